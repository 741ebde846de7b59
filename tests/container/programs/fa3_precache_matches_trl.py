import inspect

import trl.experimental.async_grpo.packing as packing
from trainer.gpu.precache_fa3 import FA3_REPO, FA3_VERSION

print(f'get_kernel("{FA3_REPO}", version={FA3_VERSION})' in inspect.getsource(packing))
