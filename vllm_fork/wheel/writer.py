"""Writing a wheel the way setuptools' bdist_wheel does: same member order, same RECORD.

bdist_wheel walks its build directory with sorted names (a directory's files before
its subdirectories), defers the files directly in `*.dist-info/` to the end in
sorted order, and writes RECORD last, listing members in the order written.
"""

from __future__ import annotations

import csv
import io
import zipfile
from pathlib import Path
from typing import BinaryIO

from vllm_fork.core.fs import b64_sha256
from vllm_fork.core.zipraw import copy_info, copy_raw

# A fixed timestamp: member bytes, not times, identify a wheel's contents.
DATE_TIME = (1980, 1, 1, 0, 0, 0)
FILE_MODE = 0o100644


def walk_key(arcname: str, dist_info: str) -> tuple:
    """Sort key giving bdist_wheel's order (dist-info's own files last, sorted)."""
    parts = arcname.split("/")
    if len(parts) == 2 and parts[0] == dist_info:
        return (1, parts[1])
    return (0, tuple((1, p) for p in parts[:-1]) + ((0, parts[-1]),))


def record_hash(data: bytes) -> str:
    return "sha256=" + b64_sha256(data)


class WheelWriter:
    """Members must be added in final order (sort with `walk_key` first)."""

    def __init__(self, path: Path, dist_info: str) -> None:
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.dist_info = dist_info
        self.record: list[tuple[str, str, int]] = []

    def add_bytes(self, arcname: str, data: bytes, mode: int = FILE_MODE) -> None:
        info = zipfile.ZipInfo(arcname, DATE_TIME)
        info.external_attr = mode << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        self.record.append((arcname, record_hash(data), len(data)))

    def add_raw(
        self, src: BinaryIO, info: zipfile.ZipInfo, arcname: str, b64_sha256: str, size: int, mode: int | None = None
    ) -> None:
        """Copy an already-compressed entry; its hash comes from a verified record.

        `mode` (st_mode bits) replaces the entry's when given: the external attributes live
        in the central directory only, so the copied bytes stay as they are.
        """
        if info.filename != arcname or (mode is not None and info.external_attr >> 16 != mode):
            info = _renamed(info, arcname)
            if mode is not None:
                info.external_attr = mode << 16
        copy_raw(src, [info], self.zip)
        self.record.append((arcname, "sha256=" + b64_sha256, size))

    def close(self) -> None:
        buf = io.StringIO()
        writer = csv.writer(buf, delimiter=",", quotechar='"', lineterminator="\n")
        writer.writerows(self.record)
        writer.writerow((f"{self.dist_info}/RECORD", "", ""))
        info = zipfile.ZipInfo(f"{self.dist_info}/RECORD", DATE_TIME)
        info.external_attr = FILE_MODE << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, buf.getvalue().encode())
        self.zip.close()

    def abort(self) -> None:
        self.zip.close()


def _renamed(info: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    """A copy of `info` under another name; header_offset still points at the source entry."""
    new = copy_info(info, name)
    new.flag_bits, new.header_offset = info.flag_bits, info.header_offset
    return new


def read_record(zf: zipfile.ZipFile, dist_info: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(zf.read(f"{dist_info}/RECORD").decode())))
