"""Reference computations with transformers, run inside the inference image by the tests.

Reads a JSON request from argv[1]: {"model", "messages", "tools"?, "chat_template_kwargs"?,
"completion_ids"?}. Prints {"prompt_ids": the chat template's token ids, "logprobs": float32
log-probabilities of completion_ids after the prompt}.
"""

import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

request = json.loads(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(request["model"])
prompt_ids = tokenizer.apply_chat_template(
    request["messages"],
    tools=request.get("tools"),
    add_generation_prompt=True,
    tokenize=True,
    return_dict=False,
    **request.get("chat_template_kwargs", {}),
)
if isinstance(prompt_ids, dict):
    prompt_ids = prompt_ids["input_ids"]
result = {"prompt_ids": list(prompt_ids)}
completion = request.get("completion_ids") or []
if completion:
    model = AutoModelForCausalLM.from_pretrained(request["model"], dtype=torch.float32).eval()
    ids = torch.tensor([list(prompt_ids) + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logprobs = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(completion)[:, None])[:, 0]
    result["logprobs"] = logprobs.tolist()
print(json.dumps(result))
