"""`vllm serve` in a subprocess, for the GPU tests and benchmarks.

Started as a user starts it (`python -m vllm.entrypoints.cli.main serve DIR
...`), on a free loopback port, stopped at the end. Also reads the resident
memory of the API server and of its engine-core process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from vllm_fork_testkit.engine_probe import harness_kwargs  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_args(options: dict) -> list[str]:
    """Engine keyword arguments as `vllm serve` flags."""
    args: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False:
            continue
        elif isinstance(value, dict):
            args += [flag, json.dumps(value)]
        else:
            args += [flag, str(value)]
    return args


class Server:
    def __init__(self, process: subprocess.Popen, port: int, log: Path):
        self.process = process
        self.port = port
        self.log = log
        self.base_url = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def processes(self) -> dict[str, psutil.Process]:
        """The API server and each child, by a readable name."""
        api = psutil.Process(self.process.pid)
        found = {"api_server": api}
        for child in api.children(recursive=True):
            try:
                name = child.name()
            except psutil.Error:
                continue
            found[f"{name}:{child.pid}"] = child
        return found

    def rss(self) -> dict[str, int]:
        figures = {}
        for name, proc in self.processes().items():
            try:
                figures[name] = proc.memory_info().rss
            except psutil.Error:
                pass
        return figures

    def log_tail(self, chars: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


@contextmanager
def vllm_serve(checkpoint: Path, *, options: dict, log: Path, timeout: float = 420):
    """Start `vllm serve` with `options` (engine kwargs); yield when healthy."""
    port = free_port()
    base = {
        "load_format": "dummy",
        "max_model_len": 8192,
        "gpu_memory_utilization": 0.3,
        "seed": 0,
        **harness_kwargs(cudagraphs=False),
        **options,
    }
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        str(checkpoint),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *cli_args(base),
    ]
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "INFO"}
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = Server(process, port, log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"vllm serve exited {process.returncode}:\n{server.log_tail()}")
            try:
                if server.get("/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vllm serve not healthy in {timeout}s:\n{server.log_tail()}")
            time.sleep(1)
        yield server
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
