"""The deployment image built and run on a real Docker engine, and pushed without one.

A dockerd of the test's own (tests/support/dockerd.py) builds the fork's image from the
real Dockerfile over the stand-in base (vllm_fork/image/base.py: Debian, python3, the
official wheel of the pinned release, installed as upstream's image installs it), with the real
patched wheel `invoke build` makes; containers run with `--network none`. A real registry
(Debian's docker-registry) takes the stand-in base, and `invoke docker --push` appends the
delta layer there with no engine at all; the engine then pulls and runs the result.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
from support.image_probe import PROBE
from support.scratch import module_scratch

from vllm_fork.core.image_ref import ImageRef
from vllm_fork.image import base as standin_base
from vllm_fork.image import registry_push
from vllm_fork.ops.oci import Registry
from vllm_fork.upstream.pin import load_pin
from vllm_fork_testkit.fork_copy import fork_with_wheel

pytestmark = pytest.mark.slow

DOCKERFILE_TAG = "vllm-fork-test/vllm-openai:dockerfile"
STANDIN_REPO = "vllm-fork-standin/vllm-openai"
#: The bound the added layer must stay under (docs/docker.md: "one small layer"; its measured
#: size is benchmarks/results/image_layer_size.json).
CLAIM_MIB = 1.0
TIMINGS: dict[str, float] = {}


def invoke(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "invoke", "docker", *args],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


def prune_build_cache(dockerd) -> None:
    """Drop the test engine's BuildKit cache (build contexts with the wheels, intermediate
    snapshots): the images stay, and the disk is CI's to share."""
    dockerd.docker("builder", "prune", "--all", "--force")


@pytest.fixture(scope="module")
def standin(dockerd, registry) -> dict:
    """The stand-in base, built once per machine (cached), pushed to the registry, pulled by the engine."""
    started = time.monotonic()
    image = standin_base.ensure_standin(dockerd.engine, log=lambda m: print(m, file=sys.stderr))
    TIMINGS["standin_ready_s"] = time.monotonic() - started
    prune_build_cache(dockerd)
    pin = load_pin()
    ref = registry.ref(STANDIN_REPO, pin.tag)
    started = time.monotonic()
    registry_push.push_layout(image.path, ref)
    dockerd.docker("pull", ref)
    TIMINGS["standin_push_pull_s"] = time.monotonic() - started
    return {"ref": ref, "repo": f"{registry.host}/{STANDIN_REPO}", "info": image.info}


@pytest.fixture(scope="module")
def fork(tmp_path_factory):
    with module_scratch(tmp_path_factory, "image") as tmp:
        yield fork_with_wheel(tmp / "fork")


@pytest.fixture(scope="module")
def dockerfile_image(dockerd, standin, fork) -> str:
    root, _ = fork
    started = time.monotonic()
    proc = invoke(
        root,
        "--base-image",
        standin["repo"],
        "--tag",
        DOCKERFILE_TAG,
        env={"DOCKER_HOST": dockerd.host, "VLLM_FORK_DOCKER": dockerd.engine.client},
    )
    TIMINGS["dockerfile_build_s"] = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    prune_build_cache(dockerd)
    assert "with BuildKit (DOCKER_BUILDKIT=1; no buildx here)" in proc.stderr  # it says which builder
    return DOCKERFILE_TAG


def probe(dockerd, image: str, site: str) -> dict:
    proc = dockerd.docker("run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c", PROBE, site)
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def inspect(dockerd, image: str) -> dict:
    return json.loads(dockerd.docker("image", "inspect", image).stdout)[0]


