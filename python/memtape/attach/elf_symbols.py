"""The address of an exported symbol in another process: read from the dynamic symbol
table (``.dynsym``) of a 64-bit little-endian ELF file mapped in it, placed where
``/proc/PID/maps`` says the file was loaded."""

from __future__ import annotations

import struct
from dataclasses import dataclass

ELF_MAGIC = b"\x7fELF"
ELFCLASS64, ELFDATA2LSB = 2, 1
SHT_DYNSYM = 11
PT_LOAD = 1
SYMBOL_SIZE = 24


@dataclass(frozen=True)
class Mapping:
    """One line of ``/proc/PID/maps`` that maps a file."""

    start: int
    offset: int
    path: str


def file_mappings(pid: int) -> list[Mapping]:
    """The file mappings of process ``pid`` (raises OSError without the rights)."""
    mappings = []
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or not fields[5].startswith("/"):
                continue
            start = int(fields[0].split("-")[0], 16)
            mappings.append(Mapping(start, int(fields[2], 16), fields[5].rstrip("\n")))
    return mappings


def dynamic_symbols(data: bytes, names: set[str]) -> dict[str, int]:
    """The values (link-time addresses) of those of ``names`` that the ELF image
    ``data`` exports; empty when it is not a 64-bit little-endian ELF file."""
    if data[:4] != ELF_MAGIC or data[4] != ELFCLASS64 or data[5] != ELFDATA2LSB:
        return {}
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
    ]
    found: dict[str, int] = {}
    for _, kind, _, _, offset, size, link, _, _, _ in sections:
        if kind != SHT_DYNSYM:
            continue
        strings_at = sections[link][4]
        for at in range(offset, offset + size, SYMBOL_SIZE):
            name_at, _, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", data, at)
            if shndx == 0 or value == 0:
                continue  # undefined here: imported from another file
            end = data.index(b"\0", strings_at + name_at)
            name = data[strings_at + name_at : end].decode("ascii", "replace")
            if name in names:
                found[name] = value
    return found


def first_load_address(data: bytes) -> int:
    """The link-time address of the ELF image's first loaded segment (0 for a
    position-independent file)."""
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        kind, _, offset, vaddr = struct.unpack_from("<IIQQ", data, phoff + i * phentsize)
        if kind == PT_LOAD and offset == 0:
            return int(vaddr)
    return 0


def symbol_addresses(pid: int, mapped_file: str, names: set[str]) -> dict[str, int]:
    """Where ``names`` lie in process ``pid``'s memory, for those exported by
    ``mapped_file`` (a path as ``/proc/PID/maps`` gives it, read through the process'
    own root so that a chroot or another mount namespace reads the same file)."""
    with open(f"/proc/{pid}/root{mapped_file}", "rb") as f:
        data = f.read()
    values = dynamic_symbols(data, names)
    base = next(
        (m.start for m in file_mappings(pid) if m.path == mapped_file and m.offset == 0), None
    )
    if base is None:
        return {}
    shift = base - first_load_address(data)
    return {name: shift + value for name, value in values.items()}
