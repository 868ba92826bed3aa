"""Reading the small files of /proc, as cheaply as Python can: the sampler reads one per process per tick."""

from __future__ import annotations

import os


def read(path: str) -> bytes:
    """The file's bytes (up to 64 KiB, more than any /proc/PID/stat). Raises OSError as open() does.
    os.open() and os.read(): half the cost of open(path, "rb").read(), which builds two file objects."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536)
    finally:
        os.close(fd)


def hidepid(mounts: str = "/proc/mounts") -> str | None:
    """`hidepid=N` when /proc is mounted so that this user cannot see other users' processes (and is
    neither root nor in the exempt `gid=` group); else None. Then a pid NVML lists and /proc does not
    show is another user's process, not a container's."""
    try:
        lines = read(mounts).decode(errors="replace").splitlines()
    except OSError:
        return None
    options: dict[str, str] | None = None
    for line in lines:  # the last /proc mount is the one on top
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/proc" and fields[2] == "proc":
            options = dict(o.partition("=")[::2] for o in fields[3].split(","))
    if options is None or options.get("hidepid", "0") in ("0", "off") or os.geteuid() == 0:
        return None
    exempt = options.get("gid", "")
    if exempt.isdigit() and int(exempt) in (os.getegid(), *os.getgroups()):
        return None
    return f"hidepid={options['hidepid']}"
