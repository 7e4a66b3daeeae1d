"""A small seccomp filter for the sandbox, as the classic-BPF program bwrap's ``--seccomp FD`` loads.

Why: in root mode the code runs as a plain uid in the host's user namespace, where any user may create a user
namespace of its own, and with it mounts (a tmpfs that RLIMIT_AS does not count, for one). bwrap's
``--disable-userns`` needs a user namespace of bwrap's own, which root mode cannot have. So the filter
refuses, for every mode:
- ``unshare``/``clone`` with CLONE_NEWUSER (EPERM), and ``setns`` (EPERM);
- ``clone3`` (ENOSYS: its flags sit in memory a filter cannot read; glibc then falls back to ``clone``);
- any system call of another ABI (x32, or 32-bit calls through ``int 0x80``), whose numbers differ (ENOSYS).
Everything else is allowed: the namespaces, the read-only mounts and the limits are the main boundary.
"""

from __future__ import annotations

import errno
import platform
import struct

# linux/filter.h and linux/seccomp.h
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian: low word first)
_NR, _ARCH, _ARG0_LOW = 0, 4, 16
_CLONE_NEWUSER = 0x10000000
_X32_BIT = 0x40000000


# machine -> (AUDIT_ARCH_*, unshare, clone, clone3, setns)
_ARCHES = {
    "x86_64": (0xC000003E, 272, 56, 435, 308),
    "aarch64": (0xC00000B7, 97, 220, 435, 268),
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    """One ``struct sock_filter``."""
    return struct.pack("=HBBI", code, jt, jf, k)


def supported() -> bool:
    """Whether this machine's architecture has a filter here."""
    return platform.machine() in _ARCHES


def program() -> bytes:
    """The filter for this machine, as bytes for ``bwrap --seccomp``; ValueError on an unknown architecture."""
    machine = platform.machine()
    if machine not in _ARCHES:
        raise ValueError(f"no seccomp filter for {machine}")
    arch, unshare, clone, clone3, setns = _ARCHES[machine]
    # Offsets of jumps are counted from the next instruction; the layout is fixed, so they are written out.
    insns = [
        _insn(_LD_W_ABS, _ARCH),  # 0
        _insn(_JEQ_K, arch, jt=1, jf=0),  # 1: native ABI -> 3
        _insn(_RET_K, _RET_ERRNO | errno.ENOSYS),  # 2: another ABI
        _insn(_LD_W_ABS, _NR),  # 3
        _insn(_JGE_K, _X32_BIT, jt=8, jf=0),  # 4: x32 -> 13 (ENOSYS)
        _insn(_JEQ_K, clone3, jt=7, jf=0),  # 5: -> 13 (ENOSYS)
        _insn(_JEQ_K, setns, jt=5, jf=0),  # 6: -> 12 (EPERM)
        _insn(_JEQ_K, unshare, jt=1, jf=0),  # 7: -> 9
        _insn(_JEQ_K, clone, jt=0, jf=2),  # 8: not clone -> 11 (allow)
        _insn(_LD_W_ABS, _ARG0_LOW),  # 9: the flags
        _insn(_JSET_K, _CLONE_NEWUSER, jt=1, jf=0),  # 10: CLONE_NEWUSER -> 12
        _insn(_RET_K, _RET_ALLOW),  # 11
        _insn(_RET_K, _RET_ERRNO | errno.EPERM),  # 12
        _insn(_RET_K, _RET_ERRNO | errno.ENOSYS),  # 13
    ]
    return b"".join(insns)
