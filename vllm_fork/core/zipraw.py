"""Copying zip entries between archives without decompressing or recompressing them.

The compiled members are most of the wheel's bytes; inflating and deflating them again is
what makes vLLM's precompiled route slow. A raw copy moves the compressed bytes
as they are, with the CRC and sizes of the source's central directory.
"""

from __future__ import annotations

import os
import shutil
import struct
import zipfile
from collections.abc import Iterable
from typing import BinaryIO

_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_DATA_DESCRIPTOR = 0x08


#: What describes a member's stored bytes: copied, the member stays as it was.
STORED_FIELDS = (
    "compress_type",
    "create_system",
    "create_version",
    "extract_version",
    "internal_attr",
    "external_attr",
    "CRC",
    "compress_size",
    "file_size",
)


def copy_info(info: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    """A new entry `name` with `info`'s date and stored-bytes fields (not its flags or offset)."""
    new = zipfile.ZipInfo(name, info.date_time)
    for attr in STORED_FIELDS:
        setattr(new, attr, getattr(info, attr))
    return new


def copy_raw(src: BinaryIO, infos: Iterable[zipfile.ZipInfo], dst: zipfile.ZipFile) -> int:
    """Append `infos` (entries of the zip open as `src`) to `dst`, bytes unchanged.

    `dst` must be open for writing; further `writestr` calls after this work as usual.
    Returns the number of compressed bytes copied.
    """
    copied = 0
    out = dst.fp
    if out is None:
        raise ValueError("copy_raw: the destination zip is closed")
    out.seek(dst.start_dir)
    for info in infos:
        src.seek(info.header_offset)
        fields = _LOCAL_HEADER.unpack(src.read(_LOCAL_HEADER.size))
        if fields[0] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"bad local header for {info.filename}")
        name_len, extra_len = fields[-2], fields[-1]
        src.seek(info.header_offset + _LOCAL_HEADER.size + name_len + extra_len)

        new = copy_info(info, info.filename)
        # Sizes and CRC go in the local header, so no data descriptor follows the data.
        new.flag_bits = info.flag_bits & ~_DATA_DESCRIPTOR
        new.header_offset = out.tell()
        out.write(new.FileHeader())
        remaining = info.compress_size
        while remaining:
            chunk = src.read(min(remaining, 1 << 20))
            if not chunk:
                raise zipfile.BadZipFile(f"{info.filename} is truncated")
            out.write(chunk)
            remaining -= len(chunk)
        copied += info.compress_size
        dst.filelist.append(new)
        dst.NameToInfo[new.filename] = new
    dst.start_dir = out.tell()
    dst._didModify = True  # type: ignore[attr-defined]  # so close() writes the central directory
    return copied


def copy_all_raw(src_path: str | os.PathLike[str], dst: zipfile.ZipFile, names: Iterable[str] | None = None) -> int:
    """Raw-copy the named members (all when None) of the zip at `src_path` into `dst`."""
    with zipfile.ZipFile(src_path) as src_zip, open(src_path, "rb") as src:
        infos = src_zip.infolist()
        if names is not None:
            wanted = set(names)
            infos = [i for i in infos if i.filename in wanted]
        return copy_raw(src, infos, dst)


def copy_file(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    with open(src, "rb") as a, open(dst, "wb") as b:
        shutil.copyfileobj(a, b, 1 << 20)
