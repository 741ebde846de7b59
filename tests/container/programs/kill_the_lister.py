import os
import time

if os.fork() == 0:  # try to SIGKILL the first file-listing helper (it runs as this uid), then stop
    os.setsid()
    for fd in (0, 1, 2):
        os.dup2(os.open(os.devnull, os.O_RDWR), fd)
    deadline = time.time() + 120
    while time.time() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
                if cmdline.endswith(b"inside import main; main(*sys.argv[1:])\x00list\x00"):
                    try:
                        os.kill(int(pid), 9)
                        open("killed", "w").write(pid)
                    except PermissionError:  # Landlock: no signal leaves this command's domain
                        open("refused", "w").write(pid)
                    raise SystemExit
            except OSError:
                continue
        time.sleep(0.001)
print("watching")
