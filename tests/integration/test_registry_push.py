"""`invoke docker --push` against a real registry, no engine: the layer, config and manifest.

The engine-side half (pull, run, compare with the Dockerfile's image) is in
test_image_engine.py, which needs root; this part runs wherever Debian's docker-registry is
installed. The wheel is the real one `invoke build` makes; the base is a one-layer image
carrying the stand-in's layout labels, pushed by push_layout as the stand-in is.
"""

from __future__ import annotations

import base64
import csv
import gzip
import hashlib
import io
import json
import ssl
import tarfile
import urllib.request
import zipfile

import pytest
from support.dockerlogin import (
    PASSWORD,
    USER,
    empty_docker_config,
    install_helper,
    make_htpasswd,
    need_login_tools,
    trust_ca,
    write_config,
)
from support.registry import start_registry, stop_registry
from support.scratch import module_scratch
from support.tlscerts import make_server_cert

from vllm_fork.image import registry_push
from vllm_fork.image.base import LABEL_PYTHON, LABEL_SITE_PACKAGES, OCI_CONFIG, OCI_LAYER_GZIP, OCI_MANIFEST
from vllm_fork.image.wheel import load_wheel
from vllm_fork.upstream.pin import load_pin
from vllm_fork_testkit.fork_copy import fork_with_wheel

pytestmark = pytest.mark.slow

SITE = "/usr/local/lib/python3.11/dist-packages"


@pytest.fixture(scope="module")
def fork(tmp_path_factory):
    with module_scratch(tmp_path_factory, "push") as tmp:
        yield fork_with_wheel(tmp / "fork")


def one_layer_base(dest):
    """A minimal image as the stand-in's cache holds one: manifest.json, config.json, blobs/."""
    (dest / "blobs").mkdir(parents=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("usr/local/lib/python3.11/dist-packages")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    layer = gzip.compress(buf.getvalue(), mtime=0)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "created": "2026-01-01T00:00:00Z",
            "config": {
                "Env": ["PATH=/usr/bin"],
                "Entrypoint": ["vllm", "serve"],
                "Cmd": ["--help"],
                "Labels": {LABEL_SITE_PACKAGES: SITE, LABEL_PYTHON: "3.11"},
            },
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(buf.getvalue()).hexdigest()]},
            "history": [{"created": "2026-01-01T00:00:00Z", "created_by": "base"}],
        }
    ).encode()
    digests = {}
    for name, data in (("layer", layer), ("config", config)):
        digests[name] = "sha256:" + hashlib.sha256(data).hexdigest()
        (dest / "blobs" / digests[name].split(":")[1]).write_bytes(data)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": digests["config"], "size": len(config)},
        "layers": [{"mediaType": OCI_LAYER_GZIP, "digest": digests["layer"], "size": len(layer)}],
    }
    (dest / "manifest.json").write_bytes(json.dumps(manifest).encode())
    return dest


def fetch(url: str, accept: str = "") -> bytes:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req) as resp:
        return resp.read()


