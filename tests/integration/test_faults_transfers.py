"""Transfers gone wrong, from real HTTP(S) servers on loopback: cut, busy, missing, wrong,
unreachable, behind auth, TLS or a proxy, killed, disk full.

Each test asserts the error type (its exit code), an actionable message, and that
the cache kept what it had (hashes before and after); a cut or killed transfer keeps
its partial file and the next attempt asks for the rest (the Range it sent is asserted).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from invoke import Exit
from support import faults
from support.httpserver import serve
from support.tls import make_certs

from vllm_fork.cli.exit import user_errors
from vllm_fork.core.errors import DiskFull, DownloadError, IntegrityError
from vllm_fork.core.fs import write_atomic
from vllm_fork.ops import cache as opscache
from vllm_fork.upstream import download
from vllm_fork.upstream.pkgindex import find_file

PAYLOAD = os.urandom(3 << 20)  # 3 MiB: more than the small disk below holds
SHA = hashlib.sha256(PAYLOAD).hexdigest()
NAME = "vllm-1.0.0-py3-none-any.whl"
USER, PASSWORD = "alice", "s3cr3t-Pa55"


def http_index(directory: Path, name: str, data: bytes) -> None:
    """A PEP 503 index for project vllm under `directory`/simple, serving `name`."""
    (directory / "files").mkdir(parents=True, exist_ok=True)
    (directory / "files" / name).write_bytes(data)
    project = directory / "simple" / "vllm"
    project.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256(data).hexdigest()
    (project / "index.html").write_text(f'<a href="../../files/{name}#sha256={sha}">{name}</a>\n')


class _Short(http.server.BaseHTTPRequestHandler):
    """Announces the whole payload, sends half, closes: a transfer cut short (Range ignored)."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.requests.append(self.path)
        self.server.ranges.append(self.headers.get("Range"))
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        self.wfile.write(PAYLOAD[: len(PAYLOAD) // 2])
        self.wfile.flush()
        self.close_connection = True


@contextmanager
def short_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Short)
    server.requests, server.ranges = [], []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_short_transfer_is_retried_kept_and_resumed_by_the_next_run(tmp_path, cache, capsys):
    """A server that ignores Range and cuts every transfer at half: the partial restarts each time
    (no progress), the run fails after RETRIES, the half stays, and the next run asks for the rest."""
    dest = download.downloads_dir() / NAME
    half = len(PAYLOAD) // 2
    with short_server() as (server, url), pytest.raises(DownloadError) as err:
        download.fetch_url(f"{url}/{NAME}", dest, SHA)
    # The first attempt brought half the file; RETRIES more brought nothing new.
    assert server.ranges == [None] + [f"bytes={half}-"] * download.RETRIES
    message = str(err.value)
    assert "truncated transfer" in message and f"{half} of the {len(PAYLOAD)} bytes" in message
    assert "pin" not in message.split("\n")[0] and "next run to resume" in message
    part = download.partial_path(dest, SHA)
    assert not dest.exists() and part.read_bytes() == PAYLOAD[:half]
    assert "the server ignored the range request" in capsys.readouterr().err

    http_index(tmp_path / "srv", NAME, PAYLOAD)
    with serve(tmp_path / "srv") as (server, url):
        assert download.fetch_url(f"{url}/files/{NAME}", dest, SHA) == dest
    assert [s.range for s in server.state.seen] == [f"bytes={half}-"]
    assert dest.read_bytes() == PAYLOAD and not part.exists()


def test_a_connection_cut_at_60_percent_resumes_from_there(tmp_path, cache):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    cut = len(PAYLOAD) * 6 // 10
    dest = download.downloads_dir() / NAME
    with serve(tmp_path / "srv", cut_at=cut) as (server, url):
        assert download.fetch_url(f"{url}/files/{NAME}", dest, SHA) == dest
    assert [(s.range, s.status) for s in server.state.seen] == [(None, 200), (f"bytes={cut}-", 206)]
    assert dest.read_bytes() == PAYLOAD and not list(dest.parent.glob(".*.part*"))


def test_a_server_ignoring_range_restarts_the_file_cleanly(tmp_path, cache):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    cut = len(PAYLOAD) * 6 // 10
    dest = download.downloads_dir() / NAME
    with serve(tmp_path / "srv", cut_at=cut, ranges=False) as (server, url):
        assert download.fetch_url(f"{url}/files/{NAME}", dest, SHA) == dest
    assert [(s.range, s.status) for s in server.state.seen] == [(None, 200), (f"bytes={cut}-", 200)]
    assert dest.read_bytes() == PAYLOAD


@pytest.mark.parametrize(
    "kept",
    [
        b"X" * 1000,  # another file's first bytes: resumed, fails the hash, downloaded again whole
        PAYLOAD + b"tail",  # longer than the file: the server answers 416
    ],
    ids=["wrong-bytes", "too-long"],
)
def test_a_partial_that_cannot_be_resumed_is_downloaded_again_whole(tmp_path, cache, kept, capsys):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    dest = download.downloads_dir() / NAME
    dest.parent.mkdir(parents=True, exist_ok=True)
    download.partial_path(dest, SHA).write_bytes(kept)
    with serve(tmp_path / "srv") as (server, url):
        assert download.fetch_url(f"{url}/files/{NAME}", dest, SHA) == dest
    assert [s.range for s in server.state.seen] == [f"bytes={len(kept)}-", None]
    assert dest.read_bytes() == PAYLOAD and not list(dest.parent.glob(".*.part*"))
    said = capsys.readouterr().err
    assert ("does not match sha256" in said) if len(kept) < len(PAYLOAD) else ("cannot resume" in said)


def test_a_partial_holding_the_whole_file_is_used_without_asking_the_server(tmp_path, cache):
    """A run killed between the last byte and the rename."""
    dest = download.downloads_dir() / NAME
    dest.parent.mkdir(parents=True, exist_ok=True)
    download.partial_path(dest, SHA).write_bytes(PAYLOAD)
    (tmp_path / "empty").mkdir()
    with serve(tmp_path / "empty") as (server, url):
        assert download.fetch_url(f"{url}/files/{NAME}", dest, SHA) == dest
    assert server.requests == [] and dest.read_bytes() == PAYLOAD


def test_a_busy_server_is_asked_again_after_its_retry_after(tmp_path, cache, capsys):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    dest = download.downloads_dir() / NAME
    with serve(tmp_path / "srv", busy=1, retry_after=1) as (server, url):
        start = time.monotonic()
        assert download.fetch_url(f"{url}/files/{NAME}", dest, SHA) == dest
        waited = time.monotonic() - start
    assert [s.status for s in server.state.seen] == [503, 200]
    assert waited >= 1.0  # the first retry is at once unless the server says when
    assert "answered 503; trying again" in capsys.readouterr().err


def test_a_server_busy_every_time_fails_after_the_retries(tmp_path, cache):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    dest = download.downloads_dir() / NAME
    with serve(tmp_path / "srv", busy=99, retry_after=0) as (server, url), pytest.raises(DownloadError) as err:
        download.fetch_url(f"{url}/files/{NAME}", dest, SHA)
    assert len(server.requests) == download.RETRIES
    assert f"answered 503 Service Unavailable, {download.RETRIES} times" in str(err.value)


def test_a_404_fails_at_once_naming_the_url_with_its_password_masked(tmp_path, cache):
    (tmp_path / "srv").mkdir()
    dest = download.downloads_dir() / NAME
    with serve(tmp_path / "srv") as (server, url), pytest.raises(DownloadError) as err:
        download.fetch_url(url.replace("//", f"//{USER}:{PASSWORD}@") + f"/files/{NAME}", dest, SHA)
    assert len(server.requests) == 1
    message = str(err.value)
    assert f"from http://{USER}:****@127.0.0.1:{server.server_address[1]}/files/{NAME}: " in message
    assert "answered 404 File not found" in message and PASSWORD not in message
    assert not dest.exists() and not list(dest.parent.glob(".*.part*"))


def test_basic_auth_from_the_url(tmp_path, cache):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    dest = download.downloads_dir() / NAME
    with serve(tmp_path / "srv", auth=(USER, PASSWORD)) as (server, url):
        for creds, said in [("", "it wants credentials"), (f"{USER}:wrong@", "were refused")]:
            with pytest.raises(DownloadError, match=said) as err:
                download.fetch_url(url.replace("//", f"//{creds}") + f"/files/{NAME}", dest, SHA)
            assert "401" in str(err.value) and "wrong" not in str(err.value)
        assert len(server.requests) == 2  # a 401 is not retried
        assert download.fetch_url(url.replace("//", f"//{USER}:{PASSWORD}@") + f"/files/{NAME}", dest, SHA) == dest
    assert dest.read_bytes() == PAYLOAD


def test_files_an_index_lists_on_its_own_host_get_its_credentials(tmp_path, cache, monkeypatch):
    """As pip does: a link on the index's host (absolute here, as PEP 691 indexes write them) is sent the
    index URL's credentials; a link to another host is not."""
    with serve(tmp_path, auth=(USER, PASSWORD)) as (_server, url):
        project = tmp_path / "simple" / "vllm"
        project.mkdir(parents=True)
        links = [(NAME, f"{url}/files/{NAME}"), ("vllm-1.0.0.tar.gz", "http://files.example/vllm-1.0.0.tar.gz")]
        project.joinpath("index.html").write_text("".join(f'<a href="{href}">{name}</a>' for name, href in links))
        monkeypatch.setenv("PIP_INDEX_URL", url.replace("//", f"//{USER}:{PASSWORD}@") + "/simple/")
        assert find_file("vllm", NAME).url == url.replace("//", f"//{USER}:{PASSWORD}@") + f"/files/{NAME}"
        assert find_file("vllm", "vllm-1.0.0.tar.gz").url == "http://files.example/vllm-1.0.0.tar.gz"


def test_basic_auth_from_a_netrc_file(tmp_path, cache, monkeypatch):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login {USER} password {PASSWORD}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    dest = download.downloads_dir() / NAME
    with serve(tmp_path / "srv", auth=(USER, PASSWORD)) as (server, url):
        assert download.fetch_url(f"{url}/files/{NAME}", dest, SHA) == dest
    assert [s.status for s in server.state.seen] == [200] and dest.read_bytes() == PAYLOAD


@pytest.fixture
def certs(tmp_path):
    return make_certs(tmp_path / "tls")


@pytest.fixture
def no_ca_settings(monkeypatch, tmp_path):
    """No CA bundle from this machine's settings: pip's config files, PIP_CERT and the others."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("setting", ["PIP_CERT", "pip.conf", "REQUESTS_CA_BUNDLE"])
def test_a_tls_server_signed_by_the_ca_pip_is_told_of(
    tmp_path, cache, certs, no_ca_settings, monkeypatch, capsys, setting
):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    dest = download.downloads_dir() / NAME
    with serve(tmp_path / "srv", tls=certs.server_context()) as (server, url):
        assert url.startswith("https://")
        with pytest.raises(DownloadError, match="certificate did not verify") as err:
            download.fetch_url(f"{url}/files/{NAME}", dest, SHA)
        assert "PIP_CERT" in str(err.value) and "trying again" not in capsys.readouterr().err  # it never would
        if setting == "pip.conf":
            (tmp_path / "pip.conf").write_text(f"[global]\ncert = {certs.ca}\n")
            monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
        else:
            monkeypatch.setenv(setting, str(certs.ca))
        assert download.fetch_url(f"{url}/files/{NAME}", dest, SHA) == dest
    assert dest.read_bytes() == PAYLOAD


@pytest.mark.parametrize("setting", ["PIP_PROXY", "pip.conf", "http_proxy"])
def test_downloads_go_through_the_proxy_pip_is_told_of(tmp_path, cache, monkeypatch, setting):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_PROXY", "http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    dest = download.downloads_dir() / NAME
    with serve(tmp_path / "srv") as (proxy, proxy_url):
        if setting == "pip.conf":
            (tmp_path / "pip.conf").write_text(f"[global]\nproxy = {proxy_url}\n")
            monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
        else:
            monkeypatch.setenv(setting, proxy_url)
        # A host that does not resolve: only the proxy can answer.
        assert download.fetch_url(f"http://index.invalid/files/{NAME}", dest, SHA) == dest
    assert proxy.requests == [f"http://index.invalid/files/{NAME}"] and dest.read_bytes() == PAYLOAD


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


def test_a_killed_download_keeps_its_partial_and_the_next_run_resumes_it(tmp_path, cache, monkeypatch, capsys):
    stall = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stall)
    stall.release = threading.Event()
    threading.Thread(target=stall.serve_forever, daemon=True).start()
    dest = download.downloads_dir() / NAME
    part = download.partial_path(dest, SHA)
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
        # kill -9 once a MiB of the file is on disk.
        assert faults.kill_when(proc, lambda: part.is_file() and part.stat().st_size >= download.CHUNK)
    finally:
        stall.release.set()
        stall.shutdown()
        stall.server_close()
    kept = part.stat().st_size
    assert kept >= download.CHUNK and part.read_bytes() == PAYLOAD[:kept] and not dest.exists()

    # The next run of the same download asks for the rest only.
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    with serve(tmp_path / "srv") as (server, url):
        monkeypatch.setenv("PIP_INDEX_URL", f"{url}/simple/")
        assert download.fetch("vllm", NAME, SHA) == dest
    assert [s.range for s in server.state.seen if s.path.startswith("/files/")] == [f"bytes={kept}-"]
    assert dest.read_bytes() == PAYLOAD and not part.exists()
    # A cache hit removes what other runs left (a temp file of an older version, another pin's partial).
    for left in (f".{NAME}.abcd1234.part", f".{NAME}.{'0' * 16}.partial"):
        (dest.parent / left).write_bytes(b"x")
    assert download.fetch("vllm", NAME, SHA) == dest
    assert not list(dest.parent.glob(".*.part*"))
    said = [ln for ln in capsys.readouterr().err.splitlines() if "partial download" in ln]
    assert said == [f"removed 2 partial download(s) of {NAME} (0.0 MiB) that an interrupted run left in {dest.parent}"]


def test_a_partial_download_no_run_resumed_for_a_week_is_removed(tmp_path, cache):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    old = download.downloads_dir() / f".other.whl.{'1' * 16}.partial"
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_bytes(b"x")
    os.utime(old, (1, 1))
    with serve(tmp_path / "srv") as (_server, url):
        download.fetch_url(f"{url}/files/{NAME}", download.downloads_dir() / NAME, SHA)
    assert not old.exists()


# -- no password from a URL in any output, of runs that fail or succeed --

DRIVER = """
import sys
from pathlib import Path
from vllm_fork.core.errors import ForkError
from vllm_fork.ops import cache as opscache
from vllm_fork.upstream import download
from vllm_fork.upstream.pkgindex import find_file
try:
    if sys.argv[1] == "index":
        print(download.fetch("vllm", sys.argv[2], sys.argv[3]))
    else:
        print(opscache.get(sys.argv[2], Path(sys.argv[3])))
except ForkError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)
"""


def _child(cache: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", DRIVER, *args],
        cwd=Path(__file__).resolve().parents[2],
        env={
            **os.environ,
            "VLLM_FORK_CACHE": str(cache),
            "VLLM_FORK_LOG": "verbose",
            "PIP_CONFIG_FILE": os.devnull,
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_output_of_any_run_shows_a_password_from_a_url(tmp_path, cache):
    http_index(tmp_path / "srv", NAME, PAYLOAD)
    (tmp_path / "srv" / "files" / "artifact.zip").write_bytes(PAYLOAD[:1000])
    root = tmp_path / "fork"
    (root / "ops-cache").mkdir(parents=True)
    key = "k" * 64
    entry = {"file": "artifact.zip", "sha256": hashlib.sha256(PAYLOAD[:1000]).hexdigest(), "size": 1000}
    entry |= {"members": 0, "record_sha256": "", "provenance": {}}
    (root / "ops-cache" / "index.json").write_text(json.dumps({"schema": 1, "remotes": [], "artifacts": {key: entry}}))
    runs = []
    with serve(tmp_path / "srv", auth=(USER, PASSWORD)) as (server, url):
        good = url.replace("//", f"//{USER}:{PASSWORD}@")
        bad = url.replace("//", f"//{USER}:{PASSWORD}x@")
        with serve(tmp_path / "srv") as (_dead, dead):
            pass  # its port is closed now
        dead = dead.replace("//", f"//{USER}:{PASSWORD}@")
        for index, wanted in [(bad, 1), (dead, 1), (f"{good}/nothing-here", 1), (good, 0)]:
            runs.append(_child(cache, "index", NAME, SHA, PIP_INDEX_URL=f"{index}/simple/"))
            assert runs[-1].returncode == wanted, runs[-1].stderr
        (cache / "downloads" / NAME).unlink()
        server.state.faults.cut_at, server.state.faults.cuts = len(PAYLOAD) // 2, 1
        runs.append(_child(cache, "index", NAME, SHA, PIP_INDEX_URL=f"{good}/simple/"))
        assert runs[-1].returncode == 0 and "resuming at byte" in runs[-1].stderr
        for remote, wanted in [(f"{bad}/files", 1), (f"{good}/nothing-here", 1), (f"{good}/files", 0)]:
            runs.append(_child(cache, "ops", key, str(root), VLLM_FORK_OPS_REMOTES=remote))
            assert runs[-1].returncode == wanted, runs[-1].stderr
    assert all(s.authorization for s in server.state.seen[1:])  # the files, too, got the index's credentials
    output = "".join(r.stdout + r.stderr for r in runs)
    assert PASSWORD not in output and f"{USER}:****@" in output
    assert "Traceback" not in output
