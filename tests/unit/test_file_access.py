"""An unwritable cache or clone is an error that names the path and what to do, and leaves nothing made."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from invoke import Exit

from vllm_fork.cli.exit import run_or_exit
from vllm_fork.core.errors import FileAccessError, file_access
from vllm_fork.queue import apply as queue


@pytest.fixture
def read_only(tmp_path) -> Iterator[Path]:
    """An empty directory nobody may write: a read-only tmpfs (root), or mode 0555 (others)."""
    path = tmp_path / "read-only"
    path.mkdir()
    if os.geteuid() == 0:
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)]).returncode != 0:
            pytest.skip("root here cannot mount a read-only tmpfs, and root writes through mode 0555")
        yield path
        subprocess.run(["umount", str(path)], check=True)
    else:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)


def test_a_read_only_empty_cache_is_an_error_and_leaves_no_build_folder(fork, read_only, monkeypatch, capsys):
    monkeypatch.setenv("VLLM_FORK_CACHE", str(read_only))
    with pytest.raises(Exit) as stopped:
        run_or_exit(queue.apply, fork.root)
    err = capsys.readouterr().err
    assert stopped.value.code == FileAccessError.exit_code
    assert "Traceback" not in err and str(read_only) in err and "VLLM_FORK_CACHE" in err
    assert not (fork.root / "build").exists()  # no empty build/, no lock left behind


def test_a_read_only_build_folder_is_an_error_naming_it(fork, read_only, capsys):
    (fork.root / "build").symlink_to(read_only)
    with pytest.raises(Exit) as stopped:
        run_or_exit(queue.apply, fork.root)
    err = capsys.readouterr().err
    assert stopped.value.code == FileAccessError.exit_code
    assert "Traceback" not in err and f"{read_only}/.vllm.lock" in err  # build/, resolved
    assert "VLLM_FORK_CACHE" not in err  # not the cache's fault


@pytest.mark.parametrize(
    "code, says",
    [(errno.EACCES, "permission denied"), (errno.EROFS, "read-only"), (errno.ENOSPC, "no space left")],
)
def test_each_os_error_names_the_path_and_why(code, says):
    message = str(file_access(OSError(code, os.strerror(code), "/somewhere/file"), cache="/cache"))
    assert "/somewhere/file" in message and says in message
