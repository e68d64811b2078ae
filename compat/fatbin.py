"""Reader of NVIDIA fatbinary containers stored in ELF shared objects.

Standard library only.  The layout (measured on real PyTorch wheels):

* The containers live in the ELF section ``.nv_fatbin``.  The section
  ``__nv_relfatbin`` (relocatable device code for device linking) is ignored.
* Container header, 16 bytes little endian: ``u32 magic 0xBA55ED50``,
  ``u16 version``, ``u16 header size``, ``u64 size`` of the entries that follow.
  Containers are 8-byte aligned and may be separated by zero padding.
* Entry header (its size is a field; 64 bytes, larger for newer targets):
  ``u16 kind`` at 0 (1 PTX, 2 ELF/SASS, 8 LTO-IR), ``u32 header size`` at 4,
  ``u64 payload size`` at 8, ``u32 arch`` at 28 (``major * 10 + minor``),
  ``u64 flags`` at 40.  The entries of a container fill it exactly.
  Kind 8 (measured in cuFFT 12.0.0.61, libcufft.so.12 of the nvidia-cufft wheel): a
  128-byte header carrying NVVM options (``-ftz=0 -prec_div=1 -prec_sqrt=1 -fmad=1``),
  link-time-optimisation IR that nvJitLink compiles at run time.  It is read and named
  (``lto_75``) but is no kernel image: it never counts as coverage (``Container.archs``).
* Libraries that load their own kernels (cuFFT) keep containers outside ``.nv_fatbin``,
  in data sections (``.ldata`` of libraries built with a large code model).  Those
  sections are searched for the container magic; a candidate counts only when its
  header and entries parse exactly, so bytes that merely look like the magic are skipped.
  Without this, libcufft.so.12 showed one container (SASS sm_75) of its 11,000+.

Nothing is decompressed: in ``.nv_fatbin`` only the headers are read, so an mmap of a
500 MB library touches a few pages per entry; the data sections are read once through
(searched), their pages unmapped as the search goes.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Union

__all__ = [
    "FATBIN_MAGIC",
    "FATBIN_SECTION",
    "Container",
    "ElfSection",
    "Entry",
    "FatbinError",
    "arch_name",
    "elf_sections",
    "find_section",
    "iter_containers",
    "iter_embedded",
    "scan_file",
]

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTION = ".nv_fatbin"
RELFATBIN_SECTION = "__nv_relfatbin"

KIND_PTX = 1
KIND_ELF = 2
KIND_LTO = 8
# Sections where a library keeps fatbins it loads itself (cuModuleLoadData and friends).
EMBEDDED_SECTIONS = (".rodata", ".lrodata", ".data", ".ldata", ".data.rel.ro")

FLAG_COMPRESSED_LZ4 = 0x2000
FLAG_COMPRESSED_ZSTD = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY_SPECIFIC = 0x200000

_CONTAINER_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size
_ENTRY_MIN_SIZE = 48  # the fields read below end at offset 48
_ALIGN = 8
_DROP_EVERY = 8 << 20
_MADV_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)

# typing.Union, not `|`: these aliases are evaluated at import, and the host copy of this
# module (compat.HOST_MODULES) runs on the hosts' Python, 3.9 on Debian 11.
Buffer = Union[bytes, bytearray, memoryview, mmap.mmap]  # noqa: UP007 (Python 3.9)
Searchable = Union[bytes, bytearray, mmap.mmap]  # noqa: UP007 (a Buffer with .find())
Kind = Literal["sass", "ptx", "lto"]
Suffix = Literal["", "a", "f"]


class FatbinError(ValueError):
    """A malformed ELF file or fatbinary container; ``offset`` is where it was found."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        self.offset = offset
        if offset is not None:
            message = f"{message} (at offset {offset:#x})"
        super().__init__(message)


@dataclass(frozen=True)
class Entry:
    """One entry of a container: a SASS cubin, a PTX text or LTO-IR for one arch."""

    kind: Kind
    arch: int
    suffix: Suffix
    compressed: bool
    offset: int
    header_size: int
    payload_size: int
    flags: int

    @property
    def name(self) -> str:
        return arch_name(self)


