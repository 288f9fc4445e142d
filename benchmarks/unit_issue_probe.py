"""How few CUDA calls can stream a unit: the host's time per unit, in an encode-like loop (issue 11).

`tower_ab.py --strip --hooks` split a streamed eager encode's extra host time per unit on the
lent H200 (2B tower, 64-token image, 61 us): 40 us are the five CUDA calls per unit (the
compute stream's wait for the unit's copy and its release of the slot; the copy stream's
wait for the slot, the copy, its record), about 8 us each inside an encode where a hot loop
of the same call takes about 4. This probe times other ways to issue the same copy program
in a loop shaped like an encode: `--units` units of `--unit-mib` from a pinned arena
through a ring of device slots, each unit "computed" by `--ops` small kernels on the
compute stream that read its slot, one encode per way per round, rotated:

- `resident`: the kernels alone (nothing copied), the baseline;
- `calls`: the streamer's five calls per unit through ctypes on cudart (ring of 2, lookahead 1);
- `copy graph`: the copy stream's three calls as one launch of a CUDA graph made once per
  (unit, slot): an event wait node (the slot's release), a memcpy node, an event record
  node (the copy's); the compute stream's two calls stay: three calls per unit;
- `query first`: the streamer's calls, but each of the two waits (the compute stream's for
  the copy, the copy stream's for the slot) is issued only if `cudaEventQuery` says the
  event's work is not done yet: in an encode bound by the host the copy issued a lookahead
  earlier is mostly done when its unit starts, and the slot's last user long done when its
  next copy is issued. One query instead of one wait where the event is done (a wait then
  orders nothing); a query, the error reset it needs and the wait where it is not. Also
  reports the share of waits skipped;
- `release every 2`: the streamer's calls with the slot released every second unit (a
  ring of 3 slots: the copy into a slot waits for the unit three positions back), one
  record and one wait fewer per two units;
- `calls, 4 KiB copies`: the streamer's calls, each copy moving 4 KiB of its unit: what
  the calls cost without the link's traffic;
- `copies alone`: the resident kernels while the copy stream moves all the units' bytes in
  one copy, with no ordering between the streams: what the link's traffic costs the host's
  launches without the streamer's calls (the two split `calls`);
- `copy thread`: the compute stream's two calls per unit stay on the encode's thread; the
  copy stream's three (the slot's wait, the copy, its record) go to a thread of their own,
  handed each position through a queue (ctypes and torch's ops release the GIL, so its
  calls run beside the encode's launches). Before its wait for a copy the encode checks
  that the thread has issued it (`copy_thread_stalls_per_encode`: how often it had not);
- `C calls`: the streamer's five calls, the four at a unit's entry (the compute stream's
  wait, the next copy's wait, copy and record) made by one call into C
  (`benchmarks/unit_copies.c`, built here with `cc` or given as `--c-helper`): what a
  compiled op making the same calls saves on ctypes and Python alone;
- `C copy thread` / `C copy thread, spinning`: `copy thread` with the thread in C (no GIL):
  the encode pushes each copy with one call and checks a counter before its wait
  (`c_copy_thread_stalls_per_encode`); the thread sleeps between copies (woken through a
  condition variable) or spins up to 1 ms for the next one (a core busy through the
  encode); `..., 4 KiB copies`: the spinning thread's copies of 4 KiB each (its calls and
  the streams' ordering without the link's traffic);
- `compute wait + record` / `compute wait` / `compute record`: no copies at all; per unit
  the compute stream makes its two calls of `calls` (a wait for the copy stream's event of
  the unit's slot, long complete, and the record of the slot's release), or one of them:
  what the compute stream's own calls cost its launches;
- `memops program`: the copy stream's whole program for the encode (per unit: wait until
  a counter in device memory says its slot is free, copy, write a counter saying the copy
  is done) captured once as a CUDA graph and launched at the encode's start; per unit the
  compute stream waits on the copy counter and writes the release counter (stream memory
  operations, `cuStreamWaitValue32` / `cuStreamWriteValue32` of the driver API: a
  device-side wait that, unlike an event's, may be issued before the write it waits for).
  Two calls per unit instead of five, and no copy issued per unit. NVIDIA warns that
  ordering made only through these operations is invisible to the scheduler: a probe, not
  a design (`--no-memops` leaves it out).

Each way runs its compute on the legacy default stream (`--compute-streams default`, a plain
script's) or on vLLM's (`vllm`: its `current_stream()`, a stream of its own, as its engine
computes); `default,vllm` times both in the same rounds, a ring each.

Per way: the host's time per encode (issue only) and in total (to the device's end), the
extra host time per unit over `resident` (median of the per-round differences, quartiles),
and whether the last encode's slots hold the arena's bytes. Two checks of a copy graph's
semantics: its wait node waits for the release recorded before its launch (a slot the
compute stream clears after a long kernel, then releases: the copy must land after it),
and whether a copy graph can be launched into a stream capture (CUDA graphs of encodes);
and whether a `cudaEventQuery` that finds the work not done leaves that as the thread's last
error (`query first` then needs a `cudaGetLastError` after it, as torch's `Event.query` makes).

    python3 benchmarks/unit_issue_probe.py --out FILE.json   # on a CUDA machine
"""

