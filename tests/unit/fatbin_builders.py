"""Builders shared by the fatbin and inspect tests: fatbinary entries and containers with
known kinds, archs and flags, a minimal ELF64 holding them, and a fake installed torch tree.
Everything here is made by the tests; nothing is read from a real binary."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

from compat.fatbin import FATBIN_MAGIC

PTX, SASS, LTO = 1, 2, 8
LZ4, ZSTD, ARCH_A, FAMILY_F = 0x2000, 0x8000, 0x100000, 0x200000


def entry(
    kind: int, arch: int, flags: int = 0x11, payload: bytes = b"\xab" * 24, header_size: int = 64
) -> bytes:
    """An entry header (fields as in real fatbins) followed by its payload."""
    head = bytearray(header_size)
    struct.pack_into("<HHIQ", head, 0, kind, 0x0101, header_size, len(payload))
    struct.pack_into("<I", head, 28, arch)
    struct.pack_into("<Q", head, 40, flags)
    return bytes(head) + payload


def container(*entries: bytes, size: int | None = None) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body) if size is None else size) + body


def pad8(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 8)


def elf(sections: dict[str, bytes]) -> bytes:
    """A minimal little-endian ELF64 shared object holding ``sections``."""
    names = [".text", *sections, ".shstrtab"]
    shstrtab = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    data = {".text": b"\x90" * 13, **sections, ".shstrtab": shstrtab}
    out = bytearray(64)
    headers = [bytes(64)]  # the null section
    for name in names:
        out += b"\0" * (-len(out) % 8)
        offset = len(out)
        out += data[name]
        name_off = shstrtab.index(name.encode() + b"\0")
        sh_type = 3 if name == ".shstrtab" else 1
        headers.append(
            struct.pack("<IIQQQQIIQQ", name_off, sh_type, 2, 0, offset, len(data[name]), 0, 0, 8, 0)
        )
    out += b"\0" * (-len(out) % 8)
    shoff = len(out)
    for h in headers:
        out += h
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    struct.pack_into(
        "<16sHHIQQQIHHHHHH",
        out,
        0,
        ident,
        3,
        62,
        1,
        0,
        0,
        shoff,
        0,
        64,
        56,
        0,
        64,
        len(headers),
        len(headers) - 1,
    )
    return bytes(out)


def torch_cuda_lib() -> bytes:
    """20 containers shaped like a real build: 9 of torch's own (sm_80 sm_86 sm_90
    compute_90: the most common set, so the real list), 2 of torch's with an extra sm_90a,
    7 vendor-like ones with sm_75 sm_80 sm_86, and 2 with sm_90 alone. Per-arch shares
    would mislead here: sm_80/sm_86 sit in 18 containers, compute_90 in only 11."""
    own = [entry(SASS, 80), entry(SASS, 86), entry(SASS, 90), entry(PTX, 90)]
    blobs = [pad8(container(*own)) for _ in range(9)]
    blobs += [pad8(container(*own, entry(SASS, 90, ARCH_A))) for _ in range(2)]
    blobs += [pad8(container(entry(SASS, 75), entry(SASS, 80), entry(SASS, 86))) for _ in range(7)]
    blobs += [pad8(container(entry(SASS, 90))) for _ in range(2)]
    relocatable = pad8(container(entry(SASS, 52)))
    return elf({"__nv_relfatbin": relocatable, ".nv_fatbin": b"".join(blobs)})


VERSION_PY = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda']
__version__ = '2.9.1+cu128'
debug = False
cuda: Optional[str] = '12.8'
git_version = 'abc'
hip: Optional[str] = None
"""


def write_torch(root: Path, *, cuda: bool = True) -> Path:
    """A fake installed torch package under ``root``; returns the torch dir."""
    torch = root / "torch"
    (torch / "lib").mkdir(parents=True)
    (torch / "__init__.py").write_text("")
    (torch / "version.py").write_text(
        VERSION_PY
        if cuda
        else VERSION_PY.replace("'2.9.1+cu128'", "'2.9.1+cpu'").replace("'12.8'", "None")
    )
    (torch / "lib" / "libtorch_cpu.so").write_bytes(elf({".rodata": b"cpu"}))
    (torch / "lib" / "libtorch_global_deps.so").write_text("/* GNU ld script */\n")
    if cuda:
        (torch / "lib" / "libtorch_cuda.so").write_bytes(torch_cuda_lib())
        (torch / "lib" / "libtorch_cuda.so.1").symlink_to("libtorch_cuda.so")
        vendor = pad8(container(entry(SASS, 50), entry(SASS, 80)))
        (torch / "lib" / "libcudnn_ops.so.9").write_bytes(elf({".nv_fatbin": vendor}))
    return torch


def write_wheel(src_root: Path, wheel: Path) -> Path:
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(src_root.rglob("*")):
            if p.is_file() and not p.is_symlink():
                zf.write(p, p.relative_to(src_root).as_posix())
        zf.writestr("torch-2.9.1.dist-info/METADATA", "Name: torch\n")
    return wheel
