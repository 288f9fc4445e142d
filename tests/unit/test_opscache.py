"""The ops cache: index, verified use, file:// and HTTP remotes, corruption, concurrent writers."""

from __future__ import annotations

import functools
import http.server
import json
import multiprocessing
import threading
import zipfile
from pathlib import Path

import pytest
from support.buildtrees import fork_root

from vllm_fork.core.errors import ForkError
from vllm_fork.ops import cache as opscache


def make_artifact(path: Path, salt: str = "") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("vllm/_C.abi3.so", b"\x7fELF" + salt.encode() * 1000)
        zf.writestr("vllm/vllm-rs", b"binary" + salt.encode())
        zf.writestr("vllm/third_party/deep_gemm/__init__.py", f"# {salt}\n")
    return path


@pytest.fixture
def root(tmp_path, cache):
    return fork_root(tmp_path / "fork")


KEY = "ab" * 32


def test_put_then_get_verifies_and_records(root, tmp_path):
    entry, stored = opscache.put(KEY, make_artifact(tmp_path / "a.zip"), {"source": "test"}, root)
    assert stored.parent == opscache.ops_dir() and not (tmp_path / "a.zip").exists()
    index = json.loads((root / "ops-cache" / "index.json").read_text())
    assert index["artifacts"][KEY]["sha256"] == entry.sha256 and index["artifacts"][KEY]["members"] == 3
    got_entry, got = opscache.get(KEY, root)
    assert got == stored and got_entry == entry
    record = opscache.load_member_record(entry, got)
    assert set(record) == {"vllm/_C.abi3.so", "vllm/vllm-rs", "vllm/third_party/deep_gemm/__init__.py"}
    assert opscache.get("cd" * 32, root) is None


def test_corrupt_artifact_is_never_used_and_is_fetched_again(root, tmp_path):
    entry, stored = opscache.put(KEY, make_artifact(tmp_path / "a.zip"), {}, root)
    remote = tmp_path / "remote"
    opscache.publish(KEY, remote, root)
    opscache.add_remote(remote.as_uri(), root)
    data = bytearray(stored.read_bytes())
    data[100] ^= 0xFF
    stored.write_bytes(bytes(data))
    _, got = opscache.get(KEY, root)
    assert opscache.sha256_file(got) == entry.sha256  # the good copy came back from the remote


def test_corrupt_artifact_without_a_good_copy_is_a_clear_error(root, tmp_path):
    _, stored = opscache.put(KEY, make_artifact(tmp_path / "a.zip"), {}, root)
    stored.write_bytes(b"tampered")
    bad_remote = tmp_path / "bad-remote"
    bad_remote.mkdir()
    (bad_remote / stored.name).write_bytes(b"also tampered")
    opscache.add_remote(bad_remote.as_uri(), root)
    with pytest.raises(ForkError, match="no remote served a good copy") as err:
        opscache.get(KEY, root)
    assert "sha256" in str(err.value) and "ops.seed" in str(err.value)
    assert not stored.exists()  # the tampered file was deleted, not kept
    assert not list(opscache.ops_dir().glob("*.part"))


def test_tampered_member_record_sidecar_is_recomputed(root, tmp_path):
    entry, stored = opscache.put(KEY, make_artifact(tmp_path / "a.zip"), {}, root)
    sidecar = opscache.ops_dir() / f"{entry.sha256}.record.json"
    good = sidecar.read_bytes()
    sidecar.write_text(json.dumps({"vllm/_C.abi3.so": ["forged", 1]}))
    record = opscache.load_member_record(entry, stored)
    assert record["vllm/_C.abi3.so"][0] != "forged" and sidecar.read_bytes() == good


def test_fetch_over_http_from_loopback(root, tmp_path):
    entry, stored = opscache.put(KEY, make_artifact(tmp_path / "a.zip"), {}, root)
    served = tmp_path / "served"
    opscache.publish(KEY, served, root)
    stored.unlink()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        opscache.add_remote(f"http://127.0.0.1:{server.server_address[1]}/", root)
        _, got = opscache.get(KEY, root)
        assert opscache.sha256_file(got) == entry.sha256
    finally:
        server.shutdown()


def _put_many(args):
    root, cache, worker = args
    import os

    os.environ["VLLM_FORK_CACHE"] = cache
    Path(cache).mkdir(parents=True, exist_ok=True)
    from vllm_fork.ops import cache as oc

    for i in range(4):
        src = make_artifact(Path(cache) / f"w{worker}-{i}.zip", salt=f"{worker}{i}")
        oc.put(f"{worker}{i}".ljust(64, "0"), src, {"worker": worker}, Path(root))
        # every worker also stores the same shared key: same bytes, written concurrently
        oc.put("f" * 64, make_artifact(Path(cache) / f"s{worker}-{i}.zip", salt="shared"), {}, Path(root))
    return True


def test_concurrent_writers_keep_index_and_artifacts_whole(root, cache):
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        assert all(pool.map(_put_many, [(str(root), str(cache), w) for w in range(3)]))
    index = opscache.read_index(root)
    assert len(index["artifacts"]) == 13
    for key in index["artifacts"]:
        entry, path = opscache.get(key, root)
        assert opscache.sha256_file(path) == entry.sha256
        assert zipfile.ZipFile(path).testzip() is None
    assert not [p for p in opscache.ops_dir().iterdir() if p.name.endswith(".part")]