from __future__ import annotations

import argparse
import ctypes
import json
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from vllm_fork.core.fs import write_atomic  # noqa: E402

MiB = 1 << 20
CUDA_MEMCPY_DEFAULT = 4
CUDA_ERROR_NOT_READY = 600
TINY_COPY_BYTES = 4096
P = ctypes.c_void_p


def cudart() -> SimpleNamespace:
    """The cudart functions the probe calls, on the libcudart vLLM's ctypes wrapper loads."""
    from vllm.distributed.device_communicators.cuda_wrapper import CudaRTLibrary

    lib = CudaRTLibrary().lib

    def fn(name: str, *argtypes: Any) -> Callable[..., int]:
        function = getattr(lib, name)
        function.restype = ctypes.c_int
        function.argtypes = list(argtypes)
        return function

    node_p = ctypes.POINTER(P)
    error_string = lib.cudaGetErrorString
    error_string.restype = ctypes.c_char_p
    return SimpleNamespace(
        memcpy=fn("cudaMemcpyAsync", P, P, ctypes.c_size_t, ctypes.c_int, P),
        record=fn("cudaEventRecord", P, P),
        wait=fn("cudaStreamWaitEvent", P, P, ctypes.c_uint),
        query=fn("cudaEventQuery", P),
        get_last_error=fn("cudaGetLastError"),
        peek_at_last_error=fn("cudaPeekAtLastError"),
        graph_create=fn("cudaGraphCreate", node_p, ctypes.c_uint),
        add_wait=fn("cudaGraphAddEventWaitNode", node_p, P, node_p, ctypes.c_size_t, P),
        add_record=fn("cudaGraphAddEventRecordNode", node_p, P, node_p, ctypes.c_size_t, P),
        add_memcpy=fn(
            "cudaGraphAddMemcpyNode1D", node_p, P, node_p, ctypes.c_size_t, P, P, ctypes.c_size_t, ctypes.c_int
        ),
        instantiate=fn("cudaGraphInstantiate", node_p, P, ctypes.c_ulonglong),
        launch=fn("cudaGraphLaunch", P, P),
        error_string=error_string,
    )


def build_c_helper(directory: Path) -> Path:
    """benchmarks/unit_copies.c built with the system's `cc` into `directory` (a library of its
    own: its state is per load). Raises OSError (no `cc`) or CalledProcessError."""
    library = directory / "unit_copies.so"
    command = ["cc", "-O2", "-shared", "-fPIC", "-pthread", "-o", str(library), str(HERE / "unit_copies.c")]
    subprocess.run(command, check=True, capture_output=True)
    return library


def c_helper(path: Path | None, rt: SimpleNamespace) -> SimpleNamespace | None:
    """benchmarks/unit_copies.c loaded (built with `cc` unless `path` is given), its calls
    pointed at `rt`'s cudart functions (`wait`, `memcpy`, `record`), its copy thread
    started; None where it cannot be built."""
    if path is None:
        try:
            path = build_c_helper(Path(tempfile.mkdtemp()))
        except (OSError, subprocess.CalledProcessError) as error:
            print(f"C helper not built ({error}): its ways are left out", flush=True)
            return None
    lib = ctypes.CDLL(str(path))

    def fn(name: str, restype: Any, *argtypes: Any) -> Callable[..., Any]:
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = list(argtypes)
        return function

    fn("uc_init", None, P, P, P)(*(ctypes.cast(f, P) for f in (rt.wait, rt.memcpy, rt.record)))
    helper = SimpleNamespace(
        enter=fn("uc_enter", ctypes.c_int, P, P, P, P, P, P, ctypes.c_size_t, P),
        push=fn("uc_push", ctypes.c_long, P, P, P, P, ctypes.c_size_t, P),
        wait_issued=fn("uc_wait_issued", ctypes.c_int, ctypes.c_long),
        set_spin=fn("uc_set_spin", None, ctypes.c_long),
        issued=ctypes.c_long.in_dll(lib, "uc_issued_count"),
        stop=fn("uc_stop", None),
    )
    check(rt, fn("uc_start", ctypes.c_int)(), "uc_start (pthread_create)")
    return helper


