"""Towers fed patches and a (t, h, w) grid per image: Qwen2/2.5/3-VL and the towers built like them."""

from __future__ import annotations

import importlib
from typing import Any

import torch
import torch.nn as nn

from vllm_fork_testkit.tower_families.core import (
    GRIDS_FULL_14,
    GRIDS_TINY,
    TINY_DEPTH_VIT,
    TINY_LAYERS,
    TINY_VIT,
    TowerFamily,
    by_size,
    current_dtype,
    grid_inputs,
    qwen_grid_inputs,
    randn,
    remote_config,
)


def _build_qwen2_vl(host: nn.Module, size: str) -> None:
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from vllm.model_executor.layers.fusion.mm_input_norm import build_mm_input_norm
    from vllm.model_executor.models.qwen2_vl import Qwen2VisionTransformer

    config = by_size(
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


def qwen2_5_vision_config(size: str):
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import (
        Qwen2_5_VLVisionConfig,
    )

    return by_size(
        size,
        Qwen2_5_VLVisionConfig(
            **TINY_DEPTH_VIT,
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
        vision_config=qwen2_5_vision_config(size),
        norm_eps=1e-6,
        quant_config=None,
        input_norm=build_mm_input_norm(None),
        prefix="visual",
    )


def _qwen3_vision_config(size: str):
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig

    from vllm_fork_testkit.vlm_checkpoint import VISION

    return by_size(
        size,
        Qwen3VLVisionConfig(
            **TINY_DEPTH_VIT,
            deepstack_visual_indexes=[1, 2],
            num_position_embeddings=64,
            temporal_patch_size=2,
            spatial_merge_size=2,
            in_channels=3,
        ),
        # Qwen3-VL-8B-Instruct: the engine tests' tower.
        Qwen3VLVisionConfig(**VISION),
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


def _glm_builder(configs: str, tower: str):
    """GLM-4.1V's tower, or one built like it (GLM-OCR), from transformers' defaults.

    `configs` is the transformers configuration module, `tower` the vLLM
    class as "module:Class"; both take (text config, vision config).
    """

    def build(host: nn.Module, size: str) -> None:
        from vllm.model_executor.layers.fusion.mm_input_norm import build_mm_input_norm

        module = importlib.import_module(f"transformers.models.{configs}")
        vision_cls = next(getattr(module, n) for n in dir(module) if n.endswith("VisionConfig"))
        text_cls = next(getattr(module, n) for n in dir(module) if n.endswith("TextConfig"))
        vision = by_size(
            size,
            vision_cls(**(TINY_DEPTH_VIT | {"depth": 3}), image_size=32),
            vision_cls(),  # the defaults are the documented checkpoint's tower
        )
        text = by_size(size, text_cls(hidden_size=96), text_cls())
        module_name, cls = tower.split(":")
        tower_cls = getattr(importlib.import_module(f"vllm.model_executor.models.{module_name}"), cls)
        host.visual = tower_cls(
            text,
            vision,
            norm_eps=1e-5,
            quant_config=None,
            input_norm=build_mm_input_norm(None),
            prefix="visual",
        )

    return build


def _build_dots_ocr(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.dots_ocr import DotsVisionTransformer
    from vllm.transformers_utils.configs.dotsocr import DotsVisionConfig

    config = by_size(
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
    patch = by_size(size, 4, 14)
    grids = by_size(size, GRIDS_TINY, GRIDS_FULL_14)
    return grid_inputs(grids, 3 * patch * patch, generator, current_dtype())


def _ernie_config(size: str):
    vision = by_size(
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
        hidden_size=by_size(size, 96, 2560),
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
    return by_size(
        size,
        remote_config(
            **TINY_VIT,
            num_channels=3,
            layer_norm_eps=1e-6,
            hidden_act="gelu_pytorch_tanh",
            spatial_merge_size=2,
            attention_dropout=0.0,
            **extra,
        ),
        # SigLIP-so400m NaViT (PaddleOCR-VL-0.9B).
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
    config = host.config = remote_config(vision_config=vision, hidden_size=by_size(size, 96, 1024))
    config.text_config = config
    host.visual = SiglipVisionModel(config=vision, quant_config=None, prefix="visual")
    host.mlp_AR = Projector(config, vision)


def _paddleocr_vl_inputs(host: nn.Module, size: str, generator):
    """Inputs as (patches, 3, P, P) with a grid."""
    from vllm.model_executor.models.paddleocr_vl import PaddleOCRImagePixelInputs

    patch = by_size(size, 4, 14)
    grids = by_size(size, GRIDS_TINY, GRIDS_FULL_14)
    flat = grid_inputs(grids, 3 * patch * patch, generator, current_dtype())
    flat["pixel_values"] = flat["pixel_values"].view(-1, 3, patch, patch)
    return PaddleOCRImagePixelInputs(**flat, resolve_bindings={"patch_size": patch})


def _build_kimi_vl(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.kimi_vl import KimiVLMultiModalProjector
    from vllm.model_executor.models.moonvit import MoonVitPretrainedModel
    from vllm.transformers_utils.configs.kimi_vl import KimiVLConfig
    from vllm.transformers_utils.configs.moonvit import MoonViTConfig

    vision = by_size(
        size,
        MoonViTConfig(**TINY_LAYERS, patch_size=4, init_pos_emb_height=16, init_pos_emb_width=16),
        MoonViTConfig(),  # the defaults are Kimi-VL-A3B's MoonViT
    )
    config = host.config = KimiVLConfig(vision_config=vision, text_config={"hidden_size": by_size(size, 96, 2048)})
    host.vision_tower = MoonVitPretrainedModel(config.vision_config, prefix="vision_tower")
    host.multi_modal_projector = KimiVLMultiModalProjector(config=config, prefix="multi_modal_projector")


def _kimi_vl_inputs(host: nn.Module, size: str, generator):
    patch = by_size(size, 4, 14)
    grids = by_size(size, [[8, 12], [4, 4]], [[74, 106], [36, 52]])
    patches = sum(h * w for h, w in grids)
    return {
        "type": "pixel_values",
        "pixel_values": randn(generator, patches, 3, patch, patch).to(current_dtype()),
        "image_grid_hws": torch.tensor(grids, dtype=torch.long),
    }


def _build_cohere_compass(host: nn.Module, size: str) -> None:
    from transformers.models.cohere_compass.configuration_cohere_compass import (
        CohereCompassVisionConfig,
    )
    from vllm.model_executor.models.cohere_compass import Cohere_VisionTransformer

    vision = by_size(
        size,
        CohereCompassVisionConfig(**TINY_DEPTH_VIT, deepstack_visual_indexes=[1, 2], num_position_embeddings=64),
        # transformers' defaults, documented as CohereLabs/North-Micro-Vision-Instruct.
        CohereCompassVisionConfig(),
    )
    host.visual = Cohere_VisionTransformer(vision, norm_eps=1e-6, quant_config=None, prefix="visual")


def _build_llava_onevision2(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.llava_onevision2 import LlavaOnevision2VisionTower

    vision = by_size(
        size,
        remote_config(
            # Two heads: its rotary needs head_dim // 2 % 16 == 0.
            **(TINY_LAYERS | {"num_attention_heads": 2}),
            patch_size=4,
            spatial_merge_size=2,
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
        text_hidden_size=by_size(size, 96, 4096),  # Qwen3-8B
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

    patch = by_size(size, 4, 14)
    grids = by_size(size, GRIDS_TINY, GRIDS_FULL_14)
    flat = grid_inputs(grids, 3 * patch * patch, generator, current_dtype())
    return LlavaOnevision2ImagePixelInputs(**flat, patch_positions=_merge_block_positions(grids).to(generator.device))


def _build_mimo_v2_omni(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.mimo_v2_omni import MiMoVisionTransformer
    from vllm.transformers_utils.configs.mimo_v2_omni import Mimo_VLVisionConfig

    vision = by_size(
        size,
        Mimo_VLVisionConfig(
            **TINY_DEPTH_VIT,
            num_key_value_heads=2,
            num_query_groups=2,
            qk_channels=16,
            kv_channels=16,
            window_size=32,
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


def _build_lfm2_vl(host: nn.Module, size: str) -> None:
    from transformers import Lfm2VlConfig
    from vllm.model_executor.models.lfm2_siglip2 import Siglip2Model
    from vllm.model_executor.models.lfm2_vl import Lfm2VLMultiModalProjector

    # LFM2-VL-450M: SigLIP2 NaFlex base/16 (transformers' defaults), pixel
    # unshuffle by 2 into LFM2-350M's 1024.
    vision = by_size(size, {**TINY_VIT, "num_patches": 64}, {})
    config = host.config = Lfm2VlConfig(
        vision_config={"model_type": "siglip2_vision_model", **vision},
        text_config={"model_type": "lfm2", "hidden_size": by_size(size, 96, 1024)},
        projector_hidden_size=by_size(size, 128, 2560),
    )
    host.vision_tower = Siglip2Model(config=config.vision_config, quant_config=None, prefix="vision_tower")
    host.multi_modal_projector = Lfm2VLMultiModalProjector(config=config, prefix="multi_modal_projector")


def _lfm2_vl_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.lfm2_vl import Lfm2VLImagePixelInputs

    # NaFlex tiles, patch sequences padded to the longest: a large image as
    # 2 tiles of 32x32 patches and a thumbnail, then a small image whole.
    shapes = by_size(size, [[8, 8], [8, 8], [4, 6], [6, 4]], [[32, 32], [32, 32], [16, 24], [20, 28]])
    patch = host.config.vision_config.patch_size
    longest = max(h * w for h, w in shapes)
    return Lfm2VLImagePixelInputs(
        type="pixel_values",
        pixel_values=randn(generator, len(shapes), longest, 3 * patch * patch).to(current_dtype()),
        spatial_shapes=torch.tensor(shapes),  # on the host, as the processor keeps it
        num_patches=torch.tensor([3, 1]),
    )


def _build_lfm3_vl(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.lfm3_vl import Lfm3VlMultiModalProjector, Lfm3VlVisionModel
    from vllm.transformers_utils.configs.lfm3_vl import Lfm3VlConfig

    # LFM3-VL-2B: the defaults of vLLM's Lfm3VlVisionConfig (14 layers of width
    # 1024, gated convolutions and every other layer from the third attention,
    # 16-pixel patches over 2 frames, 2x2 merge) into a 4096 projector and
    # LFM3's 2048. Tiny keeps one attention layer among the convolutions.
    vision = by_size(
        size,
        {**TINY_LAYERS, "num_hidden_layers": 4, "num_key_value_heads": 2, "patch_size": 4},
        {},
    )
    config = host.config = Lfm3VlConfig(
        vision_config=vision,
        text_config={"hidden_size": by_size(size, 96, 2048)},
        projector_hidden_size=by_size(size, 128, 4096),
    )
    # As Lfm3VlForConditionalGeneration.__init__.
    host.vision_tower = Lfm3VlVisionModel(config.vision_config, quant_config=None, prefix="vision_tower")
    host.multi_modal_projector = Lfm3VlMultiModalProjector(config, quant_config=None, prefix="multi_modal_projector")


def _build_kimi_k25(host: nn.Module, size: str) -> None:
    from transformers import Kimi_K25Config
    from vllm.model_executor.layers.fusion.mm_input_norm import build_mm_input_norm
    from vllm.model_executor.models.kimi_k25_vit import (
        KimiK25MultiModalProjector,
        MoonViT3dPretrainedModel,
    )

    vision = by_size(
        size,
        {
            "patch_size": 4,
            "pos_emb_height": 16,
            "pos_emb_width": 16,
            "num_attention_heads": 4,
            "num_hidden_layers": 3,
            "hidden_size": 64,
            "intermediate_size": 128,
        },
        {},  # transformers' defaults, documented as moonshotai/Kimi-K2.6
    )
    config = host.config = Kimi_K25Config(vision_config=vision, text_config={"hidden_size": by_size(size, 96, 7168)})
    # As KimiK25ForConditionalGeneration.__init__ (unquantized).
    host.vision_tower = MoonViT3dPretrainedModel(
        config.vision_config, quant_config=None, input_norm=build_mm_input_norm(None), prefix="vision_tower"
    )
    host.mm_projector = KimiK25MultiModalProjector(
        config=config.vision_config,
        out_hidden_size=config.text_config.hidden_size,
        use_data_parallel=False,
        quant_config=None,
        prefix="mm_projector",
    )


def _kimi_k25_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.kimi_k25 import KimiK25MediaPixelInputs

    patch = host.config.vision_config.patch_size
    grids = by_size(size, GRIDS_TINY, GRIDS_FULL_14)
    return KimiK25MediaPixelInputs(
        type="pixel_values",
        pixel_values=randn(generator, sum(t * h * w for t, h, w in grids), 3, patch, patch).to(current_dtype()),
        grid_thws=torch.tensor(grids),
    )


FAMILIES: list[TowerFamily] = [
    TowerFamily(
        "qwen2_vl",
        "qwen2_vl:Qwen2VLForConditionalGeneration",
        ("visual",),
        _build_qwen2_vl,
        qwen_grid_inputs(14),
        full_tower="Qwen/Qwen2-VL-7B-Instruct",
    ),
    TowerFamily(
        "qwen2_5_vl",
        "qwen2_5_vl:Qwen2_5_VLForConditionalGeneration",
        ("visual",),
        _build_qwen2_5_vl,
        qwen_grid_inputs(14),
        full_tower="Qwen/Qwen2.5-VL-7B-Instruct",
    ),
    TowerFamily(
        "qwen3_vl",
        "qwen3_vl:Qwen3VLForConditionalGeneration",
        ("visual",),
        _build_qwen3_vl,
        qwen_grid_inputs(16),
        full_tower="Qwen/Qwen3-VL-8B-Instruct",
    ),
    TowerFamily(
        "glm4_1v",
        "glm4_1v:Glm4vForConditionalGeneration",
        ("visual",),
        _glm_builder("glm4v.configuration_glm4v", "glm4_1v:Glm4vVisionTransformer"),
        qwen_grid_inputs(14),
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
        qwen_grid_inputs(14, temporal=1),
        full_tower="baidu/ERNIE-4.5-VL-28B-A3B-PT",
    ),
    TowerFamily(
        "paddleocr_vl",
        "paddleocr_vl:PaddleOCRVLForConditionalGeneration",
        ("visual", "mlp_AR"),
        _build_paddleocr_vl,
        _paddleocr_vl_inputs,
        full_tower="PaddlePaddle/PaddleOCR-VL",
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
        "cohere_compass",
        "cohere_compass:CohereCompassForConditionalGeneration",
        ("visual",),
        _build_cohere_compass,
        qwen_grid_inputs(16),
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
        qwen_grid_inputs(16),
        full_tower="XiaomiMiMo/MiMo-V2.5-Omni (vision tower; the audio encoder needs its tokenizer files)",
    ),
    TowerFamily(
        "glm_ocr",
        "glm_ocr:GlmOcrForConditionalGeneration",
        ("visual",),
        # GlmOcrForConditionalGeneration first builds GLM-4.1V's tower (its
        # parent's __init__), then replaces it: only the second is used.
        _glm_builder("glm_ocr.configuration_glm_ocr", "glm_ocr:GlmOcrVisionTransformer"),
        qwen_grid_inputs(14),
        full_tower="zai-org/GLM-OCR",
    ),
    TowerFamily(
        "lfm2_vl",
        "lfm2_vl:Lfm2VLForConditionalGeneration",
        ("vision_tower", "multi_modal_projector"),
        _build_lfm2_vl,
        _lfm2_vl_inputs,
        full_tower="LiquidAI/LFM2-VL-450M",
    ),
    TowerFamily(
        "kimi_k25",
        "kimi_k25:KimiK25ForConditionalGeneration",
        ("vision_tower", "mm_projector"),
        _build_kimi_k25,
        _kimi_k25_inputs,
        process="_process_media_input",
        full_tower="moonshotai/Kimi-K2.6",
    ),
    TowerFamily(
        "lfm3_vl",
        "lfm3_vl:Lfm3VlForConditionalGeneration",
        ("vision_tower", "multi_modal_projector"),
        _build_lfm3_vl,
        qwen_grid_inputs(16),
        process="embed_multimodal",
        full_tower="LiquidAI/LFM3-VL-2B",
    ),
]
