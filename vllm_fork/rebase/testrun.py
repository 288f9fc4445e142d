"""The rebase's test step: run the test command, show its progress, name what failed.

The suite takes minutes, so its output is passed through to stderr as it comes
(pytest's progress lines), with a heartbeat line after each quiet half-minute.
The failing tests are read from pytest's short summary (`FAILED path::test - why`,
`ERROR path::test`), which `-rfE` in PYTEST_ADDOPTS asks every pytest the command
runs to print; a command that is not pytest still gates on its exit status.
"""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fork.core import log

#: Seconds without output after which a line says the tests are still running.
HEARTBEAT_SECONDS = 30.0
#: pytest's short-summary lines for a failed test and for an error in setup or collection.
_SUMMARY_LINE = re.compile(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$")


@dataclass
class TestRun:
    """What the test step ran and how it ended (rc None: not run)."""

    __test__ = False  # not a pytest test class, despite the name

    cmd: str
    rc: int | None
    summary: str  # the last line of the output, or why it did not run
    failures: list[str] = field(default_factory=list)  # "FAILED path::test - why", in pytest's order
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.rc not in (None, 0)


def failing_tests(output: str) -> list[str]:
    """The failed and erroring tests pytest's short summary names, each once."""
    found: dict[str, None] = {}
    for line in output.splitlines():
        m = _SUMMARY_LINE.match(line.strip())
        if m:
            why = f" - {m.group(3)[:160]}" if m.group(3) else ""
            found.setdefault(f"{m.group(1)} {m.group(2)}{why}", None)
    return list(found)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{seconds:.1f} s"


def run_tests(root: Path, cmd: str) -> TestRun:
    """Run `cmd` in `root` through the shell, streaming its output; never raises for a failing suite."""
    if not (root / "tests").is_dir():
        return TestRun(cmd, None, "the repository has no tests/ directory")
    env = dict(os.environ)
    # -rfE: the short summary names every failed and erroring test; a -r in the command still wins.
    env["PYTEST_ADDOPTS"] = f"-rfE {env.get('PYTEST_ADDOPTS', '')}".strip()
    log.info(f"tests: running `{cmd}` in {root}")
    started = time.monotonic()
    echo = log.level() >= log.NORMAL
    proc = subprocess.Popen(cmd, shell=True, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    assert proc.stdout is not None
    chunks: list[bytes] = []
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            if not sel.select(timeout=HEARTBEAT_SECONDS):
                log.info(f"tests: still running ({_duration(time.monotonic() - started)})")
                continue
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            if echo:
                sys.stderr.write(chunk.decode(errors="replace"))
                sys.stderr.flush()
    rc = proc.wait()
    seconds = time.monotonic() - started
    output = b"".join(chunks).decode(errors="replace")
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    log.info(f"tests: exit status {rc} after {_duration(seconds)}")
    return TestRun(cmd, rc, lines[-1] if lines else f"exit status {rc}", failing_tests(output), seconds)
