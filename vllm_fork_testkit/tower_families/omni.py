"""Thinkers with an audio and a vision tower (both streamed): Qwen3-Omni, Qwen2.5-Omni."""

from __future__ import annotations

import torch
import torch.nn as nn

from vllm_fork_testkit.tower_families.core import (
    TINY,
    TINY_DEPTH_VIT,
    TowerFamily,
    by_size,
    current_dtype,
    qwen_grid_inputs,
    randn,
)
from vllm_fork_testkit.tower_families.grids import qwen2_5_vision_config


def audio_feature_inputs(mel_bins: int, lengths: list[int], generator):
    return {
        "type": "audio_features",
        "input_features": randn(generator, mel_bins, sum(lengths)).to(current_dtype()),
        "audio_feature_lengths": torch.tensor(lengths, dtype=torch.long),
        "feature_attention_mask": None,
    }


def _qwen3_omni_vision_config(size: str):
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import (
        Qwen3OmniMoeVisionEncoderConfig,
    )

    if size == TINY:
        config = Qwen3OmniMoeVisionEncoderConfig(
            **TINY_DEPTH_VIT, deepstack_visual_indexes=[1, 2], num_position_embeddings=64
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

    audio = by_size(
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


def _qwen3_omni_audio_inputs(host: nn.Module, size: str, generator):
    # 100 mel frames per second: 30 s and 12 s of audio.
    return audio_feature_inputs(by_size(size, 32, 128), by_size(size, [300, 120], [3000, 1200]), generator)


def _build_qwen2_5_omni(host: nn.Module, size: str) -> None:
    from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import (
        Qwen2_5OmniAudioEncoderConfig,
    )
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniAudioEncoder
    from vllm.model_executor.models.qwen2_5_vl import Qwen2_5_VisionTransformer

    audio = by_size(
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
        vision_config=qwen2_5_vision_config(size), norm_eps=1e-6, quant_config=None, prefix="visual"
    )


def _qwen2_5_omni_audio_inputs(host: nn.Module, size: str, generator):
    # 100 mel frames per second: 30 s and 12 s of audio.
    return audio_feature_inputs(128, by_size(size, [600, 240], [3000, 1200]), generator)


FAMILIES: list[TowerFamily] = [
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
        qwen_grid_inputs(16),
        full_tower="Qwen/Qwen3-Omni-30B-A3B-Instruct",
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
        qwen_grid_inputs(14),
        full_tower="Qwen/Qwen2.5-Omni-7B",
    ),
]
