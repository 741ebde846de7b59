import json
import sys

import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
ids = torch.tensor([json.loads(sys.argv[2])])
logps = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1).gather(-1, ids[0, 1:, None])[:, 0]
print(json.dumps(logps.tolist()))
