"""The one logger: messages for people on stderr (stdout stays for results), at three levels.

`quiet` shows warnings and errors only, `normal` adds what each step does, `verbose`
adds detail. The level comes from `VLLM_FORK_LOG` (quiet, normal, verbose) or
`set_level`. `Progress` reports a long step every 10 %, so a log of a two-minute
build shows it moving without drowning in lines.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

QUIET, NORMAL, VERBOSE = 0, 1, 2
LEVELS = {"quiet": QUIET, "normal": NORMAL, "verbose": VERBOSE}
LEVEL_ENV = "VLLM_FORK_LOG"

_level: int | None = None


#: Where a step's messages go: `info`, `detail` or a caller's own function.
LogFn = Callable[[str], None]


def level() -> int:
    """The current level: set_level's, else VLLM_FORK_LOG's, else normal."""
    if _level is not None:
        return _level
    return LEVELS.get(os.environ.get(LEVEL_ENV, "").strip().lower(), NORMAL)


def set_level(new: int | None) -> None:
    """Set the level for this process (None: back to VLLM_FORK_LOG's)."""
    global _level
    _level = new


def _emit(text: str) -> None:
    # sys.stderr looked up on every call: pytest's capsys and redirections replace it.
    print(text, file=sys.stderr, flush=True)


def info(msg: str) -> None:
    """What a step does (shown unless quiet)."""
    if level() >= NORMAL:
        _emit(msg)


def detail(msg: str) -> None:
    """Detail only `verbose` shows."""
    if level() >= VERBOSE:
        _emit(msg)


def warning(msg: str) -> None:
    """Something went wrong and was handled; always shown, prefixed `warning: `."""
    _emit(f"warning: {msg}")


def error(msg: str) -> None:
    """The message of a failure a user acts on; always shown, prefixed `error: `."""
    _emit(f"error: {msg}")


class Progress:
    """How far a long step is: a line at each 10 % of `total` (units are the caller's).

    `advance(n)` adds n units done; `update(done, total)` sets both when the work says
    itself how far it is (ninja's `[12/345]`). With no total (unknown size), a line
    at each `step` units instead.
    """

    def __init__(self, label: str, total: int | None = None, log: LogFn = info, unit: str = "", scale: int = 1) -> None:
        self.label, self.total, self.log = label, total, log
        self.unit, self.scale = unit, scale  # e.g. "MiB", 1 << 20: shown as done // scale
        self.done = 0
        self.shown = -1
        self.start = time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def update(self, done: int, total: int | None = None) -> None:
        self.done = done
        if total is not None:
            self.total = total
        # Unknown total: a line per 100 units shown (100 MiB of a download).
        tenth = min(100, self.done * 100 // self.total) // 10 if self.total else self.done // (100 * self.scale)
        if tenth > self.shown:
            self.shown = tenth
            self.log(self.line())

    def line(self) -> str:
        secs = time.monotonic() - self.start
        if self.unit:
            total = f"/{self.total // self.scale}" if self.total else ""
            return f"  {self.label}: {self.done // self.scale}{total} {self.unit}  {secs:5.1f}s"
        pct = min(100, self.done * 100 // max(self.total or 1, 1))
        return f"  {self.label}: {pct:3d}%  {secs:5.1f}s"
