"""What a built shared object links: its ``DT_NEEDED`` libraries and the symbols it defines.

Just enough of ELF64 (little-endian) to check a library before it is loaded, without binutils.
"""

from __future__ import annotations

import struct
from pathlib import Path

_SHT_DYNSYM = 11
_SHT_DYNAMIC = 6
_DT_NEEDED = 1


def _string(table: bytes, offset: int) -> str:
    end = table.index(b"\0", offset)
    return table[offset:end].decode("utf-8", "replace")


def dynamic_info(path: Path) -> tuple[list[str], set[str]]:
    """``(needed, defined)``: the libraries ``path`` names in ``DT_NEEDED``, and the names of the
    dynamic symbols it defines (exports).

    Raises:
        ValueError: ``path`` is not a little-endian ELF64 file.
        OSError: it cannot be read.
    """
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path} is not a little-endian 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def body(index: int) -> bytes:
        _, _, _, _, offset, size, *_ = sections[index]
        return data[offset:offset + size]

    needed: list[str] = []
    defined: set[str] = set()
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind == _SHT_DYNSYM:
            names = body(link)
            for at in range(offset, offset + size, entsize):
                name, _, _, shndx = struct.unpack_from("<IBBH", data, at)
                if name and shndx != 0:  # SHN_UNDEF: imported, not defined here
                    defined.add(_string(names, name))
        elif kind == _SHT_DYNAMIC:
            names = body(link)
            for at in range(offset, offset + size, 16):
                tag, value = struct.unpack_from("<qQ", data, at)
                if tag == _DT_NEEDED:
                    needed.append(_string(names, value))
    return needed, defined
