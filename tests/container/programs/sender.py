import os
import socket

payload = repr(dict(os.environ)) + open("../verify-0.sh").read()  # the check itself: run by it, it can read it
try:
    payload += open(f"/proc/{os.getppid()}/cmdline", "rb").read().decode(errors="replace")
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect("\0rlstack-leak")
    client.sendall(payload.encode())
    print("sent")
except OSError as exc:
    print("blocked", exc)
