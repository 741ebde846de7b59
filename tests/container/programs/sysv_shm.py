import ctypes
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
size = 300 << 20
ident = libc.shmget(0, ctypes.c_size_t(size), 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
address = libc.shmat(ident, None, 0)
ctypes.memset(address, 1, size)
libc.shmdt(ctypes.c_void_p(address))  # detached: in no process's resident set, and it outlives the process
print("segment", ident, flush=True)
time.sleep(25)
