"""The multimodal towers of vLLM 0.33.0, built and encoded the way their models do.

One entry per model family whose tower can be built from a config with random
weights. Each entry builds the children that the model class creates inside
`_mark_tower_model` (the same classes, prefixes and `quant_config=None`) from a
transformers (or vLLM) config, at one of two sizes:

- ``"tiny"``: a few small layers, for the CPU (tests/vllm/test_tower_matrix_cpu.py);
- ``"full"``: the released model's tower dimensions, for the GPU
  (tests/gpu/test_tower_matrix.py, benchmarks/tower_matrix.py).

Encoding goes through the model class's own `_process_image_input` (or its
audio equivalent), called on a *host*: a bare instance of the model class
(`__new__` + `nn.Module.__init__`, no language model) holding the towers and
the few attributes that method reads. So the forward path, casts and splits
are upstream's, not a copy of them.

The callers need a vLLM config context (`vllm_context`), a device and a dtype;
`build_family` returns the host with seeded random weights.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

TINY = "tiny"
FULL = "full"


@dataclass(frozen=True)
class TowerFamily:
    """How to build one family's towers and encode real-shaped inputs.

    Attributes:
        name: Short name of the family (the matrix's row).
        model: The vLLM model class, as ``"module:Class"`` under
            `vllm.model_executor.models`.
        towers: The names `_mark_tower_model` wraps (attribute paths on the
            model), in construction order.
        build: Sets the towers (and what the encode reads) on the host.
        inputs: The `*_input` dict the model's process method receives.
        process: The model's method that runs the towers.
        full_tower: The released checkpoint whose tower "full" reproduces.
        cpu_skip: Why the family cannot be built or run on the CPU, if so.
        slow_on_cpu: Whether the tiny CPU run takes more than a few seconds.

    """

    name: str
    model: str
    towers: tuple[str, ...]
    build: Callable[[nn.Module, str], None]
    inputs: Callable[[nn.Module, str, torch.Generator], dict[str, Any]]
    process: str = "_process_image_input"
    full_tower: str = ""
    cpu_skip: str | None = None
    slow_on_cpu: bool = False
    notes: str = ""

    def model_class(self) -> type[nn.Module]:
        module, cls = self.model.split(":")
        return getattr(
            importlib.import_module(f"vllm.model_executor.models.{module}"), cls
        )


# -- vLLM state --------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm_context(backend: str) -> Iterator[Any]:
    """A VllmConfig context with tensor and pipeline parallel size 1.

    `backend` is "gloo" on the CPU and "nccl" on a GPU.
    """
    from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
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
            backend=backend,
        )
        initialize_model_parallel(1, 1)
        try:
            yield config
        finally:
            cleanup_dist_env_and_memory()


# -- building and encoding ---------------------------------------------------


def bare_host(cls: type[nn.Module]) -> nn.Module:
    """An instance of a model class without its __init__ (no language model)."""
    host = cls.__new__(cls)
    nn.Module.__init__(host)
    host.use_data_parallel = False
    from vllm.config import get_current_vllm_config

    host.vllm_config = get_current_vllm_config()
    return host


def build_family(
    family: TowerFamily,
    size: str,
    device: torch.device,
    dtype: torch.dtype,
    seed: int = 0,
) -> nn.Module:
    """The family's host with its towers built on `device` in `dtype`.

    Built as vLLM's loader builds a model (default device and dtype set),
    then every parameter is drawn from N(0, 0.02) with a seeded generator:
    the same weights for the same seed, resident or streamed.
    """
    host = bare_host(family.model_class())
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            family.build(host, size)
    finally:
        torch.set_default_dtype(default_dtype)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for tower in towers_of(family, host).values():
            for param in tower.parameters():
                if param.is_floating_point():
                    param.normal_(std=0.02, generator=generator)
    if device.type == "cpu":
        use_plain_cpu_linear(host)
    return host


def towers_of(family: TowerFamily, host: nn.Module) -> dict[str, nn.Module]:
    """The modules `_mark_tower_model` hands to the offloader, by name."""
    return {name: host.get_submodule(name) for name in family.towers}


def use_plain_cpu_linear(host: nn.Module) -> None:
    """Let vLLM's linear layers run on the CPU without its compiled kernels.

    vLLM's CPU GEMM dispatch is set up after loading and needs its compiled
    ops; plain `F.linear` is what it falls back to without them.
    """
    import torch.nn.functional as F
    from vllm.model_executor.layers.linear import LinearBase

    for module in host.modules():
        if isinstance(module, LinearBase):
            module.cpu_linear = F.linear


def make_inputs(
    family: TowerFamily, host: nn.Module, size: str, device: torch.device, seed: int = 1
) -> dict[str, Any]:
    generator = torch.Generator(device=device).manual_seed(seed)
    return family.inputs(host, size, generator)


def encode(family: TowerFamily, host: nn.Module, inputs: dict[str, Any]) -> list[torch.Tensor]:
    """Run the model's own process method; the output as a flat tensor list."""
    method = getattr(type(host), family.process)
    with torch.inference_mode():
        out = method(host, inputs)
    return flatten(out)


def flatten(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    return [t for item in out for t in flatten(item)]


def max_abs_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return math.inf
    return max(
        ((x.float() - y.float()).abs().max().item() for x, y in zip(a, b) if x.numel()),
        default=0.0,
    )


def bit_identical(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)
        for x, y in zip(a, b)
    )


def device_properties(host: nn.Module, towers: dict[str, nn.Module]) -> dict[str, str]:
    """The `device` properties the host and its towers report, by name."""
    found = {}
    for name, module in [("<model>", host), *towers.items()]:
        if isinstance(getattr(type(module), "device", None), property):
            try:
                found[name] = str(module.device)
            except Exception as e:  # noqa: BLE001 - recorded, not hidden
                found[name] = f"error: {type(e).__name__}: {e}"
    return found


# -- input helpers -----------------------------------------------------------


def _dtype() -> torch.dtype:
    return torch.get_default_dtype()


def randn(generator: torch.Generator, *shape: int, dtype: torch.dtype | None = None):
    return torch.randn(
        *shape, generator=generator, device=generator.device, dtype=dtype or torch.float32
    )


def _size(size: str, tiny: Any, full: Any) -> Any:
    return tiny if size == TINY else full


# -- Qwen2-VL / Qwen2.5-VL / Qwen3-VL style towers (patches + grid_thw) -----


def grid_inputs(
    grids: list[list[int]], patch_dim: int, generator: torch.Generator, dtype: torch.dtype
) -> dict[str, Any]:
    patches = sum(t * h * w for t, h, w in grids)
    return {
        "type": "pixel_values",
        "pixel_values": randn(generator, patches, patch_dim).to(dtype),
        # mm kwargs' grids stay on the host (`keep_on_cpu` or `.tolist()`).
        "image_grid_thw": torch.tensor(grids, dtype=torch.long),
    }


# Real image shapes for the "full" runs: a 1036x1484 image at patch 14 with
# merge 2 (74x106 patches, 1961 tokens) and a smaller second image.
GRIDS_FULL_14 = [[1, 74, 106], [1, 36, 52]]
GRIDS_FULL_16 = [[1, 64, 92], [1, 32, 44]]
GRIDS_TINY = [[1, 8, 12], [1, 4, 4]]


def _qwen_grid_inputs(patch_full: int, temporal: int = 2):
    def inputs(host: nn.Module, size: str, generator: torch.Generator):
        patch = _size(size, 4, patch_full)
        grids = _size(size, GRIDS_TINY, GRIDS_FULL_14 if patch_full == 14 else GRIDS_FULL_16)
        return grid_inputs(grids, 3 * temporal * patch * patch, generator, _dtype())

    return inputs


def _build_qwen2_vl(host: nn.Module, size: str) -> None:
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from vllm.model_executor.layers.fusion.mm_input_norm import build_mm_input_norm
    from vllm.model_executor.models.qwen2_vl import Qwen2VisionTransformer

    config = _size(
        size,
        Qwen2VLVisionConfig(
            depth=3, embed_dim=64, hidden_size=96, num_heads=4, mlp_ratio=2,
            patch_size=4, spatial_merge_size=2, temporal_patch_size=2,
        ),
        # Qwen2-VL-7B-Instruct: depth 32, width 1280, out 3584.
        Qwen2VLVisionConfig(
            depth=32, embed_dim=1280, hidden_size=3584, num_heads=16, mlp_ratio=4,
            patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
        ),
    )
    host.visual = Qwen2VisionTransformer(
        config, norm_eps=1e-6, quant_config=None,
        input_norm=build_mm_input_norm(None), prefix="visual",
    )


def _build_qwen2_5_vl(host: nn.Module, size: str) -> None:
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import (
        Qwen2_5_VLVisionConfig,
    )
    from vllm.model_executor.layers.fusion.mm_input_norm import build_mm_input_norm
    from vllm.model_executor.models.qwen2_5_vl import Qwen2_5_VisionTransformer

    config = _size(
        size,
        Qwen2_5_VLVisionConfig(
            depth=4, hidden_size=64, intermediate_size=128, num_heads=4,
            out_hidden_size=96, patch_size=4, spatial_merge_size=2,
            temporal_patch_size=2, window_size=32, fullatt_block_indexes=[1, 3],
            hidden_act="silu",
        ),
        # Qwen2.5-VL-7B-Instruct.
        Qwen2_5_VLVisionConfig(
            depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
            out_hidden_size=3584, patch_size=14, spatial_merge_size=2,
            temporal_patch_size=2, window_size=112,
            fullatt_block_indexes=[7, 15, 23, 31], hidden_act="silu",
        ),
    )
    host.visual = Qwen2_5_VisionTransformer(
        vision_config=config, norm_eps=1e-6, quant_config=None,
        input_norm=build_mm_input_norm(None), prefix="visual",
    )


def _qwen3_vision_config(size: str):
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig

    return _size(
        size,
        Qwen3VLVisionConfig(
            depth=4, hidden_size=64, num_heads=4, intermediate_size=128,
            out_hidden_size=96, deepstack_visual_indexes=[1, 2],
            num_position_embeddings=64, patch_size=4, temporal_patch_size=2,
            spatial_merge_size=2, in_channels=3,
        ),
        # Qwen3-VL-8B-Instruct.
        Qwen3VLVisionConfig(
            depth=27, hidden_size=1152, num_heads=16, intermediate_size=4304,
            out_hidden_size=4096, deepstack_visual_indexes=[8, 16, 24],
            num_position_embeddings=2304, patch_size=16, temporal_patch_size=2,
            spatial_merge_size=2, in_channels=3, hidden_act="gelu_pytorch_tanh",
        ),
    )


def _build_qwen3_vl(host: nn.Module, size: str) -> None:
    from vllm.model_executor.layers.fusion.mm_input_norm import build_mm_input_norm
    from vllm.model_executor.models.qwen3_vl import Qwen3_VisionTransformer

    host.visual = Qwen3_VisionTransformer(
        _qwen3_vision_config(size), norm_eps=1e-6, quant_config=None,
        input_norm=build_mm_input_norm(None), prefix="visual",
    )


FAMILIES: list[TowerFamily] = [
    TowerFamily(
        "qwen2_vl", "qwen2_vl:Qwen2VLForConditionalGeneration", ("visual",),
        _build_qwen2_vl, _qwen_grid_inputs(14), full_tower="Qwen/Qwen2-VL-7B-Instruct",
    ),
    TowerFamily(
        "qwen2_5_vl", "qwen2_5_vl:Qwen2_5_VLForConditionalGeneration", ("visual",),
        _build_qwen2_5_vl, _qwen_grid_inputs(14),
        full_tower="Qwen/Qwen2.5-VL-7B-Instruct",
    ),
    TowerFamily(
        "qwen3_vl", "qwen3_vl:Qwen3VLForConditionalGeneration", ("visual",),
        _build_qwen3_vl, _qwen_grid_inputs(16), full_tower="Qwen/Qwen3-VL-8B-Instruct",
    ),
]


def family(name: str) -> TowerFamily:
    for f in FAMILIES:
        if f.name == name:
            return f
    raise KeyError(name)
