"""OCI registry remotes: fetch an artifact as a blob (token flow, redirects), push one, never use bad bytes."""

from __future__ import annotations

import base64
import hashlib
import json
import time

import pytest
from support.buildtrees import fork_root
from support.ociregistry import registry
from test_opscache import KEY, make_artifact

from vllm_fork.core.errors import ForkError
from vllm_fork.core.image_ref import INSECURE_ENV
from vllm_fork.ops import cache as opscache
from vllm_fork.ops import oci

REPO = "team/vllm-ops"


@pytest.fixture
def root(tmp_path, cache):
    return fork_root(tmp_path / "fork")


@pytest.fixture
def stored(root, tmp_path):
    """An artifact in the index and the local cache: (entry, path, its bytes)."""
    entry, path = opscache.put(KEY, make_artifact(tmp_path / "a.zip"), {"source": "test"}, root)
    return entry, path, path.read_bytes()


def test_fetch_blob_by_digest_with_the_token_dance_and_a_redirect(root, stored):
    entry, path, data = stored
    with registry() as reg:
        reg.blobs[(REPO, f"sha256:{entry.sha256}")] = data
        path.unlink()
        opscache.add_remote(f"oci+http://{reg.host}/{REPO}", root)
        got_entry, got = opscache.get(KEY, root)
        assert got == path and opscache.sha256_file(got) == entry.sha256 and got_entry == entry
        assert reg.token_scopes == [f"repository:{REPO}:pull"]
        blob_requests = [(m, p, a) for m, p, a in reg.log if p.startswith("/v2/")]
        assert blob_requests[0][2] is None  # first try anonymous: 401 with the challenge
        assert all(a and a.startswith("Bearer ") for _m, _p, a in blob_requests[1:])
        storage = [a for _m, p, a in reg.log if p.startswith("/storage/")]
        assert storage == [None]  # followed the redirect, without the registry's token
    assert not list(opscache.ops_dir().glob(".*.part"))


def test_insecure_env_reaches_a_plain_http_registry_with_oci_scheme(root, stored, monkeypatch):
    entry, path, data = stored
    monkeypatch.setenv(INSECURE_ENV, "1")
    with registry(auth=False) as reg:
        reg.blobs[(REPO, f"sha256:{entry.sha256}")] = data
        path.unlink()
        monkeypatch.setenv(opscache.REMOTES_ENV, f"oci://{reg.host}/{REPO}")
        _, got = opscache.get(KEY, root)
        assert opscache.sha256_file(got) == entry.sha256


def test_registry_serving_other_bytes_is_never_used(root, stored):
    entry, path, data = stored
    with registry() as reg:
        reg.blobs[(REPO, f"sha256:{entry.sha256}")] = data[:-1] + bytes([data[-1] ^ 1])  # tampered
        path.unlink()
        opscache.add_remote(f"oci+http://{reg.host}/{REPO}", root)
        with pytest.raises(ForkError, match="no remote served a good copy") as err:
            opscache.get(KEY, root)
    message = str(err.value)
    served = hashlib.sha256(data[:-1] + bytes([data[-1] ^ 1])).hexdigest()
    remote = f"oci+http://{reg.host}/{REPO}"
    # Both hashes, the artifact, the remote, and what to run next.
    assert "sha256 mismatch" in message and f"expected {entry.sha256}" in message and f"got      {served}" in message
    assert f"{remote}: sha256 mismatch downloading {entry.file}" in message
    assert f"`invoke ops.publish {remote}`" in message and "`invoke ops.seed`" in message
    assert "pip config list" not in message and "upstream.toml" not in message
    assert not path.exists() and not list(opscache.ops_dir().glob(".*.part"))


def test_missing_blob_and_bad_remotes_are_clear_errors(root, stored):
    _entry, path, _data = stored
    path.unlink()
    with registry() as reg:
        opscache.add_remote(f"oci+http://{reg.host}/{REPO}", root)
        with pytest.raises(ForkError, match=f"oci\\+http://{reg.host}/{REPO} has no blob sha256:"):
            opscache.get(KEY, root)
    with pytest.raises(ForkError, match="bad OCI remote"):
        oci.Registry.parse("oci://registry.example")
    with pytest.raises(ForkError, match="bad OCI repository name"):
        oci.Registry.parse("oci://registry.example/Team/Ops")
    assert oci.Registry.parse("oci://registry.example:5000/a/b/").base == "https://registry.example:5000"


