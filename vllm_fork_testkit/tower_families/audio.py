"""Audio towers: Qwen2-Audio, Whisper's encoder, Ultravox."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from vllm_fork_testkit.tower_families.core import (
    TowerFamily,
    by_size,
    current_dtype,
    model_config_view,
    randn,
    remote_config,
)


def _build_qwen2_audio(host: nn.Module, size: str) -> None:
    from transformers import Qwen2AudioConfig
    from transformers.models.qwen2_audio.modeling_qwen2_audio import Qwen2AudioEncoder
    from vllm.model_executor.models.qwen2_audio import Qwen2AudioMultiModalProjector

    audio = by_size(
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
    config = host.config = Qwen2AudioConfig(audio_config=audio, text_config={"hidden_size": by_size(size, 96, 4096)})
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
        "input_features": randn(generator, len(lengths), 128, 3000).to(current_dtype()),
        "feature_attention_mask": mask.to(generator.device),
    }


def whisper_config(size: str, **extra: Any):
    """A transformers WhisperConfig: tiny, or Whisper-large-v3's encoder."""
    from transformers import WhisperConfig

    dims = by_size(
        size,
        {"d_model": 64, "encoder_layers": 3, "encoder_attention_heads": 4, "encoder_ffn_dim": 128},
        {"d_model": 1280, "encoder_layers": 32, "encoder_attention_heads": 20, "encoder_ffn_dim": 5120},
    )
    return WhisperConfig(**dims, num_mel_bins=128, max_source_positions=1500, **extra)


