"""Towers fed whole images at their own sizes: Pixtral in Mistral's format, Mistral 3."""

from __future__ import annotations

from typing import Any

import torch.nn as nn

from vllm_fork_testkit.tower_families.core import (
    TINY_VIT,
    TowerFamily,
    by_size,
    current_dtype,
    randn,
    remote_config,
)


def _build_mistral3(host: nn.Module, size: str) -> None:
    from transformers import Mistral3Config
    from vllm.model_executor.layers.fusion.mm_input_norm import build_mm_input_norm
    from vllm.model_executor.models.mistral3 import (
        Mistral3MultiModalProjector,
        init_vision_tower_for_mistral3,
    )

    vision = by_size(
        size,
        {**TINY_VIT, "image_size": 64, "head_dim": 16},
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
        text_config={"hidden_size": by_size(size, 96, 5120)},
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
    sides = by_size(size, [(32, 48), (16, 16)], [(1036, 1484), (504, 728)])
    return {
        "type": "pixel_values",
        "pixel_values": [randn(generator, 3, h, w).to(current_dtype()) for h, w in sides],
    }


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

        dims = by_size(
            size,
            {
                **TINY_VIT,
                "num_channels": 3,
                "image_size": 64,
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
            text_config=remote_config(hidden_size=by_size(size, 96, text_hidden)),
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

    sides = by_size(size, [(32, 48), (16, 16)], [(1036, 1484), (504, 728)])
    return PixtralImagePixelInputs(
        type="pixel_values",
        images=[
            randn(generator, 3, *_pixtral_image_size(host.vision_args, h, w)).to(current_dtype()) for h, w in sides
        ],
    )


def _pixtral_image_size(args, height: int, width: int) -> tuple[int, int]:
    """The pixel size mistral_common's image encoder gives a `height` x `width` image.

    Scaled down to fit `image_size` (the encoder's rotary table has
    image_size / patch_size positions a side: a larger image indexes past it,
    a device-side assert on CUDA), then up to whole tokens (patch x merge), as
    `ImageEncoder._image_to_num_tokens` does.
    """
    ratio = max(height / args.image_size, width / args.image_size)
    if ratio > 1:
        height, width = max(round(height / ratio), 1), max(round(width / ratio), 1)
    unit = args.patch_size * args.spatial_merge_size
    return -(-height // unit) * unit, -(-width // unit) * unit


FAMILIES: list[TowerFamily] = [
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
]