def wheel_members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def test_the_image_runs_the_fork_with_every_file_as_the_wheel_has_it(dockerd, standin, fork, dockerfile_image):
    root, result = fork
    site = standin["info"]["site_packages"]
    seen = probe(dockerd, dockerfile_image, site)
    version = result.record["version"]
    assert seen["version"] == version and seen["dist_version"] == version
    assert seen["dist_infos"] == [f"vllm-{version}.dist-info"]  # upstream's dist-info is gone
    # The patched modules' bytes are the wheel's.
    members = wheel_members(result.wheel)
    patched = [p for p in result.record["patched_files"] if not p.get("deleted")]
    assert patched
    for entry in patched:
        name = entry["path"]
        want = hashlib.sha256(members[name]).hexdigest()
        assert want == entry["sha256"]  # the wheel holds the patched tree's bytes
        assert seen["files"][f"{site}/{name}"][0] == want, name
    # Every file of the installed RECORD matches its hash; nothing unlisted is left over.
    assert seen["record_bad"] == [] and seen["record_rows"] > 5000  # every file of the package (bytecode is unlisted)
    assert seen["unlisted"] == []
    # vllm-rs still resolves to the (unchanged) binary and runs.
    rs, target, out = seen["vllm_rs"]
    assert rs == "/usr/local/bin/vllm-rs" and target == f"{site}/vllm/vllm-rs" and out


def test_labels_healthcheck_and_entrypoint(dockerd, fork, dockerfile_image, standin):
    root, result = fork
    config = inspect(dockerd, dockerfile_image)["Config"]
    labels = config["Labels"]
    rec = result.record
    assert labels["org.opencontainers.image.version"] == rec["version"]
    assert labels["vllm-fork.pin.commit"] == rec["pin"]["commit"]
    assert labels["vllm-fork.ops.key"] == rec["ops"]["key"]
    assert labels["vllm-fork.ops.artifact.sha256"] == rec["ops"]["artifact"]["sha256"]
    assert [p["name"] for p in json.loads(labels["vllm-fork.series.patches"])] == [
        p["name"] for p in rec["series"]["patches"]
    ]
    assert labels["org.opencontainers.image.base.name"] == standin["ref"]
    assert config["Entrypoint"] == ["vllm", "serve"]
    test = config["Healthcheck"]["Test"]
    assert test[:2] == ["CMD", "python3"]
    seen = probe(dockerd, dockerfile_image, standin["info"]["site_packages"])
    assert seen["python3"] == "/usr/bin/python3"  # the healthcheck's command exists
    prov = [p for p in seen["files"] if p.startswith("/usr/share/vllm-fork/") and p.endswith(".provenance.json")]
    assert [Path(p).name for p in prov] == [result.provenance.name]


def _layer_figures(data: bytes) -> tuple[int, int, int]:
    """A layer tar's (uncompressed bytes, gzip bytes, regular files)."""
    with tarfile.open(fileobj=io.BytesIO(data)) as layer:
        count = sum(1 for m in layer.getmembers() if m.isfile())
    return len(data), len(gzip.compress(data, compresslevel=6, mtime=0)), count


def _pushed_top_layer(dockerd, ref: str) -> tuple[int, int, int]:
    """A pushed image's last layer, read from the registry."""
    parsed = ImageRef.parse(ref)
    reg = Registry.of_image(parsed)
    platform = dockerd.docker("version", "--format", "{{.Server.Os}}/{{.Server.Arch}}").stdout.decode().strip()
    manifest, _ = registry_push.platform_manifest(reg, parsed.reference, platform)
    return _layer_figures(gzip.decompress(registry_push.get_blob(reg, json.loads(manifest)["layers"][-1]["digest"])))


def _engine_top_layer(dockerd, image: str) -> tuple[int, int, int]:
    """A built image's last layer, tarred from the engine's own store (overlay2's upper directory of
    the image: that layer's files and whiteouts). Not `docker save` (it writes every base layer, GBs,
    to disk) nor `docker push` (it re-compresses and uploads the base layers)."""
    upper = Path(inspect(dockerd, image)["GraphDriver"]["Data"]["UpperDir"])
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(upper.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(upper)), recursive=False)
    return _layer_figures(buffer.getvalue())


