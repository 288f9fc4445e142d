"""Which builder `invoke docker` uses, and what it says when it cannot build (no engine needed)."""

from __future__ import annotations

import pytest

from vllm_fork.core.errors import ForkError
from vllm_fork.image import engine as engines


def test_no_engine_answering_says_what_to_do(tmp_path):
    client = engines.client_path()
    if client is None:
        pytest.skip("no docker client here")
    with pytest.raises(ForkError) as err:
        engines.find_engine(host=f"unix://{tmp_path}/none.sock", client=client)
    text = str(err.value)
    assert "no Docker engine answers" in text and "--dry-run" in text and "--push" in text


def test_no_client_at_all(tmp_path):
    with pytest.raises(ForkError, match="docker is not installed") as err:
        engines.find_engine(host=f"unix://{tmp_path}/none.sock", client=str(tmp_path / "docker"))
    assert "--dry-run" in str(err.value)


def test_plain_buildkit_refuses_the_routes_that_need_named_contexts():
    plain = engines.Engine("/usr/bin/docker", engines.BUILDKIT)
    assert not plain.named_contexts and plain.build_prefix() == ["/usr/bin/docker", "build"]
    assert "no buildx here" in plain.describe()
    with pytest.raises(ForkError) as err:
        engines.require_named_contexts(plain, "build")
    assert "named build contexts" in str(err.value) and "buildx" in str(err.value)
    engines.require_named_contexts(engines.Engine("docker", engines.BUILDX), "build")  # no error
    assert engines.Engine("docker", engines.BUILDX).build_prefix() == ["docker", "buildx", "build"]


def test_builder_kind_without_a_client_is_plain_buildkit(tmp_path):
    assert engines.builder_kind(str(tmp_path / "no-docker")) == engines.BUILDKIT
