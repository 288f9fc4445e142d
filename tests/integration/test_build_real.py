"""The build on the real pinned vLLM sdist, wheel and patch series (slow; runs in CI).

Uses the shared cache (downloads, build env, ops artifacts), so only the first run
pays for seeding and making the build env.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from support.buildtrees import applied_fork_root, fork_root

from vllm_fork.cli import jsonout
from vllm_fork.core.paths import REPO_ROOT, default_tree
from vllm_fork.core.zipraw import copy_raw
from vllm_fork.ops import cache as opscache
from vllm_fork.ops.key import compute_key, patches_touching_inputs
from vllm_fork.ops.seed import is_precompiled_member, official_wheel
from vllm_fork.upstream.pin import load_pin
from vllm_fork.wheel import provenance
from vllm_fork.wheel.build import build, seed_cache
from vllm_fork.wheel.verify import verify

pytestmark = pytest.mark.slow

#: The ops key of the pinned release (vLLM 0.34.0, from the sdist) with
#: ops-cache/build-params.toml: the same everywhere. A new pin changes it (its rebase seeds it).
RELEASE_KEY = "5c7c4b1f6482111c8b4732e7fb9aec51576b8d6a127d7fed83b8c6f68d0f50ad"
#: The compiled members of its official wheel (the ops artifact's members).
RELEASE_MEMBERS = 2157


@pytest.fixture(scope="module")
def real_root(tmp_path_factory) -> Iterator[Path]:
    with applied_fork_root(tmp_path_factory, "real") as root:
        yield root


@pytest.fixture(scope="module")
def fast_build(real_root):
    return build(root=real_root, apply=False, route="fast")


def members(wheel: Path) -> list[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as zf:
        return [(i.filename, hashlib.sha256(zf.read(i)).hexdigest()) for i in zf.infolist()]


def test_release_key_is_known_and_the_python_only_series_keeps_it(real_root):
    tree = default_tree(real_root)
    assert compute_key(tree, "refs/fork/upstream", real_root).key == RELEASE_KEY
    assert compute_key(tree, "HEAD", real_root).key == RELEASE_KEY
    assert patches_touching_inputs(tree, "refs/fork/upstream", "HEAD", real_root) == []


def test_seed_copies_exactly_the_precompiled_members_raw(real_root):
    entry, artifact, _ = seed_cache(real_root)
    assert entry.key == RELEASE_KEY
    committed = json.loads((REPO_ROOT / "ops-cache" / "index.json").read_text())["artifacts"][RELEASE_KEY]
    assert entry.sha256 == committed["sha256"]  # seeding is deterministic: same artifact on every machine
    # the member hashes taken from the official wheel's RECORD are those of the artifact's members
    computed = hashlib.sha256(opscache.record_bytes(opscache.member_record(artifact))).hexdigest()
    assert entry.record_sha256 == computed == committed["record_sha256"]
    with zipfile.ZipFile(official_wheel(load_pin(real_root))) as wheel, zipfile.ZipFile(artifact) as art:
        expected = [i for i in wheel.infolist() if is_precompiled_member(i.filename)]
        got = art.infolist()
        assert [i.filename for i in got] == [i.filename for i in expected]
        assert len(got) == RELEASE_MEMBERS
        # raw: same compressed sizes and CRCs as the wheel's entries, nothing recompressed
        assert [(i.CRC, i.compress_size, i.compress_type) for i in got] == [
            (i.CRC, i.compress_size, i.compress_type) for i in expected
        ]
        assert art.testzip() is None
    names = {i.filename for i in got}
    assert "vllm/vllm-rs" in names and "vllm/_C_stable_libtorch.abi3.so" in names
    assert sum(n.startswith("vllm/third_party/") for n in names) > 2000
    assert "vllm/vllm_flash_attn/__init__.py" not in names  # source-controlled, setup.py skips it


def test_fast_route_equals_vllms_precompiled_route_member_for_member(real_root, fast_build, tmp_path):
    assert fast_build.record["route"] == "fast" and fast_build.record["cache"] == "hit"
    slow = build(root=real_root, apply=False, route="precompiled", out_dir=tmp_path / "precompiled")
    assert slow.record["route"] == "precompiled"
    assert slow.wheel.name == fast_build.wheel.name
    assert slow.wheel.name.endswith("-cp38-abi3-manylinux_2_28_x86_64.whl")
    assert members(fast_build.wheel) == members(slow.wheel)


def test_build_writes_provenance_and_verify_passes(real_root, fast_build):
    record = provenance.read(fast_build.wheel)
    pin = load_pin(real_root)
    assert record["pin"] == {"version": pin.version, "tag": pin.tag, "commit": pin.commit, "source": pin.source}
    assert record["version"] == f"{pin.version}+{record['series']['label']}"
    assert [p["name"] for p in record["series"]["patches"]] == (real_root / "patches" / "series").read_text().split()
    assert record["ops"]["key"] == RELEASE_KEY and record["ops"]["artifact"]["members"] == RELEASE_MEMBERS
    assert {"apply", "key", "cache", "wheel", "total"} <= set(record["timings"])
    assert any(p["path"] == "vllm/config/multimodal.py" for p in record["patched_files"])
    with zipfile.ZipFile(fast_build.wheel) as zf:
        assert b"16" in zf.read("vllm/config/multimodal.py")
        assert f"Version: {record['version']}".encode() in zf.read(f"vllm-{record['version']}.dist-info/METADATA")
    report = verify(fast_build.wheel, real_root)
    assert report.problems == [], report.problems


def test_verify_catches_a_changed_compiled_member(real_root, fast_build, tmp_path):
    bad = tmp_path / fast_build.wheel.name
    target = "vllm/spinloop.abi3.so"
    with zipfile.ZipFile(fast_build.wheel) as src, open(fast_build.wheel, "rb") as fh, zipfile.ZipFile(bad, "w") as out:
        copy_raw(fh, [i for i in src.infolist() if i.filename != target], out)
        out.writestr(target, b"not the compiled member")
    record = provenance.read(fast_build.wheel)
    record["wheel"] = provenance.wheel_summary(bad)
    provenance.write(bad, record)
    report = verify(bad, real_root)
    assert any("compiled member" in p and target in p for p in report.problems)
    # `invoke verify --json`'s document says the same, in its documented shape.
    doc = verify_document(bad, report)
    assert doc["ok"] is False and doc["problems"] == report.problems


def verify_document(wheel: Path, report) -> dict:
    doc = json.loads(json.dumps(jsonout.document("verify", jsonout.verify_document(str(wheel), report))))
    jsonschema.validate(doc, jsonout.schema("verify"))
    return doc


def test_verify_json_of_a_sound_wheel(real_root, fast_build):
    doc = verify_document(fast_build.wheel, verify(fast_build.wheel, real_root))
    assert doc["ok"] is True and doc["problems"] == [] and doc["checks"]


def _link_cache(shared: Path, fresh: Path) -> None:
    """A fresh cache holding only the downloads (hard links) and the build env."""
    (fresh / "downloads").mkdir(parents=True)
    for f in (shared / "downloads").glob(f"vllm-{load_pin(REPO_ROOT).version}*"):
        os.link(f, fresh / "downloads" / f.name)
    (fresh / "buildenv").symlink_to(shared / "buildenv")


def test_two_builds_sharing_one_fresh_cache(tmp_path, real_root):
    from vllm_fork.core.paths import cache_dir

    fresh = tmp_path / "cache"
    _link_cache(cache_dir(), fresh)
    roots = [fork_root(tmp_path / f"fork{i}") for i in range(2)]  # empty index: both seed the same key
    # Both builds share one index (a clone's own ops-cache/), so point the second at the first's.
    (roots[1] / "ops-cache").rename(roots[1] / "ops-cache-unused")
    (roots[1] / "ops-cache").symlink_to(roots[0] / "ops-cache")
    script = "import sys; from pathlib import Path; from vllm_fork.wheel.build import build; print(build(root=Path(sys.argv[1])).wheel)"
    env = {**os.environ, "VLLM_FORK_CACHE": str(fresh), "PYTHONPATH": str(REPO_ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(r)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for r in roots
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    wheels = [Path(out.strip().splitlines()[-1]) for out, _ in outs]
    assert opscache.sha256_file(wheels[0]) == opscache.sha256_file(wheels[1])
    index = json.loads((roots[0] / "ops-cache" / "index.json").read_text())
    assert list(index["artifacts"]) == [RELEASE_KEY]
    os.environ["VLLM_FORK_CACHE"], saved = str(fresh), os.environ.get("VLLM_FORK_CACHE")
    try:
        entry, path = opscache.get(RELEASE_KEY, roots[0])
        assert opscache.sha256_file(path) == entry.sha256
    finally:
        if saved is None:
            del os.environ["VLLM_FORK_CACHE"]
        else:
            os.environ["VLLM_FORK_CACHE"] = saved
    assert not [p for p in (fresh / "ops").iterdir() if p.name.endswith(".part")]
    # both builders made the Python layer at once: one manifest, naming a file that matches it
    manifests = list((fresh / "pylayer").glob("*.json"))
    assert len(manifests) == 1
    manifest = json.loads(manifests[0].read_text())
    assert opscache.sha256_file(fresh / "pylayer" / manifest["file"]) == manifest["sha256"]
    assert not [p for p in (fresh / "pylayer").iterdir() if p.name.endswith(".part")]


def test_corrupt_python_layer_is_rebuilt_and_the_wheel_is_unchanged(tmp_path, real_root, fast_build, capfd):
    from vllm_fork.core.paths import cache_dir

    # A private cache (the shared one's artifact hard-linked, its build env and metadata linked)
    # so corrupting the layer touches nothing other builds use.
    fresh = tmp_path / "cache"
    (fresh / "ops").mkdir(parents=True)
    for f in (cache_dir() / "ops").iterdir():
        if not f.name.startswith("."):
            os.link(f, fresh / "ops" / f.name)
    for name in ("buildenv", "metadata"):
        (fresh / name).symlink_to(cache_dir() / name)
    saved = os.environ.get("VLLM_FORK_CACHE")
    os.environ["VLLM_FORK_CACHE"] = str(fresh)
    try:
        clean = build(root=real_root, apply=False, route="fast", out_dir=tmp_path / "clean")
        (manifest_path,) = (fresh / "pylayer").glob("*.json")
        layer = fresh / "pylayer" / json.loads(manifest_path.read_text())["file"]
        data = bytearray(layer.read_bytes())
        data[len(data) // 2] ^= 0x01
        layer.write_bytes(bytes(data))
        capfd.readouterr()
        again = build(root=real_root, apply=False, route="fast", out_dir=tmp_path / "again")
        err = capfd.readouterr().err
    finally:
        if saved is None:
            del os.environ["VLLM_FORK_CACHE"]
        else:
            os.environ["VLLM_FORK_CACHE"] = saved
    assert "warning: the cached Python layer" in err and "rebuilding it" in err
    assert opscache.sha256_file(again.wheel) == opscache.sha256_file(clean.wheel)
    assert members(again.wheel) == members(fast_build.wheel)
    assert verify(again.wheel, real_root).problems == []
