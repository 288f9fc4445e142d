"""Qwen3-VL's vision tower: its compute device, and streaming it on the CPU."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.nn.functional as F
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
from vllm.model_executor.offloader import PrefetchOffloader

GRID = [[1, 8, 12]]  # 96 patches -> 24 tokens after the 2x2 merge
PATCH_DIM = 3 * 2 * 4 * 4  # channels * temporal * patch * patch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_state():
    from vllm.distributed import (
        cleanup_dist_env_and_memory,
        init_distributed_environment,
        initialize_model_parallel,
    )

    config = VllmConfig(compilation_config=CompilationConfig(custom_ops=["none"]))
    with set_current_vllm_config(config):
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
            backend="gloo",
        )
        initialize_model_parallel(1, 1)
        yield config
        cleanup_dist_env_and_memory()


def build_tower(seed: int = 0):
    """A tiny Qwen3-VL vision tower (4 blocks, deepstack after blocks 1 and 2)."""
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.models.qwen3_vl import Qwen3_VisionTransformer

    config = Qwen3VLVisionConfig(
        depth=4,
        hidden_size=64,
        num_heads=4,
        intermediate_size=128,
        out_hidden_size=96,
        deepstack_visual_indexes=[1, 2],
        num_position_embeddings=64,
        patch_size=4,
        temporal_patch_size=2,
        spatial_merge_size=2,
        in_channels=3,
    )
    torch.manual_seed(seed)
    tower = Qwen3_VisionTransformer(config, prefix="visual")
    for param in tower.parameters():
        torch.nn.init.normal_(param, std=0.02)
    # vLLM's CPU GEMM dispatch (set up after loading) needs its compiled
    # kernels; plain torch linear is what it falls back to without them.
    for module in tower.modules():
        if isinstance(module, LinearBase):
            module.cpu_linear = F.linear
    return tower


def encode(tower, x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return tower(x, GRID)


def test_tower_records_the_device_it_was_built_on(vllm_state):
    tower = build_tower()
    assert tower._build_device == torch.device("cpu")
    assert tower.device == torch.device("cpu")


def test_device_falls_back_to_the_build_device_when_weights_are_on_host(
    vllm_state,
):
    tower = build_tower()
    # As if built on a GPU, with its weights now offloaded to host memory:
    tower._build_device = torch.device("cuda", 0)
    assert tower.patch_embed.proj.weight.device.type == "cpu"
    assert tower.device == torch.device("cuda", 0)
    # A weight that is on an accelerator is still what `device` follows.
    tower.patch_embed.to("meta")
    assert tower.device == torch.device("meta")


def test_whole_tower_streams_and_matches_resident_output(vllm_state):
    x = torch.randn(8 * 12, PATCH_DIM)
    tower = build_tower()
    reference = encode(tower, x)
    assert reference.shape == (24, 96 * 3)

    offloader = PrefetchOffloader(
        group_size=0, num_in_group=1, prefetch_step=1, offload_towers=True
    )
    offloader.wrap_tower(tower, prefix="visual")
    offloader.post_init()
    assert offloader.tower_streamer is not None
    streamed = offloader.tower_streamer.towers[0]
    names = [unit.spec.name for unit in streamed.units]
    assert names == [
        "patch_embed",
        "pos_embed",
        "merger",
        "deepstack_merger_list.0",
        "deepstack_merger_list.1",
        "blocks.0",
        "blocks.1",
        "blocks.2",
        "blocks.3",
    ]
    # No anchor weight left behind: the whole tower is in host buffers.
    assert streamed.host_bytes >= sum(
        p.numel() * p.element_size() for p in tower.parameters()
    )
    assert all(unit.is_packed() for unit in streamed.units)

    for _ in range(3):
        assert torch.equal(encode(tower, x), reference)
        assert all(unit.is_packed() for unit in streamed.units)
        assert streamed.in_flight_units == []
    # The learned order: deepstack mergers run right after their blocks.
    chain = [streamed._first]
    while (nxt := streamed._successor.get(chain[-1])) is not None:
        chain.append(nxt)
    chain = [names[index] for index in chain]
    assert chain == [
        "patch_embed",
        "blocks.0",
        "blocks.1",
        "deepstack_merger_list.0",
        "blocks.2",
        "deepstack_merger_list.1",
        "blocks.3",
        "merger",
    ]


def test_weights_loaded_after_wrapping_land_in_host_memory(vllm_state):
    x = torch.randn(8 * 12, PATCH_DIM)
    source = build_tower(seed=1)
    expected = encode(source, x)

    tower = build_tower(seed=0)
    offloader = PrefetchOffloader(
        group_size=0, num_in_group=1, prefetch_step=1, offload_towers=True
    )
    offloader.wrap_tower(tower, prefix="visual")
    weights = [(n, p.detach().clone()) for n, p in source.named_parameters()]
    loaded = tower.load_weights(weights)
    assert loaded == {n for n, _ in tower.named_parameters()}
    offloader.post_init()
    assert torch.equal(encode(tower, x), expected)


def test_restricted_to_blocks_keeps_the_rest_resident(vllm_state):
    x = torch.randn(8 * 12, PATCH_DIM)
    tower = build_tower()
    reference = encode(tower, x)
    resident = {n: p.data_ptr() for n, p in tower.named_parameters()}
    tower.tower_offload_children = ("blocks",)
    offloader = PrefetchOffloader(
        group_size=0, num_in_group=1, prefetch_step=2, offload_towers=True
    )
    offloader.wrap_tower(tower, prefix="visual")
    assert offloader.tower_streamer is not None
    units = [u.spec.name for u in offloader.tower_streamer.towers[0].units]
    assert units == ["blocks.0", "blocks.1", "blocks.2", "blocks.3"]
    for name, param in tower.named_parameters():
        assert (param.data_ptr() == resident[name]) != name.startswith("blocks.")
    assert torch.equal(encode(tower, x), reference)
