import copy
import json
import random

import torch
from trainer.config import PretrainConfig
from trainer.jobs.pretrain import _SharedHeadTrainer
from transformers import AutoModelForCausalLM

torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained("/models/a", dtype=torch.float32)
head = torch.randint(10, 1000, (40,)).tolist()
tails = [torch.randint(10, 1000, (n,)).tolist() for n in (3, 17, 5, 30, 9, 12)]
completions = [[7, 8, int(a), 9] for a in torch.randint(10, 1000, (6,))]
prompt_tokens = sum(len(t) - 1 for t in tails)


def row_loss(logits, row, start):
    def ce(at, n):
        return torch.nn.functional.cross_entropy(logits[at : at + n], row[at + 1 : at + 1 + n], reduction="sum")

    tail = len(row) - start - 4
    return ce(start + tail - 1, 4) / 24 + 0.5 * ce(start, tail - 1) / prompt_tokens, float(ce(start + tail + 1, 1)) / 6


def grads():
    g = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad()
    return g


with torch.no_grad():
    whole = [
        row_loss(model(input_ids=torch.tensor(head + t + c)[None]).logits[0], torch.tensor(head + t + c), len(head))
        for t, c in zip(tails, completions)
    ]
    cache = model(input_ids=torch.tensor(head)[None], use_cache=True).past_key_values
for t, c in zip(tails, completions):
    row = torch.tensor(t + c)
    logits = model(
        input_ids=row[None],
        past_key_values=copy.deepcopy(cache),
        use_cache=True,
        position_ids=torch.arange(len(head), len(head) + len(row))[None],
    ).logits[0]
    row_loss(logits, row, 0)[0].backward()
reference = grads()
trainer = _SharedHeadTrainer(model, [head + t for t in tails], 0, PretrainConfig(question_loss=0.5), random.Random(0))
loss, answer = trainer.loss(list(zip(trainer.tails, completions)), 2)
loss.backward()
print(
    json.dumps(
        {
            "loss": abs(float(loss) - float(sum(w for w, _ in whole))),
            "answer": abs(answer - sum(a for _, a in whole)),
            "grad": float((grads() - reference).abs().max() / reference.abs().max()),
        }
    )
)
