"""The multimodal towers of vLLM 0.33.0, built and encoded the way their models do.

One entry per model family whose tower can be built from a config with random
weights. Each entry builds the children that the model class creates inside
`_mark_tower_model` (the same classes, prefixes and `quant_config=None`) from a
transformers (or vLLM) config, at one of two sizes:

- ``"tiny"``: a few small layers, for the CPU (tests/patches/test_tower_matrix_cpu.py);
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
import importlib.util
import math
import socket
from collections.abc import Callable, Iterator
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

    def missing(self) -> str | None:
        """Why this family cannot be built here (a module it imports), if so."""
        for module in self.needs:
            if importlib.util.find_spec(module) is None:
                return f"{self.model.split(':')[0]}.py imports {module!r} at module level and it is not installed here"
        return None

    def model_class(self) -> type[nn.Module]:
        module, cls = self.model.split(":")
        return getattr(importlib.import_module(f"vllm.model_executor.models.{module}"), cls)


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
    host.eval()  # as vLLM's loader returns the model (BLIP-2's Q-Former has dropout)
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


def make_inputs(family: TowerFamily, host: nn.Module, size: str, device: torch.device, seed: int = 1) -> dict[str, Any]:
    generator = torch.Generator(device=device).manual_seed(seed)
    return family.inputs(host, size, generator)


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


# -- input helpers -----------------------------------------------------------


def _dtype() -> torch.dtype:
    return torch.get_default_dtype()


def randn(generator: torch.Generator, *shape: int, dtype: torch.dtype | None = None):
    return torch.randn(*shape, generator=generator, device=generator.device, dtype=dtype or torch.float32)


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
            depth=3,
            embed_dim=64,
            hidden_size=96,
            num_heads=4,
            mlp_ratio=2,
            patch_size=4,
            spatial_merge_size=2,
            temporal_patch_size=2,
        ),
        # Qwen2-VL-7B-Instruct: depth 32, width 1280, out 3584.
        Qwen2VLVisionConfig(
            depth=32,
            embed_dim=1280,
            hidden_size=3584,
            num_heads=16,
            mlp_ratio=4,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
        ),
    )
    host.visual = Qwen2VisionTransformer(
        config,
        norm_eps=1e-6,
        quant_config=None,
        input_norm=build_mm_input_norm(None),
        prefix="visual",
    )


def _qwen2_5_vision_config(size: str):
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import (
        Qwen2_5_VLVisionConfig,
    )

    return _size(
        size,
        Qwen2_5_VLVisionConfig(
            depth=4,
            hidden_size=64,
            intermediate_size=128,
            num_heads=4,
            out_hidden_size=96,
            patch_size=4,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=32,
            fullatt_block_indexes=[1, 3],
            hidden_act="silu",
        ),
        # Qwen2.5-VL-7B-Instruct (Qwen2.5-Omni-7B's tower has the same shape).
        Qwen2_5_VLVisionConfig(
            depth=32,
            hidden_size=1280,
            intermediate_size=3420,
            num_heads=16,
            out_hidden_size=3584,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=112,
            fullatt_block_indexes=[7, 15, 23, 31],
            hidden_act="silu",
        ),
    )


def _build_qwen2_5_vl(host: nn.Module, size: str) -> None:
    from vllm.model_executor.layers.fusion.mm_input_norm import build_mm_input_norm
    from vllm.model_executor.models.qwen2_5_vl import Qwen2_5_VisionTransformer

    host.visual = Qwen2_5_VisionTransformer(
        vision_config=_qwen2_5_vision_config(size),
        norm_eps=1e-6,
        quant_config=None,
        input_norm=build_mm_input_norm(None),
        prefix="visual",
    )


def _qwen3_vision_config(size: str):
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig

    return _size(
        size,
        Qwen3VLVisionConfig(
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
        ),
        # Qwen3-VL-8B-Instruct.
        Qwen3VLVisionConfig(
            depth=27,
            hidden_size=1152,
            num_heads=16,
            intermediate_size=4304,
            out_hidden_size=4096,
            deepstack_visual_indexes=[8, 16, 24],
            num_position_embeddings=2304,
            patch_size=16,
            temporal_patch_size=2,
            spatial_merge_size=2,
            in_channels=3,
            hidden_act="gelu_pytorch_tanh",
        ),
    )


def _build_qwen3_vl(host: nn.Module, size: str) -> None:
    from vllm.model_executor.layers.fusion.mm_input_norm import build_mm_input_norm
    from vllm.model_executor.models.qwen3_vl import Qwen3_VisionTransformer

    host.visual = Qwen3_VisionTransformer(
        _qwen3_vision_config(size),
        norm_eps=1e-6,
        quant_config=None,
        input_norm=build_mm_input_norm(None),
        prefix="visual",
    )


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


# -- Qwen3-Omni: audio and vision towers --------------------------------------


def _qwen3_omni_vision_config(size: str):
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import (
        Qwen3OmniMoeVisionEncoderConfig,
    )

    if size == TINY:
        config = Qwen3OmniMoeVisionEncoderConfig(
            depth=4,
            hidden_size=64,
            num_heads=4,
            intermediate_size=128,
            out_hidden_size=96,
            deepstack_visual_indexes=[1, 2],
            num_position_embeddings=64,
            patch_size=4,
        )
    else:  # Qwen3-Omni-30B-A3B
        config = Qwen3OmniMoeVisionEncoderConfig(
            depth=27,
            hidden_size=1152,
            num_heads=16,
            intermediate_size=4304,
            out_hidden_size=2048,
            deepstack_visual_indexes=[8, 16, 24],
            num_position_embeddings=2304,
            patch_size=16,
        )
    config.image_size = 768
    config.apply_vit_abs_pos_embed = True
    return config


def _build_qwen3_omni(host: nn.Module, size: str) -> None:
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import (
        Qwen3OmniMoeAudioEncoderConfig,
    )
    from vllm.model_executor.models.qwen3_omni_moe_thinker import (
        Qwen3Omni_VisionTransformer,
        Qwen3OmniMoeAudioEncoder,
    )

    audio = _size(
        size,
        Qwen3OmniMoeAudioEncoderConfig(
            num_mel_bins=32,
            encoder_layers=3,
            encoder_attention_heads=4,
            encoder_ffn_dim=128,
            d_model=64,
            output_dim=96,
            n_window=50,
            n_window_infer=400,
            conv_chunksize=500,
            downsample_hidden_size=32,
        ),
        # Qwen3-Omni-30B-A3B's audio encoder.
        Qwen3OmniMoeAudioEncoderConfig(
            num_mel_bins=128,
            encoder_layers=32,
            encoder_attention_heads=20,
            encoder_ffn_dim=5120,
            d_model=1280,
            output_dim=2048,
            n_window=50,
            n_window_infer=800,
            conv_chunksize=500,
            downsample_hidden_size=480,
        ),
    )
    host.audio_tower = Qwen3OmniMoeAudioEncoder(audio, prefix="audio_tower")
    host.visual = Qwen3Omni_VisionTransformer(
        vision_config=_qwen3_omni_vision_config(size),
        norm_eps=1e-6,
        quant_config=None,
        prefix="visual",
    )


def _audio_feature_inputs(mel_bins: int, lengths: list[int], generator):
    return {
        "type": "audio_features",
        "input_features": randn(generator, mel_bins, sum(lengths)).to(_dtype()),
        "audio_feature_lengths": torch.tensor(lengths, dtype=torch.long),
        "feature_attention_mask": None,
    }


def _qwen3_omni_audio_inputs(host: nn.Module, size: str, generator):
    # 100 mel frames per second: 30 s and 12 s of audio.
    return _audio_feature_inputs(_size(size, 32, 128), _size(size, [300, 120], [3000, 1200]), generator)


# -- GLM-4.1V, dots.ocr, ERNIE-4.5-VL, PaddleOCR-VL, Keye ---------------------


def _build_glm4_1v(host: nn.Module, size: str) -> None:
    from transformers.models.glm4v.configuration_glm4v import (
        Glm4vTextConfig,
        Glm4vVisionConfig,
    )
    from vllm.model_executor.layers.fusion.mm_input_norm import build_mm_input_norm
    from vllm.model_executor.models.glm4_1v import Glm4vVisionTransformer

    vision = _size(
        size,
        Glm4vVisionConfig(
            depth=3,
            hidden_size=64,
            num_heads=4,
            image_size=32,
            patch_size=4,
            out_hidden_size=96,
            intermediate_size=128,
        ),
        Glm4vVisionConfig(),  # the defaults are GLM-4.1V-9B's tower
    )
    text = _size(size, Glm4vTextConfig(hidden_size=96), Glm4vTextConfig())
    host.visual = Glm4vVisionTransformer(
        text,
        vision,
        norm_eps=1e-5,
        quant_config=None,
        input_norm=build_mm_input_norm(None),
        prefix="visual",
    )


def _build_dots_ocr(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.dots_ocr import DotsVisionTransformer
    from vllm.transformers_utils.configs.dotsocr import DotsVisionConfig

    config = _size(
        size,
        DotsVisionConfig(
            embed_dim=64,
            hidden_size=96,
            intermediate_size=128,
            num_hidden_layers=3,
            num_attention_heads=4,
            patch_size=4,
        ),
        DotsVisionConfig(),  # the defaults are dots.ocr's tower (1.2B)
    )
    host.config = remote_config(hidden_size=config.hidden_size)
    host.vision_tower = DotsVisionTransformer(config, quant_config=None, prefix="vision_tower")


def _dots_inputs(host: nn.Module, size: str, generator):
    patch = _size(size, 4, 14)
    grids = _size(size, GRIDS_TINY, GRIDS_FULL_14)
    return grid_inputs(grids, 3 * patch * patch, generator, _dtype())


def _ernie_config(size: str):
    vision = _size(
        size,
        remote_config(
            depth=3,
            embed_dim=64,
            hidden_size=64,
            num_heads=4,
            mlp_ratio=2,
            patch_size=4,
            spatial_merge_size=2,
            in_channels=3,
            hidden_act="quick_gelu",
        ),
        # ERNIE-4.5-VL-28B-A3B's vision tower.
        remote_config(
            depth=32,
            embed_dim=1280,
            hidden_size=1280,
            num_heads=16,
            mlp_ratio=4,
            patch_size=14,
            spatial_merge_size=2,
            in_channels=3,
            hidden_act="quick_gelu",
        ),
    )
    return remote_config(
        vision_config=vision,
        pixel_hidden_size=vision.hidden_size,
        hidden_size=_size(size, 96, 2560),
        spatial_conv_size=2,
        temporal_conv_size=2,
        use_temporal_conv=True,
        rms_norm_eps=1e-5,
    )


def _build_ernie45_vl(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.ernie45_vl import (
        Ernie4_5_VisionTransformer,
        VariableResolutionResamplerModel,
    )

    config = host.config = _ernie_config(size)
    host.vision_model = Ernie4_5_VisionTransformer(
        config.vision_config, norm_eps=1e-5, quant_config=None, prefix="vision_model"
    )
    host.resampler_model = VariableResolutionResamplerModel(
        config.pixel_hidden_size,
        config.hidden_size,
        config.spatial_conv_size,
        config.temporal_conv_size,
        config=config,
        prefix="resampler_model",
    )


def _siglip_navit_config(size: str, **extra: Any):
    return _size(
        size,
        remote_config(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_channels=3,
            image_size=32,
            patch_size=4,
            layer_norm_eps=1e-6,
            hidden_act="gelu_pytorch_tanh",
            spatial_merge_size=2,
            attention_dropout=0.0,
            **extra,
        ),
        # SigLIP-so400m NaViT (PaddleOCR-VL-0.9B, Keye-VL-8B).
        remote_config(
            hidden_size=1152,
            intermediate_size=4304,
            num_hidden_layers=27,
            num_attention_heads=16,
            num_channels=3,
            image_size=384,
            patch_size=14,
            layer_norm_eps=1e-6,
            hidden_act="gelu_pytorch_tanh",
            spatial_merge_size=2,
            attention_dropout=0.0,
            **extra,
        ),
    )


def _build_paddleocr_vl(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.paddleocr_vl import Projector, SiglipVisionModel

    vision = _siglip_navit_config(size)
    config = host.config = remote_config(vision_config=vision, hidden_size=_size(size, 96, 1024))
    config.text_config = config
    host.visual = SiglipVisionModel(config=vision, quant_config=None, prefix="visual")
    host.mlp_AR = Projector(config, vision)


def _patch_image_inputs(schema: str | None):
    """Inputs as (patches, 3, P, P) with a grid (PaddleOCR-VL, Keye)."""

    def inputs(host: nn.Module, size: str, generator):
        patch = _size(size, 4, 14)
        grids = _size(size, GRIDS_TINY, GRIDS_FULL_14)
        flat = grid_inputs(grids, 3 * patch * patch, generator, _dtype())
        flat["pixel_values"] = flat["pixel_values"].view(-1, 3, patch, patch)
        if schema is None:
            return flat
        module, cls = schema.split(":")
        mod = importlib.import_module(f"vllm.model_executor.models.{module}")
        return getattr(mod, cls)(**flat, resolve_bindings={"patch_size": patch} if module == "paddleocr_vl" else None)

    return inputs


def _build_keye(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.keye import KeyeSiglipVisionModel, Projector

    vision = _siglip_navit_config(size)
    text = remote_config(hidden_size=_size(size, 96, 4096))
    host.config = remote_config(vision_config=vision, text_config=text)
    host.visual = KeyeSiglipVisionModel(vision, quant_config=None, prefix="visual")
    host.mlp_AR = Projector(text, vision, None, "mlp_AR")


# -- InternVL, Gemma 3, Llama 4, Mistral 3, Idefics3 (fixed-size tiles) -------


def _tiles(generator, count: int, image_size: int) -> torch.Tensor:
    return randn(generator, count, 3, image_size, image_size).to(_dtype())


def _build_internvl(host: nn.Module, size: str) -> None:
    vision = _size(
        size,
        remote_config(
            hidden_size=64,
            num_attention_heads=4,
            intermediate_size=128,
            num_hidden_layers=3,
            qk_normalization=False,
            norm_type="layer_norm",
            layer_norm_eps=1e-6,
            hidden_act="gelu",
            image_size=32,
            patch_size=4,
            num_channels=3,
            qkv_bias=True,
            drop_path_rate=0.0,
            initializer_factor=1.0,
        ),
        # InternViT-300M-448px-V2.5 (InternVL3-8B).
        remote_config(
            hidden_size=1024,
            num_attention_heads=16,
            intermediate_size=4096,
            num_hidden_layers=24,
            qk_normalization=False,
            norm_type="layer_norm",
            layer_norm_eps=1e-6,
            hidden_act="gelu",
            image_size=448,
            patch_size=14,
            num_channels=3,
            qkv_bias=True,
            drop_path_rate=0.0,
            initializer_factor=1.0,
        ),
    )
    config = host.config = remote_config(
        vision_config=vision,
        text_config=remote_config(hidden_size=_size(size, 96, 3584)),
        select_layer=-1,
        downsample_ratio=0.5,
        ps_version="v2",
        force_image_size=vision.image_size,
    )
    # The model's own __init__ steps for the tower (InternVLChatModel).
    host.downsample_ratio = config.downsample_ratio
    host.ps_version = config.ps_version
    host.patch_size = vision.patch_size
    host.vision_model = host._init_vision_model(config, None, prefix="vision_model")
    host.mlp1 = host._init_mlp1(config)


def _internvl_inputs(host: nn.Module, size: str, generator):
    # A 12-tile image (dynamic tiling, thumbnail included) and a 1-tile one.
    tiles = _size(size, [3, 1], [7, 1])
    return {
        "type": "pixel_values",
        "pixel_values_flat": _tiles(generator, sum(tiles), host.config.vision_config.image_size),
        "num_patches": torch.tensor(tiles),
    }


def _build_gemma3(host: nn.Module, size: str) -> None:
    from transformers import Gemma3Config
    from vllm.model_executor.models.gemma3_mm import Gemma3MultiModalProjector
    from vllm.model_executor.models.siglip import SiglipVisionModel

    vision = _size(
        size,
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "image_size": 32,
            "patch_size": 4,
        },
        # SigLIP-so400m at 896 (Gemma 3 4B/12B/27B).
        {
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_hidden_layers": 27,
            "num_attention_heads": 16,
            "image_size": 896,
            "patch_size": 14,
        },
    )
    config = host.config = Gemma3Config(
        vision_config={**vision, "vision_use_head": False},
        text_config={"hidden_size": _size(size, 96, 2560)},
        mm_tokens_per_image=_size(size, 16, 256),
    )
    host.vision_tower = SiglipVisionModel(config.vision_config, None, prefix="vision_tower")
    host.multi_modal_projector = Gemma3MultiModalProjector(config)


def _gemma3_inputs(host: nn.Module, size: str, generator):
    crops = _size(size, [2, 1], [3, 1])  # pan-and-scan crops + the image
    return {
        "type": "pixel_values",
        "pixel_values": _tiles(generator, sum(crops), host.config.vision_config.image_size),
        "num_patches": torch.tensor(crops),
    }


def _build_llama4(host: nn.Module, size: str) -> None:
    from transformers import Llama4Config
    from vllm.model_executor.models.mllama4 import (
        Llama4MultiModalProjector,
        Llama4VisionModel,
    )

    vision = _size(
        size,
        # The pixel-shuffle MLP takes 4x hidden: intermediate = 4 * hidden.
        {
            "hidden_size": 64,
            "intermediate_size": 256,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "image_size": 32,
            "patch_size": 4,
            "pixel_shuffle_ratio": 0.5,
            "projector_input_dim": 96,
            "projector_output_dim": 96,
            "vision_output_dim": 96,
            "rope_theta": 10000,
        },
        # Llama 4 Scout / Maverick.
        {
            "hidden_size": 1408,
            "intermediate_size": 5632,
            "num_hidden_layers": 34,
            "num_attention_heads": 16,
            "image_size": 336,
            "patch_size": 14,
            "pixel_shuffle_ratio": 0.5,
            "projector_input_dim": 4096,
            "projector_output_dim": 4096,
            "vision_output_dim": 4096,
            "rope_theta": 10000,
        },
    )
    config = host.config = Llama4Config(vision_config=vision, text_config={"hidden_size": _size(size, 96, 5120)})
    host.vision_model = Llama4VisionModel(config=config.vision_config, quant_config=None, prefix="vision_model")
    host.multi_modal_projector = Llama4MultiModalProjector(
        config=config, quant_config=None, prefix="multi_modal_projector"
    )


def _llama4_inputs(host: nn.Module, size: str, generator):
    chunks = _size(size, [3, 1], [5, 1])  # 2x2 tiles + global view, and one tile
    return {
        "type": "pixel_values",
        "pixel_values": _tiles(generator, sum(chunks), host.config.vision_config.image_size),
        "patches_per_image": torch.tensor(chunks),
        "aspect_ratios": torch.tensor([[2, 2], [1, 1]]),
    }


def _build_mistral3(host: nn.Module, size: str) -> None:
    from transformers import Mistral3Config
    from vllm.model_executor.layers.fusion.mm_input_norm import build_mm_input_norm
    from vllm.model_executor.models.mistral3 import (
        Mistral3MultiModalProjector,
        init_vision_tower_for_mistral3,
    )

    vision = _size(
        size,
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "image_size": 64,
            "patch_size": 4,
            "head_dim": 16,
        },
        # Pixtral-ViT of Mistral-Small-3.1-24B.
        {
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "image_size": 1540,
            "patch_size": 14,
            "head_dim": 64,
        },
    )
    config = host.config = Mistral3Config(
        vision_config=vision,
        text_config={"hidden_size": _size(size, 96, 5120)},
        spatial_merge_size=2,
        multimodal_projector_bias=False,
    )
    host.vision_tower = init_vision_tower_for_mistral3(
        config,
        quant_config=None,
        input_norm=build_mm_input_norm(None),
        require_post_norm=False,
        prefix="vision_tower",
    )
    host.multi_modal_projector = Mistral3MultiModalProjector(
        vision_hidden_size=config.vision_config.hidden_size,
        text_hidden_size=config.text_config.hidden_size,
        projector_hidden_act=config.projector_hidden_act,
        spatial_merge_size=config.spatial_merge_size,
        patch_size=config.vision_config.patch_size,
        multimodal_projector_bias=config.multimodal_projector_bias,
        quant_config=None,
        prefix="multi_modal_projector",
    )


def _mistral3_inputs(host: nn.Module, size: str, generator):
    # Images at their own sizes (multiples of patch * merge), not tiles.
    sides = _size(size, [(32, 48), (16, 16)], [(1036, 1484), (504, 728)])
    return {
        "type": "pixel_values",
        "pixel_values": [randn(generator, 3, h, w).to(_dtype()) for h, w in sides],
    }


def _build_idefics3(host: nn.Module, size: str) -> None:
    from transformers import Idefics3Config
    from vllm.model_executor.models.idefics3 import (
        Idefics3Connector,
        Idefics3Model,
        Idefics3VisionTransformer,
    )

    vision = _size(
        size,
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "image_size": 32,
            "patch_size": 4,
        },
        # Idefics3-8B-Llama3 (SigLIP-so400m at 364).
        {
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_hidden_layers": 27,
            "num_attention_heads": 16,
            "image_size": 364,
            "patch_size": 14,
        },
    )
    config = Idefics3Config(
        vision_config=vision,
        text_config={"hidden_size": _size(size, 96, 4096)},
        scale_factor=2,
    )
    # The towers live inside Idefics3Model (`tower_targets`): build that
    # module without its __init__ (which builds the text model) and put
    # the towers where `image_pixels_to_features` finds them.
    inner = Idefics3Model.__new__(Idefics3Model)
    nn.Module.__init__(inner)
    inner.config = config
    inner.vision_model = Idefics3VisionTransformer(config.vision_config, quant_config=None, prefix="model.vision_model")
    inner.connector = Idefics3Connector(config, None, prefix="model.connector")
    host.config = config
    host.model = inner


def _idefics3_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.idefics3 import Idefics3ImagePixelInputs

    tiles = _size(size, [3, 1], [5, 1])  # 2x2 tiles + global image, one tile
    side = host.config.vision_config.image_size
    return Idefics3ImagePixelInputs(
        type="pixel_values",
        pixel_values=_tiles(generator, sum(tiles), side),
        pixel_attention_mask=torch.ones(sum(tiles), side, side, dtype=torch.bool, device=generator.device),
        num_patches=torch.tensor(tiles),
        resolve_bindings={"h": side, "w": side},
    )


# -- Qwen2-Audio (transformers' Whisper-style encoder) -------------------------


def _build_qwen2_audio(host: nn.Module, size: str) -> None:
    from transformers import Qwen2AudioConfig
    from transformers.models.qwen2_audio.modeling_qwen2_audio import Qwen2AudioEncoder
    from vllm.model_executor.models.qwen2_audio import Qwen2AudioMultiModalProjector

    audio = _size(
        size,
        {"d_model": 64, "encoder_layers": 3, "encoder_attention_heads": 4, "encoder_ffn_dim": 128, "num_mel_bins": 128},
        # Qwen2-Audio-7B: the Whisper-large-v3 encoder.
        {
            "d_model": 1280,
            "encoder_layers": 32,
            "encoder_attention_heads": 20,
            "encoder_ffn_dim": 5120,
            "num_mel_bins": 128,
        },
    )
    config = host.config = Qwen2AudioConfig(audio_config=audio, text_config={"hidden_size": _size(size, 96, 4096)})
    host.audio_tower = Qwen2AudioEncoder(config.audio_config)
    host.multi_modal_projector = Qwen2AudioMultiModalProjector(
        config.audio_config.d_model, config.text_config.hidden_size
    )


def _qwen2_audio_inputs(host: nn.Module, size: str, generator):
    # Two clips padded to Whisper's 30 s window: 30 s and 12 s.
    lengths = [3000, 1200]
    mask = torch.zeros(len(lengths), 3000, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    return {
        "type": "audio_features",
        "input_features": randn(generator, len(lengths), 128, 3000).to(_dtype()),
        "feature_attention_mask": mask.to(generator.device),
    }


# -- Kimi-VL (MoonViT, native resolution) -------------------------------------


def _build_kimi_vl(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.kimi_vl import KimiVLMultiModalProjector
    from vllm.model_executor.models.moonvit import MoonVitPretrainedModel
    from vllm.transformers_utils.configs.kimi_vl import KimiVLConfig
    from vllm.transformers_utils.configs.moonvit import MoonViTConfig

    vision = _size(
        size,
        MoonViTConfig(
            patch_size=4,
            init_pos_emb_height=16,
            init_pos_emb_width=16,
            num_attention_heads=4,
            num_hidden_layers=3,
            hidden_size=64,
            intermediate_size=128,
        ),
        MoonViTConfig(),  # the defaults are Kimi-VL-A3B's MoonViT
    )
    config = host.config = KimiVLConfig(vision_config=vision, text_config={"hidden_size": _size(size, 96, 2048)})
    host.vision_tower = MoonVitPretrainedModel(config.vision_config, prefix="vision_tower")
    host.multi_modal_projector = KimiVLMultiModalProjector(config=config, prefix="multi_modal_projector")


def _kimi_vl_inputs(host: nn.Module, size: str, generator):
    patch = _size(size, 4, 14)
    grids = _size(size, [[8, 12], [4, 4]], [[74, 106], [36, 52]])
    patches = sum(h * w for h, w in grids)
    return {
        "type": "pixel_values",
        "pixel_values": randn(generator, patches, 3, patch, patch).to(_dtype()),
        "image_grid_hws": torch.tensor(grids, dtype=torch.long),
    }


# -- Step3-VL (four tower children) ---------------------------------------------


def _build_step3_vl(host: nn.Module, size: str) -> None:
    from vllm.model_executor.layers.conv import Conv2dLayer
    from vllm.model_executor.models.step3_vl import Step3VisionTransformer
    from vllm.transformers_utils.configs.step3_vl import Step3VisionEncoderConfig

    vision = _size(
        size,
        Step3VisionEncoderConfig(
            hidden_size=64,
            intermediate_size=128,
            output_hidden_size=96,
            num_hidden_layers=3,
            num_attention_heads=4,
            image_size=32,
            patch_size=4,
        ),
        Step3VisionEncoderConfig(),  # the defaults are Step3's tower (63 layers)
    )
    config = host.config = remote_config(
        vision_config=vision,
        hidden_size=_size(size, 96, 7168),
        understand_projector_stride=2,
        projector_bias=True,
    )
    # As in Step3VLForConditionalGeneration.__init__.
    host.vision_model = Step3VisionTransformer(vision, None, prefix="vision_model")
    host.vit_downsampler = Conv2dLayer(
        vision.hidden_size,
        vision.output_hidden_size,
        kernel_size=2,
        stride=config.understand_projector_stride,
    )
    host.vit_downsampler2 = Conv2dLayer(
        vision.output_hidden_size,
        vision.output_hidden_size * 2,
        kernel_size=3,
        stride=2,
        padding=1,
    )
    host.vit_large_projector = nn.Linear(vision.output_hidden_size * 2, config.hidden_size, bias=config.projector_bias)


def _step3_vl_inputs(host: nn.Module, size: str, generator):
    # The global view at 728 and 504x504 crops: 4 crops for a large image.
    side, crop = _size(size, (32, 16), (728, 504))
    crops = [2, 0]
    return {
        "type": "pixel_values",
        "pixel_values": _tiles(generator, len(crops), side),
        "patch_pixel_values": _tiles(generator, sum(crops), crop),
        "num_patches": torch.tensor(crops),
    }


# -- MiniCPM-V (SigLIP NaViT + perceiver resampler) ----------------------------


def _siglip_config(size: str, full: dict[str, Any], **extra: Any):
    """A transformers SigLIP vision config: tiny, or `full` (a released tower)."""
    from transformers import SiglipVisionConfig

    dims = _size(
        size,
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "image_size": 32,
            "patch_size": 4,
        },
        full,
    )
    return SiglipVisionConfig(**dims, **extra)


# SigLIP-so400m/14 (27 layers, width 1152): MiniCPM-V 2.6/4.5, Gemma 3, ...
SO400M_14 = {
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "patch_size": 14,
}


def _minicpmv_builder(version: tuple[int, int], llm_hidden: int):
    def build(host: nn.Module, size: str) -> None:
        # The model's __init__ steps for the tower (MiniCPMVBaseModel).
        host.config = remote_config(
            version=".".join(map(str, version)),
            vision_config=_siglip_config(size, {**SO400M_14, "image_size": 980}),
            hidden_size=_size(size, 256, llm_hidden),
            query_num=_size(size, 8, 64),
            drop_vision_last_layer=False,
        )
        host.version = version
        host.vpm = host.init_vision_module(host.config, None, prefix="vpm")
        host.vision_dim = host.vpm.embeddings.embed_dim
        host.embed_dim = host.config.hidden_size
        host.resampler = host.init_resampler(host.embed_dim, host.vision_dim, None, prefix="resampler")

    return build


# Found on the CPU (tests/patches/test_tower_matrix_cpu.py); the mechanism is
# device-independent, so expected on the GPU too.
INFERENCE_VIEWS = (
    "the streamer binds parameters to views made inside torch.inference_mode "
    "(ring slots, resting arena views), so they become inference tensors whose "
    "views do not require grad; aten::matmul then stops folding a non-contiguous "
    "3-D input into one mm (it folds when the weight requires grad, as the "
    "resident nn.MultiheadAttention.in_proj_weight does) and sums in another "
    "order: last-bit differences (max 2.2e-8 at fp32). Allocating the slots and "
    "binding under torch.inference_mode(False) makes it bit-identical."
)


def _minicpmv_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.minicpmv import MiniCPMVImagePixelInputs

    # Slices as the processor cuts them: an overview and 4 slices of a large
    # image (patch grids up to 448/14 = 32 a side), then a small image whole.
    patch = host.config.vision_config.patch_size
    grids = _size(
        size,
        [(4, 6), (3, 4), (3, 4), (3, 4), (3, 4), (2, 2)],
        [(26, 38), (32, 23), (32, 23), (32, 23), (32, 23), (18, 26)],
    )
    return MiniCPMVImagePixelInputs(
        type="pixel_values",
        # One (3, P, h*w*P) strip of patches per slice.
        pixel_values=[randn(generator, 3, patch, h * w * patch).to(_dtype()) for h, w in grids],
        tgt_sizes=torch.tensor(grids, dtype=torch.long),
        num_slices=torch.tensor([5, 1]),
    )


# -- Molmo (CLIP ViT, 2x2 attention pooling, SwiGLU projector) ------------------


def _build_molmo(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.molmo import MolmoVisionBackbone, VisionBackboneConfig

    # MolmoForCausalLM builds `VisionBackboneConfig()` whatever the checkpoint
    # (its defaults are the CLIP ViT-L/14-336 of Molmo-7B-D); the projector
    # takes the language model's sizes. Tiny: 9 layers, for the two feature
    # layers it concatenates (-2 and -9).
    vision = _size(
        size,
        VisionBackboneConfig(
            image_default_input_size=(32, 32),
            image_patch_size=4,
            image_pos_patch_size=4,
            image_emb_dim=64,
            image_num_heads=4,
            image_num_key_value_heads=4,
            image_num_layers=9,
            image_mlp_dim=128,
            image_num_pos=65,
        ),
        VisionBackboneConfig(),
    )
    host.config = remote_config(hidden_size=_size(size, 96, 3584), intermediate_size=_size(size, 192, 37888))
    host.vision_backbone = MolmoVisionBackbone(host.config, vision, None, prefix="vision_backbone")


def _molmo_inputs(host: nn.Module, size: str, generator):
    backbone = host.vision_backbone
    rows, cols = backbone.image_num_patch
    patch = backbone.image_vit.patch_embedding.in_features
    tokens = backbone.llm_patches_per_crop[0] * backbone.llm_patches_per_crop[1]
    # A large image: 12 crops and the global view; a small one: 1 crop and the view.
    crops = _size(size, [3, 2], [13, 2])
    images = randn(generator, sum(crops), rows * cols, patch).to(_dtype())
    masks = torch.ones(sum(crops), rows * cols, device=generator.device)
    masks[-1, -cols:] = 0.5  # a partly padded crop
    # Where each crop's pooled tokens go in the prompt (-1: not shown).
    index = torch.arange(sum(crops) * tokens, device=generator.device).view(sum(crops), tokens)
    index[0, -2:] = -1
    return {
        "images": images,
        "image_masks": masks.to(_dtype()),
        "image_input_idx": index,
        "num_crops": torch.tensor(crops),
    }


# -- Molmo2 (SigLIP 2 ViT, attention pooling over index lists) -----------------


class TokenEmbedding(nn.Module):
    """The language model's input embedding, all that an encode asks of it.

    Molmo2's `_process_image_input` embeds each image's prompt tokens and
    writes the pooled features over its patch tokens.
    """

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)

    def embed_input_ids(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(ids)


MOLMO2_PATCH_TOKEN = 3


def _build_molmo2(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.molmo2 import AdapterConfig, Molmo2VisionBackbone, VitConfig

    vit = _size(
        size,
        VitConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=9,
            num_attention_heads=4,
            num_key_value_heads=4,
            head_dim=16,
            image_default_input_size=(28, 28),
            image_patch_size=4,
            image_num_pos=49,
        ),
        VitConfig(),  # the defaults are SigLIP 2 so400m/14 at 378
    )
    # Molmo2-8B's adapter maps to Qwen3-8B (hidden 4096, MLP 12288).
    adapter = _size(
        size,
        AdapterConfig(
            hidden_size=64,
            num_attention_heads=4,
            num_key_value_heads=4,
            head_dim=16,
            intermediate_size=192,
            text_hidden_size=96,
        ),
        AdapterConfig(text_hidden_size=4096, intermediate_size=12288),
    )
    host.vision_backbone = Molmo2VisionBackbone(vit, adapter, None, prefix="vision_backbone")
    host.img_patch_id = MOLMO2_PATCH_TOKEN
    embedding = TokenEmbedding(8, adapter.text_hidden_size)
    host.get_language_model = lambda: embedding


def _pool_2x2(rows: int, cols: int, offset: int) -> list[list[int]]:
    """Indices of each 2x2 cell of a rows x cols crop (-1 past the edge)."""
    cells = []
    for r in range(0, rows, 2):
        for c in range(0, cols, 2):
            cells.append(
                [offset + y * cols + x if y < rows and x < cols else -1 for y in (r, r + 1) for x in (c, c + 1)]
            )
    return cells


def _molmo2_inputs(host: nn.Module, size: str, generator):
    patch_dim = host.vision_backbone.image_vit.patch_embedding.in_features
    side = _size(size, 7, 27)  # patches a side of each crop
    crops = [_size(size, 3, 5), 1]  # crops and the global view; a small image
    pooling, pooled = [], []
    for image, count in enumerate(crops):
        before = sum(crops[:image])
        cells = [cell for k in range(count) for cell in _pool_2x2(side, side, (before + k) * side * side)]
        pooling += cells
        pooled.append(len(cells))
    tokens = [torch.tensor([1, *[MOLMO2_PATCH_TOKEN] * n, 2]) for n in pooled]
    device = generator.device
    return {
        "pixel_values": randn(generator, sum(crops), side * side, patch_dim).to(_dtype()),
        "token_pooling": torch.tensor(pooling, device=device),
        "num_pooled_patches": torch.tensor(pooled),
        "image_tokens": torch.cat(tokens).to(device),
        "num_image_tokens": torch.tensor([len(t) for t in tokens]),
    }


# -- Pixtral in Mistral's format (vision_encoder + adapter) ---------------------


def _pixtral_builder(full: dict[str, Any], text_hidden: int):
    def build(host: nn.Module, size: str) -> None:
        from transformers import PixtralVisionConfig
        from vllm.model_executor.layers.layernorm import RMSNorm
        from vllm.model_executor.models.pixtral import (
            PATCH_MERGE,
            PatchMerger,
            VisionEncoderArgs,
            VisionLanguageAdapter,
            VisionTransformer,
        )

        dims = _size(
            size,
            {
                "hidden_size": 64,
                "num_channels": 3,
                "image_size": 64,
                "patch_size": 4,
                "intermediate_size": 128,
                "num_hidden_layers": 3,
                "num_attention_heads": 4,
                "rope_theta": 10000.0,
                "image_token_id": 10,
                # The released layout: merger, norm, adapter bias.
                **{k: v for k, v in full.items() if k in MISTRAL_LAYOUT},
            },
            full,
        )
        # As PixtralForConditionalGeneration.__init__ (params.json's vision_encoder).
        host.config = remote_config(
            vision_config=PixtralVisionConfig(**dims),
            text_config=remote_config(hidden_size=_size(size, 96, text_hidden)),
        )
        args = host.vision_args = VisionEncoderArgs(**dims)
        host.vision_encoder = VisionTransformer(args, prefix="vision_encoder")
        host.pre_mm_projector_norm = (
            RMSNorm(args.hidden_size, eps=1e-5) if args.add_pre_mm_projector_layer_norm else None
        )
        host.patch_merger = (
            PatchMerger(
                vision_encoder_dim=args.hidden_size,
                spatial_merge_size=args.spatial_merge_size,
                use_mlp_bias=False,
            )
            if args.mm_projector_id == PATCH_MERGE
            else None
        )
        host.vision_language_adapter = VisionLanguageAdapter(args, dim=host.config.text_config.hidden_size)

    return build


MISTRAL_LAYOUT = ("adapter_bias", "spatial_merge_size", "add_pre_mm_projector_layer_norm", "mm_projector_id")
PIXTRAL_12B = {
    "hidden_size": 1024,
    "num_channels": 3,
    "image_size": 1024,
    "patch_size": 16,
    "intermediate_size": 4096,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "rope_theta": 10000.0,
    "image_token_id": 10,
}
# Mistral-Small-3.1's params.json: the same ViT at patch 14 and 1540, with a
# 2x2 patch merger and a norm before it.
MISTRAL_SMALL_3_1 = {
    **PIXTRAL_12B,
    "image_size": 1540,
    "patch_size": 14,
    "adapter_bias": False,
    "spatial_merge_size": 2,
    "add_pre_mm_projector_layer_norm": True,
    "mm_projector_id": "patch_merge",
}


def _pixtral_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.pixtral import PixtralImagePixelInputs

    # Images at their own sizes, cut to multiples of the patch (times the merge).
    unit = host.vision_args.patch_size * host.vision_args.spatial_merge_size
    sides = _size(size, [(32, 48), (16, 16)], [(1036, 1484), (504, 728)])
    return PixtralImagePixelInputs(
        type="pixel_values",
        images=[randn(generator, 3, h // unit * unit, w // unit * unit).to(_dtype()) for h, w in sides],
    )


# -- Whisper's encoder (vLLM's WhisperEncoder) ----------------------------------


def whisper_config(size: str, **extra: Any):
    """A transformers WhisperConfig: tiny, or Whisper-large-v3's encoder."""
    from transformers import WhisperConfig

    dims = _size(
        size,
        {"d_model": 64, "encoder_layers": 3, "encoder_attention_heads": 4, "encoder_ffn_dim": 128},
        {"d_model": 1280, "encoder_layers": 32, "encoder_attention_heads": 20, "encoder_ffn_dim": 5120},
    )
    return WhisperConfig(**dims, num_mel_bins=128, max_source_positions=1500, **extra)


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


