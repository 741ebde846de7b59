import os
import time

fd = os.memfd_create("hoard")
for _ in range(40):
    os.write(fd, b"x" * (8 << 20))  # 320 MB that no process maps
print("held", flush=True)
time.sleep(25)
