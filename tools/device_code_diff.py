#!/usr/bin/env python3
"""Compares the device code of two builds, config by config: whether a change moved any instruction.

Usage: ``python3 tools/device_code_diff.py CACHE_A CACHE_B [NAME ...]`` (two ``FUSED_SWIGLU_CACHE_DIR``
folders, each holding the units ``fused-swiglu build`` wrote; every config found in both, or the names given).

Each config library's cubins are taken out with ``cuobjdump -xelf all`` (``cuobjdump`` on PATH, or the
``CUOBJDUMP`` variable; ``nvdisasm`` is not needed) and compared section by section in order: code, constant
banks, attributes and relocations byte for byte; the symbol and string tables are left out, since a kernel's
name carries its template arguments, which a change of types may rename without changing an instruction.
Prints one line per config that differs and a count; exit status 1 if any differs, 2 on a usage error.
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

_NAMED = re.compile(r"\._Z\w+")  # a section name's kernel symbol
_SYMBOLS, _STRINGS = 2, 3  # ELF section types left out
_NOBITS = 8


def cuobjdump() -> str:
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        sys.exit("device_code_diff: cuobjdump not found (put it on PATH or name it in CUOBJDUMP)")
    return tool


def sections(library: Path) -> list[tuple[str, bytes]]:
    """(section kind, contents) of every cubin of ``library``, in order, symbol and string tables left out."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([cuobjdump(), "-xelf", "all", str(library.resolve())], cwd=tmp, check=True,
                       capture_output=True)
        for cubin in sorted(Path(tmp).glob("*.cubin")):
            data = cubin.read_bytes()
            (shoff,) = struct.unpack_from("<Q", data, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
            headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
            names = headers[shstrndx][4]
            for name_off, kind, _, _, offset, size, *_ in headers:
                name = data[names + name_off:data.index(b"\0", names + name_off)].decode()
                if kind in (_SYMBOLS, _STRINGS):
                    continue
                body = b"nobits:%d" % size if kind == _NOBITS else data[offset:offset + size]
                out.append((_NAMED.sub(".K", name), body))
    return out


def libraries(cache: Path) -> dict[str, Path]:
    """Config name -> its library in ``cache`` (folders ``<name>-<key>`` holding ``libfsw_<name>.so``)."""
    found = {}
    for lib in cache.glob("*/libfsw_*.so"):
        found[lib.name[len("libfsw_"):-len(".so")]] = lib
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    a, b = libraries(Path(argv[0])), libraries(Path(argv[1]))
    names = argv[2:] or sorted(a.keys() & b.keys())
    missing = [n for n in names if n not in a or n not in b]
    if missing:
        print(f"device_code_diff: not in both builds: {', '.join(missing)}", file=sys.stderr)
        return 2
    differ = [n for n in names if sections(a[n]) != sections(b[n])]
    for n in differ:
        print(f"{n}: device code differs")
    print(f"{len(names) - len(differ)} of {len(names)} configs: the same device code")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
