"""Transfers gone wrong, from a real HTTP server on loopback: short, wrong, unreachable, disk full.

Each test asserts the error type (its exit code), an actionable message, and that
the cache kept what it had (hashes before and after).
"""

from __future__ import annotations

import hashlib
import http.server
import os
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from invoke import Exit
from support import faults
from support.httpserver import serve

from vllm_fork.cli.exit import user_errors
from vllm_fork.core.errors import DiskFull, DownloadError, IntegrityError
from vllm_fork.core.fs import write_atomic
from vllm_fork.ops import cache as opscache
from vllm_fork.upstream import download

PAYLOAD = os.urandom(3 << 20)  # 3 MiB: more than the small disk below holds
SHA = hashlib.sha256(PAYLOAD).hexdigest()
NAME = "vllm-1.0.0-py3-none-any.whl"


def http_index(directory: Path, name: str, data: bytes) -> None:
    """A PEP 503 index for project vllm under `directory`/simple, serving `name`."""
    (directory / "files").mkdir(parents=True, exist_ok=True)
    (directory / "files" / name).write_bytes(data)
    project = directory / "simple" / "vllm"
    project.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256(data).hexdigest()
    (project / "index.html").write_text(f'<a href="../../files/{name}#sha256={sha}">{name}</a>\n')


class _Short(http.server.BaseHTTPRequestHandler):
    """Announces the whole payload, sends half, closes: a transfer cut short."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.requests.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        self.wfile.write(PAYLOAD[: len(PAYLOAD) // 2])
        self.wfile.flush()
        self.close_connection = True


@contextmanager
def short_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Short)
    server.requests = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_short_transfer_is_retried_and_named_truncated(tmp_path, cache):
    dest = download.downloads_dir() / NAME
    with short_server() as (server, url), pytest.raises(DownloadError) as err:
        download.fetch_url(f"{url}/{NAME}", dest, SHA)
    assert len(server.requests) == download.RETRIES
    message = str(err.value)
    assert "truncated transfer" in message and f"{len(PAYLOAD) // 2} of the {len(PAYLOAD)} bytes" in message
    assert "pin" not in message.split("\n")[0]
    assert not dest.exists() and not list(dest.parent.glob("*.part"))


def test_wrong_bytes_are_reported_and_never_stored(tmp_path, cache):
    http_index(tmp_path / "srv", NAME, b"not the release" * 1000)
    dest = download.downloads_dir() / NAME
    with serve(tmp_path / "srv") as (server, url), pytest.raises(IntegrityError) as err:
        download.fetch_url(f"{url}/files/{NAME}", dest, SHA)
    assert SHA in str(err.value) and "nothing was replaced" in str(err.value)
    assert len(server.requests) == 1  # a wrong file is not a network error: no retry
    assert not dest.exists() and not list(dest.parent.glob("*.part"))


def test_a_pin_typo_keeps_the_good_cached_file(tmp_path, cache, monkeypatch):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    dest = download.downloads_dir() / NAME
    dest.write_bytes(PAYLOAD)
    before = faults.digest_tree(cache / "downloads")
    typo = SHA[:-1] + ("0" if SHA[-1] != "0" else "1")
    with serve(tmp_path / "srv") as (server, url):
        monkeypatch.setenv("PIP_INDEX_URL", f"{url}/simple/")
        with pytest.raises(IntegrityError) as err:
            download.fetch(NAME.split("-")[0], NAME, typo)
    message = str(err.value)
    assert f"with sha256 {SHA}, but the pin expects {typo}" in message
    assert "was kept" in message and "nothing was downloaded" in message
    assert not any(r.startswith("/files/") for r in server.requests)
    assert faults.digest_tree(cache / "downloads") == before


def test_a_corrupt_cached_file_is_replaced_only_by_a_good_one(tmp_path, cache, monkeypatch):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    dest = download.downloads_dir() / NAME
    dest.write_bytes(PAYLOAD[:1000])  # a copy cut short some other way
    with serve(tmp_path / "srv") as (_server, url):
        monkeypatch.setenv("PIP_INDEX_URL", f"{url}/simple/")
        assert download.fetch("vllm", NAME, SHA) == dest
    assert dest.read_bytes() == PAYLOAD


def test_an_unreachable_index_is_named_unreachable(tmp_path, cache, monkeypatch):
    with serve(tmp_path) as (_server, url):
        dead = url  # the port is closed once the block ends
    monkeypatch.setenv("PIP_INDEX_URL", f"{dead}/simple/")
    with pytest.raises(DownloadError) as err:
        download.fetch("vllm", NAME, SHA)
    message = str(err.value)
    assert "could not reach any package index" in message and dead in message
    assert "not on any package index" not in message


def test_a_stale_part_file_is_removed_by_the_next_download(tmp_path, cache):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    stale = download.downloads_dir() / f".{NAME}.k1ll3d.part"
    stale.write_bytes(PAYLOAD[:4096])
    os.utime(stale, (1, 1))
    with serve(tmp_path / "srv") as (_server, url):
        download.fetch_url(f"{url}/files/{NAME}", download.downloads_dir() / NAME, SHA)
    assert not stale.exists()


@pytest.mark.parametrize("mask", [0o022, 0o002])
def test_downloads_and_published_artifacts_follow_the_umask(tmp_path, cache, mask):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    old = os.umask(mask)
    try:
        with serve(tmp_path / "srv") as (_server, url):
            got = download.fetch_url(f"{url}/files/{NAME}", download.downloads_dir() / NAME, SHA)
        artifact = opscache.ops_dir() / ".fresh.zip"
        subprocess.run(["python3", "-m", "zipfile", "-c", str(artifact), str(got)], check=True)
        entry, stored = opscache.put("a" * 64, artifact, {"source": "test"}, tmp_path)
        shared = opscache.publish("a" * 64, tmp_path / "shared", tmp_path)
    finally:
        os.umask(old)
    for path in (got, stored, shared):
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask, path


# -- a full disk: a real small tmpfs --


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_cache_disk_is_not_retried_as_a_network_error(tmp_path, small_disk, monkeypatch):
    monkeypatch.setenv("VLLM_FORK_CACHE", str(small_disk / "cache"))
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    with serve(tmp_path / "srv") as (server, url), pytest.raises(DiskFull) as err:
        download.fetch_url(f"{url}/files/{NAME}", download.downloads_dir() / NAME, SHA)
    assert len(server.requests) == 1
    assert err.value.exit_code == 28 and "no space left" in str(err.value) and "df -h" in str(err.value)
    assert not list((small_disk / "cache" / "downloads").iterdir())


def test_a_full_disk_anywhere_is_a_message_and_exit_28_not_a_traceback(small_disk, capsys):
    with pytest.raises(Exit) as exited, user_errors():
        write_atomic(small_disk / "dist.whl", PAYLOAD)
    assert exited.value.code == 28
    faults.assert_actionable(capsys.readouterr().err, "no space left", "Free some space")
    assert not list(small_disk.iterdir())


class _Stall(http.server.BaseHTTPRequestHandler):
    """Announces the whole payload, sends one read's worth (a MiB) and a little, then holds the
    connection: a download to kill, with a MiB on disk."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        self.wfile.write(PAYLOAD[: download.CHUNK + 1000])
        self.wfile.flush()
        self.server.release.wait(60)


