"""Raw zip copies and bdist_wheel's member order."""

from __future__ import annotations

import io
import os
import zipfile

from vllm_fork.core.zipraw import copy_raw
from vllm_fork.wheel.writer import walk_key


def test_raw_copy_keeps_every_byte_and_mode(tmp_path):
    src = tmp_path / "src.zip"
    with zipfile.ZipFile(src, "w") as zf:
        info = zipfile.ZipInfo("vllm/vllm-rs")
        info.external_attr = 0o100755 << 16
        zf.writestr(info, b"\x7fELF" * 5000, compress_type=zipfile.ZIP_DEFLATED)
        zf.writestr("vllm/a.py", "print(1)\n", compress_type=zipfile.ZIP_STORED)
    # An entry with a data descriptor, as streaming writers make.
    buf = io.BytesIO()

    class Unseekable(io.RawIOBase):
        def writable(self):
            return True

        def write(self, b):
            return buf.write(b)

    with zipfile.ZipFile(Unseekable(), "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("vllm/streamed.py", "x = 1\n" * 100)
    streamed = tmp_path / "streamed.zip"
    streamed.write_bytes(buf.getvalue())

    dst = tmp_path / "dst.zip"
    with zipfile.ZipFile(dst, "w") as out:
        for path in (src, streamed):
            with zipfile.ZipFile(path) as zf, open(path, "rb") as fh:
                copy_raw(fh, zf.infolist(), out)
        out.writestr("after.txt", "written after raw copies")
    with zipfile.ZipFile(dst) as zf:
        assert zf.testzip() is None
        assert zf.read("vllm/vllm-rs") == b"\x7fELF" * 5000
        assert zf.getinfo("vllm/vllm-rs").external_attr >> 16 == 0o100755
        assert zf.read("vllm/streamed.py") == b"x = 1\n" * 100
        assert zf.read("after.txt") == b"written after raw copies"


def test_walk_key_is_bdist_wheels_order(tmp_path):
    names = [
        "vllm/z.py",
        "vllm/_C.abi3.so",
        "vllm/__init__.py",
        "vllm/a/b.py",
        "vllm/a/c/d.py",
        "vllm/a/z.py",
        "vllm/vllm-rs",
        "vllm/B.py",
        "vllm-1.0.dist-info/METADATA",
        "vllm-1.0.dist-info/licenses/LICENSE",
        "vllm-1.0.dist-info/WHEEL",
        "vllm-1.0.dist-info/entry_points.txt",
    ]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    walked, deferred = [], []
    for root, dirs, files in os.walk(tmp_path):  # what bdist_wheel's write_files does
        dirs.sort()
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(root, f), tmp_path)
            (deferred if root.endswith(".dist-info") else walked).append(rel)
    expected = walked + sorted(deferred)
    assert sorted(names, key=lambda n: walk_key(n, "vllm-1.0.dist-info")) == expected
