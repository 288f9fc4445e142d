"""A real OCI registry for the image tests: Debian's `docker-registry` (CNCF distribution).

Started on a free loopback port with its own storage directory and a config written for
the test (filesystem storage, deletes allowed; no auth unless asked), stopped at the end.
Docker treats loopback registries as plain-HTTP ones unless they answer TLS, and so does
the tool. `start_registry` can also ask for a password file (htpasswd, bcrypt), TLS with a
certificate, or token auth with a token service's certificate.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.tlscerts import ServerCert

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
{extra}"""


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


def start_registry(
    htpasswd: Path | None = None,
    tls: ServerCert | None = None,
    token: dict[str, str] | None = None,
    client_certs: bool = False,
) -> TestRegistry:
    """`token`: realm, service, issuer and rootcertbundle (the token service's certificate);
    `client_certs`: TLS clients must show a certificate `tls`'s CA signed."""
    root = Path(tempfile.mkdtemp(prefix="vf-registry-"))
    port = _free_port()
    config = root / "config.yml"
    extra = ""
    if tls:
        extra += f"  tls:\n    certificate: {tls.cert}\n    key: {tls.key}\n"
        if client_certs:
            extra += f"    clientcas:\n      - {tls.ca}\n"
    if htpasswd:
        extra += f"auth:\n  htpasswd:\n    realm: vllm-fork-test\n    path: {htpasswd}\n"
    if token:
        extra += "auth:\n  token:\n" + "".join(f"    {k}: {v}\n" for k, v in token.items())
    config.write_text(CONFIG.format(root=root / "storage", port=port, extra=extra))
    log = open(root / "registry.log", "wb")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 30
    scheme = "https" if tls else "http"
    context = ssl.create_default_context(cafile=str(tls.ca)) if tls else None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/v2/", timeout=2, context=context):
                return TestRegistry(f"127.0.0.1:{port}", root, proc)
        except urllib.error.HTTPError as exc:
            exc.close()  # up, and asking for a login
            return TestRegistry(f"127.0.0.1:{port}", root, proc)
        except ssl.SSLError:
            return TestRegistry(f"127.0.0.1:{port}", root, proc)  # up, and asking for a client certificate
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"docker-registry did not start: {(root / 'registry.log').read_text()[-2000:]}")


def stop_registry(reg: TestRegistry) -> None:
    reg.proc.terminate()
    try:
        reg.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        reg.proc.kill()
    shutil.rmtree(reg.root, ignore_errors=True)


def need_registry() -> None:
    if shutil.which("docker-registry") is None:
        pytest.skip("no docker-registry (Debian's docker-registry package: scripts/setup-docker.sh)")


@pytest.fixture(scope="session")
def registry():
    need_registry()
    reg = start_registry()
    try:
        yield reg
    finally:
        stop_registry(reg)
