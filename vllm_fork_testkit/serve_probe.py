"""What a `vllm serve` process holds, sampled from inside it while it serves.

A vLLM general plugin (entry point group `vllm.general_plugins`), which vLLM loads in
every process of a server: the API server and the engine core, where the model runs.
`benchmarks/serve_load.py` makes it discoverable for its servers alone
(`plugin_path`: a `.dist-info` next to nothing else, put on their `PYTHONPATH`) and
reads what it writes. With `SERVE_PROBE_DIR` unset the plugin does nothing.

Each process appends one JSON line every `SERVE_PROBE_INTERVAL_S` seconds to
`SERVE_PROBE_DIR/probe-<pid>.jsonl`: its RSS and, once CUDA is initialized in it
(the engine core), the caching allocator's allocated and reserved bytes and their
peaks since the last reset, the pinned host bytes of PyTorch's caching host allocator,
and the bytes the tower streamer has copied to the GPU so far. Writing a new token
into `SERVE_PROBE_DIR/reset` resets the peaks (once per token), so that each load
point has peaks of its own.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

DIR_ENV = "SERVE_PROBE_DIR"
INTERVAL_ENV = "SERVE_PROBE_INTERVAL_S"
ENTRY_POINT = "serve_probe = vllm_fork_testkit.serve_probe:start"
_started = False


def plugin_path(root: Path) -> Path:
    """A directory that, on `PYTHONPATH`, makes vLLM load `start` as a general plugin."""
    info = root / "vllm_fork_serve_probe-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-fork-serve-probe\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{ENTRY_POINT}\n")
    return root


def start() -> None:
    """vLLM's plugin hook: start sampling in this process (once), if asked to."""
    global _started
    directory = os.environ.get(DIR_ENV)
    if _started or not directory:
        return
    _started = True
    interval = float(os.environ.get(INTERVAL_ENV, "0.5"))
    sampler = Sampler(Path(directory), os.getpid())
    threading.Thread(target=sampler.run, args=(interval,), name="serve-probe", daemon=True).start()


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cuda_figures() -> dict:
    """The engine core's figures; {} where CUDA is not initialized in this process."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {}
    host = torch.cuda.host_memory_stats()
    figures = {
        "allocated": torch.cuda.memory_allocated(0),
        "reserved": torch.cuda.memory_reserved(0),
        "peak_allocated": torch.cuda.max_memory_allocated(0),
        "peak_reserved": torch.cuda.max_memory_reserved(0),
        "pinned": int(host.get("allocated_bytes.current", 0)),
        "pinned_reserved": int(host.get("reserved_bytes.current", 0)),
        "peak_pinned": int(host.get("allocated_bytes.peak", 0)),
    }
    offloader = sys.modules.get("vllm.model_executor.offloader")
    streamer = getattr(offloader.get_offloader(), "tower_streamer", None) if offloader else None
    if streamer is not None:
        figures["tower_copied"] = int(streamer.copied_bytes)
        figures["tower_host"] = int(streamer.host_bytes)
    return figures


def reset_peaks() -> None:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    torch.cuda.reset_peak_memory_stats(0)
    reset_host = getattr(torch.cuda, "reset_peak_host_memory_stats", None)
    if reset_host is not None:
        reset_host()


class Sampler:
    def __init__(self, directory: Path, pid: int):
        self.out = directory / f"probe-{pid}.jsonl"
        self.reset_file = directory / "reset"
        self.token: str | None = None

    def reset_token(self) -> str | None:
        try:
            return self.reset_file.read_text()
        except OSError:
            return None

    def sample(self) -> dict:
        token = self.reset_token()
        if token is not None and token != self.token:
            reset_peaks()
            self.token = token
        return {"t": time.time(), "rss": rss_bytes(), "reset": self.token, **cuda_figures()}

    def run(self, interval: float) -> None:
        while True:
            try:
                line = json.dumps(self.sample())
            except Exception as error:  # a probe never takes the server down
                line = json.dumps({"t": time.time(), "error": repr(error)})
            with open(self.out, "a") as out:
                out.write(line + "\n")
            time.sleep(interval)