def test_publish_pushes_blob_and_a_manifest_tagged_with_the_key(root, stored, tmp_path, monkeypatch, capfd):
    entry, path, data = stored
    with registry() as reg:
        remote = f"oci+http://{reg.host}/{REPO}"
        ref = opscache.publish_oci(KEY, remote, root)
        assert ref == f"{reg.host}/{REPO}:{KEY}"
        assert f"uploading {path.name}:" in capfd.readouterr().err, "the upload says how far it is"
        assert reg.blobs[(REPO, f"sha256:{entry.sha256}")] == data
        assert reg.blobs[(REPO, oci.EMPTY_DIGEST)] == b"{}"
        assert "sha256:" + hashlib.sha256(b"{}").hexdigest() == oci.EMPTY_DIGEST
        ctype, raw = reg.manifests[(REPO, KEY)]
        manifest = json.loads(raw)
        assert ctype == oci.MANIFEST_TYPE and manifest["schemaVersion"] == 2
        (layer,) = manifest["layers"]
        assert layer == {
            "mediaType": "application/zip",
            "digest": f"sha256:{entry.sha256}",
            "size": entry.size,
            "annotations": {"org.opencontainers.image.title": entry.file},
        }
        assert any("push" in s for s in reg.token_scopes)
        pushes = len(reg.log)
        opscache.publish_oci(KEY, remote, root)  # blobs already there: only the manifest again
        assert not [p for m, p, _a in reg.log[pushes:] if m == "POST"]

        # another machine: empty cache, same index, the registry as its remote
        monkeypatch.setenv("VLLM_FORK_CACHE", str(tmp_path / "other-cache"))
        opscache.add_remote(remote, root)
        _, got = opscache.get(KEY, root)
        assert got.read_bytes() == data


# -- logins and tokens (the password-file registries are in tests/integration/test_registry_auth.py) --


@pytest.fixture
def docker_config(tmp_path, monkeypatch):
    """An empty Docker config directory, the only one the tool may read."""
    config = tmp_path / "docker"
    config.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    monkeypatch.delenv("VLLM_FORK_OCI_USERNAME", raising=False)
    monkeypatch.delenv("VLLM_FORK_OCI_PASSWORD", raising=False)
    return config


def login(config, host: str, entry: dict) -> None:
    (config / "config.json").write_text(json.dumps({"auths": {host: entry}}))


def basic(user: str, password: str) -> dict:
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_the_token_service_gets_the_docker_login_and_a_token_is_renewed_before_it_runs_out(
    stored, tmp_path, docker_config
):
    entry, path, data = stored
    with registry(users={"alice": "pw"}, expires_in=1) as reg:
        login(docker_config, reg.host, basic("alice", "pw"))
        client = oci.Registry.parse(f"oci://{reg.host}/{REPO}")  # loopback, no hint: HTTPS refused, so HTTP
        client.push_blob(path, f"sha256:{entry.sha256}")
        fetched = len(reg.token_requests)
        assert client.base == f"http://{reg.host}" and fetched
        assert all(a == "Basic " + base64.b64encode(b"alice:pw").decode() for _m, a, _f in reg.token_requests)
        assert all(f["account"] == "alice" for _m, _a, f in reg.token_requests)
        time.sleep(1.2)  # past expires_in: the next request must carry a new token, not meet a 401
        client.fetch_blob(entry.sha256, tmp_path / "again.zip")
        assert len(reg.token_requests) > fetched and reg.expired_uses == 0
        assert (tmp_path / "again.zip").read_bytes() == data


def test_a_401_in_the_middle_of_an_upload_renews_the_token_and_sends_the_body_again(stored, docker_config):
    entry, path, data = stored
    with registry(users={"alice": "pw"}, revoke_on_upload=True) as reg:
        login(docker_config, reg.host, basic("alice", "pw"))
        oci.push(f"oci+http://{reg.host}/{REPO}", KEY, path, entry.sha256)
        assert reg.blobs[(REPO, f"sha256:{entry.sha256}")] == data
        puts = [code for method, p, code in reg.statuses if method == "PUT" and "/blobs/uploads/" in p]
        assert puts[:2] == [401, 201]  # refused once the upload had started, then taken whole


def test_an_identity_token_is_exchanged_with_refresh_token_grant(stored, docker_config):
    entry, path, data = stored
    with registry(users={"alice": "pw"}, identity_tokens=("refresh-me",)) as reg:
        login(docker_config, reg.host, {"identitytoken": "refresh-me"})
        oci.push(f"oci+http://{reg.host}/{REPO}", KEY, path, entry.sha256)
        assert {m for m, _a, _f in reg.token_requests} == {"POST"}
        assert reg.blobs[(REPO, f"sha256:{entry.sha256}")] == data


def test_a_refused_login_names_its_source_and_never_the_password(stored, docker_config, monkeypatch):
    entry, path, _ = stored
    with registry(users={"alice": "pw"}) as reg:
        monkeypatch.setenv("VLLM_FORK_OCI_USERNAME", "alice")
        monkeypatch.setenv("VLLM_FORK_OCI_PASSWORD", "wrong-secret")
        with pytest.raises(ForkError) as refused:
            oci.push(f"oci+http://{reg.host}/{REPO}", KEY, path, entry.sha256)
    message = str(refused.value)
    assert "refused the login from VLLM_FORK_OCI_USERNAME/VLLM_FORK_OCI_PASSWORD" in message
    assert f"docker login {reg.host}" in message and "wrong-secret" not in message
