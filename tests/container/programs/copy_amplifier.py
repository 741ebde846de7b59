# Setup command, as the agent's uid, disk_mb 16: a 12 MB file with 40 more names (12 MB on disk,
# 492 MB if each name were copied), or 40 sparse files of 15 MB apparent size (no block on disk).
import os
import sys

if sys.argv[1] == "links":
    with open("big.bin", "wb") as f:
        f.write(os.urandom(12 << 20))
    for i in range(40):
        os.link("big.bin", f"link-{i}.bin")
else:
    for i in range(40):
        with open(f"sparse-{i}.bin", "wb") as f:
            f.truncate(15 << 20)
print("made", sys.argv[1])
