"""Tower streaming on a GPU: a Qwen3-VL-8B-sized vision tower, one 2223-token image.

Runs the patched vLLM Python tree (`../shared/gpu/README.md` says how, on the
H200 test machine). Random bf16 weights; no downloads.
"""

from __future__ import annotations

import gc

import pytest
import torch

from vllm_fork_testkit.vlm_checkpoint import VISION  # the same 8B tower the engine tests build

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

MiB = 1 << 20
GRID = [[1, 78, 114]]  # 8892 patches -> 2223 image tokens after the 2x2 merge


def vision_config(**overrides: object):
    """Qwen3-VL-8B's vision tower: 1099 MiB of bf16 weights."""
    from transformers.models.qwen3_vl.configuration_qwen3_vl import (
        Qwen3VLVisionConfig,
    )

    params = {**VISION, **overrides}
    return Qwen3VLVisionConfig(**params)


@pytest.fixture(scope="module")
def vllm_state():
    from vllm_fork_testkit.tower_families import vllm_context

    with vllm_context("nccl") as config:
        yield config


def build_tower(cls=None, seed: int = 0, **config: object) -> torch.nn.Module:
    """Build on the GPU in bf16, like vLLM's loader, with seeded weights."""
    from vllm.model_executor.models.qwen3_vl import Qwen3_VisionTransformer

    from vllm_fork_testkit.tower_families import loader_defaults, seed_weights

    cls = cls or Qwen3_VisionTransformer
    with loader_defaults("cuda", torch.bfloat16):
        tower = cls(vision_config(**config), prefix="visual")
    seed_weights([tower], "cuda", seed)
    return tower


def image(seed: int = 1) -> torch.Tensor:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    t, h, w = GRID[0]
    return torch.randn(t * h * w, 3 * 2 * 16 * 16, device="cuda", generator=generator).to(torch.bfloat16)


