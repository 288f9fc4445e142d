"""Image references and `oci://` remotes as the Docker CLI reads them, and where their logins are filed."""

from __future__ import annotations

import base64
import json
import os

import pytest

from vllm_fork.core.docker_config import find_credentials
from vllm_fork.core.errors import ConfigError
from vllm_fork.core.image_ref import DOCKER_HUB_API, DOCKER_HUB_AUTH_KEY, Endpoint, ImageRef, parse_remote

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("ref", "host", "repository", "reference"),
    [
        ("ubuntu", DOCKER_HUB_API, "library/ubuntu", "latest"),
        ("vllm/vllm-openai:v0.34.0", DOCKER_HUB_API, "vllm/vllm-openai", "v0.34.0"),
        ("docker.io/vllm/vllm-openai:v1", DOCKER_HUB_API, "vllm/vllm-openai", "v1"),
        ("index.docker.io/library/python:3.12", DOCKER_HUB_API, "library/python", "3.12"),
        ("registry-1.docker.io/python", DOCKER_HUB_API, "library/python", "latest"),
        ("localhost:5000/team/img", "localhost:5000", "team/img", "latest"),
        ("ghcr.io/org/img:tag@" + DIGEST, "ghcr.io", "org/img", DIGEST),
        ("127.0.0.1:5000/img@" + DIGEST, "127.0.0.1:5000", "img", DIGEST),
    ],
)
def test_references(ref, host, repository, reference):
    parsed = ImageRef.parse(ref)
    assert (parsed.host, parsed.repository, parsed.reference) == (host, repository, reference)


def test_docker_hub_logins_are_filed_under_its_index_url_and_others_under_the_host():
    assert ImageRef.parse("docker.io/vllm/vllm-openai").endpoint.auth_key == DOCKER_HUB_AUTH_KEY
    assert ImageRef.parse("ghcr.io/o/i:1").endpoint.auth_key == "ghcr.io"


def test_bad_references_say_what_is_wrong():
    with pytest.raises(ConfigError, match="bad repository name 'Team/Img'"):
        ImageRef.parse("ghcr.io/Team/Img:1")
    with pytest.raises(ConfigError, match="bad digest"):
        ImageRef.parse("ghcr.io/o/i@sha256:xyz")
    with pytest.raises(ConfigError, match="bad tag"):
        ImageRef.parse("ghcr.io/o/i:" + "t" * 200)


def test_which_scheme(monkeypatch):
    monkeypatch.delenv("VLLM_FORK_OCI_INSECURE", raising=False)
    assert parse_remote("oci://127.0.0.1:5000/a/b")[0] == Endpoint("127.0.0.1:5000", "auto")
    assert parse_remote("oci://localhost/a")[0].scheme == "auto"
    assert parse_remote("oci://registry.example/a")[0].scheme == "https"
    assert parse_remote("oci+http://registry.example/a")[0].scheme == "http"
    assert parse_remote("oci+https://127.0.0.1:5000/a")[0].scheme == "https"
    assert parse_remote("oci://docker.io/team/ops") == (Endpoint(DOCKER_HUB_API, "https"), "team/ops")
    monkeypatch.setenv("VLLM_FORK_OCI_INSECURE", "1")
    assert parse_remote("oci://registry.example/a")[0].scheme == "http"
    with pytest.raises(ConfigError, match="use oci://"):
        parse_remote("oci://registry.example")


def test_docker_hub_login_from_config_and_from_a_helper(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("VLLM_FORK_OCI_USERNAME", raising=False)
    auth = base64.b64encode(b"hubuser:hubpass").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {DOCKER_HUB_AUTH_KEY: {"auth": auth}}}))
    hub = ImageRef.parse("docker.io/vllm/vllm-openai").endpoint
    found = find_credentials(hub.auth_key)
    assert (found.username, found.password) == ("hubuser", "hubpass") and "auths" in found.source
    assert "hubpass" not in repr(found)
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"docker.io": {"auth": auth}}}))
    assert find_credentials(hub.auth_key).username == "hubuser"  # another of Docker Hub's names
    # A helper is asked with the key `docker login` used: Docker Hub's index URL.
    asked = tmp_path / "asked"
    helper = tmp_path / "docker-credential-hubtest"
    helper.write_text(f'#!/bin/sh\ncat > {asked}\necho \'{{"Username": "<token>", "Secret": "identity"}}\'\n')
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "config.json").write_text(json.dumps({"credHelpers": {DOCKER_HUB_AUTH_KEY: "hubtest"}}))
    found = find_credentials(hub.auth_key)
    assert asked.read_text() == DOCKER_HUB_AUTH_KEY and found.identity_token == "identity"