def test_a_killed_download_leaves_no_part_file_after_the_next_run(tmp_path, cache, monkeypatch, capsys):
    stall = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stall)
    stall.release = threading.Event()
    threading.Thread(target=stall.serve_forever, daemon=True).start()
    dest = download.downloads_dir() / NAME
    script = (
        "import sys; from pathlib import Path; from vllm_fork.upstream import download; "
        "download.fetch_url(sys.argv[1], Path(sys.argv[2]), sys.argv[3])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, f"http://127.0.0.1:{stall.server_address[1]}/{NAME}", str(dest), SHA],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "VLLM_FORK_CACHE": str(cache)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        # kill -9 once a MiB of the file is on disk: the temp file stays behind.
        partial = lambda: [p for p in dest.parent.glob(f".{NAME}.*.part") if p.stat().st_size >= download.CHUNK]  # noqa: E731
        assert faults.kill_when(proc, lambda: bool(partial()))
    finally:
        stall.release.set()
        stall.shutdown()
        stall.server_close()
    left = partial()
    assert left and not dest.exists()

    # The next run of the same download (fresh: seconds later) removes it and says so in one line.
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    with serve(tmp_path / "srv") as (_server, url):
        monkeypatch.setenv("PIP_INDEX_URL", f"{url}/simple/")
        assert download.fetch("vllm", NAME, SHA) == dest
    assert not any(p.exists() for p in left) and not list(dest.parent.glob("*.part"))
    said = [ln for ln in capsys.readouterr().err.splitlines() if "partial download" in ln]
    assert said == [f"removed 1 partial download(s) of {NAME} (1.0 MiB) that an interrupted run left in {dest.parent}"]
    # A cache hit cleans up too: a run killed after another finished leaves nothing for good.
    (dest.parent / f".{NAME}.abcd1234.part").write_bytes(b"x")
    assert download.fetch("vllm", NAME, SHA) == dest
    assert not list(dest.parent.glob("*.part"))
