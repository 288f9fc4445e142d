"""Fault injection helpers: run a step in a child process and kill it, hash what must never be lost."""

from __future__ import annotations

import hashlib
import json
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
import signal
import sys
from pathlib import Path
# Ctrl-C raises KeyboardInterrupt, as in a terminal's foreground job, even where the test
# runs in a background job of a shell without job control (SIGINT inherited ignored).
signal.signal(signal.SIGINT, signal.default_int_handler)
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
    elif step == "build":
        from vllm_fork.wheel.build import build
        print(build(root=root, route="fast").wheel)
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
        # Its own process group: a kill reaches the git it runs too, as kill -9 of a
        # terminal's job, Ctrl-C (SIGINT to the foreground group) or a power loss does.
        start_new_session=True,
    )


def run(step: str, root: Path) -> subprocess.CompletedProcess:
    proc = start(step, root)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


#: The kill grid of issue 57: every 30 ms through the first 1.5 s of a step.
KILL_GRID = [round(0.03 * n, 2) for n in range(51)]


def seconds_to_finish(step: str, root: Path, runs: int = 3) -> float:
    """The shortest wall time of `runs` uninterrupted runs of `step` (each must succeed)."""
    best = float("inf")
    for _ in range(runs):
        started = time.monotonic()
        done = run(step, root)
        assert done.returncode == 0, done.stderr
        best = min(best, time.monotonic() - started)
    return best


def kills_expected(grid: list[float], seconds: float) -> int:
    """How many of `grid`'s kills must find the step still running: those in the first
    half of its uninterrupted time (a faster machine finishes sooner; the grid must
    still have cut the step at every point it had)."""
    return max(1, sum(1 for delay in grid if delay < seconds / 2))


def kill_after(proc: subprocess.Popen, delay: float, sig: int = signal.SIGKILL) -> bool:
    """Send `sig` to the child's process group after `delay` seconds; True if it was still running."""
    deadline = time.monotonic() + delay
    return kill_when(proc, lambda: time.monotonic() >= deadline, sig)


def kill_when(proc: subprocess.Popen, ready, sig: int = signal.SIGKILL, timeout: float = 120) -> bool:
    """Send `sig` to the child's group as soon as `ready()` holds; True if it was still running then."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.communicate()
            return False
        time.sleep(0.001)
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    proc.communicate(timeout=60)
    if sig != signal.SIGKILL:
        # Ctrl-C: the tool's own git children may still be finishing; let the group end.
        _wait_group(proc.pid)
    return True


def kill_children(proc: subprocess.Popen, name: str, sig: int = signal.SIGKILL) -> int:
    """Send `sig` to the child's own children called `name` (a git it runs), not to it."""
    killed = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, comm, fields = _parse_stat(stat.read_text())
        except (OSError, ValueError):
            continue  # ended while listed
        if int(fields[1]) == proc.pid and comm == name:
            try:
                os.kill(pid, sig)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def _parse_stat(text: str) -> tuple[int, str, list[str]]:
    """/proc/PID/stat: its pid, its command name (in parentheses) and the fields after."""
    head, _, rest = text.rpartition(")")
    pid, _, comm = head.partition(" (")
    return int(pid), comm, rest.split()


def _wait_group(pgid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)


def am_at(tree: Path, patch: int):
    """A kill point: `git am` in `tree` has reached patch number `patch`."""
    next_file = tree / ".git" / "rebase-apply" / "next"

    def ready() -> bool:
        try:
            return int(next_file.read_text()) >= patch
        except (FileNotFoundError, ValueError):
            return False

    return ready


def exists(path: Path):
    """A kill point: `path` exists (a lock, a journal, a temp file)."""
    return lambda: Path(path).exists()


def journal_says(journal: Path, step: str):
    """A kill point: the tree lock's journal names `step` (an apply past its checks, remaking the tree)."""

    def ready() -> bool:
        try:
            return json.loads(Path(journal).read_text()).get("step") == step
        except (OSError, ValueError):
            return False

    return ready


def matches(directory: Path, pattern: str):
    """A kill point: a file matching `pattern` exists in `directory` (a temp file being written)."""
    return lambda: Path(directory).is_dir() and any(Path(directory).glob(pattern))


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
