"""The Python layer (upstream's files, deflated once) is sha256-verified on every use."""

from __future__ import annotations

import json
import multiprocessing
import zipfile
from pathlib import Path

from support.buildtrees import VLLM_LIKE, make_tree

from vllm_fork.core.fs import sha256_file, sha256_fp
from vllm_fork.wheel import pylayer

FILES = {**VLLM_LIKE, **{f"vllm/mod{i}.py": f"VALUE = {i}\n" * 50 for i in range(20)}}


def _layer_file(tree: Path) -> tuple[Path, dict]:
    tree_id = pylayer.out(tree, "rev-parse", "HEAD:vllm")
    manifest = json.loads(pylayer.manifest_path(tree_id).read_text())
    return pylayer.layer_dir() / manifest["file"], manifest


def test_layer_has_a_manifest_and_holds_every_blob(tmp_path, cache):
    tree = make_tree(tmp_path / "tree", FILES)
    with pylayer.open_layer(tree, "HEAD") as fp:
        names = set(zipfile.ZipFile(fp).namelist())
    path, manifest = _layer_file(tree)
    assert manifest["sha256"] == sha256_file(path) and manifest["size"] == path.stat().st_size
    assert manifest["sha256"][:16] in path.name
    blobs = {row.split()[2] for row in pylayer.out(tree, "ls-tree", "-r", "HEAD:vllm").splitlines()}
    assert names == blobs
    assert not list(pylayer.layer_dir().glob(".*.part"))


def test_corrupt_layer_is_rebuilt_with_a_warning_never_used(tmp_path, cache, capfd):
    tree = make_tree(tmp_path / "tree", FILES)
    pylayer.open_layer(tree, "HEAD").close()
    path, manifest = _layer_file(tree)
    good = path.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 3] ^= 0x01  # one bit inside some member's deflated data
    path.write_bytes(bytes(bad))
    capfd.readouterr()
    with pylayer.open_layer(tree, "HEAD") as fp:
        assert fp.read() == good  # rebuilt, byte for byte what it was
    err = capfd.readouterr().err
    assert "warning" in err and "rebuilding" in err and manifest["sha256"] in err
    assert path.read_bytes() == good


def test_missing_or_garbled_manifest_rebuilds(tmp_path, cache, capfd):
    tree = make_tree(tmp_path / "tree", FILES)
    pylayer.open_layer(tree, "HEAD").close()
    path, _ = _layer_file(tree)
    tree_id = pylayer.out(tree, "rev-parse", "HEAD:vllm")
    pylayer.manifest_path(tree_id).write_text("{not json")
    with pylayer.open_layer(tree, "HEAD") as fp:
        assert fp.read() == path.read_bytes()
    assert "malformed" in capfd.readouterr().err
    path.unlink()
    with pylayer.open_layer(tree, "HEAD") as fp:
        assert zipfile.ZipFile(fp).testzip() is None
    assert "missing" in capfd.readouterr().err


def _open_many(args):
    import os

    tree, cache = args
    os.environ["VLLM_FORK_CACHE"] = cache
    from vllm_fork.wheel import pylayer as pl

    digests = []
    for _ in range(5):
        with pl.open_layer(Path(tree), "HEAD") as fp:
            digests.append(sha256_fp(fp)[0])
    return digests


def test_concurrent_builders_share_one_good_layer(tmp_path, cache):
    tree = make_tree(tmp_path / "tree", FILES)
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        results = pool.map(_open_many, [(str(tree), str(cache))] * 3)
    path, manifest = _layer_file(tree)
    assert {d for r in results for d in r} == {manifest["sha256"]} == {sha256_file(path)}
    assert not list(pylayer.layer_dir().glob(".*.part"))
