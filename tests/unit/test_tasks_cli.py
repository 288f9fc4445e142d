"""The invoke layer: every task is registered, and flags read as documented."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from invoke import Context

from vllm_fork.cli.usage import task
from vllm_fork.core import log
from vllm_fork.core.paths import REPO_ROOT


def invoke(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return proc.stdout


def test_every_documented_task_is_registered():
    listed = invoke("--list")
    for name in (
        "apply",
        "export",
        "check",
        "status",
        "build",
        "verify",
        "ops.key",
        "ops.seed",
        "ops.publish",
        "docker",
        "rebase",
    ):
        assert f"  {name} " in listed or f"  {name}\n" in listed, name
        assert f"invoke {name}" in (REPO_ROOT / "README.md").read_text(), f"README lacks `invoke {name}`"


def test_apply_takes_git_s_own_3way_spelling():
    assert "--3way, --three-way" in invoke("apply", "--help")


# -- arguments that cannot be mistaken --


def run_invoke(*args: str, cache=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, **({"VLLM_FORK_CACHE": str(cache)} if cache else {}))
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False, env=env
    )


def listed_tasks() -> list[str]:
    """Every task `invoke --list` shows, by its full name (ops.key)."""
    names = []

    def walk(collection: dict, prefix: str) -> None:
        names.extend(prefix + task["name"] for task in collection["tasks"])
        for sub in collection["collections"]:
            walk(sub, prefix + sub["name"] + ".")

    walk(json.loads(invoke("--list", "--list-format", "json")), "")
    return names


def repo_state() -> tuple[str, bytes]:
    """Everything in the checkout a task could change: files (ignored ones too) and the ops index."""
    # --ignored: build/, dist/ and the like too; --porcelain: stable, one line per path.
    status = subprocess.run(
        ["git", "status", "--porcelain", "--ignored"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    # Python's own module cache comes and goes with any import.
    paths = "\n".join(line for line in status.splitlines() if "__pycache__/" not in line)
    return paths, (REPO_ROOT / "ops-cache" / "index.json").read_bytes()


def test_help_works_on_every_task_and_changes_nothing(tmp_path):
    tasks = listed_tasks()
    assert "ops.publish" in tasks and "verify" in tasks and len(tasks) >= 11
    before = repo_state()
    # verify and ops.publish take a positional value: invoke alone took `--help` as that value.
    runs = [(name, "--help") for name in tasks] + [("verify", "-h"), ("ops.publish", "-h")]
    runs += [("ops.publish", "--key", "abc", "--help"), ("docker", "--wheel", "--help")]
    for name, *flags in runs:
        proc = run_invoke(name, *flags, cache=tmp_path / "cache")
        assert proc.returncode == 0, (name, flags, proc.stderr)
        assert proc.stdout.startswith(f"Usage: inv[oke] [--core-opts] {name} "), (name, proc.stdout)
        assert "-v, --verbose" in proc.stdout and "-q, --quiet" in proc.stdout, name
    assert repo_state() == before
    assert not (tmp_path / "cache").exists()  # no task ran far enough to open the cache


@pytest.mark.parametrize(
    "args, says",
    [
        (["ops.publish", "-x"], "--remote got '-x'"),
        (["ops.publish", "--remote=--help"], "--remote got '--help'"),
        (["verify", "--dry"], "--wheel got '--dry'"),  # a core flag of invoke's, eaten as the value
        (["docker", "--tag", "-t", "--dry-run"], "--tag got '-t'"),
        (["status", "--bogus"], "No idea what '--bogus' is!"),
        (["verify"], "did not receive required positional arguments: 'wheel'"),
        (["status", "-v", "-q"], "exclude each other"),
        (["rebase", "--json"], "--json goes with --survey"),
    ],
)
def test_usage_errors_exit_2_and_change_nothing(args, says, tmp_path):
    before = repo_state()
    proc = run_invoke(*args, cache=tmp_path / "cache")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and says in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert repo_state() == before
    assert not (tmp_path / "cache").exists()


def test_a_failure_still_exits_1(tmp_path):
    proc = run_invoke("verify", str(tmp_path / "missing.whl"), cache=tmp_path / "cache")
    assert proc.returncode == 1 and "does not exist" in proc.stderr


def test_quiet_and_verbose_set_the_log_level(capsys, monkeypatch):
    monkeypatch.delenv(log.LEVEL_ENV, raising=False)

    @task
    def talk(c):
        log.info("a step")
        log.detail("a detail")

    for flags, shown in [({}, "a step\n"), ({"quiet": True}, ""), ({"verbose": True}, "a step\na detail\n")]:
        log.set_level(None)
        talk(Context(), **flags)
        assert capsys.readouterr().err == shown, flags
    log.set_level(None)
