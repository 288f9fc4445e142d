"""The image config `docker --push` reads from a Dockerfile stage is the one `docker build` makes.

Each form below was read wrong by the earlier hand-written reader (issue 58): the legacy
`ENV KEY value words`, `${PATH}` from the base image, shell-form ENTRYPOINT and HEALTHCHECK.
"""

from __future__ import annotations

import pytest

from vllm_fork.core.errors import ForkError
from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.image.dockerfile import base_image, dockerfile_args, stage_config
from vllm_fork.upstream.pin import load_pin

BASE_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/bin", "LANG=C.UTF-8"]


def config(tmp_path, text: str, args: dict | None = None, base_env: list | None = None) -> dict:
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    return stage_config(path, "image", args or {}, BASE_ENV if base_env is None else base_env)


def test_legacy_env_form_is_one_variable_with_the_rest_of_the_line(tmp_path):
    got = config(tmp_path, "FROM base AS image\nENV GREETING hello big world\n")
    assert got["Env"] == {"GREETING": "hello big world"}


def test_env_expands_the_base_images_variables_and_earlier_ones(tmp_path):
    text = 'FROM base AS image\nENV PATH=/opt/bin:${PATH} \\\n    HOME_BIN=$PATH/x\nENV LANG="en $LANG"\n'
    got = config(tmp_path, text)
    assert got["Env"]["PATH"] == "/opt/bin:/usr/local/sbin:/usr/local/bin:/usr/bin"
    assert got["Env"]["HOME_BIN"] == "/usr/local/sbin:/usr/local/bin:/usr/bin/x"  # before this ENV, as Docker does
    assert got["Env"]["LANG"] == "en C.UTF-8"


def test_only_the_named_stage_counts_and_args_come_from_the_build(tmp_path):
    text = (
        "ARG VERSION=0\nFROM other AS builder\nENV NOT_MINE=1\nLABEL nope=1\n"
        "FROM base AS image\nARG VERSION\nARG REVISION\n"
        'LABEL org.opencontainers.image.version="${VERSION}" rev=$REVISION quoted="a b"\n'
    )
    got = config(tmp_path, text, {"VERSION": "1.2", "REVISION": "abc"})
    assert got["Env"] == {}
    assert got["Labels"] == {"org.opencontainers.image.version": "1.2", "rev": "abc", "quoted": "a b"}
    assert config(tmp_path, text)["Labels"]["org.opencontainers.image.version"] == "0"  # the global default


def test_shell_form_entrypoint_and_cmd_run_through_the_shell(tmp_path):
    got = config(tmp_path, 'FROM base AS image\nENTRYPOINT exec vllm serve "$MODEL"\nCMD --port 8000\n')
    assert got["Entrypoint"] == ["/bin/sh", "-c", 'exec vllm serve "$MODEL"']
    assert got["Cmd"] == ["/bin/sh", "-c", "--port 8000"]
    exec_form = config(tmp_path, 'FROM base AS image\nENTRYPOINT ["vllm", "serve"]\n')
    assert exec_form["Entrypoint"] == ["vllm", "serve"] and exec_form["Cmd"] is None
    not_json = config(tmp_path, "FROM base AS image\nENTRYPOINT [not json\n")
    assert not_json["Entrypoint"] == ["/bin/sh", "-c", "[not json"]


def test_healthcheck_forms(tmp_path):
    shell = config(tmp_path, "FROM base AS image\nHEALTHCHECK --interval=1m30s --retries=2 CMD curl -f localhost\n")
    assert shell["Healthcheck"] == {"Test": ["CMD-SHELL", "curl -f localhost"], "Interval": 90 * 10**9, "Retries": 2}
    exec_form = config(tmp_path, 'FROM base AS image\nHEALTHCHECK --timeout=500ms CMD ["true"]\n')
    assert exec_form["Healthcheck"] == {"Test": ["CMD", "true"], "Timeout": 500 * 10**6}
    assert config(tmp_path, "FROM base AS image\nHEALTHCHECK NONE\n")["Healthcheck"] == {"Test": ["NONE"]}
    with pytest.raises(ForkError, match=r"Dockerfile:2: cannot read the duration '5x'"):
        config(tmp_path, "FROM base AS image\nHEALTHCHECK --interval=5x CMD true\n")


def test_expansion_modifiers_are_refused_with_the_line(tmp_path):
    with pytest.raises(ForkError, match=r"Dockerfile:3: ENV uses"):
        config(tmp_path, "FROM base AS image\n\nENV A=${B:-x}\n")


def test_the_fork_dockerfile_image_stage(tmp_path):
    got = stage_config(REPO_ROOT / "Dockerfile", "image", {"FORK_VERSION": "9.9"}, BASE_ENV)
    assert got["Entrypoint"] == ["vllm", "serve"] and got["Cmd"] is None
    assert got["Env"] == {"HEALTHCHECK_PORT": "8000"} and got["ExposedPorts"] == {"8000/tcp": {}}
    assert got["Labels"]["org.opencontainers.image.version"] == "9.9"
    assert got["Labels"]["org.opencontainers.image.base.name"] == "vllm/vllm-openai:v0.34.0"
    assert got["Healthcheck"]["Test"][:2] == ["CMD", "python3"] and got["Healthcheck"]["StartPeriod"] == 600 * 10**9
    assert dockerfile_args(REPO_ROOT / "Dockerfile")["VLLM_BASE_IMAGE"] == "vllm/vllm-openai"


def test_base_image_by_digest_and_refused_forms():
    pin = load_pin(REPO_ROOT)
    digest = "sha256:" + "cd" * 32
    base = base_image(REPO_ROOT / "Dockerfile", pin, None, f"127.0.0.1:5000/mirror/vllm@{digest}")
    assert base == {
        "VLLM_BASE_IMAGE": "127.0.0.1:5000/mirror/vllm",
        "VLLM_BASE_TAG": pin.tag,
        "VLLM_BASE_DIGEST": digest,
    }
    with pytest.raises(ForkError, match="give the repository only"):
        base_image(REPO_ROOT / "Dockerfile", pin, None, "127.0.0.1:5000/mirror/vllm:v1")
    with pytest.raises(ForkError, match="name two digests"):
        base_image(REPO_ROOT / "Dockerfile", pin, "sha256:" + "ef" * 32, f"mirror/vllm@{digest}")
