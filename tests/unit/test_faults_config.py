"""Hostile configuration: pins, indexes and cache locations a careless edit can make."""

from __future__ import annotations

import json
import os
import zipfile

import pytest
from support import faults

from vllm_fork.core.errors import BuildError, ConfigError, DiskFull, ForkError, IntegrityError
from vllm_fork.core.fs import remove_stale_temps
from vllm_fork.core.paths import cache_dir
from vllm_fork.ops import cache as opscache
from vllm_fork.ops.key import OpsKey
from vllm_fork.upstream.pin import load_pin
from vllm_fork.wheel import provenance
from vllm_fork.wheel.build import ensure_artifact
from vllm_fork.wheel.buildenv import BuildEnv
from vllm_fork.wheel.verify import verify


def test_a_float_version_names_the_key_and_the_fix(fork):
    pin = fork.root / "upstream.toml"
    pin.write_text(pin.read_text().replace('version = "1.0.0"', "version = 0.33"))
    with pytest.raises(ConfigError, match=r"`version = 0.33` is a float; write it as a quoted string") as err:
        load_pin(fork.root)
    assert "upstream.toml" in str(err.value)


def test_a_missing_sha256_names_the_table(fork):
    pin = fork.root / "upstream.toml"
    text = pin.read_text()
    start = text.index("[wheel]")
    pin.write_text(text[:start] + '[wheel]\nfilename = "mini-1.0.0-py3-none-any.whl"\n')
    with pytest.raises(ConfigError, match=r"\[wheel\] lacks `sha256`"):
        load_pin(fork.root)


@pytest.mark.parametrize("name", ["../../victim", "/etc/passwd", "..", "a/b.whl"])
def test_a_pin_file_name_with_a_directory_is_refused(fork, name):
    pin = fork.root / "upstream.toml"
    pin.write_text(pin.read_text().replace('filename = "mini-1.0.0.tar.gz"', f'filename = "{name}"'))
    with pytest.raises(ConfigError, match="not a plain file name"):
        load_pin(fork.root)


def index_with(root, file_name: str) -> None:
    (root / "ops-cache").mkdir(parents=True, exist_ok=True)
    entry = {"file": file_name, "sha256": "0" * 64, "size": 1, "members": 1, "record_sha256": "0" * 64}
    (root / "ops-cache" / "index.json").write_text(
        json.dumps({"schema": 1, "remotes": [], "artifacts": {"k" * 64: {**entry, "provenance": {}}}})
    )


@pytest.mark.parametrize("name", ["../../victim", "../ops-elsewhere.zip", "/tmp/victim"])
def test_an_index_naming_a_file_outside_the_cache_touches_nothing(tmp_path, cache, name):
    victim = tmp_path / "victim"
    victim.write_bytes(b"not the tool's")
    index_with(tmp_path, name)
    before = faults.precious(tmp_path, cache)
    with pytest.raises(ConfigError, match="not a plain file name") as err:
        opscache.get("k" * 64, tmp_path)
    assert "index.json" in str(err.value) and "git checkout" in str(err.value)
    assert victim.read_bytes() == b"not the tool's"
    assert faults.precious(tmp_path, cache) == before


def test_an_index_entry_lacking_a_field_is_a_config_error(tmp_path, cache):
    index_with(tmp_path, "vllm-ops-x.zip")
    data = json.loads((tmp_path / "ops-cache" / "index.json").read_text())
    del data["artifacts"]["k" * 64]["sha256"]
    (tmp_path / "ops-cache" / "index.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match='lacks "sha256"'):
        opscache.get("k" * 64, tmp_path)


def test_a_cache_path_that_is_a_file_is_a_config_error(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("VLLM_FORK_CACHE", str(blocker))
    with pytest.raises(ConfigError, match="VLLM_FORK_CACHE") as err:
        cache_dir()
    assert str(blocker) in str(err.value)
    monkeypatch.setenv("VLLM_FORK_CACHE", str(blocker / "sub"))
    with pytest.raises(ConfigError, match="is a file"):
        cache_dir()


def test_stale_temp_files_go_and_fresh_ones_stay(tmp_path):
    stale, fresh = tmp_path / ".x.whl.abc.part", tmp_path / ".y.whl.def.part"
    stale.write_bytes(b"left by kill -9")
    fresh.write_bytes(b"another process is writing this")
    os.utime(stale, (1, 1))
    assert remove_stale_temps(tmp_path) == [stale]
    assert fresh.exists() and not stale.exists()


# -- verify on damaged wheels and records --


def damaged_wheel(tmp_path):
    wheel = tmp_path / "vllm-1.0.0+fork.x-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("vllm/engine.py", b"A" * 4096)
        zf.writestr("vllm-1.0.0+fork.x.dist-info/RECORD", b"")
    provenance.write(
        wheel,
        {
            "version": "1.0.0+fork.x",
            "wheel": {"sha256": "0" * 64},
            "ops": {"key": "k" * 64, "artifact": {"sha256": "0" * 64}},
        },
    )
    return wheel


def test_verify_reports_a_member_with_a_bad_crc(tmp_path, cache):
    wheel = damaged_wheel(tmp_path)
    data = bytearray(wheel.read_bytes())
    data[data.index(b"AAAA") + 100] = ord("B")  # the member's bytes no longer match its CRC
    wheel.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="is corrupt") as err:
        verify(wheel, tmp_path)
    assert "invoke build" in str(err.value)


def test_verify_reports_a_truncated_provenance_record(tmp_path, cache):
    wheel = damaged_wheel(tmp_path)
    record = provenance.provenance_path(wheel)
    record.write_bytes(record.read_bytes()[:40])
    with pytest.raises(IntegrityError, match="not a whole provenance record") as err:
        verify(wheel, tmp_path)
    assert str(record) in str(err.value)


def test_disk_full_is_a_typed_error_with_its_own_exit_code():
    assert issubclass(DiskFull, ForkError) and DiskFull.exit_code == 28


def test_a_build_env_whose_python_is_gone_is_a_build_error_naming_it(tmp_path):
    env = BuildEnv(tmp_path / "env", "2.9.0", "12.8", real_torch=False)
    (env.path / "bin").mkdir(parents=True)
    (env.path / ".complete").write_text("x\n")
    (env.path / "bin" / "python").symlink_to(tmp_path / "removed-interpreter")  # a dangling venv link
    with pytest.raises(BuildError, match="cannot run") as err:
        env.tool_versions()
    assert str(env.path) in str(err.value)


@pytest.mark.parametrize("index", ['{"schema": 1, "artifacts": {', '{"schema": 1, "artifacts": {"K": {"file": 3}}}'])
def test_an_invalid_index_is_reported_before_any_seeding(tmp_path, cache, index):
    (tmp_path / "ops-cache").mkdir()
    (tmp_path / "ops-cache" / "index.json").write_text(index.replace("K", "k" * 64))
    key = OpsKey("k" * 64, "0" * 40, [])
    seeded = []
    with pytest.raises(ConfigError, match="index.json"):
        ensure_artifact(key, key, tmp_path, tmp_path / "no-tree", seeded.append)
    assert seeded == [] and not list((cache / "ops").glob("*"))
