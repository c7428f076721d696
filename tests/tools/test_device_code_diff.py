"""tools/device_code_diff.py on hand-made cubin images: what counts as device code and what does not."""

import struct

import pytest

KERNEL = "._Z6kernelILi128EEvv"  # a kernel symbol: template arguments in its name


@pytest.fixture(scope="module")
def diff(load_tool):
    return load_tool("device_code_diff")


def elf(sections: list[tuple[str, int, int, bytes]]) -> bytes:
    """A 64-bit ELF image of ``sections`` ((name, type, flags, contents); type 8 = no contents, its length
    the size), a section-name table appended last."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, *_ in sections) + b".shstrtab\0"
    body, offsets, pos = b"", [], 64
    for _, kind, _, data in sections:
        offsets.append(pos)
        if kind != 8:
            body += data
            pos += len(data)
    names_at = pos
    body += names
    shoff = 64 + len(body)
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, len(sections) + 2, len(sections) + 1)
    table = bytes(64)  # the null section
    at = 1
    for (name, kind, flags, data), offset in zip(sections, offsets):
        table += struct.pack("<IIQQQQIIQQ", at, kind, flags, 0, offset, len(data), 0, 3, 0, 0)
        at += len(name) + 1
    table += struct.pack("<IIQQQQIIQQ", at, 3, 0, 0, names_at, len(names), 0, 0, 0, 0)
    return bytes(header) + body + table


def info(registers: int, symbol: int) -> bytes:
    """A cubin's ``.nv.info``: the register count (attribute 0x2f) and frame size (0x11) of kernel ``symbol``."""
    return b"".join(struct.pack("<BBHII", 4, attr, 8, symbol, value) for attr, value in ((0x2F, registers), (0x11, 0)))


def build(text=b"\x01\x02", kernel=KERNEL, flags=6, shared=1024, debug=b"lines", note=b"nvcc -O3", symbols=b"s",
          registers=168, symbol=3):
    return elf([(".text" + kernel, 1, flags, text), (".nv.constant0" + kernel, 1, 0x42, bytes(16)),
                (".nv.shared" + kernel, 8, 0x43, bytes(shared)), (".debug_line", 1, 0, debug),
                (".note.nv.tkinfo", 7, 0, note), (".symtab", 2, 0, symbols),
                (".nv.info", 0x70000000, 0, info(registers, symbol)), (".nv.info" + kernel, 0x70000000, 0, b"i")])


def test_names_line_tables_notes_symbols_and_attributes_are_not_device_code(diff):
    base = diff.cubin_sections(build())
    assert set(base) == {".text.K", ".nv.constant0.K", ".nv.shared.K", "registers and stack"}
    same = build(kernel="._Z6kernelIN4pol5PairEEvv", debug=b"other lines, longer", note=b"nvcc -O3 -lineinfo",
                 symbols=b"more symbols", symbol=7)  # line tables' symbols move the kernel's index
    assert diff.differing([base], [diff.cubin_sections(same)]) == []


@pytest.mark.parametrize("change, section", [
    ({"text": b"\x01\x03"}, ".text.K"),  # an instruction
    ({"flags": 7}, ".text.K"),  # the code section's header
    ({"shared": 2048}, ".nv.shared.K"),  # shared memory size
    ({"registers": 232}, "registers and stack"),  # the register count
])
def test_an_instruction_a_header_flag_or_a_memory_size_differs(diff, change, section):
    assert diff.differing([diff.cubin_sections(build())], [diff.cubin_sections(build(**change))]) == [section]


def test_a_section_in_one_build_only_and_another_cubin_count_differ(diff):
    base = diff.cubin_sections(build())
    fewer = {k: v for k, v in base.items() if k != ".nv.shared.K"}
    assert diff.differing([base], [fewer]) == [".nv.shared.K"]
    assert diff.differing([base], [base, base]) == ["cubins"]


def test_two_kernels_sections_of_one_name_are_both_compared(diff):
    one = elf([(".text" + KERNEL, 1, 6, b"\x01"), (".text._Z7another", 1, 6, b"\x02")])
    other = elf([(".text" + KERNEL, 1, 6, b"\x01"), (".text._Z7another", 1, 6, b"\x03")])
    assert set(diff.cubin_sections(one)) == {".text.K", ".text.K#2"}
    assert diff.differing([diff.cubin_sections(one)], [diff.cubin_sections(other)]) == [".text.K#2"]
