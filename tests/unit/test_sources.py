"""The two upstream sources and the download cache, on real archives, indexes and remotes."""

from __future__ import annotations

import hashlib
import io
import socket
import tarfile
from pathlib import Path

import pytest
from support.forkrepo import TAG, sh
from support.httpserver import serve

from vllm_fork.core.errors import ForkError
from vllm_fork.queue import apply as queue
from vllm_fork.upstream import download
from vllm_fork.upstream.pin import Artifact, load_pin, save_pin
from vllm_fork.upstream.sources import ensure_upstream, import_sdist, upstream_repo


def make_sdist(path: Path) -> str:
    """A small sdist with what vLLM's has: ignored-but-shipped, executable and linked files."""
    members = {
        "mini-1.0.0/PKG-INFO": (b"Name: mini\nVersion: 1.0.0\n", 0o644),
        "mini-1.0.0/.gitignore": (b"*.gitkeep\nrdna3_hip.py\n", 0o644),
        "mini-1.0.0/mini/__init__.py": (b"", 0o644),
        "mini-1.0.0/mini/flash/.gitkeep": (b"", 0o644),
        "mini-1.0.0/mini/kernels/rdna3_hip.py": (b"# matched by .gitignore\n", 0o644),
        "mini-1.0.0/tools/run.sh": (b"#!/bin/sh\necho hi\n", 0o755),
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, (data, mode) in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 1234567
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("mini-1.0.0/mini/alias.py")
        link.type, link.linkname = tarfile.SYMTYPE, "__init__.py"
        tar.addfile(link)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_index(root: Path, sdist: Path, sha: str) -> str:
    """A PEP 503 file:// index listing the sdist, as pip would be configured to use."""
    project = root / "simple" / "mini"
    project.mkdir(parents=True)
    (root / "files").mkdir()
    (root / "files" / sdist.name).write_bytes(sdist.read_bytes())
    (project / "index.html").write_text(
        f'<html><body><a href="../../files/{sdist.name}#sha256={sha}">{sdist.name}</a></body></html>'
    )
    return (root / "simple").as_uri() + "/"


def test_sdist_import_holds_exactly_the_archive_and_is_deterministic(tmp_path, cache, monkeypatch):
    sdist = tmp_path / "mini-1.0.0.tar.gz"
    sha = make_sdist(sdist)
    first = import_sdist(sdist, upstream_repo(), "1.0.0", sha)
    monkeypatch.setenv("VLLM_FORK_CACHE", str(tmp_path / "second-cache"))
    second = import_sdist(sdist, upstream_repo(), "1.0.0", sha)
    assert first == second
    listing = sh(upstream_repo(), "git", "ls-tree", "-r", "--format=%(objectmode) %(path)", first)
    assert listing.splitlines() == [
        "100644 .gitignore",
        "100644 PKG-INFO",
        "100644 mini/__init__.py",
        "120000 mini/alias.py",
        "100644 mini/flash/.gitkeep",
        "100644 mini/kernels/rdna3_hip.py",
        "100755 tools/run.sh",
    ]
    assert sh(upstream_repo(), "git", "log", "-1", "--format=%an %ae %at %cn %ce %ct", first) == (
        "vllm-fork vllm-fork@localhost 0 vllm-fork vllm-fork@localhost 0"
    )


def test_pypi_source_downloads_once_through_pips_index(tmp_path, cache, fork, monkeypatch):
    sdist = tmp_path / "mini-1.0.0.tar.gz"
    sha = make_sdist(sdist)
    with serve(tmp_path) as (server, base):
        (tmp_path / "simple" / "vllm").mkdir(parents=True)
        (tmp_path / "simple" / "vllm" / "index.html").write_text(
            f'<a href="{base}/{sdist.name}#sha256={sha}">{sdist.name}</a>'
        )
        monkeypatch.setenv("PIP_INDEX_URL", f"{base}/simple/")
        pin = load_pin(fork.root).with_changes(sdist=Artifact(sdist.name, sha), source="pypi")
        save_pin(pin, fork.root)
        head = queue.apply(fork.root)
        downloads = [r for r in server.requests if r.endswith(".tar.gz")]
        assert downloads == [f"/{sdist.name}"]
        assert (cache / "downloads" / sdist.name).read_bytes() == sdist.read_bytes()
        # Warm: neither the index nor the file is asked for again.
        server.requests.clear()
        assert queue.apply(fork.root) == head
        assert server.requests == []
    assert (fork.tree / "mini" / "flash" / ".gitkeep").exists()


def test_download_hash_mismatch_names_both_hashes_and_leaves_nothing(tmp_path, cache):
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "f.tar.gz").write_bytes(b"tampered")
    wrong = "a" * 64
    dest = download.downloads_dir() / "f.tar.gz"
    with serve(tmp_path / "www") as (_, base), pytest.raises(ForkError) as err:
        download.fetch_url(f"{base}/f.tar.gz", dest, wrong)
    assert "f.tar.gz" in str(err.value)
    assert wrong in str(err.value) and hashlib.sha256(b"tampered").hexdigest() in str(err.value)
    assert list(download.downloads_dir().iterdir()) == []


