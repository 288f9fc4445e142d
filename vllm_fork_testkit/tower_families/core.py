"""What every family shares: the registry entry, vLLM state, building, encoding, comparing, input helpers."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
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
        differs: Why the streamed output is known not to be bit-identical
            (a patch issue, with the evidence); the tests expect the
            difference until the patch is fixed (strict xfail).
        works_around: A vLLM bug outside the towers' streaming that the
            build works around to reach an encode (what and why); the
            matrix's row carries it.

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
    needs: tuple[str, ...] = ()
    differs: str = ""
    works_around: str = ""

    def missing(self) -> str | None:
        """Why this family cannot be built here (a module it imports), if so."""
        for module in self.needs:
            if importlib.util.find_spec(module) is None:
                return f"{self.model.split(':')[0]}.py imports {module!r} at module level and it is not installed here"
        return None

    def model_class(self) -> type[nn.Module]:
        module, cls = self.model.split(":")
        return getattr(importlib.import_module(f"vllm.model_executor.models.{module}"), cls)


# -- vLLM state ----------------------------------------------------------------


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


# -- building, encoding, comparing ---------------------------------------------


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
    with loader_defaults(device, dtype):
        family.build(host, size)
    host.eval()  # as vLLM's loader returns the model (BLIP-2's Q-Former has dropout)
    seed_weights(towers_of(family, host).values(), device, seed)
    if device.type == "cpu":
        use_plain_cpu_linear(host)
    return host


def build_on_meta(family: TowerFamily, size: str, dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    """The family's host with its towers built on the meta device: shapes, no memory.

    Checks a size's configs (the GPU matrix's "full" ones included) on any
    machine, in seconds.
    """
    host = bare_host(family.model_class())
    with loader_defaults(torch.device("meta"), dtype):
        family.build(host, size)
    return host


@contextlib.contextmanager
def loader_defaults(device: torch.device | str, dtype: torch.dtype) -> Iterator[None]:
    """What vLLM's loader sets while it builds a model: the default device and dtype."""
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(default_dtype)


def seed_weights(modules: Iterable[nn.Module], device: torch.device | str, seed: int = 0) -> None:
    """Draw every floating parameter of `modules` from N(0, 0.02) with a seeded generator:
    the same weights for the same seed, resident or streamed."""
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for module in modules:
            for param in module.parameters():
                if param.is_floating_point():
                    param.normal_(std=0.02, generator=generator)


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
    family: TowerFamily, host: nn.Module, size: str, device: torch.device, dtype: torch.dtype, seed: int = 1
) -> dict[str, Any]:
    """The family's inputs, every floating tensor in the model's `dtype`.

    vLLM casts every floating tensor its processors return to the model dtype
    (`InputProcessingContext._postprocess_output`), so the towers never see
    float32 pixels in a bf16 model; several model classes rely on it (Kimi-VL,
    Step3-VL and Llama 4 feed the pixels straight to a bf16 linear layer).
    """
    generator = torch.Generator(device=device).manual_seed(seed)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # what `current_dtype()` answers in the family's inputs
    try:
        return to_model_dtype(family.inputs(host, size, generator), dtype)
    finally:
        torch.set_default_dtype(default_dtype)


def to_model_dtype(inputs: Any, dtype: torch.dtype) -> Any:
    """`inputs` with every floating tensor cast to `dtype`, as vLLM casts processor outputs."""
    from vllm.utils.tensor_schema import TensorSchema

    if isinstance(inputs, torch.Tensor):
        return inputs.to(dtype) if inputs.is_floating_point() else inputs
    if isinstance(inputs, TensorSchema):
        for key, value in vars(inputs).items():
            setattr(inputs, key, to_model_dtype(value, dtype))
        return inputs
    if isinstance(inputs, dict):
        return {key: to_model_dtype(value, dtype) for key, value in inputs.items()}
    if isinstance(inputs, (list, tuple)):
        return type(inputs)(to_model_dtype(value, dtype) for value in inputs)
    return inputs


def encode(family: TowerFamily, host: nn.Module, inputs: dict[str, Any]) -> list[torch.Tensor]:
    """Run the model's own process method; the output as a flat tensor list."""
    method = getattr(type(host), family.process)
    with torch.inference_mode():
        # `embed_multimodal` takes the mm kwargs; `_process_*` a parsed input.
        out = method(host, **inputs) if family.process == "embed_multimodal" else method(host, inputs)
    return flatten(out)


