import sys

from safetensors.torch import load_file

a, b = (load_file(p + "/model.safetensors") for p in sys.argv[1:3])
print(max((a[k].float() - b[k].float()).abs().max().item() for k in a))
