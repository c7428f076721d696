#!/usr/bin/env python3
"""Compares the device code of two builds, config by config: whether a change moved any instruction.

Usage: ``python3 tools/device_code_diff.py CACHE_A CACHE_B [NAME ...]`` (two ``FUSED_SWIGLU_CACHE_DIR``
folders, each holding the units ``fused-swiglu build`` wrote; every config found in both, or the names given).

Each config library's cubins are taken out with ``cuobjdump -xelf all`` (``cuobjdump`` on PATH, or the
``CUOBJDUMP`` variable; ``nvdisasm`` is not needed) and their machine code compared section by section, by
name: the code (``.text``), the constant banks, and the shared and global memory sections (contents, or the
size of those without, and the section header's flags; its info field is a symbol index), and each kernel's
register count and stack sizes from the attributes (``.nv.info``), without the symbol indices they carry. Left out: the symbol and string tables (a
kernel's name carries its template arguments, which a change of types may rename without changing an
instruction), line tables and other debug sections (``FUSED_SWIGLU_LINEINFO`` builds add them), the
toolkit note (nvcc's command line), and the attribute and relocation sections (they refer to symbols by
index, which the line tables' symbols shift). Prints one line per config that differs, naming the sections,
and a count; exit status 1 if any differs, 2 on a usage error.
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
_MACHINE_CODE = (".text.", ".nv.constant", ".nv.shared", ".nv.global")
_NOBITS = 8
_VALUE = 4  # an attribute's format: a payload of the given size
_RESOURCES = {0x2F: "registers", 0x11: "frame size", 0x12: "min stack size", 0x23: "max stack size"}


def cuobjdump() -> str:
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        sys.exit("device_code_diff: cuobjdump not found (put it on PATH or name it in CUOBJDUMP)")
    return tool


def cubin_sections(data: bytes) -> dict[str, bytes]:
    """Machine-code section name (the kernel symbol in it replaced by ``K``) -> its header's flags and its
    contents (the size alone for a section without contents), of one cubin's ELF image."""
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    out = {}
    for name_off, kind, flags, _, offset, size, *_ in headers:
        name = _NAMED.sub(".K", data[names + name_off:data.index(b"\0", names + name_off)].decode())
        if name == ".nv.info":
            name, body = "registers and stack", resources(data[offset:offset + size])
        elif name.startswith(_MACHINE_CODE):
            body = struct.pack("<Q", flags) + (b"nobits:%d" % size if kind == _NOBITS else data[offset:offset + size])
        else:
            continue
        key, n = name, 1
        while key in out:  # a second kernel's section of the same name
            n += 1
            key = f"{name}#{n}"
        out[key] = body
    return out


def resources(info: bytes) -> bytes:
    """The register counts and stack sizes of a cubin's ``.nv.info`` attributes (:data:`_RESOURCES`), each as
    (attribute, value) without the kernel's symbol index, in order."""
    out, i = [], 0
    while i + 4 <= len(info):
        fmt, attr = info[i], info[i + 1]
        if fmt != _VALUE:
            i += 4
            continue
        (size,) = struct.unpack_from("<H", info, i + 2)
        if attr in _RESOURCES and size == 8:
            out.append(struct.pack("<BI", attr, struct.unpack_from("<I", info, i + 8)[0]))
        i += 4 + size
    return b"".join(out)


def sections(library: Path) -> list[dict[str, bytes]]:
    """:func:`cubin_sections` of every cubin of ``library``, in cuobjdump's order."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([cuobjdump(), "-xelf", "all", str(library.resolve())], cwd=tmp, check=True,
                       capture_output=True)
        return [cubin_sections(cubin.read_bytes()) for cubin in sorted(Path(tmp).glob("*.cubin"))]


def differing(a: list[dict[str, bytes]], b: list[dict[str, bytes]]) -> list[str]:
    """Names of the machine-code sections that differ between two libraries' cubins (or are in one only);
    ``cubins`` where their numbers differ."""
    if len(a) != len(b):
        return ["cubins"]
    return sorted({n for x, y in zip(a, b) for n in x.keys() | y.keys() if x.get(n) != y.get(n)})


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
    differ = {n: found for n in names if (found := differing(sections(a[n]), sections(b[n])))}
    for n, found in differ.items():
        print(f"{n}: device code differs ({', '.join(found)})")
    print(f"{len(names) - len(differ)} of {len(names)} configs: the same device code")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