def flatten(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    return [t for item in out for t in flatten(item)]


def streamable_parameters(module: nn.Module) -> list[nn.Parameter]:
    """`module`'s parameters but those the streamer keeps resident by design (the patch's own
    `resident_modules`: token-embedding tables)."""
    from vllm.model_executor.offloader.tower_units import resident_modules

    kept = {id(p) for name in resident_modules(module) for p in module.get_submodule(name).parameters()}
    return [p for p in module.parameters() if id(p) not in kept]


def max_abs_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return math.inf
    return max(
        ((x.float() - y.float()).abs().max().item() for x, y in zip(a, b) if x.numel()),
        default=0.0,
    )


def bit_identical(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(a, b)
    )


class NotBitIdentical(AssertionError):
    """The streamed output differs from the resident one."""


def check_bit_identical(streamed: list[torch.Tensor], resident: list[torch.Tensor]) -> None:
    if not bit_identical(streamed, resident):
        raise NotBitIdentical(
            f"streamed output differs from resident: max abs diff {max_abs_diff(streamed, resident):.3g}"
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


# -- input helpers and shared tower configs ------------------------------------


def current_dtype() -> torch.dtype:
    return torch.get_default_dtype()


def randn(generator: torch.Generator, *shape: int, dtype: torch.dtype | None = None):
    return torch.randn(*shape, generator=generator, device=generator.device, dtype=dtype or torch.float32)


def by_size(size: str, tiny: Any, full: Any) -> Any:
    return tiny if size == TINY else full


def remote_config(**attrs: Any):
    """A config for a family whose transformers config is remote code.

    vLLM reads these as attributes of the checkpoint's config; a plain
    `PretrainedConfig` carrying the released model's values is what
    `AutoConfig(trust_remote_code=True)` gives it.
    """
    from transformers import PretrainedConfig

    config = PretrainedConfig()
    for key, value in attrs.items():
        setattr(config, key, value)
    return config


def model_config_view(hf_config: Any, dtype: torch.dtype):
    """The current VllmConfig as a model class sees it, with `hf_config` set.

    Classes such as `WhisperEncoder` read their config from
    `vllm_config.model_config`, which the matrix's context leaves unset.
    """
    from types import SimpleNamespace

    from vllm.config import get_current_vllm_config

    vllm_config = get_current_vllm_config()
    return SimpleNamespace(
        model_config=SimpleNamespace(hf_config=hf_config, dtype=dtype),
        cache_config=vllm_config.cache_config,
        quant_config=None,
    )


def random_tiles(generator, count: int, image_size: int) -> torch.Tensor:
    return randn(generator, count, 3, image_size, image_size).to(current_dtype())


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


def qwen_grid_inputs(patch_full: int, temporal: int = 2):
    def inputs(host: nn.Module, size: str, generator: torch.Generator):
        patch = by_size(size, 4, patch_full)
        grids = by_size(size, GRIDS_TINY, GRIDS_FULL_14 if patch_full == 14 else GRIDS_FULL_16)
        return grid_inputs(grids, 3 * temporal * patch * patch, generator, current_dtype())

    return inputs


# SigLIP-so400m/14 (27 layers, width 1152): MiniCPM-V 2.6/4.5, Gemma 3, ...
SO400M_14 = {
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "patch_size": 14,
}


# The tiny size's transformer blocks, in the names of transformers' configs; a family's
# tiny config is these with what it changes or adds (`{**TINY_LAYERS, "num_hidden_layers": 2}`).
TINY_LAYERS = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
}
# ... and a ViT's patches: 32 x 32 images of 4 x 4 patches.
TINY_VIT = {**TINY_LAYERS, "image_size": 32, "patch_size": 4}
# Qwen-VL-style vision configs' names (depth, num_heads): four such blocks, projected to
# the tiny decoder's width (96).
TINY_DEPTH_VIT = {
    "depth": 4,
    "hidden_size": 64,
    "num_heads": 4,
    "intermediate_size": 128,
    "out_hidden_size": 96,
    "patch_size": 4,
}
