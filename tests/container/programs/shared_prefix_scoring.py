import json

import torch
from trainer.cpu.loss import token_logprobs
from transformers import AutoModelForCausalLM

torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained("/models/a", dtype=torch.float32)


def plain(ids, mask):
    logits = model(input_ids=ids[None]).logits[0, :-1].float() / 0.7
    return torch.log_softmax(logits, -1).gather(-1, ids[1:, None])[:, 0][mask[1:]]


def grads(loss):
    model.zero_grad()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


prefix = torch.randint(10, 1000, (300,))
cases = {"shared": [], "none": [], "alone": []}
for n in range(3):
    ids = torch.cat([prefix, torch.randint(10, 1000, (20 + 5 * n,))])
    mask = torch.zeros(len(ids), dtype=torch.bool)
    mask[300 + n :] = True
    cases["shared"].append((ids, mask))
cases["none"] = [cases["shared"][0], (torch.cat([torch.tensor([5]), cases["shared"][1][0][1:]]), cases["shared"][1][1])]
cases["alone"] = [cases["shared"][2]]
out = {}
for name, rows in cases.items():
    ours = token_logprobs(model, rows, 0.7)
    reference = [plain(i, m) for i, m in rows]
    value_diff = max(float((a - b).abs().max()) for a, b in zip(ours, reference))
    g_ours, g_ref = grads(sum(x.sum() for x in ours)), grads(sum(x.sum() for x in reference))
    out[name] = {
        "value": value_diff,
        "grad": float((g_ours - g_ref).abs().max() / g_ref.abs().max()),
        "tokens": [len(x) for x in ours],
        "expected": [int(m.sum()) for _, m in rows],
    }
print(json.dumps(out))