@dataclass(frozen=True)
class Container:
    """One fatbinary container: its offset (in the buffer scanned) and entries."""

    offset: int
    version: int
    header_size: int
    size: int
    entries: tuple[Entry, ...]

    @property
    def archs(self) -> frozenset[str]:
        """The arch names (``sm_90a``, ``compute_80``) of the SASS and PTX entries: what a
        GPU can run.  LTO-IR entries are left out (no kernel image until nvJitLink)."""
        return frozenset(arch_name(e) for e in self.entries if e.kind != "lto")


@dataclass(frozen=True)
class ElfSection:
    name: str
    type: int
    offset: int
    size: int


def arch_name(entry: Entry) -> str:
    """``sm_90a`` for a SASS entry, ``compute_80`` for a PTX entry, ``lto_75`` for LTO-IR."""
    prefix = {"sass": "sm", "ptx": "compute", "lto": "lto"}[entry.kind]
    return f"{prefix}_{entry.arch}{entry.suffix}"


# ---------------------------------------------------------------- ELF


_ELF_MAGIC = b"\x7fELF"
_SHN_XINDEX = 0xFFFF
_SHT_NOBITS = 8
_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")


def elf_sections(buf: Buffer) -> list[ElfSection]:
    """The section headers of a little-endian ELF64 file held in ``buf``."""
    size = len(buf)
    if size < 64 or bytes(buf[0:4]) != _ELF_MAGIC:
        raise FatbinError("not an ELF file", 0)
    if buf[4] != 2:
        raise FatbinError("only ELF64 is supported", 4)
    if buf[5] != 1:
        raise FatbinError("only little-endian ELF is supported", 5)
    (shoff,) = struct.unpack_from("<Q", buf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", buf, 0x3A)
    if shoff == 0:
        return []
    if shentsize < _SECTION_HEADER.size:
        raise FatbinError(f"bad section header size {shentsize}", 0x3A)

    def header(index: int) -> tuple[int, ...]:
        at = shoff + index * shentsize
        if at + _SECTION_HEADER.size > size:
            raise FatbinError(f"section header {index} beyond the end of the file", at)
        return _SECTION_HEADER.unpack_from(buf, at)

    first = header(0)
    if shnum == 0:  # more than 0xff00 sections: the count is in section 0
        shnum = first[5]
    if shstrndx == _SHN_XINDEX:
        shstrndx = first[6]
    headers = [header(i) for i in range(shnum)]
    if not 0 <= shstrndx < shnum:
        raise FatbinError(f"bad section name table index {shstrndx}", 0x3E)
    strtab_off, strtab_size = headers[shstrndx][4], headers[shstrndx][5]
    if strtab_off + strtab_size > size:
        raise FatbinError("section name table beyond the end of the file", strtab_off)

    strtab = bytes(buf[strtab_off : strtab_off + strtab_size])
    sections = []
    for i, h in enumerate(headers):
        name_off, sh_type, sh_offset, sh_size = h[0], h[1], h[4], h[5]
        if name_off >= strtab_size and i:
            raise FatbinError(f"section {i} name beyond the name table", strtab_off)
        stop = strtab.find(b"\0", name_off)
        name = strtab[name_off : stop if stop >= 0 else None].decode("utf-8", "replace")
        if sh_type != _SHT_NOBITS and sh_offset + sh_size > size:
            raise FatbinError(f"section {name!r} beyond the end of the file", sh_offset)
        sections.append(ElfSection(name, sh_type, sh_offset, sh_size))
    return sections


def find_section(buf: Buffer, name: str = FATBIN_SECTION) -> ElfSection | None:
    """The first section called ``name`` holding data, or None."""
    for section in elf_sections(buf):
        if section.name == name and section.type != _SHT_NOBITS:
            return section
    return None


# ---------------------------------------------------------------- containers


def _parse_entry(buf: Buffer, at: int, end: int) -> Entry:
    if at + _ENTRY_MIN_SIZE > end:
        raise FatbinError("truncated fatbin entry header", at)
    kind_code, header_size, payload_size = struct.unpack_from("<HxxIQ", buf, at)
    (arch,) = struct.unpack_from("<I", buf, at + 28)
    (flags,) = struct.unpack_from("<Q", buf, at + 40)
    if header_size < _ENTRY_MIN_SIZE:
        raise FatbinError(f"fatbin entry header size {header_size} is too small", at)
    kind: Kind
    if kind_code == KIND_PTX:
        kind = "ptx"
    elif kind_code == KIND_ELF:
        kind = "sass"
    elif kind_code == KIND_LTO:
        kind = "lto"
    else:
        raise FatbinError(f"unknown fatbin entry kind {kind_code}", at)
    suffix: Suffix = ""
    if flags & FLAG_ARCH_SPECIFIC:
        suffix = "a"
    elif flags & FLAG_FAMILY_SPECIFIC:
        suffix = "f"
    return Entry(
        kind=kind,
        arch=arch,
        suffix=suffix,
        compressed=bool(flags & (FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD)),
        offset=at,
        header_size=header_size,
        payload_size=payload_size,
        flags=flags,
    )


def _parse_container(buf: Buffer, at: int, end: int) -> Container:
    """The container whose header (magic already checked) is at ``at``; it must end by ``end``."""
    _, version, header_size, size = _CONTAINER_HEADER.unpack_from(buf, at)
    if header_size < _CONTAINER_HEADER.size:
        raise FatbinError(f"fatbin container header size {header_size} is too small", at)
    body = at + header_size
    stop = body + size
    if stop > end:
        raise FatbinError(
            f"fatbin container size {size} runs past the end of the section "
            f"({stop - end} bytes too many)",
            at,
        )
    entries = []
    pos = body
    while pos < stop:
        try:
            entry = _parse_entry(buf, pos, stop)
        except FatbinError as exc:
            raise FatbinError(
                f"fatbin container size {size} does not match its entries "
                f"(entries up to here sum to {pos - body}): {exc}",
                at,
            ) from exc
        pos += entry.header_size + entry.payload_size
        if pos > stop:
            raise FatbinError(
                f"fatbin container size {size} does not match its entries "
                f"(they sum to at least {pos - body})",
                at,
            )
        entries.append(entry)
    return Container(
        offset=at, version=version, header_size=header_size, size=size, entries=tuple(entries)
    )


def _iter_raw(buf: Buffer, start: int, end: int) -> Iterator[Container]:
    at = start
    while at < end:
        if end - at < _CONTAINER_HEADER.size:
            if any(buf[at:end]):
                raise FatbinError("trailing bytes after the last fatbin container", at)
            return
        (magic,) = struct.unpack_from("<I", buf, at)
        if magic != FATBIN_MAGIC:
            if magic == 0 and not any(buf[at : at + _ALIGN]):
                at += _ALIGN  # zero padding between containers
                continue
            raise FatbinError(f"bad fatbin container magic {magic:#010x}", at)
        container = _parse_container(buf, at, end)
        yield container
        at += container.header_size + container.size
        if at % _ALIGN:
            pad = _ALIGN - at % _ALIGN
            if at + pad <= end and any(buf[at : at + pad]):
                raise FatbinError("non-zero bytes between fatbin containers", at)
            at += pad


def iter_containers(
    buf: Buffer,
    start: int = 0,
    end: int | None = None,
) -> Iterator[Container]:
    """Yield the containers of ``buf``.

    When ``buf`` is an ELF file, its ``.nv_fatbin`` section is read (nothing
    when it has none; ``__nv_relfatbin`` is ignored) and offsets are file
    offsets.  Otherwise ``buf[start:end]`` is taken as raw fatbin data.
    A FatbinError (a ValueError) with the offset is raised on malformed data.
    """
    if end is None:
        end = len(buf)
    if start == 0 and bytes(buf[0:4]) == _ELF_MAGIC:
        section = find_section(buf, FATBIN_SECTION)
        if section is None:
            return
        start, end = section.offset, section.offset + section.size
    if not 0 <= start <= end <= len(buf):
        raise FatbinError(f"bad range {start:#x}..{end:#x} of a {len(buf)}-byte buffer", start)
    yield from _iter_raw(buf, start, end)


def _embedded_at(buf: Searchable, at: int, end: int) -> Container | None:
    """The container at ``at`` of a data section, or None where the bytes only look like one.
    Stricter than ``.nv_fatbin``: what the toolchain writes (version 1, a 16-byte header, at
    least one entry, 8-byte aligned; all 23,984 of libcufft.so.12's are so), since an empty
    "container" would make the search jump over a real one."""
    if at % _ALIGN or end - at < _CONTAINER_HEADER.size:
        return None
    _, version, header_size, size = _CONTAINER_HEADER.unpack_from(buf, at)
    if version != 1 or header_size != _CONTAINER_HEADER.size or size == 0:
        return None
    try:
        return _parse_container(buf, at, end)
    except FatbinError:
        return None


def iter_embedded(
    buf: Searchable, release: Callable[[int, int], None] | None = None
) -> Iterator[Container]:
    """Yield the containers a library keeps in its data sections (``EMBEDDED_SECTIONS``),
    with file offsets: every place the container magic occurs that ``_embedded_at`` accepts;
    anything else there is data that only looks like the magic.  The sections are searched
    in windows; ``release(start, stop)`` is called for each stretch searched (scan_file
    unmaps it, so the resident set stays bounded in a section without containers too)."""
    if bytes(buf[0:4]) != _ELF_MAGIC:
        return
    magic = struct.pack("<I", FATBIN_MAGIC)
    for section in elf_sections(buf):
        if section.name not in EMBEDDED_SECTIONS or section.type == _SHT_NOBITS:
            continue
        at = released = section.offset
        end = section.offset + section.size
        while at < end:
            stop = min(at + _DROP_EVERY, end)
            # a magic that starts before `stop` is found even where it ends after it
            hit = buf.find(magic, at, min(stop + len(magic) - 1, end))
            if hit < 0:
                at = stop
            elif (container := _embedded_at(buf, hit, end)) is None:
                at = hit + 1
            else:
                yield container
                at = hit + container.header_size + container.size
            if release is not None and at - released >= _DROP_EVERY:
                release(released, at)
                released = at


def scan_file(path: str | Path) -> list[Container] | None:
    """The containers of the ELF file at ``path`` that hold a kernel image (SASS or PTX; a
    container of LTO-IR alone is left out): its ``.nv_fatbin``'s, then those embedded in its
    data sections (``iter_embedded``); None when it has no ``.nv_fatbin`` and none of those.

    The file is mmapped; only the headers are touched (and the data sections searched).
    """
    with Path(path).open("rb") as f:
        f.seek(0, 2)
        if f.tell() == 0:
            raise FatbinError(f"{path}: empty file", 0)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            fat = find_section(mm, FATBIN_SECTION)
            containers: list[Container] = []
            dropped = 0

            def release(start: int, stop: int) -> None:
                # Unmap pages already read (the kernel maps whole page-cache folios on a
                # fault), so the resident set stays bounded; they fault in again if needed.
                lo, hi = start - start % mmap.PAGESIZE, stop - stop % mmap.PAGESIZE
                if _MADV_DONTNEED is not None and hi > lo:
                    mm.madvise(_MADV_DONTNEED, lo, hi - lo)

            for container in iter_containers(mm) if fat is not None else ():
                containers.append(container)
                if container.offset - dropped >= _DROP_EVERY:
                    release(dropped, container.offset)
                    dropped = container.offset
            containers.extend(iter_embedded(mm, release))
            kernels = [c for c in containers if c.archs]
            return None if fat is None and not kernels else kernels