def test_the_added_layer_is_small_as_the_readme_says(dockerd, dockerfile_image, standin):
    raw, packed, count = _engine_top_layer(dockerd, dockerfile_image)
    history = dockerd.docker("history", "--no-trunc", "--format", "{{.Size}}\t{{.CreatedBy}}", dockerfile_image)
    sizes = [line.split("\t")[0] for line in history.stdout.decode().splitlines()]
    nonempty = [s for s in sizes if s not in ("0B", "0")]
    base_layers = len(inspect(dockerd, standin["ref"])["RootFS"]["Layers"])
    assert len(inspect(dockerd, dockerfile_image)["RootFS"]["Layers"]) == base_layers + 1  # one layer added
    print(
        f"\nDockerfile route: added layer {count} files, {raw / 2**20:.2f} MiB, gzip {packed / 2**20:.2f} MiB; "
        f"docker history top {nonempty[0]}; timings {TIMINGS}",
        file=sys.stderr,
    )
    assert packed < CLAIM_MIB * 2**20


def test_the_build_route_names_the_missing_feature_on_a_plain_engine(dockerd, fork):
    root, _ = fork
    if dockerd.engine.named_contexts:
        pytest.skip("this engine has buildx: the build route runs there")
    proc = invoke(
        root, "--wheel-from", "build", env={"DOCKER_HOST": dockerd.host, "VLLM_FORK_DOCKER": dockerd.engine.client}
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "named build contexts" in proc.stderr and "buildx" in proc.stderr


def test_daemonless_push_appends_the_layer_and_equals_the_dockerfile_image(
    dockerd, registry, standin, fork, dockerfile_image
):
    root, result = fork
    target = registry.ref("vllm-fork/vllm-openai", "prod")
    no_engine = {"DOCKER_HOST": "unix:///nonexistent.sock", "VLLM_FORK_DOCKER": "/nonexistent/docker"}
    started = time.monotonic()
    proc = invoke(root, "--push", "--base-image", standin["repo"], "--tag", target, env=no_engine)
    TIMINGS["daemonless_push_s"] = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    digest = proc.stdout.split(f"{target}@", 1)[1].split()[0]
    # The same inputs give the same digest (another tag, another run).
    again = invoke(
        root,
        "--push",
        "--base-image",
        standin["repo"],
        "--tag",
        registry.ref("vllm-fork/vllm-openai", "again"),
        env=no_engine,
    )
    assert again.returncode == 0 and f"@{digest}" in again.stdout

    dockerd.docker("pull", target)
    site = standin["info"]["site_packages"]
    pushed, built = probe(dockerd, target, site), probe(dockerd, dockerfile_image, site)
    assert pushed["version"] == result.record["version"] and pushed["record_bad"] == [] and pushed["unlisted"] == []
    assert pushed["vllm_rs"] == built["vllm_rs"]
    # The filesystem: every vllm file, the console script and the provenance as the Dockerfile's
    # image has them, but for what only pip's install writes (direct_url.json, REQUESTED), the
    # INSTALLER it names and the RECORD listing those.
    info = f"{site}/vllm-{result.record['version']}.dist-info"
    installer_only = {f"{info}/{n}" for n in ("RECORD", "INSTALLER", "direct_url.json", "REQUESTED")}
    a = {p: v for p, v in pushed["files"].items() if p not in installer_only}
    b = {p: v for p, v in built["files"].items() if p not in installer_only}
    assert sorted(set(a) ^ set(b)) == []
    differ = sorted(p for p in a if a[p] != b[p] and not p.endswith("vllm-delta.json"))
    assert differ == []
    # Same labels and runtime config; one layer over the same base layers.
    pc, bc = inspect(dockerd, target), inspect(dockerd, dockerfile_image)
    assert pc["Config"]["Labels"] == bc["Config"]["Labels"]
    for key in ("Entrypoint", "Healthcheck", "ExposedPorts", "Cmd"):
        assert pc["Config"][key] == bc["Config"][key], key
    assert sorted(pc["Config"]["Env"]) == sorted(bc["Config"]["Env"])
    assert pc["RootFS"]["Layers"][:-1] == bc["RootFS"]["Layers"][:-1]
    raw, packed, count = _pushed_top_layer(dockerd, target)
    print(
        f"\ndaemonless route: added layer {count} files, {raw / 2**20:.2f} MiB, gzip {packed / 2**20:.2f} MiB; "
        f"timings {TIMINGS}",
        file=sys.stderr,
    )