CU_STREAM_WAIT_VALUE_GEQ = 0x0
CU_STREAM_WRITE_VALUE_DEFAULT = 0x0


def driver_memops() -> SimpleNamespace:
    """`cuStreamWaitValue32` and `cuStreamWriteValue32` of libcuda (their CUDA 12+ `_v2` symbols)."""
    lib = ctypes.CDLL("libcuda.so.1")

    def fn(name: str) -> Callable[..., int]:
        function = getattr(lib, f"{name}_v2", None) or getattr(lib, name)
        function.restype = ctypes.c_int
        function.argtypes = [P, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        return function

    return SimpleNamespace(wait=fn("cuStreamWaitValue32"), write=fn("cuStreamWriteValue32"))


def check(rt: SimpleNamespace, error: int, what: str) -> None:
    """Raise on a cudart error code, naming the call and the error."""
    if error:
        raise RuntimeError(f"{what}: cudart error {error} ({rt.error_string(error).decode()})")


def check_driver(error: int, what: str) -> None:
    """Raise on a driver API error code (`CUresult`: not cudart's numbering)."""
    if error:
        raise RuntimeError(f"{what}: CUDA driver error {error}")


def copy_graph(rt: SimpleNamespace, dst: int, src: int, nbytes: int, after: int, done: int) -> int:
    """An instantiated graph: wait for event `after`, copy, record event `done`."""
    graph, wait, copy, record, graph_exec = P(), P(), P(), P(), P()
    check(rt, rt.graph_create(ctypes.byref(graph), 0), "cudaGraphCreate")
    check(rt, rt.add_wait(ctypes.byref(wait), graph, None, 0, after), "cudaGraphAddEventWaitNode")
    check(
        rt,
        rt.add_memcpy(ctypes.byref(copy), graph, ctypes.byref(wait), 1, dst, src, nbytes, CUDA_MEMCPY_DEFAULT),
        "cudaGraphAddMemcpyNode1D",
    )
    check(rt, rt.add_record(ctypes.byref(record), graph, ctypes.byref(copy), 1, done), "cudaGraphAddEventRecordNode")
    check(rt, rt.instantiate(ctypes.byref(graph_exec), graph, 0), "cudaGraphInstantiate")
    assert graph_exec.value is not None
    return graph_exec.value


class Ring:
    """A pinned arena of units, device slots, the events, and one encode per way."""

    def __init__(self, rt: SimpleNamespace, units: int, unit_bytes: int, ops: int, device: torch.device):
        self.rt, self.units, self.unit_bytes, self.ops = rt, units, unit_bytes, ops
        self.arena = torch.empty(units * unit_bytes, dtype=torch.uint8, pin_memory=True)
        self.arena.view(torch.int32).random_(0, 1 << 30)
        self.slots = torch.empty(3, unit_bytes, dtype=torch.uint8, device=device)
        self.scratch = torch.empty(units * unit_bytes, dtype=torch.uint8, device=device)  # `copies alone`
        self.copy_stream = torch.cuda.Stream(device)
        self.compute_stream = torch.cuda.current_stream(device)
        self.compute, self.copy = self.compute_stream.cuda_stream, self.copy_stream.cuda_stream
        self.events = [torch.cuda.Event() for _ in range(7)]
        for event in self.events:
            event.record(self.compute_stream)
        handles = [e.cuda_event for e in self.events]
        self.copied, self.released, self.release_one = handles[:3], handles[3:6], handles[6]
        # What a unit's compute reads: the first 256 x 512 bf16 of its slot.
        self.views = [slot[: 256 * 512 * 2].view(torch.bfloat16).view(256, 512) for slot in self.slots]
        self.queries = self.skipped = 0  # of `query first`
        self.c_stalls = 0  # of `C copy thread`: positions whose copy was not issued yet
        self.uc: SimpleNamespace | None = None
        self.x = torch.zeros(256, 512, dtype=torch.bfloat16, device=device)
        self.graphs = {
            (unit, slot): copy_graph(
                rt,
                self.slots[slot].data_ptr(),
                self.arena.data_ptr() + unit * unit_bytes,
                unit_bytes,
                self.released[slot],
                self.copied[slot],
            )
            for unit in range(units)
            for slot in range(2)
        }

    def _compute(self, slot: int | None) -> None:
        x = self.x
        for _ in range(self.ops - 1):
            x = x * 0.5
        self.x = x + self.views[slot] if slot is not None else x * 0.5

    def resident(self) -> None:
        for _ in range(self.units):
            self._compute(None)

    def _calls(self, issue: Callable[[int], None], wait: Callable[[int, int], None] | None = None) -> None:
        rt, slots = self.rt, 2
        for slot in range(slots):
            rt.record(self.released[slot], self.compute)
        issue(0)
        for position in range(self.units):
            slot = position % slots
            if wait is None:  # the streamer's call, as the other ways make it
                rt.wait(self.compute, self.copied[slot], 0)
            else:
                wait(self.compute, self.copied[slot])
            if position + 1 < self.units:
                issue(position + 1)
            self._compute(slot)
            rt.record(self.released[slot], self.compute)
        for slot in range(slots):
            rt.wait(self.compute, self.copied[slot], 0)

    def _copy(self, position: int, slot: int, nbytes: int | None = None) -> None:
        """Copy unit `position` (its first `nbytes`) into `slot` on the copy stream;
        record the slot's copy."""
        self.rt.memcpy(
            self.slots[slot].data_ptr(),
            self.arena.data_ptr() + position * self.unit_bytes,
            self.unit_bytes if nbytes is None else nbytes,
            CUDA_MEMCPY_DEFAULT,
            self.copy,
        )
        self.rt.record(self.copied[slot], self.copy)

    def calls(self, nbytes: int | None = None) -> None:
        def issue(position: int) -> None:
            slot = position % 2
            self.rt.wait(self.copy, self.released[slot], 0)
            self._copy(position, slot, nbytes)

        self._calls(issue)

    def calls_tiny_copies(self) -> None:
        """The five calls per unit, each copy of 4 KiB: the calls without the link's traffic."""
        self.calls(TINY_COPY_BYTES)

    def copies_alone(self) -> None:
        """The resident kernels while the copy stream moves the same bytes in one copy, with
        no ordering between the streams: what the link's traffic alone costs the host."""
        error = self.rt.memcpy(
            self.scratch.data_ptr(), self.arena.data_ptr(), self.arena.numel(), CUDA_MEMCPY_DEFAULT, self.copy
        )
        check(self.rt, error, "cudaMemcpyAsync")
        self.resident()

    def _wait_unless_done(self, stream: int, event: int) -> None:
        """Make `stream` wait for `event` unless its work is done already."""
        self.queries += 1
        error = self.rt.query(event)
        if error == 0:
            self.skipped += 1
            return
        if error == CUDA_ERROR_NOT_READY:
            self.rt.get_last_error()  # as torch's Event.query: not an error, reset
        else:
            check(self.rt, error, "cudaEventQuery")
        self.rt.wait(stream, event, 0)

    def calls_query_first(self) -> None:
        def issue(position: int) -> None:
            slot = position % 2
            self._wait_unless_done(self.copy, self.released[slot])
            self._copy(position, slot)

        self._calls(issue, self._wait_unless_done)

    def copy_graphs(self) -> None:
        rt, graphs = self.rt, self.graphs

        def issue(position: int) -> None:
            rt.launch(graphs[position, position % 2], self.copy)

        self._calls(issue)

    def release_every_2(self) -> None:
        rt, slots = self.rt, 3
        rt.record(self.release_one, self.compute)
        rt.wait(self.copy, self.release_one, 0)
        self._copy(0, 0)
        for position in range(self.units):
            slot = position % slots
            rt.wait(self.compute, self.copied[slot], 0)
            if position + 1 < self.units:
                # The copy into slot (p + 1) % 3 needs position p - 2 done: released below
                # after every odd position, so by p - 1 or p - 2.
                self._copy(position + 1, (position + 1) % slots)
            self._compute(slot)
            if position % 2 == 1:
                rt.record(self.release_one, self.compute)
                rt.wait(self.copy, self.release_one, 0)
        for slot in range(slots):
            rt.wait(self.compute, self.copied[slot], 0)

    def capture_memops_program(self, cu: SimpleNamespace) -> None:
        """The copy stream's program for one encode, as a CUDA graph (see the module docstring)."""
        # Two counters: copies done, units released; reset by the compute stream per encode.
        self.cu = cu
        self.counters = torch.zeros(2, dtype=torch.int32, device=self.slots.device)
        self.copied_at = self.counters.data_ptr()
        self.released_at = self.copied_at + 4
        self.program = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(self.program, stream=self.copy_stream):
            stream = torch.cuda.current_stream().cuda_stream
            for position in range(self.units):
                slot = position % 2
                if position >= 2:  # the slot's unit before, two positions back, released
                    check_driver(cu.wait(stream, self.released_at, position - 1, CU_STREAM_WAIT_VALUE_GEQ), "wait")
                check(
                    self.rt,
                    self.rt.memcpy(
                        self.slots[slot].data_ptr(),
                        self.arena.data_ptr() + position * self.unit_bytes,
                        self.unit_bytes,
                        CUDA_MEMCPY_DEFAULT,
                        stream,
                    ),
                    "memcpy",
                )
                check_driver(cu.write(stream, self.copied_at, position + 1, CU_STREAM_WRITE_VALUE_DEFAULT), "write")
        torch.cuda.synchronize()

    def memops_program(self) -> None:
        rt, cu = self.rt, self.cu
        # Reset the counters after the last encode, then start the copy program.
        cu.write(self.compute, self.copied_at, 0, CU_STREAM_WRITE_VALUE_DEFAULT)
        cu.write(self.compute, self.released_at, 0, CU_STREAM_WRITE_VALUE_DEFAULT)
        rt.record(self.release_one, self.compute)
        rt.wait(self.copy, self.release_one, 0)
        with torch.cuda.stream(self.copy_stream):
            self.program.replay()
        for position in range(self.units):
            cu.wait(self.compute, self.copied_at, position + 1, CU_STREAM_WAIT_VALUE_GEQ)
            self._compute(position % 2)
            cu.write(self.compute, self.released_at, position + 1, CU_STREAM_WRITE_VALUE_DEFAULT)
        # The copy stream's program is over once its last copy is (waited for above); the
        # next encode's reset comes after it on the compute stream.

    def start_copy_thread(self) -> None:
        """The thread of `copy thread`: per position from the queue, the slot's wait, the copy
        and its record on the copy stream; then `issued` says so."""
        self.requests: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self.issued = -1
        self.stalls = 0

        def serve() -> None:
            while (position := self.requests.get()) is not None:
                slot = position % 2
                self.rt.wait(self.copy, self.released[slot], 0)
                self._copy(position, slot)
                self.issued = position

        self.thread = threading.Thread(target=serve, name="unit-copies", daemon=True)
        self.thread.start()

    def copy_thread(self) -> None:
        rt, slots, put = self.rt, 2, self.requests.put
        for slot in range(slots):
            rt.record(self.released[slot], self.compute)
        self.issued = -1  # the thread is idle: the last encode waited for its last copy
        put(0)
        for position in range(self.units):
            slot = position % slots
            if self.issued < position:  # not issued yet: let the thread run
                self.stalls += 1
                while self.issued < position:
                    time.sleep(0)
            rt.wait(self.compute, self.copied[slot], 0)
            if position + 1 < self.units:
                put(position + 1)
            self._compute(slot)
            rt.record(self.released[slot], self.compute)
        while self.issued < self.units - 1:
            time.sleep(0)
        for slot in range(slots):
            rt.wait(self.compute, self.copied[slot], 0)

    def compute_calls(self, wait: bool = True, record: bool = True) -> None:
        """The resident kernels with the compute stream's calls of `calls` and no copies."""
        rt = self.rt
        for position in range(self.units):
            slot = position % 2
            if wait:
                rt.wait(self.compute, self.copied[slot], 0)
            self._compute(slot)
            if record:
                rt.record(self.released[slot], self.compute)

    def compute_wait(self) -> None:
        self.compute_calls(record=False)

    def compute_record(self) -> None:
        self.compute_calls(wait=False)

    def c_calls(self) -> None:
        """The five calls, the four at a unit's entry in one call into C."""
        rt, uc, slots = self.rt, self.uc, 2
        for slot in range(slots):
            rt.record(self.released[slot], self.compute)
        rt.wait(self.copy, self.released[0], 0)
        self._copy(0, 0)
        for position in range(self.units):
            slot, following = position % slots, (position + 1) % slots
            last = position + 1 == self.units
            error = uc.enter(
                self.compute,
                self.copied[slot],
                self.copy,
                self.released[following],
                None if last else self.slots[following].data_ptr(),
                self.arena.data_ptr() + (position + 1) * self.unit_bytes,
                self.unit_bytes,
                self.copied[following],
            )
            if error:
                check(rt, error, "uc_enter")
            self._compute(slot)
            rt.record(self.released[slot], self.compute)
        for slot in range(slots):
            rt.wait(self.compute, self.copied[slot], 0)

    def _push(self, position: int, nbytes: int) -> None:
        slot = position % 2
        self.uc.push(
            self.copy,
            self.released[slot],
            self.slots[slot].data_ptr(),
            self.arena.data_ptr() + position * self.unit_bytes,
            nbytes,
            self.copied[slot],
        )

    def c_copy_thread(self, spin_ns: int = 0, nbytes: int | None = None) -> None:
        rt, uc, slots = self.rt, self.uc, 2
        uc.set_spin(spin_ns)
        for slot in range(slots):
            rt.record(self.released[slot], self.compute)
        nbytes = self.unit_bytes if nbytes is None else nbytes
        base = uc.issued.value  # the thread is idle: the last encode waited for its copies
        self._push(0, nbytes)
        for position in range(self.units):
            slot = position % slots
            if uc.issued.value <= base + position:
                self.c_stalls += 1
                check(rt, uc.wait_issued(base + position + 1), "the copy thread")
            rt.wait(self.compute, self.copied[slot], 0)
            if position + 1 < self.units:
                self._push(position + 1, nbytes)
            self._compute(slot)
            rt.record(self.released[slot], self.compute)
        check(rt, uc.wait_issued(base + self.units), "the copy thread")
        for slot in range(slots):
            rt.wait(self.compute, self.copied[slot], 0)

    def c_copy_thread_spinning(self) -> None:
        self.c_copy_thread(spin_ns=1_000_000)

    def c_copy_thread_tiny_copies(self) -> None:
        self.c_copy_thread(spin_ns=1_000_000, nbytes=TINY_COPY_BYTES)

    def last_slots_hold_the_arena(self, slots: int) -> bool:
        torch.cuda.synchronize()
        ok = True
        for position in range(self.units - slots, self.units):
            unit = self.arena[position * self.unit_bytes : (position + 1) * self.unit_bytes]
            ok &= bool(torch.equal(self.slots[position % slots].cpu(), unit))
        return ok


def wait_node_waits(ring: Ring) -> bool:
    """A copy graph's wait node waits for the release recorded before the launch: the
    compute stream sleeps, clears slot 0, releases it; the copy must land after the clear."""
    rt = ring.rt
    ok = True
    for _ in range(2):  # the second time the event's earlier record is long complete
        torch.cuda.synchronize()
        ring.slots[0].fill_(1)
        torch.cuda._sleep(50_000_000)
        ring.slots[0].zero_()
        rt.record(ring.released[0], ring.compute)
        check(rt, rt.launch(ring.graphs[0, 0], ring.copy), "cudaGraphLaunch")
        torch.cuda.synchronize()
        ok &= bool(torch.equal(ring.slots[0].cpu(), ring.arena[: ring.unit_bytes]))
    return ok


def not_ready_is_a_last_error(ring: Ring) -> dict[str, int]:
    """What `cudaEventQuery` returns for an event behind a long kernel, and whether the
    thread's last error is then that (if not, `query first` needs no reset call)."""
    rt = ring.rt
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)
    rt.record(ring.release_one, ring.compute)
    query = rt.query(ring.release_one)
    peek = rt.peek_at_last_error()
    rt.get_last_error()
    torch.cuda.synchronize()
    return {"query": query, "last_error_after": peek}