def _build_whisper(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.whisper import WhisperEncoder, WhisperModel

    host.config = whisper_config(size)
    host.dtype = current_dtype()
    # Only the encoder of WhisperModel (the tower target); no decoder.
    host.model = WhisperModel.__new__(WhisperModel)
    nn.Module.__init__(host.model)
    host.model.encoder = WhisperEncoder(
        vllm_config=model_config_view(host.config, current_dtype()), prefix="model.encoder"
    )


def _whisper_inputs(host: nn.Module, size: str, generator):
    # Two clips, each padded to Whisper's 30 s window of 100 mel frames/s.
    return {"input_features": [randn(generator, 128, 3000) for _ in range(2)]}


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
        text_config={"model_type": "llama", "hidden_size": by_size(size, 96, 4096)},
        hidden_size=by_size(size, 128, 4096),
        stack_factor=8,
    )
    host.pad_audio_to_max_context = False  # no tower LoRA
    host.audio_tower = UltravoxWhisperEncoder(
        vllm_config=model_config_view(config.audio_config, current_dtype()), prefix="audio_tower", enable_pp=False
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


def _build_voxtral(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.voxtral import AudioLanguageAdapter, VoxtralEncoderModel

    # Voxtral-Mini-3B-2507 (params.json): Whisper-large-v3's encoder, which
    # computes its own log-mel from waveforms; 4 frames per token into 3072.
    audio = whisper_config(
        size,
        window_size=400,
        hop_length=160,
        sampling_rate=16000,
        global_log_mel_max=1.5,
        downsample_factor=4,
    )
    host.config = remote_config(audio_config=audio, text_config=remote_config(hidden_size=by_size(size, 96, 3072)))
    host.downsample_factor = audio.downsample_factor
    # As VoxtralForConditionalGeneration.__init__.
    host.whisper_encoder = VoxtralEncoderModel(model_config_view(audio, current_dtype()), prefix="whisper_encoder")
    host.audio_language_adapter = AudioLanguageAdapter(
        hidden_size=audio.d_model * host.downsample_factor, dim=host.config.text_config.hidden_size
    )


def _voxtral_inputs(host: nn.Module, size: str, generator):
    # Waveforms at 16 kHz, padded by the processor to 30 s chunks: a 60 s
    # clip (two chunks) and a short one (one).
    return {"audio_arrays": [randn(generator, 16000 * seconds) for seconds in (60, 30)]}


def _build_granite_speech(host: nn.Module, size: str) -> None:
    from transformers import GraniteSpeechConfig
    from vllm.model_executor.models.granite_speech import (
        GraniteSpeechCTCEncoder,
        GraniteSpeechEncoderProjector,
    )

    encoder = by_size(
        size,
        {"hidden_dim": 64, "num_layers": 2, "num_heads": 4, "dim_head": 16, "output_dim": 42},
        # granite-speech-3.3-8b (from its published config, not read here).
        {"hidden_dim": 1024, "num_layers": 16, "num_heads": 8, "dim_head": 128, "output_dim": 256},
    )
    qformer = by_size(
        size,
        {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128},
        {"hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 16, "intermediate_size": 4096},
    )
    config = host.config = GraniteSpeechConfig(
        encoder_config={**encoder, "dropout": 0.0},
        projector_config={**qformer, "encoder_hidden_size": encoder["hidden_dim"], "cross_attention_frequency": 1},
        text_config={"model_type": "granite", "hidden_size": by_size(size, 96, 4096)},
        window_size=15,
        downsample_rate=5,
    )
    # As GraniteSpeechForConditionalGeneration.__init__: a conformer CTC
    # encoder, then a windowed Q-Former.
    host.encoder = GraniteSpeechCTCEncoder(config=config.encoder_config, quant_config=None, prefix="encoder")
    host.projector = GraniteSpeechEncoderProjector(
        config=config, quant_config=None, cache_config=host.vllm_config.cache_config, prefix="projector"
    )


def _granite_speech_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.granite_speech import GraniteSpeechAudioInputs

    # Stacked log-mel (2 x 80) at 50 frames/s: 30 s and 12 s, padded.
    frames = torch.tensor([1500, 600])
    window, rate = host.config.window_size, host.config.downsample_rate
    tokens = (frames + window - 1) // window * (window // rate)
    mask = torch.arange(int(tokens.max()), device=generator.device) < tokens.to(generator.device)[:, None]
    return GraniteSpeechAudioInputs(
        input_features=randn(generator, 2, int(frames.max()), 160).to(current_dtype()),
        input_features_mask=mask,
        audio_embed_sizes=tokens.tolist(),
    )


def _build_audioflamingo3(host: nn.Module, size: str) -> None:
    from transformers import AudioFlamingo3Config
    from vllm.model_executor.models.audioflamingo3 import (
        AudioFlamingo3Encoder,
        AudioFlamingo3MultiModalProjector,
    )

    # audio-flamingo-3-hf: Whisper-large-v3's encoder (transformers' defaults)
    # with 2x average pooling, projected into Qwen2.5-7B's 3584.
    audio = by_size(
        size, {"d_model": 64, "encoder_layers": 3, "encoder_attention_heads": 4, "encoder_ffn_dim": 128}, {}
    )
    config = host.config = AudioFlamingo3Config(
        audio_config=audio, text_config={"model_type": "qwen2", "hidden_size": by_size(size, 96, 3584)}
    )
    host.audio_tower = AudioFlamingo3Encoder(config.audio_config)
    host.multi_modal_projector = AudioFlamingo3MultiModalProjector(config)


def _audioflamingo3_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.audioflamingo3 import AudioFlamingo3FeatureInputs

    # 30 s chunks of 128 mel bins: a 42 s clip (two chunks) and a 12 s one.
    frames = torch.tensor([3000, 1200, 1200], device=generator.device)
    return AudioFlamingo3FeatureInputs(
        type="audio_features",
        input_features=randn(generator, 3, 128, 3000).to(current_dtype()),
        feature_attention_mask=(torch.arange(3000, device=generator.device) < frames[:, None]).long(),
        chunk_counts=torch.tensor([2, 1]),
    )


def _build_glmasr(host: nn.Module, size: str) -> None:
    from transformers import GlmAsrConfig
    from vllm.model_executor.models.glmasr import GlmAsrEncoder, GlmAsrMultiModalProjector

    audio = by_size(
        size,
        {
            "hidden_size": 64,
            "intermediate_size": 256,  # 4 frames merged into one token: 4 x hidden
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
        },
        {},  # transformers' defaults, documented as zai-org/GLM-ASR-Nano-2512
    )
    config = host.config = GlmAsrConfig(audio_config=audio, text_config={"hidden_size": by_size(size, 96, 2048)})
    host.audio_tower = GlmAsrEncoder(config.audio_config, quant_config=None, prefix="audio_tower")
    host.multi_modal_projector = GlmAsrMultiModalProjector(config, quant_config=None, prefix="multi_modal_projector")


def _glmasr_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.glmasr import GlmAsrFeatureInputs

    # 30 s chunks of 128 mel bins: a 42 s clip (two chunks) and a 12 s one.
    frames = torch.tensor([3000, 1200, 1200], device=generator.device)
    return GlmAsrFeatureInputs(
        type="audio_features",
        input_features=randn(generator, 3, 128, 3000).to(current_dtype()),
        feature_attention_mask=(torch.arange(3000, device=generator.device) < frames[:, None]).long(),
        chunk_counts=torch.tensor([2, 1]),
    )


def _build_minicpmo_audio(host: nn.Module, size: str) -> None:
    from transformers import WhisperConfig

    # MiniCPM-o 2.6: Whisper-medium's encoder (80 mels), 1 s attention
    # chunks, 2x pooling, projected into Qwen2.5-7B's 3584.
    dims = by_size(
        size,
        {"d_model": 64, "encoder_layers": 3, "encoder_attention_heads": 4, "encoder_ffn_dim": 256},
        {"d_model": 1024, "encoder_layers": 24, "encoder_attention_heads": 16, "encoder_ffn_dim": 4096},
    )
    host.config = remote_config(
        audio_config=WhisperConfig(**dims, num_mel_bins=80, max_source_positions=1500),
        audio_pool_step=2,
        audio_chunk_length=1.0,
    )
    host.embed_dim = by_size(size, 96, 3584)
    # MiniCPMOBaseModel.__init__: init_audio_module also sets the pooler and
    # the projection, inside _mark_tower_model, so both are towers too.
    host.apm = host.init_audio_module(vllm_config=host.vllm_config, prefix="apm")


def _minicpmo_audio_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.minicpmo import MiniCPMOAudioFeatureInputs

    # 80 mel bins at 100 frames/s, padded: a 30 s clip and a 12 s one.
    frames = [3000, 1200]
    return MiniCPMOAudioFeatureInputs(
        type="audio_features",
        audio_features=randn(generator, 2, 80, 3000).to(current_dtype()),
        audio_feature_lens=[torch.tensor([n]) for n in frames],
    )


FAMILIES: list[TowerFamily] = [
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
        "whisper",
        "whisper:WhisperForConditionalGeneration",
        ("model.encoder",),
        _build_whisper,
        _whisper_inputs,
        process="embed_multimodal",
        full_tower="openai/whisper-large-v3",
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
        "voxtral",
        "voxtral:VoxtralForConditionalGeneration",
        ("whisper_encoder", "audio_language_adapter"),
        _build_voxtral,
        _voxtral_inputs,
        process="embed_multimodal",
        full_tower="mistralai/Voxtral-Mini-3B-2507",
        needs=("mistral_common",),
    ),
    TowerFamily(
        "granite_speech",
        "granite_speech:GraniteSpeechForConditionalGeneration",
        ("encoder", "projector"),
        _build_granite_speech,
        _granite_speech_inputs,
        process="_process_audio_input",
        full_tower="ibm-granite/granite-speech-3.3-8b",
    ),
    TowerFamily(
        "audioflamingo3",
        "audioflamingo3:AudioFlamingo3ForConditionalGeneration",
        ("audio_tower", "multi_modal_projector"),
        _build_audioflamingo3,
        _audioflamingo3_inputs,
        process="_process_audio_input",
        full_tower="nvidia/audio-flamingo-3-hf",
    ),
    TowerFamily(
        "glmasr",
        "glmasr:GlmAsrForConditionalGeneration",
        ("audio_tower", "multi_modal_projector"),
        _build_glmasr,
        _glmasr_inputs,
        process="_process_audio_input",
        full_tower="zai-org/GLM-ASR-Nano-2512",
    ),
    TowerFamily(
        "minicpmo_audio",
        "minicpmo:MiniCPMO2_6",
        ("apm", "audio_avg_pooler", "audio_projection_layer"),
        _build_minicpmo_audio,
        _minicpmo_audio_inputs,
        process="_process_audio_input",
        full_tower="openbmb/MiniCPM-o-2_6 (audio tower)",
    ),
]