def _build_whisper(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.whisper import WhisperEncoder, WhisperModel

    host.config = whisper_config(size)
    host.dtype = _dtype()
    # Only the encoder of WhisperModel (the tower target); no decoder.
    host.model = WhisperModel.__new__(WhisperModel)
    nn.Module.__init__(host.model)
    host.model.encoder = WhisperEncoder(vllm_config=model_config_view(host.config, _dtype()), prefix="model.encoder")


def _whisper_inputs(host: nn.Module, size: str, generator):
    # Two clips, each padded to Whisper's 30 s window of 100 mel frames/s.
    return {"input_features": [randn(generator, 128, 3000) for _ in range(2)]}


# -- Cohere Compass (North vision: a Qwen3-VL-style tower with deepstack) ------


def _build_cohere_compass(host: nn.Module, size: str) -> None:
    from transformers.models.cohere_compass.configuration_cohere_compass import (
        CohereCompassVisionConfig,
    )
    from vllm.model_executor.models.cohere_compass import Cohere_VisionTransformer

    vision = _size(
        size,
        CohereCompassVisionConfig(
            depth=4,
            hidden_size=64,
            num_heads=4,
            intermediate_size=128,
            out_hidden_size=96,
            deepstack_visual_indexes=[1, 2],
            num_position_embeddings=64,
            patch_size=4,
        ),
        # transformers' defaults, documented as CohereLabs/North-Micro-Vision-Instruct.
        CohereCompassVisionConfig(),
    )
    host.visual = Cohere_VisionTransformer(vision, norm_eps=1e-6, quant_config=None, prefix="visual")


# -- LLaVA-OneVision-2 (OneVision encoder; positions per patch) -----------------


def _build_llava_onevision2(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.llava_onevision2 import LlavaOnevision2VisionTower

    vision = _size(
        size,
        remote_config(
            patch_size=4,
            spatial_merge_size=2,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=2,  # its rotary needs head_dim // 2 % 16 == 0
            intermediate_size=128,
        ),
        # Assumed, not read from the checkpoint (remote code, not reachable
        # here): the ViT-L shape of vLLM's LlavaOnevision2VisionEmbeddings
        # defaults (patch 14, width 1024), 24 layers, 2x2 merge.
        remote_config(
            patch_size=14,
            spatial_merge_size=2,
            hidden_size=1024,
            num_hidden_layers=24,
            num_attention_heads=16,
            intermediate_size=4096,
        ),
    )
    host.visual = LlavaOnevision2VisionTower(
        vision,
        text_hidden_size=_size(size, 96, 4096),  # Qwen3-8B
        norm_eps=1e-6,
        quant_config=None,
        prefix="visual",
    )


def _merge_block_positions(grids: list[list[int]], merge: int = 2) -> torch.Tensor:
    """(t, h, w) of every patch, in the merge-block order the processors emit."""
    rows = []
    for t, h, w in grids:
        for frame in range(t):
            for bh in range(0, h, merge):
                for bw in range(0, w, merge):
                    rows += [[frame, bh + dh, bw + dw] for dh in range(merge) for dw in range(merge)]
    return torch.tensor(rows, dtype=torch.long)


def _llava_onevision2_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.llava_onevision2 import LlavaOnevision2ImagePixelInputs

    patch = _size(size, 4, 14)
    grids = _size(size, GRIDS_TINY, GRIDS_FULL_14)
    flat = grid_inputs(grids, 3 * patch * patch, generator, _dtype())
    return LlavaOnevision2ImagePixelInputs(**flat, patch_positions=_merge_block_positions(grids).to(generator.device))


# -- MiMo-V2.5-Omni (vision tower; GQA ViT with windows) ------------------------


def _build_mimo_v2_omni(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.mimo_v2_omni import MiMoVisionTransformer
    from vllm.transformers_utils.configs.mimo_v2_omni import Mimo_VLVisionConfig

    vision = _size(
        size,
        Mimo_VLVisionConfig(
            depth=4,
            hidden_size=64,
            intermediate_size=128,
            num_heads=4,
            num_key_value_heads=2,
            num_query_groups=2,
            qk_channels=16,
            kv_channels=16,
            patch_size=4,
            window_size=32,
            out_hidden_size=96,
            # Window attention (with sinks) is a Triton kernel: full
            # attention in every block on the CPU; the GPU runs the windows.
            fullatt_block_indexes=[0, 1, 2, 3],
            use_sink=True,
        ),
        # vLLM's defaults are MiMo-V2.5-Omni's ViT, less `use_sink` (the
        # checkpoint's config sets it; vLLM's config class has no default).
        Mimo_VLVisionConfig(use_sink=True),
    )
    host.config = remote_config(vision_config=vision)
    host.visual = MiMoVisionTransformer(vision, norm_eps=1e-6, quant_config=None, prefix="visual")


# -- LLaVA-1.5 (CLIP ViT-L/14-336) and PaliGemma (SigLIP) ----------------------

# CLIP ViT-L/14 at 336 (LLaVA-1.5, LLaVA-NeXT, ...).
CLIP_L14_336 = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "image_size": 336,
    "patch_size": 14,
    "projection_dim": 768,
}
TINY_VIT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "image_size": 32,
    "patch_size": 4,
}


def _build_llava(host: nn.Module, size: str) -> None:
    from transformers import LlavaConfig
    from vllm.model_executor.models.llava import (
        LlavaMultiModalProjector,
        init_vision_tower_for_llava,
    )

    config = host.config = LlavaConfig(
        vision_config={"model_type": "clip_vision_model", **_size(size, TINY_VIT, CLIP_L14_336)},
        text_config={"hidden_size": _size(size, 96, 4096)},
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
    )
    # As LlavaForConditionalGeneration.__init__.
    host.vision_tower = init_vision_tower_for_llava(
        config, quant_config=None, require_post_norm=False, prefix="vision_tower"
    )
    host.multi_modal_projector = LlavaMultiModalProjector(
        vision_hidden_size=config.vision_config.hidden_size,
        text_hidden_size=config.text_config.hidden_size,
        projector_hidden_act=config.projector_hidden_act,
        multimodal_projector_bias=config.multimodal_projector_bias,
        quant_config=None,
        prefix="multi_modal_projector",
    )


def _square_images_inputs(count: int):
    """`count` images at the tower's own square size (LLaVA, PaliGemma)."""

    def inputs(host: nn.Module, size: str, generator):
        side = host.config.vision_config.image_size
        return {"type": "pixel_values", "pixel_values": _tiles(generator, count, side)}

    return inputs


def _build_paligemma(host: nn.Module, size: str) -> None:
    from transformers import PaliGemmaConfig
    from vllm.model_executor.models.paligemma import PaliGemmaMultiModalProjector
    from vllm.model_executor.models.siglip import SiglipVisionModel

    # PaliGemma 2 3B at 448: SigLIP-so400m/14, projected to Gemma 2's 2304.
    vision = _size(size, TINY_VIT, {**SO400M_14, "image_size": 448})
    config = host.config = PaliGemmaConfig(
        vision_config={**vision, "projection_dim": _size(size, 96, 2304)},
        text_config={"hidden_size": _size(size, 96, 2304)},
    )
    host.vision_tower = SiglipVisionModel(config.vision_config, None, prefix="vision_tower")
    host.multi_modal_projector = PaliGemmaMultiModalProjector(
        vision_hidden_size=config.vision_config.hidden_size,
        projection_dim=config.vision_config.projection_dim,
    )


def _paligemma_inputs(host: nn.Module, size: str, generator):
    side = host.config.vision_config.image_size
    return {"type": "pixel_values", "data": _tiles(generator, 2, side)}


# -- BLIP-2 (EVA ViT-g + Q-Former) -------------------------------------------------


def _build_blip2(host: nn.Module, size: str) -> None:
    from transformers import Blip2Config
    from vllm.model_executor.models.blip import BlipVisionModel
    from vllm.model_executor.models.blip2 import Blip2QFormerModel

    tiny_qformer = {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "encoder_hidden_size": 64,
    }
    # transformers' defaults are Salesforce/blip2-opt-2.7b's ViT-g and Q-Former.
    config = host.config = Blip2Config(
        vision_config=_size(size, TINY_VIT, {}),
        qformer_config=_size(size, tiny_qformer, {}),
        text_config={"model_type": "opt", "hidden_size": _size(size, 96, 2560)},
        num_query_tokens=_size(size, 8, 32),
    )
    # As Blip2ForConditionalGeneration.__init__; `query_tokens` is a
    # parameter of the model, not a module: it stays resident.
    host.vision_model = BlipVisionModel(config.vision_config, None)
    host.query_tokens = nn.Parameter(torch.zeros(1, config.num_query_tokens, config.qformer_config.hidden_size))
    host.qformer = Blip2QFormerModel(
        config.qformer_config,
        cache_config=host.vllm_config.cache_config,
        quant_config=None,
        prefix="qformer",
    )
    host.language_projection = nn.Linear(config.qformer_config.hidden_size, config.text_config.hidden_size, bias=True)


def _blip2_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.blip2 import Blip2ImagePixelInputs

    side = host.config.vision_config.image_size
    return Blip2ImagePixelInputs(type="pixel_values", data=_tiles(generator, 2, side))


# -- Qwen2.5-Omni thinker: audio and vision towers -------------------------------


def _build_qwen2_5_omni(host: nn.Module, size: str) -> None:
    from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import (
        Qwen2_5OmniAudioEncoderConfig,
    )
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniAudioEncoder
    from vllm.model_executor.models.qwen2_5_vl import Qwen2_5_VisionTransformer

    audio = _size(
        size,
        Qwen2_5OmniAudioEncoderConfig(
            num_mel_bins=128,
            encoder_layers=3,
            encoder_attention_heads=4,
            encoder_ffn_dim=128,
            d_model=64,
            output_dim=96,
        ),
        Qwen2_5OmniAudioEncoderConfig(),  # the defaults are Qwen2.5-Omni-7B's
    )
    # As Qwen2_5OmniThinkerForConditionalGeneration.__init__.
    host.audio_tower = Qwen2_5OmniAudioEncoder(audio)
    host.visual = Qwen2_5_VisionTransformer(
        vision_config=_qwen2_5_vision_config(size), norm_eps=1e-6, quant_config=None, prefix="visual"
    )


def _qwen2_5_omni_audio_inputs(host: nn.Module, size: str, generator):
    # 100 mel frames per second: 30 s and 12 s of audio.
    return _audio_feature_inputs(128, _size(size, [600, 240], [3000, 1200]), generator)


# -- Phi-3.5-vision (CLIP ViT-L/14-336 HD crops; the token table is a tower) -----


def _build_phi3v(host: nn.Module, size: str) -> None:
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
    from vllm.model_executor.models.phi3v import Phi3HDImageEmbedding

    # The CLIP is fixed (ViT-L/14-336: the HD transform asserts 576 patches of
    # width 1024); `layer_idx` sets its depth: 2 layers on the CPU, 23 in
    # Phi-3.5-vision-instruct (-2).
    config = host.config = remote_config(
        hidden_size=_size(size, 96, 3072),
        vocab_size=_size(size, 64, 32064),
        img_processor={"image_dim_out": 1024, "num_img_tokens": 144, "layer_idx": _size(size, 1, -2)},
        embd_layer={
            "embedding_cls": "image",
            "hd_transform_order": "sub_glb",
            "projection_cls": "mlp",
            "use_hd_transform": True,
            "with_learnable_separator": True,
        },
    )
    # As Phi3VForCausalLM.__init__: the language model's token table is built
    # inside `_mark_tower_model`, so --offload-towers streams it too (and a
    # decode step's embedding lookup then reads it from host memory).
    host.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size, prefix="model.embed_tokens")
    host.vision_embed_tokens = Phi3HDImageEmbedding(config, None, prefix="model.vision_embed_tokens")