def graph_in_capture(ring: Ring) -> str:
    """Whether a copy graph launches into a stream capture (as a child graph): 'ok' or the error."""
    rt = ring.rt
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            stream = torch.cuda.current_stream().cuda_stream
            rt.record(ring.released[0], stream)
            join = torch.cuda.Event()
            join.record()
            ring.copy_stream.wait_event(join)
            error = rt.launch(ring.graphs[0, 0], ring.copy)
            rt.wait(stream, ring.copied[0], 0)
            if error:
                return f"cudaGraphLaunch in a capture: error {error} ({rt.error_string(error).decode()})"
        graph.replay()
        torch.cuda.synchronize()
        return "ok" if torch.equal(ring.slots[0].cpu(), ring.arena[: ring.unit_bytes]) else "wrong bytes"
    except RuntimeError as error:  # the capture's end or the replay refused
        torch.cuda.synchronize()
        return f"refused: {str(error).splitlines()[0]}"


def compute_stream(kind: str, device: torch.device) -> torch.cuda.Stream:
    """The stream a way's compute runs on: `default`, the legacy default stream (a plain
    script's, and the benchmarks' before 2026-12-04), or `vllm`, the stream vLLM's engine
    computes on (`vllm.utils.torch_utils.current_stream()`, a stream of its own), as
    tower_pipeline.py's `--compute-stream`. Runs before 2026-12-04d named it `side`."""
    if kind == "default":
        return torch.cuda.default_stream(device)
    from vllm.utils.torch_utils import current_stream

    return current_stream()


