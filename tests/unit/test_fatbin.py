"""Tests of compat.fatbin on containers and ELF files built here."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import pytest
from fatbin_builders import (
    ARCH_A,
    FAMILY_F,
    LTO,
    LZ4,
    PTX,
    SASS,
    ZSTD,
    container,
    elf,
    entry,
    pad8,
)

from compat import rules
from compat.fatbin import (
    FATBIN_MAGIC,
    Container,
    FatbinError,
    arch_name,
    elf_sections,
    find_section,
    iter_containers,
    iter_embedded,
    scan_file,
)


def names(c: Container) -> list[str]:
    return [arch_name(e) for e in c.entries]


# ---------------------------------------------------------------- containers

FIRST = container(
    entry(SASS, 75),
    entry(SASS, 90, ARCH_A | ZSTD),
    entry(SASS, 103, FAMILY_F | LZ4, header_size=112),
    entry(PTX, 120, payload=b".version 8.8\n\0"),
)
SECOND = container(entry(SASS, 80, payload=b"\x01" * 5))  # leaves the section unaligned


def test_entries_kinds_archs_and_flags() -> None:
    (c,) = list(iter_containers(FIRST))
    assert c.offset == 0
    assert c.version == 1
    assert c.size == len(FIRST) - 16
    assert names(c) == ["sm_75", "sm_90a", "sm_103f", "compute_120"]
    assert [e.kind for e in c.entries] == ["sass", "sass", "sass", "ptx"]
    assert [e.arch for e in c.entries] == [75, 90, 103, 120]
    assert [e.suffix for e in c.entries] == ["", "a", "f", ""]
    assert [e.compressed for e in c.entries] == [False, True, True, False]
    assert [e.header_size for e in c.entries] == [64, 64, 112, 64]
    assert c.entries[3].payload_size == len(b".version 8.8\n\0")
    assert c.entries[1].name == "sm_90a"
    assert c.archs == frozenset({"sm_75", "sm_90a", "sm_103f", "compute_120"})


def test_zero_padding_between_containers() -> None:
    data = pad8(SECOND) + bytes(32) + FIRST + bytes(8)
    containers = list(iter_containers(data))
    assert [c.offset for c in containers] == [0, len(pad8(SECOND)) + 32]
    assert names(containers[0]) == ["sm_80"]
    assert names(containers[1])[0] == "sm_75"


def test_raw_range() -> None:
    data = bytes(24) + pad8(FIRST) + SECOND
    containers = list(iter_containers(data, start=24))
    assert [c.offset for c in containers] == [24, 24 + len(pad8(FIRST))]


@pytest.mark.parametrize("delta", [-8, 8, -1])
def test_container_size_mismatch_is_rejected(delta: int) -> None:
    good_size = len(FIRST) - 16
    bad = container(FIRST[16:], size=good_size + delta)
    data = pad8(SECOND) + bad + bytes(64) + SECOND
    with pytest.raises(FatbinError, match="does not match its entries") as info:
        list(iter_containers(data))
    assert info.value.offset == len(pad8(SECOND))
    assert f"{len(pad8(SECOND)):#x}" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_container_past_end_is_rejected() -> None:
    with pytest.raises(FatbinError, match="past the end") as info:
        list(iter_containers(container(FIRST[16:], size=4096)))
    assert info.value.offset == 0


def test_bad_magic_and_junk() -> None:
    with pytest.raises(FatbinError, match="magic") as info:
        list(iter_containers(pad8(SECOND) + b"\x01" + bytes(31)))
    assert info.value.offset == len(pad8(SECOND))
    with pytest.raises(FatbinError, match="non-zero bytes"):
        list(iter_containers(SECOND + b"\x07\x07\x07" + bytes(8)))
    with pytest.raises(FatbinError, match="trailing"):
        list(iter_containers(pad8(SECOND) + b"\x01\x02"))


def test_unknown_kind_and_small_header() -> None:
    with pytest.raises(FatbinError, match="unknown fatbin entry kind 7"):
        list(iter_containers(container(entry(7, 80))))
    with pytest.raises(FatbinError, match="too small"):
        list(
            iter_containers(
                container(
                    entry(SASS, 80)[:64].replace(struct.pack("<I", 64), struct.pack("<I", 16), 1)
                )
            )
        )


def test_lto_ir_entries_are_read_but_never_coverage() -> None:
    # cuFFT's kind-8 entries: a 128-byte header, LTO-IR for nvJitLink, no kernel image
    (c,) = list(iter_containers(container(entry(SASS, 90), entry(LTO, 75, header_size=128))))
    assert [e.kind for e in c.entries] == ["sass", "lto"]
    assert names(c) == ["sm_90", "lto_75"]
    assert c.archs == frozenset({"sm_90"})
    (only_lto,) = list(iter_containers(container(entry(LTO, 75, header_size=128))))
    assert only_lto.archs == frozenset()


def test_empty_buffer_has_no_containers() -> None:
    assert list(iter_containers(b"")) == []
    assert list(iter_containers(bytes(64))) == []


# ---------------------------------------------------------------- ELF


def sample_elf() -> bytes:
    relocatable = container(entry(SASS, 52), entry(PTX, 52))
    return elf(
        {
            ".rodata": b"x" * 7,
            "__nv_relfatbin": relocatable,
            ".nv_fatbin": pad8(FIRST) + bytes(16) + SECOND,
        }
    )


def test_elf_sections() -> None:
    data = sample_elf()
    sections = {s.name: s for s in elf_sections(data)}
    assert set(sections) == {"", ".text", ".rodata", "__nv_relfatbin", ".nv_fatbin", ".shstrtab"}
    fat = find_section(data)
    assert fat is not None
    assert fat.name == ".nv_fatbin"
    assert data[fat.offset : fat.offset + 4] == struct.pack("<I", FATBIN_MAGIC)
    assert find_section(data, ".nope") is None


def test_elf_reads_nv_fatbin_and_ignores_relfatbin() -> None:
    data = sample_elf()
    fat = find_section(data)
    assert fat is not None
    containers = list(iter_containers(data))
    assert len(containers) == 2
    assert containers[0].offset == fat.offset  # file offsets
    found = set().union(*(c.archs for c in containers))
    assert found == {"sm_75", "sm_90a", "sm_103f", "compute_120", "sm_80"}
    assert "sm_52" not in found
    assert "compute_52" not in found


def test_elf_without_fatbin() -> None:
    data = elf({".rodata": b"abc"})
    assert list(iter_containers(data)) == []


def test_not_elf_and_truncated_elf() -> None:
    with pytest.raises(FatbinError, match="not an ELF"):
        elf_sections(b"hello world" * 10)
    data = sample_elf()
    with pytest.raises(FatbinError, match="beyond the end"):
        elf_sections(data[: len(data) - 100])
    elf32 = bytearray(data)
    elf32[4] = 1
    with pytest.raises(FatbinError, match="ELF64"):
        elf_sections(bytes(elf32))


def test_corrupt_container_in_elf_reports_file_offset() -> None:
    bad = container(FIRST[16:], size=len(FIRST) - 16 - 8)
    data = elf({".nv_fatbin": pad8(SECOND) + bad})
    fat = find_section(data)
    assert fat is not None
    with pytest.raises(FatbinError) as info:
        list(iter_containers(data))
    assert info.value.offset == fat.offset + len(pad8(SECOND))


def test_scan_file(tmp_path: Path) -> None:
    lib = tmp_path / "libx.so"
    lib.write_bytes(sample_elf())
    containers = scan_file(lib)
    assert containers is not None
    assert [names(c) for c in containers] == [
        ["sm_75", "sm_90a", "sm_103f", "compute_120"],
        ["sm_80"],
    ]
    plain = tmp_path / "liby.so"
    plain.write_bytes(elf({".rodata": b"abc"}))
    assert scan_file(plain) is None
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    with pytest.raises(FatbinError, match="empty"):
        scan_file(empty)


# Shaped like libcufft.so.12 (nvidia-cufft 12.0.0.61): one sm_75 container in .nv_fatbin,
# the kernels it loads itself among other data in .ldata, LTO-IR containers beside them.
# Each part is (bytes, the arch names of the container found there or None); the builder
# starts every section at a multiple of 8, so offsets in .ldata are alignments in the file.
MAGIC = struct.pack("<I", FATBIN_MAGIC)
KERNELS = container(entry(SASS, 90), entry(PTX, 90))
LTO_ONLY = container(entry(LTO, 75, header_size=128))
LDATA_PARTS: list[tuple[bytes, list[str] | None]] = [
    (MAGIC + b"\x22" * 4, None),  # the magic alone, then data
    (KERNELS, ["sm_90", "compute_90"]),
    (b"\x33" * 3 + container(entry(SASS, 86)) + b"\0" * 5, None),  # a container, unaligned
    # "empty containers" (any version, a longer header, size 0) must not make the search
    # jump over the real container that follows
    (MAGIC + struct.pack("<HHQ", 0x9999, 0x40, 0), None),
    (container(entry(SASS, 100)), ["sm_100"]),
    (MAGIC + struct.pack("<HHQ", 1, 16, 0), None),
    # a header whose entries do not fill it: skipped, not an error
    (MAGIC + struct.pack("<HHQ", 1, 16, 64) + entry(SASS, 52)[:48], None),
    (LTO_ONLY, ["lto_75"]),
    (MAGIC[:3], None),  # a cut-off magic at the very end
]
LDATA = b"".join(part for part, _ in LDATA_PARTS)


def ldata_expected() -> list[tuple[int, list[str]]]:
    out, at = [], 0
    for part, found in LDATA_PARTS:
        assert at % 8 == 0 or found is None
        if found is not None:
            out.append((at, found))
        at += len(part)
    return out


def test_containers_embedded_in_data_sections_are_found() -> None:
    data = elf({".nv_fatbin": pad8(SECOND), ".ldata": LDATA, ".comment": KERNELS})
    ldata = find_section(data, ".ldata")
    assert ldata is not None
    found = list(iter_embedded(data))
    assert [(c.offset - ldata.offset, names(c)) for c in found] == ldata_expected()
    # .comment is no section a library loads kernels from; .nv_fatbin is read strictly elsewhere
    assert list(iter_embedded(elf({".comment": KERNELS, ".nv_fatbin": pad8(SECOND)}))) == []
    assert list(iter_embedded(KERNELS)) == []  # raw fatbin data, not an ELF file


def test_the_search_releases_what_it_has_read() -> None:
    # 20 MiB of data, one container at its end: the searched stretches are released behind
    # the search (scan_file unmaps them), in order and without gaps, before the container
    filler = b"\x5a" * (20 << 20)
    data = elf({".ldata": filler + KERNELS})
    ldata = find_section(data, ".ldata")
    assert ldata is not None
    released: list[tuple[int, int]] = []
    found = list(iter_embedded(data, lambda start, stop: released.append((start, stop))))
    assert [names(c) for c in found] == [["sm_90", "compute_90"]]
    assert released[0][0] == ldata.offset
    assert all(a[1] == b[0] for a, b in itertools.pairwise(released))
    assert released[-1][1] >= ldata.offset + len(filler) - (8 << 20)
    assert len(released) >= 2


def test_scan_file_adds_embedded_containers(tmp_path: Path) -> None:
    lib = tmp_path / "libcufft.so.12"
    lib.write_bytes(elf({".nv_fatbin": pad8(SECOND), ".ldata": LDATA}))
    containers = scan_file(lib)
    assert containers is not None
    # the LTO-IR container holds no kernel image: left out
    embedded = [found for _, found in ldata_expected() if found != ["lto_75"]]
    assert [names(c) for c in containers] == [["sm_80"], *embedded]
    lto_only = tmp_path / "liblto.so"
    lto_only.write_bytes(elf({".ldata": LTO_ONLY}))
    assert scan_file(lto_only) is None
    # no .nv_fatbin at all: the embedded containers alone, not None
    rodata_only = tmp_path / "libown.so"
    rodata_only.write_bytes(elf({".rodata": b"\x01" * 8 + KERNELS}))
    only = scan_file(rodata_only)
    assert only is not None
    assert [names(c) for c in only] == [["sm_90", "compute_90"]]


def test_scan_file_many_containers(tmp_path: Path) -> None:
    big = container(entry(SASS, 86, payload=b"\xcc" * 70_000))
    lib = tmp_path / "libbig.so"
    lib.write_bytes(elf({".nv_fatbin": pad8(big) * 300}))  # ~21 MB: pages get dropped
    containers = scan_file(lib)
    assert containers is not None
    assert len(containers) == 300
    assert all(names(c) == ["sm_86"] for c in containers)


# ---------------------------------------------------------------- rules


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("sm_90a", ("sm", (9, 0), "a")),
        ("sm_103f", ("sm", (10, 3), "f")),
        ("compute_80", ("compute", (8, 0), "")),
        ("sm_35", ("sm", (3, 5), "")),
    ],
)
def test_parse_arch(name: str, parsed: tuple[str, tuple[int, int], str]) -> None:
    # One vocabulary for arch names: compat.rules.parse_arch (the fatbin reader has no own).
    assert rules.parse_arch(name) == parsed


@pytest.mark.parametrize("bad", ["sm90", "8.0", "sm_90b", "compute_", ""])
def test_parse_arch_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="not a CUDA arch entry"):
        rules.parse_arch(bad)
