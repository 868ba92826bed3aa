"""A path walked one directory descriptor at a time: each directory opened O_DIRECTORY|O_NOFOLLOW relative
to its parent's descriptor, each symbolic link read and walked here rather than by the kernel. So every
entry passed through is seen, and what is then read or written through the last descriptor is in the
directory that was checked, even if a component is swapped meanwhile.

The caller decides what a missing component or a link means (`on_missing`, `on_link`): the hook records
what it passed for an ownership check (hook.py); the settings create their directory and follow only
their user's or root's links (gputui/settings.py). Standard library only: the agent's package is copied
whole into jobs."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

MAX_LINKS = 40  # as the kernel allows on one path
# O_PATH: a directory only passed through (0711, like many homes) need not be readable.
DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Seen = list[tuple[str, os.stat_result]]  # what a walk passed through: each entry's path, lstat'ed
# (the directory's descriptor, its path, the missing name): make the entry there, or raise.
OnMissing = Callable[[int, str, str], None]
# (the link's path, its lstat): return to follow it, raise to refuse it.
OnLink = Callable[[str, os.stat_result], None]


class TooManyLinks(OSError):
    """ELOOP said by the walk itself (more than MAX_LINKS links), not by an open that met a link."""


class NotADirectoryOnTheWay(NotADirectoryError):
    """ENOTDIR said by the walk itself, for the entry it names: not an open racing a swap."""


def walk(
    path: str,
    *,
    on_missing: OnMissing | None = None,
    on_link: OnLink | None = None,
    directory_only: bool = False,
) -> tuple[int, Seen]:
    """Reach `path` (relative: from the current directory) as the kernel would, one component at a time.
    Returns a descriptor of the last directory reached (`path` itself, or the directory of the file it
    names; `directory_only`: a file there is refused too) and every entry passed through, `path`'s last.
    A missing component is FileNotFoundError unless `on_missing` makes it."""
    if not path.startswith("/"):
        path = os.path.join(os.getcwd(), path)
    pending = _parts(path)
    fd = os.open("/", DIR_FLAGS)
    where, links = "/", 0
    seen: Seen = [("/", os.fstat(fd))]
    try:
        while pending:
            name = pending.pop(0)
            if name == "..":
                parent = os.open("..", DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd, where = parent, os.path.dirname(where)
                seen.append((where, os.fstat(fd)))
                continue
            here = os.path.join(where, name)
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if on_missing is None:
                    raise
                on_missing(fd, where, name)
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            seen.append((here, st))
            if stat.S_ISLNK(st.st_mode):
                if on_link is not None:
                    on_link(here, st)
                links += 1
                if links > MAX_LINKS:
                    raise TooManyLinks(errno.ELOOP, os.strerror(errno.ELOOP), path)
                target = os.readlink(name, dir_fd=fd)
                pending[:0] = _parts(target)
                if target.startswith("/"):
                    os.close(fd)
                    fd, where = -1, "/"  # never closed twice if the open fails
                    fd = os.open("/", DIR_FLAGS)
                    seen.append((where, os.fstat(fd)))
                continue
            if not stat.S_ISDIR(st.st_mode):
                if pending or directory_only:
                    raise NotADirectoryOnTheWay(errno.ENOTDIR, os.strerror(errno.ENOTDIR), here)
                break
            child = os.open(name, DIR_FLAGS, dir_fd=fd)  # a link swapped in meanwhile: ELOOP
            os.close(fd)
            fd, where = child, here
            seen[-1] = (here, os.fstat(fd))  # what was opened is what is judged
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return fd, seen


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]
