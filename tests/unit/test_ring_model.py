"""benchmarks/ring_model.py's two pipelines, on units whose schedules can be worked out by hand."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from ring_model import Unit, at_balance, byte_ring_ms, fixed_slots_ms, ratios  # noqa: E402

#: One byte per ms: a unit's bytes are its copy time.
RATE = 1.0


def test_one_slot_serializes_every_copy_and_compute():
    units = [Unit("a", 4, 3.0), Unit("b", 2, 5.0), Unit("c", 6, 1.0)]
    assert fixed_slots_ms(units, 1, RATE) == sum(u.nbytes + u.compute for u in units)


def test_enough_slots_leave_the_copies_back_to_back():
    # Compute shorter than the next copy: the encode ends with the last copy and its compute.
    units = [Unit(str(i), 10, 2.0) for i in range(8)]
    assert fixed_slots_ms(units, 8, RATE) == 8 * 10 + 2.0


def test_two_slots_hold_a_copy_back_for_the_compute_two_units_before():
    # Copies 1 ms, computes 10 ms: copy 2 waits for compute 0 (ends at 11), copy 3 for
    # compute 1 (ends at 21), ...; each compute then starts when the one before ends.
    units = [Unit(str(i), 1, 10.0) for i in range(4)]
    assert fixed_slots_ms(units, 2, RATE) == 1 + 4 * 10.0


def test_a_byte_ring_of_equal_units_is_the_fixed_ring():
    rng = random.Random(0)
    for slots in (1, 2, 3, 4):
        units = [Unit(str(i), 8, rng.uniform(1, 20)) for i in range(30)]
        assert byte_ring_ms(units, slots * 8, RATE) == pytest.approx(fixed_slots_ms(units, slots, RATE))


def test_a_large_unit_that_wraps_waits_for_the_unit_just_before_it():
    # Capacity 12: `a` at [0, 5), `b` at [5, 10); `c` (6 bytes) does not fit in [10, 12), wraps
    # to [0, 6) and overwrites both, so it waits for `b`'s compute: two fixed slots would
    # only have waited for `a`'s.
    units = [Unit("a", 5, 1.0), Unit("b", 5, 20.0), Unit("c", 6, 1.0)]
    # a: copy 0-5, compute 5-6; b: copy 5-10, compute 10-30; c: copy 30-36, compute 36-37.
    assert byte_ring_ms(units, 12, RATE) == 37.0
    # Fixed, 2 slots: c's copy waits for a (6) and b's copy (10): 10-16, compute 30-31.
    assert fixed_slots_ms(units, 2, RATE) == 31.0


def test_a_unit_larger_than_the_byte_ring_is_refused():
    with pytest.raises(ValueError, match="exceeds the ring"):
        byte_ring_ms([Unit("a", 9, 1.0)], 8, RATE)


def test_balance_scales_the_compute_to_a_share_of_the_copy_time():
    units = [Unit("a", 30, 1.0), Unit("b", 10, 3.0)]
    scaled = at_balance(units, 0.5, RATE)
    assert sum(u.compute for u in scaled) == pytest.approx(20.0)
    assert scaled[1].compute == pytest.approx(3 * scaled[0].compute)
    # The ratios are against max(compute, copy time): here the copy time, 40.
    assert ratios(scaled, 1, RATE)["fixed"] == pytest.approx(fixed_slots_ms(scaled, 2, RATE) / 40)