def time_ways(rings: dict[str, Ring], ways: dict[str, dict[str, Callable[[], None]]], rounds: int) -> dict[str, Any]:
    """Each (compute stream, way) once per round, rotated, each on its ring's compute stream:
    the host's time of the issue and in total, per stream and way."""
    keys = [(kind, name) for kind in rings for name in ways[kind]]
    times = {key: {"host_ms": [], "total_ms": []} for key in keys}
    for round_ in range(rounds):
        k = round_ % len(keys)
        for kind, name in keys[k:] + keys[:k]:
            run = ways[kind][name]
            with torch.cuda.stream(rings[kind].compute_stream):
                torch.cuda.synchronize()
                start = time.perf_counter()
                run()
                issued = time.perf_counter()
                torch.cuda.synchronize()
            times[kind, name]["host_ms"].append((issued - start) * 1e3)
            times[kind, name]["total_ms"].append((time.perf_counter() - start) * 1e3)
    return {kind: {name: times[kind, name] for name in ways[kind]} for kind in rings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--units", type=int, default=34)
    parser.add_argument("--unit-mib", type=int, default=24)
    parser.add_argument("--ops", type=int, default=24, help="kernels per unit (a block's host time, roughly)")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument(
        "--c-helper",
        type=Path,
        help="a built benchmarks/unit_copies.c (default: build it with cc; without cc, no C ways)",
    )
    parser.add_argument("--no-memops", action="store_true", help="leave out the stream memory operations' way")
    parser.add_argument(
        "--compute-streams",
        default="default",
        help="comma-separated, each a ring of its own timed in the same rounds: default (the legacy "
        "default stream) and/or vllm (vLLM's own stream, as its engine computes)",
    )
    args = parser.parse_args()
    kinds = [k for k in args.compute_streams.split(",") if k]
    if not kinds or not set(kinds) <= {"default", "vllm"}:
        parser.error("--compute-streams: default, vllm or default,vllm")
    device = torch.device("cuda", 0)
    rt = cudart()
    rings: dict[str, Ring] = {}
    for kind in kinds:
        with torch.cuda.stream(compute_stream(kind, device)):
            rings[kind] = Ring(rt, args.units, args.unit_mib * MiB, args.ops, device)
    ring = rings[kinds[0]]
    result: dict[str, Any] = {
        "command": " ".join(["python3", *sys.argv]),
        "device": torch.cuda.get_device_name(device),
        "units": args.units,
        "unit_mib": args.unit_mib,
        "ops_per_unit": args.ops,
        "rounds": args.rounds,
        "compute_streams": {kind: r.compute for kind, r in rings.items()},  # 0: the legacy default
    }
    with torch.cuda.stream(ring.compute_stream):
        result["wait_node_waits_for_the_release"] = wait_node_waits(ring)
        result["not_ready_query"] = not_ready_is_a_last_error(ring)
    ways: dict[str, dict[str, Callable[[], None]]] = {}
    uc = c_helper(args.c_helper, rt)
    result["c_helper"] = "left out" if uc is None else "ok"
    memops = "skipped (--no-memops)"
    for kind, r in rings.items():
        ways[kind] = {
            "resident": r.resident,
            "calls": r.calls,
            "query first": r.calls_query_first,
            "copy graph": r.copy_graphs,
            "release every 2": r.release_every_2,
            "calls, 4 KiB copies": r.calls_tiny_copies,
            "copies alone": r.copies_alone,
            "copy thread": r.copy_thread,
            "compute wait + record": r.compute_calls,
            "compute wait": r.compute_wait,
            "compute record": r.compute_record,
        }
        r.start_copy_thread()
        if uc is not None:
            r.uc = uc
            ways[kind]["C calls"] = r.c_calls
            ways[kind]["C copy thread"] = r.c_copy_thread
            ways[kind]["C copy thread, spinning"] = r.c_copy_thread_spinning
            ways[kind]["C copy thread, spinning, 4 KiB copies"] = r.c_copy_thread_tiny_copies
        if not args.no_memops:
            try:
                with torch.cuda.stream(r.compute_stream):
                    r.capture_memops_program(driver_memops())
                memops = "ok"
                ways[kind]["memops program"] = r.memops_program
            except (RuntimeError, OSError, AttributeError) as error:  # not capturable, no libcuda
                memops = f"refused: {str(error).splitlines()[0]}"
                torch.cuda.synchronize()
    print("memops program:", memops, flush=True)
    result["memops_program"] = memops
    ring_slots = {
        "calls": 2,
        "copy thread": 2,
        "C calls": 2,
        "C copy thread": 2,
        "C copy thread, spinning": 2,
        "query first": 2,
        "copy graph": 2,
        "release every 2": 3,
        "memops program": 2,
    }
    result["bytes_equal"] = {}
    for kind, r in rings.items():
        with torch.cuda.stream(r.compute_stream):
            for run in ways[kind].values():
                for _ in range(3):
                    run()
            equal = result["bytes_equal"][kind] = {}
            for name, run in ways[kind].items():
                if name in ring_slots:
                    run()
                    equal[name] = r.last_slots_hold_the_arena(ring_slots[name])
    times = time_ways(rings, ways, args.rounds)
    result["times_ms"] = times
    result["median_ms"] = {
        kind: {n: {k: statistics.median(v) for k, v in t.items()} for n, t in by_way.items()}
        for kind, by_way in times.items()
    }
    result["extra_host_us_per_unit"] = {}
    for kind, by_way in times.items():
        extra = result["extra_host_us_per_unit"][kind] = {}
        for name in by_way:
            if name == "resident":
                continue
            diffs = sorted(
                (b - a) * 1e3 / args.units for a, b in zip(by_way["resident"]["host_ms"], by_way[name]["host_ms"])
            )
            q1, median, q3 = statistics.quantiles(diffs, n=4)
            extra[name] = {"median": median, "q1": q1, "q3": q3}
    result["query_first_waits_skipped"] = {kind: r.skipped / max(1, r.queries) for kind, r in rings.items()}
    result["c_copy_thread_stalls_per_encode"] = {
        kind: r.c_stalls / (3 * args.rounds + 11)
        for kind, r in rings.items()  # three ways: rounds, 3 warm-ups, 1 check (2 ways)
    }
    result["copy_thread_stalls_per_encode"] = {
        kind: r.stalls / (args.rounds + 4)
        for kind, r in rings.items()  # 3 warm-ups, 1 check
    }
    # Last: a refused capture may leave the streams unusable for the timings.
    with torch.cuda.stream(ring.compute_stream):
        result["copy_graph_in_a_capture"] = graph_in_capture(ring)
    print("wait node:", result["wait_node_waits_for_the_release"], "/ in a capture:", result["copy_graph_in_a_capture"])
    write_atomic(args.out, json.dumps(result, indent=1) + "\n")
    for kind in rings:
        medians, extra = result["median_ms"][kind], result["extra_host_us_per_unit"][kind]
        print(
            f"[{kind} stream, {args.ops} kernels a unit] host ms "
            + " / ".join(f"{n} {m['host_ms']:.2f}" for n, m in medians.items())
            + "; total ms "
            + " / ".join(f"{n} {m['total_ms']:.2f}" for n, m in medians.items())
            + "; over resident per unit: "
            + ", ".join(f"{n} {v['median']:.1f} us ({v['q1']:.1f} / {v['q3']:.1f})" for n, v in extra.items())
            + f"; bytes equal: {result['bytes_equal'][kind]}"
            + f"; query first skipped {result['query_first_waits_skipped'][kind]:.0%} of its waits"
            + f"; copy thread stalls per encode {result['copy_thread_stalls_per_encode'][kind]:.1f}"
            + f" (C: {result['c_copy_thread_stalls_per_encode'][kind]:.1f})"
        )
    print(f"a not-ready query: {result['not_ready_query']}")


if __name__ == "__main__":
    main()
