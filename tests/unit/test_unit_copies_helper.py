"""benchmarks/unit_copies.c, the C side of unit_issue_probe.py's `C calls` and `C copy thread`
ways: built by the probe's own `build_c_helper`, its cudart calls pointed at Python functions
that record them (the probe points them at cudart's)."""

from __future__ import annotations

import ctypes
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

P = ctypes.c_void_p
WAIT = ctypes.CFUNCTYPE(ctypes.c_int, P, P, ctypes.c_uint)
MEMCPY = ctypes.CFUNCTYPE(ctypes.c_int, P, P, ctypes.c_size_t, ctypes.c_int, P)
RECORD = ctypes.CFUNCTYPE(ctypes.c_int, P, P)

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


class FakeCudart:
    """cudart's three calls as Python callbacks: each call recorded with its thread; the
    memcpy of the `fail_copy`-th copy (counting from 1) returns error 1."""

    def __init__(self, fail_copy: int = 0):
        self.calls: list[tuple[Any, ...]] = []
        self.threads: set[int] = set()
        self.copies = 0
        self.fail_copy = fail_copy
        self.wait = WAIT(self._wait)
        self.memcpy = MEMCPY(self._memcpy)
        self.record = RECORD(self._record)

    def _wait(self, stream: int | None, event: int | None, flags: int) -> int:
        self.threads.add(threading.get_ident())
        self.calls.append(("wait", stream, event))
        return 0

    def _memcpy(self, dst: int | None, src: int | None, nbytes: int, kind: int, stream: int | None) -> int:
        self.copies += 1
        self.calls.append(("memcpy", dst, src, nbytes, kind, stream))
        return 1 if self.copies == self.fail_copy else 0

    def _record(self, event: int | None, stream: int | None) -> int:
        self.calls.append(("record", event, stream))
        return 0


def load(tmp_path: Path, rt: FakeCudart) -> SimpleNamespace:
    """The helper as the probe loads it (`c_helper`: built into `tmp_path`, its calls
    pointed at `rt`'s, its copy thread started)."""
    from benchmarks.unit_issue_probe import build_c_helper, c_helper

    helper = c_helper(build_c_helper(tmp_path), SimpleNamespace(wait=rt.wait, memcpy=rt.memcpy, record=rt.record))
    assert helper is not None
    return helper


def issued_within(helper: SimpleNamespace, count: int, seconds: float = 10.0) -> int:
    """Copies the thread has issued once it has issued `count`, or after `seconds` (a test of a
    broken helper fails instead of spinning for ever in `uc_wait_issued`)."""
    issued = helper.issued
    deadline = time.monotonic() + seconds
    while issued.value < count and time.monotonic() < deadline:
        time.sleep(0.001)
    return issued.value


def test_enter_makes_the_compute_wait_then_the_next_copy_in_order(tmp_path: Path) -> None:
    rt = FakeCudart()
    helper = load(tmp_path, rt)
    assert helper.enter(11, 21, 12, 31, 4096, 8192, 64, 22) == 0
    assert rt.calls == [
        ("wait", 11, 21),
        ("wait", 12, 31),
        ("memcpy", 4096, 8192, 64, 4, 12),
        ("record", 22, 12),
    ]
    rt.calls.clear()
    assert helper.enter(11, 21, 12, 31, None, 8192, 64, 22) == 0  # the last unit: no next copy
    assert rt.calls == [("wait", 11, 21)]


@pytest.mark.parametrize("spin_ns", [0, 1_000_000])
def test_the_copy_thread_issues_every_pushed_copy_in_order_off_the_callers_thread(tmp_path: Path, spin_ns: int) -> None:
    rt = FakeCudart()
    helper = load(tmp_path, rt)
    helper.set_spin(spin_ns)
    for n in range(1, 6):
        assert helper.push(7, 100 + n, 1000 * n, 2000 * n, n, 200 + n) == n - 1
    assert issued_within(helper, 5) == 5
    assert helper.wait_issued(5) == 0
    expected = []
    for n in range(1, 6):
        expected += [("wait", 7, 100 + n), ("memcpy", 1000 * n, 2000 * n, n, 4, 7), ("record", 200 + n, 7)]
    assert rt.calls == expected
    assert rt.threads and threading.get_ident() not in rt.threads
    helper.stop()


def test_a_failed_copy_is_reported_and_its_record_not_made(tmp_path: Path) -> None:
    rt = FakeCudart(fail_copy=2)
    helper = load(tmp_path, rt)
    for n in range(1, 4):
        helper.push(7, 100 + n, 1000 * n, 2000 * n, n, 200 + n)
    assert issued_within(helper, 3) == 3
    assert helper.wait_issued(3) == 1
    helper.stop()
    assert ("record", 202, 7) not in rt.calls
    assert ("record", 201, 7) in rt.calls and ("record", 203, 7) in rt.calls
