# Run by a held-out test as the verifier uid: a child forked off by the check holds 300 MB while the
# check waits, then the check prints the right answer.
import os
import sys
import time

line = sys.stdin.readline()
if os.fork() == 0:
    hog = bytearray(300 << 20)
    for i in range(0, len(hog), 4096):
        hog[i] = 1
    time.sleep(5)
    os._exit(0)
time.sleep(2)
print(line.strip()[::-1])