def test_download_network_failure_is_retried_then_explained(cache, monkeypatch):
    monkeypatch.setattr(download, "RETRIES", 2)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dest = download.downloads_dir() / "x.whl"
    with pytest.raises(ForkError, match=r"could not download x\.whl .* after 2 attempts"):
        download.fetch_url(f"http://127.0.0.1:{port}/x.whl", dest, "0" * 64)
    assert list(download.downloads_dir().iterdir()) == []


def test_a_corrupted_cached_download_is_fetched_again(tmp_path, cache, monkeypatch):
    sdist = tmp_path / "mini-1.0.0.tar.gz"
    sha = make_sdist(sdist)
    index = make_index(tmp_path / "idx", sdist, sha)
    monkeypatch.setenv("PIP_INDEX_URL", index)
    good = download.fetch("mini", sdist.name, sha)
    good.write_bytes(b"bit rot")
    again = download.fetch("mini", sdist.name, sha)
    assert again.read_bytes() == sdist.read_bytes()


def test_index_listing_a_different_hash_downloads_nothing(tmp_path, cache, monkeypatch):
    sdist = tmp_path / "mini-1.0.0.tar.gz"
    sha = make_sdist(sdist)
    monkeypatch.setenv("PIP_INDEX_URL", make_index(tmp_path / "idx", sdist, sha))
    with pytest.raises(ForkError, match=f"sha256 {sha}, but the pin expects {'b' * 64}"):
        download.fetch("mini", sdist.name, "b" * 64)
    assert list(download.downloads_dir().iterdir()) == []


def test_git_source_checks_the_tag_against_the_pin(fork):
    pin = load_pin(fork.root)
    up = ensure_upstream(pin)
    assert up.commit == sh(fork.remote, "git", "rev-parse", f"{TAG}^{{commit}}")
    # Upstream re-tags the release on another commit: refused, nothing changed.
    (fork.remote / "late.txt").write_text("late\n")
    sh(fork.remote, "git", "add", "-A")
    sh(fork.remote, "git", "commit", "-qm", "late fix")
    sh(fork.remote, "git", "tag", "-f", "-a", TAG, "-m", "moved")
    before = (fork.root / "upstream.toml").read_bytes()
    with pytest.raises(ForkError, match=f"tag {TAG} on .* is commit .*but upstream.toml pins {pin.commit}"):
        ensure_upstream(pin)
    assert (fork.root / "upstream.toml").read_bytes() == before


def test_git_source_reports_an_unreachable_remote(fork, tmp_path):
    pin = load_pin(fork.root)
    with pytest.raises(ForkError, match="could not fetch tag v1.0.0 from .*nowhere"):
        ensure_upstream(pin, remote=str(tmp_path / "nowhere"))


def test_a_lock_file_a_killed_fetch_left_in_the_cache_repo_does_not_stop_the_next(fork):
    """kill -9 during the git source's shallow fetch leaves `shallow.lock` in the cache repo; git's
    next fetch would refuse ("File exists"). The fork's own repo lock says no git runs there now."""
    pin = load_pin(fork.root)
    repo = upstream_repo()
    (repo / "shallow.lock").write_bytes(b"")
    (repo / "refs" / "fork").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "fork" / "half.lock").write_bytes(b"")
    up = ensure_upstream(pin)
    assert up.commit == sh(fork.remote, "git", "rev-parse", f"{TAG}^{{commit}}")
    assert not (repo / "shallow.lock").exists() and not (repo / "refs" / "fork" / "half.lock").exists()
