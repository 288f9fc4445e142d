"""The `offload_towers` prefetch-offload option: config, CLI, default, refusals."""

from __future__ import annotations

import warnings

import pytest
from vllm.config import CompilationConfig, VllmConfig
from vllm.config.offload import OffloadConfig, PrefetchOffloadConfig
from vllm.engine.arg_utils import EngineArgs
from vllm.model_executor.offloader import (
    NoopOffloader,
    PrefetchOffloader,
    UVAOffloader,
    create_offloader,
)
from vllm.utils.argparse_utils import FlexibleArgumentParser


def _parse(*argv: str) -> EngineArgs:
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    return EngineArgs.from_cli_args(parser.parse_args(["--model", "m", *argv]))


def _towers(**offload: object) -> OffloadConfig:
    backend = offload.pop("offload_backend", "auto")
    return OffloadConfig(
        offload_backend=backend,  # type: ignore[arg-type]
        prefetch=PrefetchOffloadConfig(offload_towers=True, **offload),  # type: ignore[arg-type]
    )


def test_off_by_default_everywhere():
    assert PrefetchOffloadConfig().offload_towers is False
    assert EngineArgs().offload_towers is False
    assert _parse().offload_towers is False
    assert OffloadConfig().streams_towers is False
    offloader = create_offloader(OffloadConfig())
    assert isinstance(offloader, NoopOffloader)
    assert offloader.supports_tower_offload is False


def test_cli_flag_sets_it_and_can_unset_it():
    assert _parse("--offload-towers").offload_towers is True
    assert _parse("--offload-towers", "--no-offload-towers").offload_towers is False
    args = _parse("--offload-backend", "prefetch", "--offload-towers")
    assert (args.offload_backend, args.offload_towers) == ("prefetch", True)


def test_cli_help_documents_it(monkeypatch, capsys):
    import vllm.engine.arg_utils as arg_utils

    # Attribute docs are read only for `--help`, decided at import time.
    monkeypatch.setattr(arg_utils, "NEEDS_HELP", True)
    arg_utils._compute_kwargs.cache_clear()
    try:
        parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
        with pytest.raises(SystemExit):
            parser.parse_args(["--help=OffloadConfig"])
    finally:
        arg_utils._compute_kwargs.cache_clear()
    out = " ".join(capsys.readouterr().out.split())
    assert "--offload-towers" in out
    assert "Stream the multimodal encoder towers" in out
    assert "pinned CPU memory" in out


def test_towers_alone_select_the_prefetch_backend_without_decoder_offload():
    for backend in ("auto", "prefetch"):
        config = _towers(offload_backend=backend)
        assert config.streams_towers
        offloader = create_offloader(config)
        assert isinstance(offloader, PrefetchOffloader)
        assert offloader.supports_tower_offload is True
        assert offloader.tower_streamer is not None
        # No decoder layers offloaded: no decoder copy stream either, which
        # is also why this runs without CUDA.
        assert offloader.group_size == 0 and offloader.copy_stream is None


def test_prefetch_step_is_the_tower_lookahead():
    offloader = create_offloader(_towers(offload_prefetch_step=3))
    assert isinstance(offloader, PrefetchOffloader)
    assert offloader.tower_streamer is not None
    assert offloader.tower_streamer.lookahead == 3
    with pytest.raises(ValueError, match="offload_prefetch_step"):
        _towers(offload_prefetch_step=0)


def test_decoder_group_checks_are_unchanged():
    # The prefetch backend with nothing to offload is still refused.
    with pytest.raises(ValueError, match="offload_num_in_group"):
        OffloadConfig(offload_backend="prefetch")
    with pytest.raises(ValueError, match="offload_num_in_group"):
        _towers(offload_group_size=2, offload_num_in_group=3)
    config = _towers(offload_group_size=4, offload_num_in_group=2)
    assert config.streams_towers and config.prefetch.offload_group_size == 4


def test_uva_backend_ignores_it_with_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = _towers(offload_backend="uva")
    assert any("offload_backend='uva'" in str(w.message) for w in caught)
    assert config.streams_towers is False
    offloader = create_offloader(config)
    assert isinstance(offloader, UVAOffloader)


def test_option_changes_the_config_hash():
    assert _towers().compute_hash() != OffloadConfig().compute_hash()


@pytest.mark.parametrize("option", ["cudagraph_mm_encoder", "compile_mm_encoder"])
def test_encoder_graphs_and_compilation_are_refused_at_startup(option):
    compilation = CompilationConfig(custom_ops=["none"], **{option: True})
    with pytest.raises(ValueError, match=f"--offload-towers.*{option}"):
        VllmConfig(offload_config=_towers(), compilation_config=compilation)
    # Either one alone is fine.
    VllmConfig(compilation_config=CompilationConfig(**{option: True}))
    VllmConfig(offload_config=_towers())