def encode(tower: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        out = tower(x, GRID)
    torch.cuda.synchronize()
    return out


def param_bytes_on_gpu(module: torch.nn.Module, offloader=None) -> int:
    """Parameter bytes in GPU memory: not counting views of a streamed arena."""
    arenas = []
    if offloader is not None and offloader.tower_streamer is not None:
        arenas = [t.arena.device_view for t in offloader.tower_streamer.towers]

    def in_arena(p: torch.Tensor) -> bool:
        return any(a.data_ptr() <= p.data_ptr() < a.data_ptr() + a.numel() for a in arenas)

    return sum(p.numel() * p.element_size() for p in module.parameters() if p.is_cuda and not in_arena(p))


def kept_bytes(offloader) -> int:
    """Parameter bytes the streamer keeps on the GPU: the units too small to
    stream (the mergers' norms, a few KiB)."""
    return sum(offloader.tower_streamer.kept_resident.values())


def streamed(tower: torch.nn.Module):
    """The tower streamed as vLLM ships it: the towers' default lookahead."""
    from vllm.model_executor.offloader import PrefetchOffloader

    offloader = PrefetchOffloader(group_size=0, num_in_group=1, prefetch_step=1, offload_towers=True)
    offloader.wrap_tower(tower, prefix="visual")
    offloader.post_init()
    return offloader


@pytest.fixture(scope="module")
def resident_run(vllm_state):
    """The resident tower's output and the activation memory of one encode."""
    tower = build_tower()
    x = image()
    encode(tower, x)  # warm up (Triton, cuBLAS workspaces)
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = encode(tower, x)
    activation_peak = torch.cuda.max_memory_allocated() - before
    tower_bytes = param_bytes_on_gpu(tower)
    del tower
    gc.collect()  # vLLM modules hold reference cycles (bound methods)
    torch.cuda.empty_cache()
    return {
        "x": x,
        "out": out,
        "activation_peak": activation_peak,
        "tower_bytes": tower_bytes,
    }


@pytest.fixture(scope="module")
def streamed_tower(vllm_state, resident_run):
    gc.collect()
    torch.cuda.empty_cache()
    baseline = torch.cuda.memory_allocated()
    tower = build_tower()
    offloader = streamed(tower)
    yield tower, offloader, baseline
    del tower, offloader
    torch.cuda.empty_cache()


def test_streamed_output_equals_resident_bit_for_bit(resident_run, streamed_tower):
    tower, _, _ = streamed_tower
    for _ in range(3):
        assert torch.equal(encode(tower, resident_run["x"]), resident_run["out"])


def test_no_tower_parameter_bytes_on_gpu_between_encodes(resident_run, streamed_tower):
    tower, offloader, baseline = streamed_tower
    encode(tower, resident_run["x"])
    assert param_bytes_on_gpu(tower, offloader) == kept_bytes(offloader)
    # Every parameter rests on a device view of the tower's pinned arena.
    arena = offloader.tower_streamer.towers[0].arena
    assert arena.host.is_pinned() and arena.device_view.is_cuda
    assert all(p.is_cuda for p in tower.parameters())
    print(f"\n[gpu] arena pinned by {arena.pinning}, {arena.nbytes / MiB:.1f} MiB")
    buffers = {name: b.numel() * b.element_size() for name, b in tower.named_buffers() if b.is_cuda}
    # Whatever else the tower keeps on the GPU between encodes is its buffers
    # (e.g. the rotary cos/sin cache) and the streamer's ring, kept from the
    # first encode on: lookahead + 1 slots of the largest unit.
    ring = offloader.tower_streamer.ring_bytes
    resident_extra = torch.cuda.memory_allocated() - baseline
    print(
        f"\n[gpu] tower params {resident_run['tower_bytes'] / MiB:.1f} MiB, on GPU "
        f"between encodes: params {kept_bytes(offloader)} B, buffers {buffers} "
        f"({sum(buffers.values()) / MiB:.2f} MiB), ring {ring / MiB:.1f} MiB, "
        f"allocated since the build {resident_extra / MiB:.2f} MiB"
    )
    assert resident_extra <= sum(buffers.values()) + ring + kept_bytes(offloader) + 1 * MiB
    assert offloader.tower_streamer.towers[0].in_flight_units == []


def test_no_growth_over_repeated_encodes(resident_run, streamed_tower):
    tower, _, _ = streamed_tower
    x = resident_run["x"]
    encode(tower, x)
    allocated, reserved = [], []
    for _ in range(8):
        out = encode(tower, x)
        del out
        allocated.append(torch.cuda.memory_allocated())
        reserved.append(torch.cuda.memory_reserved())
    print(f"\n[gpu] allocated after encodes: {allocated}; reserved: {reserved}")
    assert len(set(allocated)) == 1
    assert len(set(reserved)) == 1


def test_peak_during_an_encode_is_bounded_by_the_units_in_flight(resident_run, streamed_tower):
    tower, offloader, _ = streamed_tower
    streamed_state = offloader.tower_streamer.towers[0]
    units = [u.nbytes for u in streamed_state.units if u.spec.recurse]
    slots = offloader.tower_streamer.lookahead + 1  # the running unit and those whose copy is ahead
    ring = slots * max(units)
    pos_embed = tower.pos_embed.weight.numel() * tower.pos_embed.weight.element_size()
    x = resident_run["x"]
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    encode(tower, x)
    extra = torch.cuda.max_memory_allocated() - before
    bound = resident_run["activation_peak"] + ring + pos_embed + 2 * MiB
    print(
        f"\n[gpu] peak during a streamed encode {extra / MiB:.1f} MiB = resident "
        f"activations {resident_run['activation_peak'] / MiB:.1f} MiB + ring "
        f"{ring / MiB:.1f} MiB ({slots} x largest unit) + pos-embed "
        f"{pos_embed / MiB:.1f} MiB; bound {bound / MiB:.1f} MiB; whole tower "
        f"{resident_run['tower_bytes'] / MiB:.1f} MiB"
    )
    assert extra <= bound
    assert ring < resident_run["tower_bytes"] / 5


def test_construction_memory_is_released_before_profiling(vllm_state):
    torch.cuda.empty_cache()
    allocated0 = torch.cuda.memory_allocated()
    reserved0 = torch.cuda.memory_reserved()
    tower = build_tower(depth=6)
    built = torch.cuda.memory_allocated() - allocated0
    offloader = streamed(tower)  # wrap_tower + post_init, as vLLM does
    after = torch.cuda.memory_allocated() - allocated0
    # What vLLM's memory profiling does before it measures (mem_utils.memory_profiling).
    gc.collect()
    torch.cuda.empty_cache()
    buffers = sum(b.numel() * b.element_size() for b in tower.buffers() if b.is_cuda)
    print(
        f"\n[gpu] 6-block tower: {built / MiB:.1f} MiB while built, "
        f"{after / MiB:.2f} MiB after post_init (buffers {buffers / MiB:.2f} MiB), "
        f"reserved {torch.cuda.memory_reserved() - reserved0} B over the start"
    )
    assert after <= buffers
    assert torch.cuda.memory_reserved() - reserved0 <= buffers + 2 * MiB
    del tower, offloader


def test_a_device_property_that_follows_a_weight_keeps_working(vllm_state):
    """vLLM 0.33.0's `device` property reads a weight; it stays on the GPU."""
    from vllm.model_executor.models.qwen3_vl import Qwen3_VisionTransformer

    class UpstreamDevice(Qwen3_VisionTransformer):
        @property
        def device(self) -> torch.device:  # 0.33.0's property
            return self.patch_embed.proj.weight.device

    tower = build_tower(UpstreamDevice, depth=2)
    x = image()
    reference = encode(tower, x)
    streamed(tower)
    assert tower.device == torch.device("cuda", torch.cuda.current_device())
    for _ in range(2):
        assert torch.equal(encode(tower, x), reference)


class DecoderLayer(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.up = torch.nn.Linear(dim, 4 * dim)
        self.down = torch.nn.Linear(4 * dim, dim)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return hidden_states + self.down(torch.relu(self.up(hidden_states)))


def test_decoder_layer_prefetch_alongside(vllm_state):
    from vllm.model_executor.offloader import PrefetchOffloader, set_offloader

    torch.manual_seed(0)
    dim = 1024
    with torch.device("cuda"):
        layers = [DecoderLayer(dim).to(torch.bfloat16) for _ in range(6)]
        reference_layers = [DecoderLayer(dim).to(torch.bfloat16) for _ in range(6)]
        hidden = torch.randn(64, dim, dtype=torch.bfloat16)
    for layer, ref in zip(layers, reference_layers, strict=False):
        ref.load_state_dict(layer.state_dict())
    tower = build_tower(depth=4, deepstack_visual_indexes=[1, 2])
    x = image()
    with torch.inference_mode():
        tower_reference = tower(x, GRID)
        decoder_reference = hidden
        for ref in reference_layers:
            decoder_reference = ref(decoder_reference)

    offloader = PrefetchOffloader(group_size=2, num_in_group=1, prefetch_step=1, offload_towers=True)
    set_offloader(offloader)
    try:
        # As in a model's __init__: the tower first, then `make_layers`.
        offloader.wrap_tower(tower, prefix="visual")
        wrapped = offloader.wrap_modules(iter(layers))
        offloader.post_init()
        assert [m.layer_idx for m in offloader.module_offloaders] == [0, 1, 2]
        assert all("forward" in vars(layer) for i, layer in enumerate(wrapped) if i % 2)
        with torch.inference_mode():
            for _ in range(2):
                out = hidden
                for layer in wrapped:
                    out = layer(out)
                assert torch.equal(out, decoder_reference)
                assert torch.equal(tower(x, GRID), tower_reference)
        torch.cuda.synchronize()
        assert param_bytes_on_gpu(tower, offloader) == kept_bytes(offloader)
        # Offloaded decoder layers point at the static GPU buffers, as before.
        assert all(p.is_cuda for layer in wrapped for p in layer.parameters())
    finally:
        set_offloader(None)
