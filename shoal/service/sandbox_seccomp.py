"""The seccomp filter of a job sandbox: a classic BPF program bubblewrap loads (``--seccomp FD``).

The namespaces already take away the network, the host's files and processes. The filter
closes what namespaces do not cover, kernel surface an analysis job never needs:

* new namespaces and mounts (``unshare``, ``setns``, ``clone`` with ``CLONE_NEW*``,
  ``mount``, the new mount API, ``pivot_root``, ``chroot``): the way to regain capabilities
  inside a user namespace, and the usual first step of a kernel exploit;
* ``clone3`` answers ``ENOSYS`` (its flags sit in memory a filter cannot read; glibc falls
  back to ``clone``, which is checked);
* ``ptrace``, ``process_vm_readv/writev``, ``kcmp``: no reading of other processes (a job's
  processes share one uid);
* ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_*`` (whose operations bypass
  seccomp), keyrings, module loading, ``kexec``, ``open_by_handle_at``, swap, reboot, syslog,
  ``acct``, ``quotactl``;
* ``socket`` of any family but ``AF_UNIX``, ``AF_INET``, ``AF_INET6`` and ``AF_NETLINK``
  (which glibc's resolver uses): ``AF_VSOCK`` in particular reaches the hypervisor host and
  is not confined by a network namespace;
* ``ioctl(TIOCSTI/TIOCLINUX)``: no typing into a terminal (bubblewrap's ``--new-session``
  already detaches it);
* another architecture's system calls (32-bit ``int 0x80``, x32): the process is killed.

Only x86_64 is described; elsewhere :func:`program` returns None and the sandbox runs without
a filter (``docs/sandbox.md`` records it).
"""

from __future__ import annotations

import errno
import platform
import struct

# BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h)
_LD_W_ABS = 0x00 | 0x00 | 0x20
_JEQ_K = 0x05 | 0x10
_JGE_K = 0x05 | 0x30
_JSET_K = 0x05 | 0x40
_RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
AUDIT_ARCH_X86_64 = 0xC000003E
X32_BIT = 0x40000000

# struct seccomp_data: nr @0, arch @4, instruction_pointer @8, args[6] @16 (64-bit each;
# the low 32 bits first on little-endian machines)
_OFF_NR, _OFF_ARCH, _OFF_ARG0, _OFF_ARG1 = 0, 4, 16, 24

# x86_64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl)
X86_64 = {
    "ptrace": 101, "syslog": 103, "uselib": 134, "pivot_root": 155, "chroot": 161,
    "acct": 163, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169,
    "init_module": 175, "delete_module": 176, "quotactl": 179, "lookup_dcookie": 212,
    "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
    "perf_event_open": 298, "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "finit_module": 313,
    "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
}
_CLONE, _CLONE3, _SOCKET, _IOCTL = 56, 435, 41, 16
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 \
    | 0x20000000 | 0x40000000 | 0x00000080
ALLOWED_FAMILIES = (1, 2, 10, 16)  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK
TIOCSTI, TIOCLINUX = 0x5412, 0x541C


def _off(labels: dict[str, int], i: int, label: str | None) -> int:
    """The forward offset from instruction ``i`` to ``label`` (None: the next one)."""
    if label is None:
        return 0
    d = labels[label] - (i + 1)
    if not 0 <= d <= 255:
        raise ValueError(f"seccomp jump to {label} out of range ({d})")
    return d


def _assemble(code: list[tuple]) -> bytes:
    """Resolve ``("jeq", k, true_label, false_label)``-style jumps to BPF offsets."""
    labels: dict[str, int] = {}
    insns: list[tuple] = []
    for item in code:
        if item[0] == "label":
            labels[item[1]] = len(insns)
        else:
            insns.append(item)
    out = []
    for i, ins in enumerate(insns):
        op = ins[0]
        if op == "ld":
            out.append(struct.pack("<HBBI", _LD_W_ABS, 0, 0, ins[1]))
        elif op == "ret":
            out.append(struct.pack("<HBBI", _RET_K, 0, 0, ins[1]))
        else:
            opcode = {"jeq": _JEQ_K, "jge": _JGE_K, "jset": _JSET_K}[op]

            out.append(struct.pack("<HBBI", opcode, _off(labels, i, ins[2]),
                                   _off(labels, i, ins[3]), ins[1]))
    return b"".join(out)


def program() -> bytes | None:
    """The filter for this machine's architecture, or None where none is described."""
    if platform.machine() != "x86_64":
        return None
    code: list[tuple] = [
        ("ld", _OFF_ARCH), ("jeq", AUDIT_ARCH_X86_64, None, "kill"),
        ("ld", _OFF_NR), ("jge", X32_BIT, "kill", None),
        ("jeq", _CLONE, "clone", None),
        ("jeq", _CLONE3, "enosys", None),
        ("jeq", _SOCKET, "socket", None),
        ("jeq", _IOCTL, "ioctl", None),
    ]
    for nr in sorted(X86_64.values()):
        code.append(("jeq", nr, "eperm", None))
    code += [
        ("ret", RET_ALLOW),
        ("label", "clone"), ("ld", _OFF_ARG0), ("jset", CLONE_NEW_FLAGS, "eperm", "allow"),
        ("label", "socket"), ("ld", _OFF_ARG0),
    ]
    for fam in ALLOWED_FAMILIES:
        code.append(("jeq", fam, "allow", None))
    code += [
        ("ret", RET_ERRNO | errno.EAFNOSUPPORT),
        ("label", "ioctl"), ("ld", _OFF_ARG1), ("jeq", TIOCSTI, "eperm", None),
        ("jeq", TIOCLINUX, "eperm", "allow"),
        ("label", "eperm"), ("ret", RET_ERRNO | errno.EPERM),
        ("label", "enosys"), ("ret", RET_ERRNO | errno.ENOSYS),
        ("label", "kill"), ("ret", RET_KILL_PROCESS),
        ("label", "allow"), ("ret", RET_ALLOW),
    ]
    return _assemble(code)
