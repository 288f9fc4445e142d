"""Logging in to real registries as Docker does: Debian's docker-registry, password file or tokens.

Each registry is the distribution registry, started by the test on 127.0.0.1 with an
htpasswd (bcrypt) file, over plain HTTP and over TLS with a private CA. The login comes
from a Docker config directory made for the test (DOCKER_CONFIG, HOME): `auths` as `docker
login` writes it, or a credential helper script on PATH (`credsStore`, `credHelpers`);
the CA from `certs.d/<host:port>/ca.crt` there. Both clients are exercised: the ops cache's
`oci://` remotes (publish and fetch) and the image push's (`push_layout`, then the manifest
and config read back). The registry's token auth is tested with a token service of the
test's own (tests/support/tokenservice.py: real signed JWTs); a 401 in the middle of an
upload, with the tests' own registry in tests/unit/test_oci.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import urllib.request

import pytest
from support.dockerlogin import (
    PASSWORD,
    USER,
    auth_entry,
    empty_docker_config,
    install_helper,
    make_htpasswd,
    need_login_tools,
    trust_ca,
    write_config,
)
from support.registry import start_registry, stop_registry
from support.tlscerts import make_client_cert, make_server_cert
from support.tokenservice import token_service

from vllm_fork.core.errors import ForkError
from vllm_fork.core.image_ref import ImageRef
from vllm_fork.image import registry_push
from vllm_fork.image.base import OCI_CONFIG, OCI_LAYER_GZIP, OCI_MANIFEST
from vllm_fork.ops import oci

KEY = "0123456789abcdef" * 4


@pytest.fixture(scope="module")
def htpasswd(tmp_path_factory):
    need_login_tools()
    return make_htpasswd(tmp_path_factory.mktemp("htpasswd"), USER, PASSWORD)


@pytest.fixture(scope="module")
def http_registry(htpasswd):
    reg = start_registry(htpasswd=htpasswd)
    yield reg
    stop_registry(reg)


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_server_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_registry(htpasswd, tls):
    reg = start_registry(htpasswd=htpasswd, tls=tls)
    yield reg
    stop_registry(reg)


@pytest.fixture
def docker_config(tmp_path, monkeypatch):
    return empty_docker_config(tmp_path, monkeypatch)


def artifact(tmp_path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "ops-artifact.zip"
    path.write_bytes(os.urandom(3 << 20))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def small_image(dest):
    """An image as the stand-in's cache keeps one: manifest.json and blobs/<hex>."""
    (dest / "blobs").mkdir(parents=True)
    layer, config = os.urandom(4096), json.dumps({"architecture": "amd64", "os": "linux"}).encode()
    descs = {}
    for name, data in (("layer", layer), ("config", config)):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (dest / "blobs" / digest.split(":")[1]).write_bytes(data)
        descs[name] = {"digest": digest, "size": len(data)}
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, **descs["config"]},
        "layers": [{"mediaType": OCI_LAYER_GZIP, **descs["layer"]}],
    }
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest, descs


def publish_and_fetch(reg, tmp_path) -> None:
    """`ops.publish` to an `oci://` remote (no scheme hint) and a fetch back, byte for byte."""
    path, sha = artifact(tmp_path)
    remote = f"oci://{reg.host}/team/vllm-ops"
    assert oci.push(remote, KEY, path, sha) == f"{reg.host}/team/vllm-ops:{KEY}"
    got = oci.fetch(remote, path.name, sha, tmp_path / "fetched.zip")
    assert got.read_bytes() == path.read_bytes()


def push_and_read_image(reg, tmp_path) -> None:
    """`docker --push`'s client: push an image, read its manifest and config back."""
    layout, descs = small_image(tmp_path / "image")
    ref = f"{reg.host}/fork/vllm-openai:prod"
    digest = registry_push.push_layout(layout, ref)
    by_digest = ImageRef.parse(f"{reg.host}/fork/vllm-openai@{digest}")  # read back by digest
    registry = oci.Registry.of_image(by_digest)
    data, _media = registry_push.platform_manifest(registry, by_digest.reference, "linux/amd64")
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    assert (
        registry_push.get_blob(registry, descs["config"]["digest"])
        == (layout / "blobs" / descs["config"]["digest"].split(":")[1]).read_bytes()
    )


def test_password_file_over_http_with_the_login_docker_login_wrote(http_registry, docker_config, tmp_path):
    write_config(docker_config, {"auths": {http_registry.host: auth_entry(USER, PASSWORD)}})
    publish_and_fetch(http_registry, tmp_path)
    push_and_read_image(http_registry, tmp_path)
    # What was pushed is there for anyone with the login (checked without the tool).
    request = urllib.request.Request(
        f"http://{http_registry.host}/v2/fork/vllm-openai/manifests/prod",
        headers={
            "Accept": OCI_MANIFEST,
            "Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode(),
        },
    )
    with urllib.request.urlopen(request) as resp:
        assert json.loads(resp.read())["mediaType"] == OCI_MANIFEST


