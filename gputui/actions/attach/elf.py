"""What a program file says it is, read from its ELF dynamic symbol table: nothing is run.

preflight asks it which Python a process runs (`Py_Version`, the interpreter's own version number) and
whether its program is CPython's command line (`Py_BytesMain`, which only that program's main() calls), so
that neither a file's name nor a library's decides what gputui runs as root. The files read may be the
target user's (a library it maps): every size is bounded, and a file that is not what it claims is None.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

MAX_TABLE = 16 << 20  # a symbol or string table larger than this is not libpython's (under 1 MiB)
MAX_VALUE = 64  # bytes read of a data symbol
SHT_NOBITS = 8
SHT_DYNSYM = 11
SHN_UNDEF = 0
SHN_LORESERVE = 0xFF00


@dataclass(frozen=True)
class Symbols:
    """Of the names asked about: those the file defines, those it needs from another file, and the bytes
    of each defined one that was asked for its value."""

    defined: frozenset[str]
    used: frozenset[str]
    values: dict[str, bytes] = field(default_factory=dict)
    little_endian: bool = True

    def has(self, name: str) -> bool:
        return name in self.defined or name in self.used

    def number(self, name: str) -> int | None:
        value = self.values.get(name)
        return None if value is None else int.from_bytes(value, "little" if self.little_endian else "big")


def symbols(path: str | Path, wanted: Iterable[str], values: Iterable[str] = ()) -> Symbols | None:
    """The dynamic symbols of the regular file `path` among `wanted` (and the bytes of those in `values`);
    None when it cannot be read or is not an ELF file with a dynamic symbol table. Never blocks on a FIFO
    or a device, never raises."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, frozenset(wanted), frozenset(values))
        if key not in _CACHE:
            if len(_CACHE) >= CACHE_SIZE:
                _CACHE.pop(next(iter(_CACHE)))
            try:
                _CACHE[key] = _read(fd, key[4], key[5])
            except (struct.error, ValueError, IndexError, OverflowError):
                _CACHE[key] = None  # malformed: not an ELF file that says anything
        return _CACHE[key]
    except OSError:
        return None
    finally:
        os.close(fd)


# The same file (device, inode, size, modification time) and question: the doctor and the UI ask often.
_CACHE: dict[tuple[object, ...], Symbols | None] = {}
CACHE_SIZE = 64


def _read(fd: int, wanted: frozenset[str], values: frozenset[str]) -> Symbols | None:  # noqa: C901
    ident = os.pread(fd, 16, 0)
    if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return None
    wide = ident[4] == 2
    end = "<" if ident[5] == 1 else ">"
    header = struct.Struct(end + ("HHIQQQIHHHHHH" if wide else "HHIIIIIHHHHHH"))
    section = struct.Struct(end + ("IIQQQQIIQQ" if wide else "IIIIIIIIII"))
    symbol = struct.Struct(end + ("IBBHQQ" if wide else "IIIBBH"))
    fields = header.unpack(os.pread(fd, header.size, 16))
    shoff, shentsize, shnum = fields[5], fields[10], fields[11]
    if not shoff or not section.size <= shentsize <= 256:
        return None

    def sections_at(first: int, count: int) -> list[tuple[int, int, int, int, int]]:
        """(type, address, offset, size, link) of `count` section headers, read at once."""
        raw = os.pread(fd, count * shentsize, shoff + first * shentsize)
        # name, type, flags, addr, offset, size, link, info, addralign, entsize
        fields = [section.unpack_from(raw, i * shentsize) for i in range(count)]
        return [(s[1], s[3], s[4], s[5], s[6]) for s in fields]

    if shnum == 0:  # more sections than the header can count: the first section's size says how many
        shnum = sections_at(0, 1)[0][3]
    if shnum > 1 << 16:
        return None
    sections = sections_at(0, shnum)
    dynsym = next((s for s in sections if s[0] == SHT_DYNSYM), None)
    if dynsym is None or not 0 <= dynsym[4] < shnum:
        return None
    strtab = sections[dynsym[4]]
    if dynsym[3] > MAX_TABLE or strtab[3] > MAX_TABLE:
        return None
    names = os.pread(fd, strtab[3], strtab[2])
    table = os.pread(fd, dynsym[3], dynsym[2])
    # The offsets in the string table where each wanted name is written (a name may end a longer one).
    at: dict[int, str] = {}
    for wanted_name in wanted:
        needle = wanted_name.encode() + b"\0"
        i = names.find(needle)
        while i >= 0:
            at[i] = wanted_name
            i = names.find(needle, i + 1)
    defined: set[str] = set()
    used: set[str] = set()
    raw_values: dict[str, bytes] = {}
    count = len(table) // symbol.size
    for entry in symbol.iter_unpack(table[: count * symbol.size]):
        if wide:
            st_name, _info, _other, shndx, value, size = entry
        else:
            st_name, value, size, _info, _other, shndx = entry
        if (name := at.get(st_name)) is None:
            continue
        if shndx == SHN_UNDEF:
            used.add(name)
            continue
        defined.add(name)
        if name in values and shndx < min(SHN_LORESERVE, len(sections)) and 0 < size <= MAX_VALUE:
            kind, address, offset, _size, _link = sections[shndx]
            if kind != SHT_NOBITS and address <= value:
                data = os.pread(fd, size, offset + value - address)
                if len(data) == size:
                    raw_values[name] = data
    return Symbols(frozenset(defined), frozenset(used - defined), raw_values, little_endian=end == "<")
