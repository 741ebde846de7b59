import os
import socket
import threading
import time

seen = []


def listen():
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0rlstack-leak")
    server.listen(8)
    while True:
        conn, _ = server.accept()
        seen.append(conn.recv(65536).decode(errors="replace"))


def scan():
    while True:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            for name in ("environ", "cmdline"):
                try:
                    text = open(f"/proc/{pid}/{name}", "rb").read().decode(errors="replace")
                except OSError:
                    continue
                if "HELD-OUT" in text:
                    seen.append(name + ":" + text)
        with open("seen.json.tmp", "w") as f:
            f.write(repr(seen))
        os.replace("seen.json.tmp", "seen.txt")
        time.sleep(0.05)


if os.fork() == 0:
    os.setsid()
    for fd in (0, 1, 2):
        os.dup2(os.open(os.devnull, os.O_RDWR), fd)
    threading.Thread(target=listen, daemon=True).start()
    scan()
time.sleep(0.5)
print("listening")