def _phi3v_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.phi3v import Phi3VImagePixelInputs

    # HD crops of 336: the global view first, then h x w crops, padded to
    # the largest image's count. Full: 1008x1344 (3x4 crops) and 336x672.
    sizes = _size(size, [(336, 672), (336, 336)], [(1008, 1344), (336, 672)])
    crops = 1 + max(h // 336 * (w // 336) for h, w in sizes)
    return Phi3VImagePixelInputs(
        type="pixel_values",
        pixel_values=randn(generator, len(sizes), crops, 3, 336, 336).to(_dtype()),
        image_sizes=torch.tensor(sizes),
    )


# -- GLM-4V (CogVLM2's EVA2-CLIP-E, conv downsampler and GLU) -------------------


def _build_glm4v(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.glm4v import EVA2CLIPModel, GLM4VModel

    vision = _size(
        size,
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 3,
            "num_heads": 4,
            "image_size": 32,
            "patch_size": 4,
            "num_positions": 65,
        },
        # THUDM/glm-4v-9b's config.json.
        {
            "hidden_size": 1792,
            "intermediate_size": 15360,
            "num_hidden_layers": 63,
            "num_heads": 16,
            "image_size": 1120,
            "patch_size": 14,
            "num_positions": 6401,
        },
    )
    host.config = remote_config(
        vision_config={
            **vision,
            "in_channels": 3,
            "hidden_act": "gelu",
            "layer_norm_eps": 1e-6,
            "dropout_prob": 0.0,
            "scaling_factor": 8,
        },
        hidden_size=_size(size, 96, 4096),
        ffn_hidden_size=_size(size, 192, 13696),
        dtype=_dtype(),
    )
    # The tower target is GLM4VModel.vision (`_mark_composite_model`); the
    # rest of GLM4VModel is the language model.
    host.transformer = GLM4VModel.__new__(GLM4VModel)
    nn.Module.__init__(host.transformer)
    host.transformer.vision = EVA2CLIPModel(host.config, None, prefix="transformer.vision")


def _glm4v_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.glm4v import GLMVImagePixelInputs

    side = host.config.vision_config["image_size"]
    return GLMVImagePixelInputs(type="pixel_values", data=_tiles(generator, 2, side))


# -- Ultravox (Whisper encoder on chunks + stacked-frame projector) --------------


def _build_ultravox(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.ultravox import (
        UltravoxFeedForwardProjector,
        UltravoxWhisperEncoder,
    )
    from vllm.transformers_utils.configs.ultravox import UltravoxConfig

    # Ultravox v0.5 (Llama 3.1 8B): Whisper-large-v3-turbo's encoder, 8
    # frames stacked into each token, a SwiGLU projector to 4096.
    audio = whisper_config(size).to_dict()
    config = host.config = UltravoxConfig(
        audio_config=audio,
        text_config={"model_type": "llama", "hidden_size": _size(size, 96, 4096)},
        hidden_size=_size(size, 128, 4096),
        stack_factor=8,
    )
    host.pad_audio_to_max_context = False  # no tower LoRA
    host.audio_tower = UltravoxWhisperEncoder(
        vllm_config=model_config_view(config.audio_config, _dtype()), prefix="audio_tower", enable_pp=False
    )
    host.multi_modal_projector = UltravoxFeedForwardProjector(config, quant_config=None, prefix="multi_modal_projector")


def _ultravox_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.ultravox import UltravoxAudioFeatureInputs

    # A 42 s clip cut into 30 s chunks (3000 and 1200 mel frames).
    frames = torch.tensor([3000, 1200], device=generator.device)
    tokens = ((frames - 1) // 2 + 1 + host.config.stack_factor - 1) // host.config.stack_factor
    return UltravoxAudioFeatureInputs(
        type="audio_features",
        # Chunks padded to the longest, as the processor batches them.
        data=randn(generator, 2, 128, 3000) * (torch.arange(3000, device=generator.device) < frames[:, None, None]),
        lens=frames,
        token_len=tokens,
        num_chunks=torch.tensor([2]),
    )


# -- Ovis2 (AIMv2 visual tokenizer + a visual embedding table) -------------------


def _build_ovis(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.ovis import VisualEmbedding, VisualTokenizer

    backbone = remote_config(
        model_type="aimv2_vision_model",
        num_channels=3,
        rms_norm_eps=1e-5,
        qkv_bias=False,
        mlp_bias=False,
        **_size(
            size,
            TINY_VIT,
            # apple/aimv2-huge-patch14-448 (Ovis2-8B).
            {
                "hidden_size": 1536,
                "intermediate_size": 4096,
                "num_hidden_layers": 24,
                "num_attention_heads": 12,
                "image_size": 448,
                "patch_size": 14,
            },
        ),
    )
    tokenizer = remote_config(
        backbone_config=backbone,
        vocab_size=_size(size, 256, 65536),
        hidden_stride=2,
        drop_cls_token=False,
        tokenize_function="softmax",
    )
    host.config = remote_config(visual_tokenizer_config=tokenizer, hidden_size=_size(size, 96, 3584))
    # As Ovis.__init__: the visual "tokens" are soft one-hots over the
    # table, so `vte` runs a matmul with its weight as well as lookups.
    host.visual_tokenizer = VisualTokenizer(config=tokenizer, quant_config=None, prefix="visual_tokenizer")
    host.vte = VisualEmbedding(tokenizer.vocab_size, host.config.hidden_size)


def _ovis_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.ovis import OvisImagePatchInputs

    vocab = host.config.visual_tokenizer_config.vocab_size
    side = host.config.visual_tokenizer_config.backbone_config.image_size
    patches = [5, 1]  # 2x2 crops and the global view; a small image whole
    indicators = sum(n + 1 if n > 1 else n + 2 for n in patches)
    return OvisImagePatchInputs(
        type="image_patches",
        flat_data=_tiles(generator, sum(patches), side),
        # The indicator ids are the table's last 5 rows.
        indicator_tokens=(vocab - 5 + torch.arange(indicators, device=generator.device) % 5),
        patches_per_image=patches,
    )


FAMILIES: list[TowerFamily] = [
    TowerFamily(
        "qwen2_vl",
        "qwen2_vl:Qwen2VLForConditionalGeneration",
        ("visual",),
        _build_qwen2_vl,
        _qwen_grid_inputs(14),
        full_tower="Qwen/Qwen2-VL-7B-Instruct",
    ),
    TowerFamily(
        "qwen2_5_vl",
        "qwen2_5_vl:Qwen2_5_VLForConditionalGeneration",
        ("visual",),
        _build_qwen2_5_vl,
        _qwen_grid_inputs(14),
        full_tower="Qwen/Qwen2.5-VL-7B-Instruct",
    ),
    TowerFamily(
        "qwen3_vl",
        "qwen3_vl:Qwen3VLForConditionalGeneration",
        ("visual",),
        _build_qwen3_vl,
        _qwen_grid_inputs(16),
        full_tower="Qwen/Qwen3-VL-8B-Instruct",
    ),
    TowerFamily(
        "qwen3_omni_audio",
        "qwen3_omni_moe_thinker:Qwen3OmniMoeThinkerForConditionalGeneration",
        ("audio_tower", "visual"),
        _build_qwen3_omni,
        _qwen3_omni_audio_inputs,
        process="_process_audio_input",
        full_tower="Qwen/Qwen3-Omni-30B-A3B-Instruct",
    ),
    TowerFamily(
        "qwen3_omni_vision",
        "qwen3_omni_moe_thinker:Qwen3OmniMoeThinkerForConditionalGeneration",
        ("audio_tower", "visual"),
        _build_qwen3_omni,
        _qwen_grid_inputs(16),
        full_tower="Qwen/Qwen3-Omni-30B-A3B-Instruct",
    ),
    TowerFamily(
        "glm4_1v",
        "glm4_1v:Glm4vForConditionalGeneration",
        ("visual",),
        _build_glm4_1v,
        _qwen_grid_inputs(14),
        full_tower="zai-org/GLM-4.1V-9B-Thinking",
    ),
    TowerFamily(
        "dots_ocr",
        "dots_ocr:DotsOCRForCausalLM",
        ("vision_tower",),
        _build_dots_ocr,
        _dots_inputs,
        full_tower="rednote-hilab/dots.ocr",
    ),
    TowerFamily(
        "ernie45_vl",
        "ernie45_vl:Ernie4_5_VLMoeForConditionalGeneration",
        ("vision_model", "resampler_model"),
        _build_ernie45_vl,
        _qwen_grid_inputs(14, temporal=1),
        full_tower="baidu/ERNIE-4.5-VL-28B-A3B-PT",
    ),
    TowerFamily(
        "paddleocr_vl",
        "paddleocr_vl:PaddleOCRVLForConditionalGeneration",
        ("visual", "mlp_AR"),
        _build_paddleocr_vl,
        _patch_image_inputs("paddleocr_vl:PaddleOCRImagePixelInputs"),
        full_tower="PaddlePaddle/PaddleOCR-VL",
    ),
    TowerFamily(
        "keye",
        "keye:KeyeForConditionalGeneration",
        ("visual", "mlp_AR"),
        _build_keye,
        _patch_image_inputs(None),
        full_tower="Kwai-Keye/Keye-VL-8B-Preview",
    ),
    TowerFamily(
        "internvl",
        "internvl:InternVLChatModel",
        ("vision_model", "mlp1"),
        _build_internvl,
        _internvl_inputs,
        process="_process_vision_input",
        full_tower="OpenGVLab/InternVL3-8B",
    ),
    TowerFamily(
        "gemma3",
        "gemma3_mm:Gemma3ForConditionalGeneration",
        ("vision_tower", "multi_modal_projector"),
        _build_gemma3,
        _gemma3_inputs,
        full_tower="google/gemma-3-27b-it",
    ),
    TowerFamily(
        "llama4",
        "mllama4:Llama4ForConditionalGeneration",
        ("vision_model", "multi_modal_projector"),
        _build_llama4,
        _llama4_inputs,
        full_tower="meta-llama/Llama-4-Scout-17B-16E-Instruct",
    ),
    TowerFamily(
        "mistral3",
        "mistral3:Mistral3ForConditionalGeneration",
        ("vision_tower", "multi_modal_projector"),
        _build_mistral3,
        _mistral3_inputs,
        full_tower="mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        needs=("mistral_common",),
    ),
    TowerFamily(
        "idefics3",
        "idefics3:Idefics3ForConditionalGeneration",
        ("model.vision_model", "model.connector"),
        _build_idefics3,
        _idefics3_inputs,
        full_tower="HuggingFaceM4/Idefics3-8B-Llama3",
    ),
    TowerFamily(
        "qwen2_audio",
        "qwen2_audio:Qwen2AudioForConditionalGeneration",
        ("audio_tower", "multi_modal_projector"),
        _build_qwen2_audio,
        _qwen2_audio_inputs,
        process="_process_audio_input",
        full_tower="Qwen/Qwen2-Audio-7B-Instruct",
    ),
    TowerFamily(
        "kimi_vl",
        "kimi_vl:KimiVLForConditionalGeneration",
        ("vision_tower", "multi_modal_projector"),
        _build_kimi_vl,
        _kimi_vl_inputs,
        full_tower="moonshotai/Kimi-VL-A3B-Instruct",
    ),
    TowerFamily(
        "step3_vl",
        "step3_vl:Step3VLForConditionalGeneration",
        ("vision_model", "vit_downsampler", "vit_downsampler2", "vit_large_projector"),
        _build_step3_vl,
        _step3_vl_inputs,
        full_tower="stepfun-ai/step3",
    ),
    TowerFamily(
        "minicpmv",
        "minicpmv:MiniCPMV2_6",
        ("vpm", "resampler"),
        _minicpmv_builder((2, 6), llm_hidden=3584),
        _minicpmv_inputs,
        process="_process_vision_input",
        full_tower="openbmb/MiniCPM-V-2_6",
        differs=INFERENCE_VIEWS,
    ),
    TowerFamily(
        "minicpmv4_5",
        "minicpmv:MiniCPMV4_5",
        ("vpm", "resampler"),
        _minicpmv_builder((4, 5), llm_hidden=4096),
        _minicpmv_inputs,
        process="_process_vision_input",
        full_tower="openbmb/MiniCPM-V-4_5",
        differs=INFERENCE_VIEWS,
    ),
    TowerFamily(
        "molmo",
        "molmo:MolmoForCausalLM",
        ("vision_backbone",),
        _build_molmo,
        _molmo_inputs,
        full_tower="allenai/Molmo-7B-D-0924",
    ),
    TowerFamily(
        "molmo2",
        "molmo2:Molmo2ForConditionalGeneration",
        ("vision_backbone",),
        _build_molmo2,
        _molmo2_inputs,
        full_tower="allenai/Molmo2-8B",
    ),
    TowerFamily(
        "pixtral",
        "pixtral:PixtralForConditionalGeneration",
        ("vision_encoder", "vision_language_adapter"),
        _pixtral_builder(PIXTRAL_12B, text_hidden=5120),
        _pixtral_inputs,
        full_tower="mistralai/Pixtral-12B-2409",
        needs=("mistral_common",),
    ),
    TowerFamily(
        "pixtral_merge",
        "pixtral:PixtralForConditionalGeneration",
        ("vision_encoder", "pre_mm_projector_norm", "patch_merger", "vision_language_adapter"),
        _pixtral_builder(MISTRAL_SMALL_3_1, text_hidden=5120),
        _pixtral_inputs,
        full_tower="mistralai/Mistral-Small-3.1-24B-Instruct-2503 (Mistral format)",
        needs=("mistral_common",),
    ),
    TowerFamily(
        "whisper",
        "whisper:WhisperForConditionalGeneration",
        ("model.encoder",),
        _build_whisper,
        _whisper_inputs,
        process="embed_multimodal",
        full_tower="openai/whisper-large-v3",
    ),
    TowerFamily(
        "cohere_compass",
        "cohere_compass:CohereCompassForConditionalGeneration",
        ("visual",),
        _build_cohere_compass,
        _qwen_grid_inputs(16),
        full_tower="CohereLabs/North-Micro-Vision-Instruct",
    ),
    TowerFamily(
        "llava_onevision2",
        "llava_onevision2:LlavaOnevision2ForConditionalGeneration",
        ("visual",),
        _build_llava_onevision2,
        _llava_onevision2_inputs,
        full_tower="lmms-lab-encoder/LLaVA-OneVision-2-8B-Instruct (tower dims assumed)",
    ),
    TowerFamily(
        "mimo_v2_omni",
        "mimo_v2_omni:MiMoV2OmniForCausalLM",
        ("visual",),
        _build_mimo_v2_omni,
        _qwen_grid_inputs(16),
        full_tower="XiaomiMiMo/MiMo-V2.5-Omni (vision tower; the audio encoder needs its tokenizer files)",
    ),
    TowerFamily(
        "llava",
        "llava:LlavaForConditionalGeneration",
        ("vision_tower", "multi_modal_projector"),
        _build_llava,
        _square_images_inputs(2),
        full_tower="llava-hf/llava-1.5-7b-hf",
    ),
    TowerFamily(
        "paligemma",
        "paligemma:PaliGemmaForConditionalGeneration",
        ("vision_tower", "multi_modal_projector"),
        _build_paligemma,
        _paligemma_inputs,
        full_tower="google/paligemma2-3b-pt-448",
    ),
    TowerFamily(
        "blip2",
        "blip2:Blip2ForConditionalGeneration",
        ("vision_model", "qformer", "language_projection"),
        _build_blip2,
        _blip2_inputs,
        full_tower="Salesforce/blip2-opt-2.7b",
    ),
    TowerFamily(
        "qwen2_5_omni_audio",
        "qwen2_5_omni_thinker:Qwen2_5OmniThinkerForConditionalGeneration",
        ("audio_tower", "visual"),
        _build_qwen2_5_omni,
        _qwen2_5_omni_audio_inputs,
        process="_process_audio_input",
        full_tower="Qwen/Qwen2.5-Omni-7B",
    ),
    TowerFamily(
        "qwen2_5_omni_vision",
        "qwen2_5_omni_thinker:Qwen2_5OmniThinkerForConditionalGeneration",
        ("audio_tower", "visual"),
        _build_qwen2_5_omni,
        _qwen_grid_inputs(14),
        full_tower="Qwen/Qwen2.5-Omni-7B",
    ),
    TowerFamily(
        "phi3v",
        "phi3v:Phi3VForCausalLM",
        ("embed_tokens", "vision_embed_tokens"),
        _build_phi3v,
        _phi3v_inputs,
        full_tower="microsoft/Phi-3.5-vision-instruct",
        slow_on_cpu=True,  # its CLIP is full width even when tiny
    ),
    TowerFamily(
        "glm4v",
        "glm4v:GLM4VForCausalLM",
        ("transformer.vision",),
        _build_glm4v,
        _glm4v_inputs,
        full_tower="THUDM/glm-4v-9b",
    ),
    TowerFamily(
        "ultravox",
        "ultravox:UltravoxModel",
        ("audio_tower", "multi_modal_projector"),
        _build_ultravox,
        _ultravox_inputs,
        process="_process_audio_input",
        full_tower="fixie-ai/ultravox-v0_5-llama-3_1-8b",
    ),
    TowerFamily(
        "ovis",
        "ovis:Ovis",
        ("visual_tokenizer", "vte"),
        _build_ovis,
        _ovis_inputs,
        full_tower="AIDC-AI/Ovis2-8B",
    ),
]


def family(name: str) -> TowerFamily:
    for f in FAMILIES:
        if f.name == name:
            return f
    raise KeyError(name)


# -- one family, resident vs streamed ----------------------------------------

MiB = 1 << 20


def param_bytes_on_device(module: nn.Module, offloader=None) -> int:
    """Parameter bytes in device memory: not counting views of a streamed arena."""
    arenas = []
    if offloader is not None and offloader.tower_streamer is not None:
        arenas = [t.arena.device_view for t in offloader.tower_streamer.towers]

    def in_arena(p: torch.Tensor) -> bool:
        return any(a.data_ptr() <= p.data_ptr() < a.data_ptr() + a.numel() for a in arenas)

    return sum(p.numel() * p.element_size() for p in module.parameters() if p.device.type != "cpu" and not in_arena(p))


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_encodes(family, host, inputs, device, repeats: int):
    import time

    outputs, times = None, []
    for _ in range(repeats):
        _synchronize(device)
        start = time.perf_counter()
        outputs = encode(family, host, inputs)
        _synchronize(device)
        times.append(time.perf_counter() - start)
    return outputs, times


def _release(device: torch.device) -> None:
    import gc

    gc.collect()  # vLLM modules hold reference cycles (bound methods)
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_family(
    family: TowerFamily,
    size: str,
    device: torch.device,
    dtype: torch.dtype,
    repeats: int = 3,
) -> dict[str, Any]:
    """Build, encode resident, then streamed: one row of the tower matrix.

    The streamed towers are built again from the same seed (as vLLM builds
    them once, under the offloader), wrapped like `_mark_tower_model` does
    (`wrap_tower` per tower, then `post_init`). A refusal at wrap time is
    recorded with its message; the towers are freed before returning.
    """
    from vllm.model_executor.offloader import PrefetchOffloader

    row: dict[str, Any] = {
        "family": family.name,
        "model": family.model,
        "towers": list(family.towers),
        "full_tower": family.full_tower,
        "size": size,
    }
    host = build_family(family, size, device, dtype)
    towers = towers_of(family, host)
    row["tower_param_bytes"] = sum(p.numel() * p.element_size() for t in towers.values() for p in t.parameters())
    inputs = make_inputs(family, host, size, device)
    warm = encode(family, host, inputs)  # warm up (kernels, workspaces)
    reference, resident_times = _timed_encodes(family, host, inputs, device, repeats)
    row["resident_repeatable"] = bit_identical(warm, reference)
    row["output_shapes"] = [list(t.shape) for t in reference]
    row["resident_encode_s"] = min(resident_times)
    row["resident_param_bytes_on_device"] = param_bytes_on_device(host)
    devices = device_properties(host, towers)
    row["device_properties"] = devices
    del host, towers
    _release(device)

    host = build_family(family, size, device, dtype)
    towers = towers_of(family, host)
    offloader = PrefetchOffloader(group_size=0, num_in_group=1, prefetch_step=1, offload_towers=True)
    try:
        for name, tower in towers.items():
            offloader.wrap_tower(tower, prefix=name)
    except ValueError as e:
        row["status"] = "refused"
        row["refusal"] = str(e)
        del host, towers, offloader
        _release(device)
        return row
    offloader.post_init()
    streamer = offloader.tower_streamer
    row["arena_pinning"] = sorted({t.arena.pinning for t in streamer.towers})
    row["units"] = sum(len(t.units) for t in streamer.towers)
    row["largest_unit_bytes"] = max(u.nbytes for t in streamer.towers for u in t.units)
    row["streamed_param_bytes_on_device_after_load"] = param_bytes_on_device(host, offloader)
    encode(family, host, inputs)  # the first encode learns the unit order
    outputs, streamed_times = _timed_encodes(family, host, inputs, device, repeats)
    row["streamed_encode_s"] = min(streamed_times)
    row["streamed_param_bytes_on_device"] = param_bytes_on_device(host, offloader)
    row["bit_identical"] = bit_identical(outputs, reference)
    row["max_abs_diff"] = max_abs_diff(outputs, reference)
    row["device_properties_streamed"] = device_properties(host, towers)
    row["status"] = "streams" if row["bit_identical"] else "differs"
    if family.differs:
        row["known_difference"] = family.differs
    del host, towers, offloader, streamer, outputs, reference
    _release(device)
    return row


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The tower matrix as a Markdown table."""
    lines = [
        "| family | towers | tower MiB | status | bit-identical (max abs diff) "
        "| param MiB on GPU between encodes | resident ms | streamed ms | ratio |",
        "| --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        status = row.get("status", "?")
        if status in ("refused", "error", "skipped"):
            why = row.get("refusal") or row.get("error") or row.get("reason", "")
            lines.append(
                f"| {row['family']} | {', '.join(row.get('towers', []))} | "
                f"{row.get('tower_param_bytes', 0) / MiB:.1f} | {status}: "
                f"{why.splitlines()[0][:160] if why else ''} | | | | | |"
            )
            continue
        ratio = row["streamed_encode_s"] / row["resident_encode_s"]
        lines.append(
            f"| {row['family']} | {', '.join(row['towers'])} | "
            f"{row['tower_param_bytes'] / MiB:.1f} | {status} | "
            f"{'yes' if row['bit_identical'] else 'no'} ({row['max_abs_diff']:.3g}) | "
            f"{row['streamed_param_bytes_on_device'] / MiB:.2f} | "
            f"{row['resident_encode_s'] * 1e3:.1f} | "
            f"{row['streamed_encode_s'] * 1e3:.1f} | {ratio:.2f}x |"
        )
    return "\n".join(lines) + "\n"
