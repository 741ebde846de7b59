# Run by a held-out test as the verifier uid: 10 files of 12 MB (each under the per-file limit) beside
# the work dir's copy, then the right answer.
import sys
import time

line = sys.stdin.readline()
block = b"x" * (1 << 20)
for n in range(10):
    with open(f"fill-{n}.bin", "wb") as f:
        for _ in range(12):
            f.write(block)
time.sleep(1)
print(line.strip()[::-1])
