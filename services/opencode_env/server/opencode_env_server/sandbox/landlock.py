"""Landlock scoping of sandbox processes: no abstract Unix socket and no signal across sandboxes.

Abstract Unix sockets have no file and no owner: any uid in the network namespace may connect to
any of them, and iptables does not see them. Landlock (ABI 6, Linux 6.12) scopes them: a process in
a Landlock domain connects only to abstract sockets made inside its own domain (or domains nested
in it), and signals only processes there. Every command the service starts in a sandbox gets a
domain of its own (``restrict_self`` between fork and exec), so one rollout's code, its setup
commands and another rollout's checks cannot reach each other through them. Unprivileged: it needs
``no_new_privs`` only, set first.
"""

import ctypes
import os
import struct

_libc = ctypes.CDLL(None, use_errno=True)
# The Landlock system calls have the same numbers on every architecture (unified syscall table).
SYS_CREATE_RULESET, SYS_RESTRICT_SELF = 444, 446
CREATE_RULESET_VERSION = 1 << 0
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
SCOPED_ABI = 6
PR_SET_NO_NEW_PRIVS = 38


def abi_version() -> int:
    """The kernel's Landlock ABI version (0 when Landlock is missing or not allowed here)."""
    version = _libc.syscall(SYS_CREATE_RULESET, None, 0, CREATE_RULESET_VERSION)
    return max(version, 0)


AVAILABLE = abi_version() >= SCOPED_ABI


def restrict_self() -> None:
    """Put the calling process (and everything it starts) in a new domain scoped for abstract Unix
    sockets and signals; does nothing where the kernel lacks ABI 6 (``AVAILABLE`` says which)."""
    if not AVAILABLE:
        return
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    # struct landlock_ruleset_attr {u64 handled_access_fs, handled_access_net, scoped}
    attr = ctypes.create_string_buffer(struct.pack("QQQ", 0, 0, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL))
    ruleset = _libc.syscall(SYS_CREATE_RULESET, attr, ctypes.c_size_t(len(attr.raw)), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        if _libc.syscall(SYS_RESTRICT_SELF, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
