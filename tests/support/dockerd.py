"""A real Docker engine for the image tests: its own dockerd, data root and socket.

Started as Debian's `docker.io` package starts it, minus what a shared machine must not
get: no iptables rules and no bridge (`--iptables=false --bridge=none`), so builds and
containers run with `--network none`. Stopped, and its data root removed, at the end.
Skips, saying why, only where no engine can start (no dockerd, not root).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from vllm_fork.image.engine import Engine, find_engine

#: Debian's client: its `docker build` drives the engine's BuildKit (the static client in
#: /usr/local/bin may lack the classic builder's BuildKit support or match another engine).
CLIENT_CANDIDATES = ("/usr/bin/docker", "docker")
START_TIMEOUT_S = 60


@dataclass
class Dockerd:
    engine: Engine
    root: Path
    log: Path
    proc: subprocess.Popen

    @property
    def host(self) -> str:
        return self.engine.host

    def docker(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return self.engine.run(*args, **kwargs)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _client() -> str | None:
    for name in CLIENT_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def why_no_engine() -> str | None:
    """Why no engine can start here (None: one can)."""
    if shutil.which("dockerd") is None:
        return "no dockerd (install Debian's docker.io: scripts/setup-docker.sh)"
    if _client() is None:
        return "no docker client"
    if os.geteuid() != 0:
        return "dockerd needs root here (CI runs as root)"
    return None


def start_dockerd() -> Dockerd:
    # A short path: the socket's path must fit in sun_path (108 bytes).
    root = Path(tempfile.mkdtemp(prefix="vf-dockerd-", dir="/tmp"))
    sock = root / "docker.sock"
    log = root / "dockerd.log"
    cmd = [
        "dockerd",
        "--data-root",
        str(root / "data"),  # images, layers, containers: ours alone
        "--exec-root",
        str(root / "exec"),  # its containerd's and runc's state
        "--pidfile",
        str(root / "dockerd.pid"),
        "--host",
        f"unix://{sock}",
        "--iptables=false",  # no firewall rules on a shared machine
        "--bridge=none",  # no docker0: containers run --network none
        "--storage-driver=overlay2",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    host = f"unix://{sock}"
    deadline = time.monotonic() + START_TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            engine = find_engine(host=host, client=_client())
            return Dockerd(engine, root, log, proc)
        except Exception as exc:  # noqa: BLE001 (not up yet: retry until the deadline)
            last = str(exc)
            time.sleep(0.5)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    stop_dockerd_proc(proc, root)
    raise RuntimeError(f"dockerd did not start ({last}):\n{tail}")


def stop_dockerd_proc(proc: subprocess.Popen, root: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    # overlay2 may leave mounts under the data root: unmount before removing.
    subprocess.run(
        ["sh", "-c", f"grep -o ' {root}/[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l"],
        check=False,
        capture_output=True,
    )
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def dockerd():
    reason = why_no_engine()
    if reason:
        pytest.skip(f"no Docker engine can start here: {reason}")
    daemon = start_dockerd()
    try:
        yield daemon
    finally:
        stop_dockerd_proc(daemon.proc, daemon.root)