def test_a_login_under_a_url_key_and_the_tools_variables(http_registry, docker_config, tmp_path, monkeypatch):
    # Old `docker login` wrote keys as URLs: they match their host, as in the Docker CLI.
    write_config(docker_config, {"auths": {f"https://{http_registry.host}/v1/": auth_entry(USER, PASSWORD)}})
    publish_and_fetch(http_registry, tmp_path / "url-key")
    # No Docker login at all: the tool's own variables.
    write_config(docker_config, {})
    monkeypatch.setenv("VLLM_FORK_OCI_USERNAME", USER)
    monkeypatch.setenv("VLLM_FORK_OCI_PASSWORD", PASSWORD)
    publish_and_fetch(http_registry, tmp_path / "env")


def test_a_wrong_or_missing_login_says_where_it_came_from_never_the_password(http_registry, docker_config, tmp_path):
    path, sha = artifact(tmp_path)
    remote = f"oci://{http_registry.host}/team/vllm-ops"
    write_config(docker_config, {"auths": {http_registry.host: auth_entry(USER, "not-the-password")}})
    with pytest.raises(ForkError) as refused:
        oci.push(remote, KEY, path, sha)
    message = str(refused.value)
    assert "refused" in message and str(docker_config / "config.json") in message
    assert "not-the-password" not in message and f"docker login {http_registry.host}" in message
    write_config(docker_config, {})
    with pytest.raises(ForkError, match=f"asks for a user name and password.*docker login {http_registry.host}"):
        oci.push(remote, KEY, path, sha)


def test_password_file_over_tls_with_a_certs_d_ca_and_a_credential_store(
    tls_registry, tls, docker_config, tmp_path, monkeypatch
):
    trust_ca(docker_config, tls_registry.host, tls.ca)
    asked = install_helper(tmp_path, monkeypatch, {tls_registry.host: (USER, PASSWORD)})
    write_config(docker_config, {"credsStore": "vftest"})
    publish_and_fetch(tls_registry, tmp_path / "store")
    push_and_read_image(tls_registry, tmp_path / "store")
    assert set(asked.read_text().split()) == {tls_registry.host}
    # credHelpers for this registry win over a stale `auths` entry, as in the Docker CLI.
    write_config(
        docker_config,
        {"credHelpers": {tls_registry.host: "vftest"}, "auths": {tls_registry.host: auth_entry(USER, "stale")}},
    )
    publish_and_fetch(tls_registry, tmp_path / "helpers")


def test_tls_without_the_ca_names_where_to_put_it(tls_registry, docker_config, tmp_path):
    write_config(docker_config, {"auths": {tls_registry.host: auth_entry(USER, PASSWORD)}})
    path, sha = artifact(tmp_path)
    with pytest.raises(ForkError, match=f"certs.d/{tls_registry.host}/ca.crt"):
        oci.push(f"oci://{tls_registry.host}/team/vllm-ops", KEY, path, sha)


def test_a_credential_store_that_is_not_installed_is_named(tls_registry, tls, docker_config, tmp_path):
    trust_ca(docker_config, tls_registry.host, tls.ca)
    write_config(docker_config, {"credsStore": "no-such-helper"})
    path, sha = artifact(tmp_path)
    with pytest.raises(ForkError, match="docker-credential-no-such-helper is not on PATH"):
        oci.push(f"oci://{tls_registry.host}/team/vllm-ops", KEY, path, sha)


@pytest.fixture(scope="module")
def token_registry(htpasswd, tmp_path_factory):
    """docker-registry with token auth, and its token service (tokens good for 2 s, it says)."""
    with token_service(tmp_path_factory.mktemp("token"), {USER: PASSWORD}, expires_in=2) as service:
        reg = start_registry(token=service.registry_config())
        yield reg, service
        stop_registry(reg)


def test_token_auth_with_the_login_at_the_token_service_renewed_at_expires_in(
    token_registry, docker_config, tmp_path, monkeypatch
):
    reg, service = token_registry
    install_helper(tmp_path, monkeypatch, {reg.host: (USER, PASSWORD)})
    write_config(docker_config, {"credHelpers": {reg.host: "vftest"}})
    publish_and_fetch(reg, tmp_path / "ops")
    push_and_read_image(reg, tmp_path / "image")
    login = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert service.requests and all(auth == login for _m, auth, _q in service.requests)
    # One client across the token's lifetime: a new token is asked for before the old one is used late.
    client = oci.Registry.parse(f"oci://{reg.host}/team/vllm-ops")
    path, sha = artifact(tmp_path / "renew")
    client.push_blob(path, f"sha256:{sha}")
    asked = len(service.requests)
    time.sleep(2.5)
    assert client.has_blob(f"sha256:{sha}") and len(service.requests) == asked + 1


def test_a_client_certificate_from_certs_d(tls, docker_config, tmp_path):
    reg = start_registry(tls=tls, client_certs=True)
    try:
        trust_ca(docker_config, reg.host, tls.ca)
        path, sha = artifact(tmp_path)
        remote = f"oci://{reg.host}/team/vllm-ops"
        with pytest.raises(ForkError, match=f"certs.d/{reg.host}/client.cert"):  # no client certificate
            oci.push(remote, KEY, path, sha)
        cert, key = make_client_cert(tls)
        (docker_config / "certs.d" / reg.host / "client.cert").write_bytes(cert.read_bytes())
        (docker_config / "certs.d" / reg.host / "client.key").write_bytes(key.read_bytes())
        publish_and_fetch(reg, tmp_path / "with-cert")
    finally:
        stop_registry(reg)
