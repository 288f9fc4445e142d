"""Fault injection helpers: run a step in a child process and kill it, hash what must never be lost."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from vllm_fork.core.paths import REPO_ROOT

#: Runs one tool step in a child: `python -c DRIVER <step> <fork root>`; a ForkError
#: becomes "error: <message>" and its exit code, as the invoke tasks print it.
DRIVER = """
import sys
from pathlib import Path
from vllm_fork.core.errors import ForkError
from vllm_fork.queue import apply as queue
step, root = sys.argv[1], Path(sys.argv[2])
try:
    if step == "apply":
        print(queue.apply(root))
    elif step == "apply-force":
        print(queue.apply(root, force=True))
    elif step == "abort":
        queue.abort(root=root)
except ForkError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)
"""


def start(step: str, root: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, step, str(root)],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(step: str, root: Path) -> subprocess.CompletedProcess:
    proc = start(step, root)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def kill_after(proc: subprocess.Popen, delay: float, sig: int = signal.SIGKILL) -> bool:
    """Send `sig` after `delay` seconds; True if the child was still running then."""
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            proc.communicate()
            return False
        time.sleep(0.005)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    return True


def digest_tree(path: Path) -> dict[str, str]:
    """sha256 of every file under `path` (or of `path` itself), by relative name."""
    path = Path(path)
    if path.is_file():
        return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()}
    if not path.exists():
        return {}
    return {
        p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def precious(root: Path, cache: Path | None = None, cache_parts: tuple[str, ...] = ("downloads", "ops")) -> dict:
    """What a failure must never change: patches/, the pin, ops-cache/index.json and the cache's files."""
    state = {
        "patches": digest_tree(root / "patches"),
        "pin": digest_tree(root / "upstream.toml"),
        "index": digest_tree(root / "ops-cache" / "index.json"),
    }
    if cache is not None:
        for part in cache_parts:
            state[f"cache/{part}"] = digest_tree(cache / part)
    return state


def assert_actionable(stderr: str, *needles: str) -> None:
    """A message for a user: no traceback, and it names what it must."""
    assert "Traceback" not in stderr, stderr
    for needle in needles:
        assert needle in stderr, f"{needle!r} not in:\n{stderr}"
