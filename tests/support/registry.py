"""A real OCI registry for the image tests: Debian's `docker-registry` (CNCF distribution).

Started on a free loopback port with its own storage directory and a config written for
the test (no auth, filesystem storage, deletes allowed), stopped at the end. Docker treats
loopback registries as plain-HTTP ones, and so does `invoke docker --push`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

CONFIG = """\
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


@dataclass
class TestRegistry:
    host: str  # 127.0.0.1:PORT
    root: Path
    proc: subprocess.Popen

    def ref(self, repository: str, tag: str) -> str:
        return f"{self.host}/{repository}:{tag}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_registry() -> TestRegistry:
    root = Path(tempfile.mkdtemp(prefix="vf-registry-"))
    port = _free_port()
    config = root / "config.yml"
    config.write_text(CONFIG.format(root=root / "storage", port=port))
    log = open(root / "registry.log", "wb")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2):
                return TestRegistry(f"127.0.0.1:{port}", root, proc)
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"docker-registry did not start: {(root / 'registry.log').read_text()[-2000:]}")


@pytest.fixture(scope="session")
def registry():
    if shutil.which("docker-registry") is None:
        pytest.skip("no docker-registry (Debian's docker-registry package: scripts/setup-docker.sh)")
    reg = start_registry()
    try:
        yield reg
    finally:
        reg.proc.terminate()
        try:
            reg.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            reg.proc.kill()
        shutil.rmtree(reg.root, ignore_errors=True)
