"""Audio towers: Qwen2-Audio, Whisper's encoder, Ultravox, ..., LFM3-Audio, Ming-3.0-ASR, Nemotron-3.5-Transcribe."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from vllm_fork_testkit.tower_families.core import (
    TINY_LAYERS,
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
        {**TINY_LAYERS, "num_hidden_layers": 2},
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
        # 4 frames merged into one token: intermediate = 4 x hidden.
        {**TINY_LAYERS, "intermediate_size": 256, "num_key_value_heads": 4},
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


def _build_lfm3_audio(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.lfm3_audio import Lfm3AudioEncoder, Lfm3AudioProjector
    from vllm.transformers_utils.configs.lfm3_audio import Lfm3AudioConfig

    # LFM3-Audio-2B, in the hub checkpoints' training-export layout (as vLLM's
    # tests/models/multimodal/processing/test_lfm3_audio.py writes it): a
    # convolution downsampler (128 mel bins, 8 frames per token) into a 17-layer
    # LFM2 of width 768 (convolutions, attention every third layer and the last
    # two) with a 32-frame causal window, projected into LFM3's 2048.
    backbone = by_size(
        size,
        {**TINY_LAYERS, "num_key_value_heads": 2, "layer_types": ["conv", "conv", "full_attention"]},
        {
            "hidden_size": 768,
            "intermediate_size": 2560,
            "num_hidden_layers": 17,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "layer_types": ["conv", "conv", "full_attention"] * 5 + ["full_attention"] * 2,
        },
    )
    encoder = {
        "dim_in": by_size(size, 32, 128),
        "dim_conv": by_size(size, 16, 256),
        "sliding_window": 32,
        "lfm": {
            "model_type": "lfm2",
            "vocab_size": 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
            **backbone,
        },
    }
    config = host.config = Lfm3AudioConfig(
        lfm={"model_type": "lfm3", "hidden_size": by_size(size, 96, 2048)}, encoder=encoder
    )
    # As Lfm3AudioForConditionalGeneration.__init__.
    host.audio_encoder = Lfm3AudioEncoder(config.audio_encoder_config)
    host.audio_projector = Lfm3AudioProjector(config, prefix="audio_projector")


def _lfm3_audio_inputs(host: nn.Module, size: str, generator):
    # One log-mel per clip, each its own length (the processor splits the
    # padded batch): 30 s and 12 s at 100 frames/s.
    mels = host.config.audio_encoder_config.num_mel_bins
    return {"input_features": [randn(generator, mels, frames) for frames in by_size(size, [600, 240], [3000, 1200])]}


def _with_hf_config_view(dtype: torch.dtype):
    """The current VllmConfig as `VllmConfig.with_hf_config` hands it to a tower.

    The matrix's context has no model config to copy; the view carries the
    config the tower asks for, as `model_config_view` does.
    """
    view = model_config_view(None, dtype)
    view.with_hf_config = lambda hf_config, architectures=None: model_config_view(hf_config, dtype)
    return view


def _build_ming_v3_asr(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.ming_audio import MingAudioEncoder, MingAudioProjector
    from vllm.transformers_utils.configs.ming_v3_asr import MingV3ASRConfig

    # Ming-3.0-asr-tiny: the defaults of vLLM's MingAudioConfig (Whisper-large's
    # encoder, 128 mel bins, 30 s chunks) and a stride-2 convolution projector
    # into the Bailing decoder's 2048 (BailingMoeV3TextConfig's default).
    audio = by_size(
        size,
        {
            "n_mels": 32,
            "n_audio_ctx": 300,
            "n_audio_state": 64,
            "n_audio_head": 4,
            "n_audio_layer": 3,
            "chunk_frames": 300,
        },
        {},
    )
    config = host.config = MingV3ASRConfig(audio_config=audio, text_config={"hidden_size": by_size(size, 96, 2048)})
    host.dtype = current_dtype()
    # As MingV3ASRForConditionalGeneration.__init__.
    host.audio_encoder = MingAudioEncoder(
        vllm_config=_with_hf_config_view(current_dtype()), config=config.audio_config, prefix="audio_encoder"
    )
    host.audio_projector = MingAudioProjector(config.audio_config, config.text_config.hidden_size)


def _ming_v3_asr_inputs(host: nn.Module, size: str, generator):
    # (frames, mel bins) per clip at 100 frames/s, cut into chunks of
    # `chunk_frames` (30 s): a 42 s clip (two chunks) and a 12 s one.
    audio = host.config.audio_config
    frames = by_size(size, [420, 120], [4200, 1200])
    return {
        "audio_feats": [randn(generator, n, audio.n_mels) for n in frames],
        "audio_feats_lengths": torch.tensor(frames),
        "audio_chunk_frames": torch.tensor([audio.chunk_frames] * len(frames)),
    }


def _nemotron_encoder(d_model: int, n_heads: int, n_layers: int, feat_in: int, **extra: Any) -> dict[str, Any]:
    return {
        "feat_in": feat_in,
        "d_model": d_model,
        "n_heads": n_heads,
        "n_layers": n_layers,
        "self_attention_model": "rope",
        "subsampling_factor": 8,
        **extra,
    }


def _build_nemotron3_5_transcribe(host: nn.Module, size: str) -> None:
    from transformers.audio_utils import mel_filter_bank
    from vllm.model_executor.models.nemotron3_5_transcribe_audio import Nemotron3_5TranscribeAudioTower
    from vllm.transformers_utils.configs.nemotron3_5_transcribe import Nemotron3_5TranscribeConfig

    # NVIDIA-Nemotron-3.5-Transcribe-30B-A4B, in its NeMo config.json layout
    # (resolved by vLLM's config class, as for the checkpoint). Its config is
    # not public here: the ASR encoder (1280 wide, 32 layers, per-head q/k
    # LayerNorm, RoPE on half of each head) and the Sortformer speaker encoder
    # (512 wide, 31 layers) are as described for the released model; the
    # Sortformer's 8 heads are transformers' Nemotron3DiarizationAudioConfig,
    # the ASR encoder's 20 heads an assumption (they only size the q/k norms);
    # 128 mel bins of 25 ms windows, 8x subsampling, windows of 500 encoder
    # frames with 50 each side (vLLM's defaults) and the NemotronH decoder's
    # 2688 are the released model's.
    mels = by_size(size, 16, 128)
    asr = by_size(
        size,
        _nemotron_encoder(32, 4, 2, mels, qk_norm=True, rotary_fraction=0.5),
        _nemotron_encoder(1280, 20, 32, mels, qk_norm=True, rotary_fraction=0.5),
    )
    speaker = by_size(size, _nemotron_encoder(24, 4, 2, mels), _nemotron_encoder(512, 8, 31, mels))
    # Tiny: 0.8 s windows, so a few seconds span several windows and fill and
    # compress the speaker cache (as vLLM's own tiny tower test).
    online = by_size(
        size,
        {
            "online_inference_length": 10,
            "chunk_left_context": 2,
            "chunk_right_context": 2,
            "diar_fifo_len": 3,
            "diar_spkcache_update_period": 6,
            "diar_spkcache_len": 12,
        },
        {},
    )
    decoder_width = by_size(size, 96, 2688)
    config = host.config = Nemotron3_5TranscribeConfig(
        architectures=["Nemotron3_5TranscribeForConditionalGeneration"],
        llm_config={"model_type": "nemotron_h", "hidden_size": decoder_width, "vocab_size": 1000},
        perception={
            "preprocessor": {"features": mels, "normalize": None, "window_size": 0.025},
            "modality_adapter": {"_target_": "IdentityConnector", "d_model": asr["d_model"]},
            "output_dim": decoder_width,
        },
        pe_encoder_config={
            "asr_encoder_type": "transformer",
            "asr_encoder_cfg": asr,
            "diarization_model_cfg": {
                "encoder": speaker,
                "high_resolution": True,
                "sortformer_modules": {
                    "use_learnable_sil_emb": True,
                    "fc_d_model": speaker["d_model"],
                    "tf_d_model": by_size(size, 12, 192),
                    "spkcache_sil_frames_per_spk": by_size(size, 1, 3),
                },
            },
            "speaker_feature_mode": "thresholded",
            "speaker_activity_threshold": 0.5,
            **online,
        },
    )
    # As Nemotron3_5TranscribeForConditionalGeneration.__init__.
    host.audio_tower = Nemotron3_5TranscribeAudioTower(config.audio_config, quant_config=None, prefix="audio_tower")
    # The featurizer's window and filterbank are buffers the checkpoint fills
    # (not parameters, so not seeded): NeMo's symmetric Hann window and Slaney
    # mel filters, as it computes them.
    featurizer = host.audio_tower.preprocessor.featurizer
    if featurizer.window.device.type != "meta":
        filters = mel_filter_bank(
            num_frequency_bins=featurizer.n_fft // 2 + 1,
            num_mel_filters=mels,
            min_frequency=0.0,
            max_frequency=8000.0,
            sampling_rate=16000,
            norm="slaney",
            mel_scale="slaney",
        )
        with torch.no_grad():
            featurizer.window.copy_(torch.hann_window(featurizer.win_length, periodic=False))
            featurizer.fb.copy_(torch.from_numpy(filters).T[None])


def _nemotron3_5_transcribe_inputs(host: nn.Module, size: str, generator):
    # Waveforms at 16 kHz (float32, as the processor passes them): a clip
    # spanning two encoder windows and a short one (3 s and 1 s tiny).
    seconds = by_size(size, [3, 1], [60, 12])
    signals = [randn(generator, 16000 * s) * 0.1 for s in seconds]
    return {"audio_signal": signals, "audio_signal_length": torch.tensor([len(x) for x in signals])}


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
    TowerFamily(
        "lfm3_audio",
        "lfm3_audio:Lfm3AudioForConditionalGeneration",
        ("audio_encoder", "audio_projector"),
        _build_lfm3_audio,
        _lfm3_audio_inputs,
        process="embed_multimodal",
        full_tower="LiquidAI/LFM3-Audio-2B",
    ),
    TowerFamily(
        "ming_v3_asr",
        "ming_v3_asr:MingV3ASRForConditionalGeneration",
        ("audio_encoder", "audio_projector"),
        _build_ming_v3_asr,
        _ming_v3_asr_inputs,
        process="embed_multimodal",
        full_tower="inclusionAI/Ming-3.0-asr-tiny",
    ),
    TowerFamily(
        "nemotron3_5_transcribe",
        "nemotron3_5_transcribe:Nemotron3_5TranscribeForConditionalGeneration",
        ("audio_tower",),
        _build_nemotron3_5_transcribe,
        _nemotron3_5_transcribe_inputs,
        process="embed_multimodal",
        full_tower="nvidia/NVIDIA-Nemotron-3.5-Transcribe-30B-A4B (tower dims as described; config not public)",
    ),
]
