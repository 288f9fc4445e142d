"""A Docker login for the registry tests: a password file, a Docker config directory, a helper.

`empty_docker_config` points DOCKER_CONFIG (and HOME) at a directory of the test's, so
nothing of the machine's own Docker logins is read; `install_helper` puts a credential
helper script, `docker-credential-vftest`, on PATH.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from support.registry import need_registry

USER, PASSWORD = "alice", "pa:ss w0rd"  # a colon and a space: the login is split at the first colon only


def need_login_tools() -> None:
    need_registry()
    for tool, package in (("htpasswd", "apache2-utils"), ("openssl", "openssl")):
        if shutil.which(tool) is None:
            pytest.skip(f"no {tool} (Debian's {package} package: scripts/setup-docker.sh)")


def make_htpasswd(directory: Path, user: str, password: str) -> Path:
    """The registry's password file (bcrypt, the only hash it takes)."""
    path = directory / "htpasswd"
    path.write_bytes(subprocess.run(["htpasswd", "-Bbn", user, password], check=True, capture_output=True).stdout)
    return path


def empty_docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Docker config directory, the only one the tool may read."""
    config = tmp_path / "docker"
    config.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("VLLM_FORK_OCI_USERNAME", "VLLM_FORK_OCI_PASSWORD", "VLLM_FORK_OCI_INSECURE", "SSL_CERT_FILE"):
        monkeypatch.delenv(name, raising=False)
    return config


def write_config(config_dir: Path, data: dict) -> None:
    (config_dir / "config.json").write_text(json.dumps(data))


def auth_entry(user: str, password: str) -> dict:
    """An `auths` entry as `docker login` writes it."""
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


def trust_ca(config_dir: Path, host: str, ca: Path) -> None:
    """The registry's CA where Docker looks for it: certs.d/<host:port>/ca.crt."""
    (config_dir / "certs.d" / host).mkdir(parents=True)
    (config_dir / "certs.d" / host / "ca.crt").write_bytes(ca.read_bytes())


def install_helper(tmp_path, monkeypatch, logins: dict[str, tuple[str, str]]) -> os.PathLike:
    """`docker-credential-vftest` on PATH: answers `get` from `logins`, logs what it was asked."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    asked = tmp_path / "helper-asked.log"
    table = {k: {"ServerURL": k, "Username": u, "Secret": s} for k, (u, s) in logins.items()}
    script = bindir / "docker-credential-vftest"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"TABLE = {json.dumps(table)!r}\n"
        "assert sys.argv[1:] == ['get'], sys.argv\n"
        "server = sys.stdin.read().strip()\n"
        f"open({str(asked)!r}, 'a').write(server + '\\n')\n"
        "entry = json.loads(TABLE).get(server)\n"
        "if entry is None:\n"
        "    print('credentials not found in native keychain'); sys.exit(1)\n"
        "print(json.dumps(entry))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return asked