def test_push_appends_one_reproducible_layer_holding_the_delta(registry, fork, tmp_path):
    root, result = fork
    pin = load_pin(root)
    base = registry.ref("base/vllm-openai", pin.tag)
    registry_push.push_layout(one_layer_base(tmp_path / "base"), base)
    wheel = load_wheel(result.wheel)
    labels = {
        "FORK_VERSION": wheel.version,
        "VLLM_BASE_IMAGE": f"{registry.host}/base/vllm-openai",
        "VLLM_BASE_TAG": pin.tag,
    }
    pushes = [
        registry_push.push_image(
            root=root,
            pin=pin,
            wheel=wheel,
            base=base,
            labels=labels,
            tags=[registry.ref("fork/vllm-openai", t)],
            platform="linux/amd64",
            log=lambda m: None,
        )
        for t in ("a", "b")
    ]
    assert pushes[0].digest == pushes[1].digest  # same inputs, same image

    api = f"http://{registry.host}/v2/fork/vllm-openai"
    manifest_bytes = fetch(f"{api}/manifests/a", registry_push.OCI_MANIFEST)
    assert "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() == pushes[0].digest
    manifest = json.loads(manifest_bytes)
    base_manifest = json.loads((tmp_path / "base" / "manifest.json").read_bytes())
    assert manifest["layers"][:-1] == base_manifest["layers"]  # mounted from the base's repository
    config = json.loads(fetch(f"{api}/blobs/{manifest['config']['digest']}"))
    layer_gz = fetch(f"{api}/blobs/{manifest['layers'][-1]['digest']}")
    tar_bytes = gzip.decompress(layer_gz)
    assert config["rootfs"]["diff_ids"][-1] == "sha256:" + hashlib.sha256(tar_bytes).hexdigest()
    # The runtime config is the Dockerfile's image stage: labels, healthcheck, entrypoint; CMD reset.
    c = config["config"]
    assert c["Labels"]["org.opencontainers.image.version"] == wheel.version
    assert c["Labels"][LABEL_SITE_PACKAGES] == SITE  # the base's labels stay
    assert c["Entrypoint"] == ["vllm", "serve"] and c["Cmd"] is None
    assert c["Healthcheck"]["Test"][:2] == ["CMD", "python3"] and c["Healthcheck"]["Retries"] == 3
    assert "HEALTHCHECK_PORT=8000" in c["Env"] and "8000/tcp" in c["ExposedPorts"]

    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        data = {n: tar.extractfile(m).read() for n, m in members.items() if m.isfile()}
    assert all(m.uid == 0 and m.gid == 0 for m in members.values())
    site = SITE.lstrip("/")
    info = f"vllm-{wheel.version}.dist-info"
    # Every patched module, with the wheel's bytes, and its bytecode.
    with zipfile.ZipFile(result.wheel) as zf:
        for entry in result.record["patched_files"]:
            assert data[f"{site}/{entry['path']}"] == zf.read(entry["path"])
            parent, _, name = entry["path"].rpartition("/")
            assert f"{site}/{parent}/__pycache__/{name[:-3]}.cpython-311.pyc" in data
    # Upstream's dist-info goes (a whiteout); the new one's RECORD matches what the layer holds.
    assert f"{site}/.wh.vllm-{pin.version}.dist-info" in members
    rows = list(csv.reader(io.StringIO(data[f"{site}/{info}/RECORD"].decode())))
    for path, digest, _size in rows:
        name = f"{site}/{path}" if not path.startswith("../") else "usr/local/bin/" + path.rsplit("/", 1)[1]
        if digest and name in data:
            algo, _, want = digest.partition("=")
            got = base64.urlsafe_b64encode(hashlib.new(algo, data[name]).digest()).rstrip(b"=").decode()
            assert got == want, path
    assert "usr/local/bin/vllm" in data and members["usr/local/bin/vllm"].mode == 0o755
    # Only the delta: a handful of files, not the package.
    assert len(data) < 60 and len(layer_gz) < 2**20


def test_push_to_a_registry_over_tls_that_wants_the_login_of_a_credential_helper(fork, tmp_path, monkeypatch):
    """The whole `docker --push` (base read, layers mounted, config and manifest) with a login."""
    need_login_tools()
    root, result = fork
    pin = load_pin(root)
    tls = make_server_cert(tmp_path / "tls")
    reg = start_registry(htpasswd=make_htpasswd(tmp_path, USER, PASSWORD), tls=tls)
    try:
        config = empty_docker_config(tmp_path, monkeypatch)
        trust_ca(config, reg.host, tls.ca)
        install_helper(tmp_path, monkeypatch, {reg.host: (USER, PASSWORD)})
        write_config(config, {"credsStore": "vftest"})
        base = reg.ref("base/vllm-openai", pin.tag)
        registry_push.push_layout(one_layer_base(tmp_path / "base"), base)
        pushed = registry_push.push_image(
            root=root,
            pin=pin,
            wheel=load_wheel(result.wheel),
            base=base,
            labels={"VLLM_BASE_IMAGE": f"{reg.host}/base/vllm-openai", "VLLM_BASE_TAG": pin.tag},
            tags=[reg.ref("fork/vllm-openai", "prod")],
            platform="linux/amd64",
            log=lambda m: None,
        )
        # Read back without the tool: the login as Basic, the CA as the only trust.
        login = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        request = urllib.request.Request(
            f"https://{reg.host}/v2/fork/vllm-openai/manifests/prod",
            headers={"Accept": registry_push.OCI_MANIFEST, "Authorization": f"Basic {login}"},
        )
        context = ssl.create_default_context(cafile=str(tls.ca))
        with urllib.request.urlopen(request, context=context) as resp:
            assert "sha256:" + hashlib.sha256(resp.read()).hexdigest() == pushed.digest
    finally:
        stop_registry(reg)
