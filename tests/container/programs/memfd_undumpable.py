import ctypes
import os
import time

fd = os.memfd_create("hoard")
os.write(fd, b"x" * (8 << 20))
ctypes.CDLL(None).prctl(4, 0)  # PR_SET_DUMPABLE 0: /proc/<pid>/fd closes to the uid, so the memfd cannot be seen
print("hidden", flush=True)
time.sleep(25)
