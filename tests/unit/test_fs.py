"""core.fs: atomic writes keep the umask's mode and never leave a half-written file."""

import os

import pytest

from vllm_fork.core.fs import write_atomic


def test_write_atomic_gives_the_umask_mode_not_mkstemps_0600(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "f", b"data")
    finally:
        os.umask(old)
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "f").read_bytes() == b"data"


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    (tmp_path / "f").write_bytes(b"old")

    with pytest.raises(TypeError):
        write_atomic(tmp_path / "f", object())  # not bytes: the write fails half-way
    assert (tmp_path / "f").read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]
