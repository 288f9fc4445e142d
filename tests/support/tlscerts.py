"""A private CA and a server certificate for 127.0.0.1, made with the openssl command line."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServerCert:
    ca: Path  # the CA's certificate (what a client must trust)
    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_server_cert(directory: Path, ip: str = "127.0.0.1") -> ServerCert:
    """A CA, and a certificate it signed for `ip` (as a SAN: what TLS clients check)."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=vllm-fork test CA",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=directory)  # fmt: skip
    (directory / "san.ext").write_text(f"subjectAltName=IP:{ip}\nextendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={ip}", "-keyout", "server.key",
             "-out", "server.csr", cwd=directory)  # fmt: skip
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "san.ext", "-out", "server.crt", cwd=directory)  # fmt: skip
    return ServerCert(directory / "ca.crt", directory / "server.crt", directory / "server.key")


def make_client_cert(server: ServerCert, name: str = "client") -> tuple[Path, Path]:
    """A client certificate the server's CA signed: (certificate, key), named as certs.d wants them."""
    directory = server.ca.parent
    (directory / f"{name}.ext").write_text("extendedKeyUsage=clientAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", cwd=directory)  # fmt: skip
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.cert", cwd=directory)  # fmt: skip
    return directory / f"{name}.cert", directory / f"{name}.key"
