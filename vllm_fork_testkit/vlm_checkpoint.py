"""A Qwen3-VL or Qwen2.5-VL checkpoint directory made on the spot, for vLLM's engine and server.

Nothing can be downloaded on the GPU machine, so the tests write what
`vllm serve <dir>` needs: `config.json` (a small text model with a full-size
vision tower: Qwen3-VL-8B's or Qwen2.5-VL-7B's, in the layout of the published
checkpoint's config), a byte-level BPE tokenizer trained in a second on
a tiny corpus with Qwen's special tokens and a chat template, and the
processor files written by `transformers` itself. Weights come from
`load_format="dummy"` (vLLM's seeded random weights, the same for every run).
"""

from __future__ import annotations

import json
from pathlib import Path

# Qwen3-VL-8B's vision tower: 1099 MiB of bf16 weights with a 4096-wide text
# model (the mergers project into the text model's width).
VISION = {
    "depth": 27,
    "hidden_size": 1152,
    "num_heads": 16,
    "intermediate_size": 4304,
    "out_hidden_size": 4096,
    "deepstack_visual_indexes": [8, 16, 24],
    "num_position_embeddings": 2304,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "in_channels": 3,
    "hidden_act": "gelu_pytorch_tanh",
    "initializer_range": 0.02,
}

# Qwen3-VL-2B-Instruct's vision tower (its config.json): 776 MiB in bf16 (the pipeline benchmark's small tower).
VISION_QWEN3_2B = {
    "depth": 24,
    "hidden_size": 1024,
    "num_heads": 16,
    "intermediate_size": 4096,
    "out_hidden_size": 2048,
    "deepstack_visual_indexes": [5, 11, 17],
    "num_position_embeddings": 2304,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "in_channels": 3,
    "hidden_act": "gelu_pytorch_tanh",
}

# Qwen2.5-VL-7B's vision tower (1.26 GiB bf16; its `device` follows a weight,
# the case issue 10 found crashing), from the published config.json.
VISION_QWEN2_5 = {
    "depth": 32,
    "hidden_act": "silu",
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "in_chans": 3,
    "out_hidden_size": 3584,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "spatial_patch_size": 14,
    "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31],
    "tokens_per_second": 2,
    "temporal_patch_size": 2,
}

FAMILIES = ("qwen3_vl", "qwen2_5_vl")
#: Pixels along one side of an image token: a 2x2 merge of the tower's patches.
PIXELS_PER_TOKEN = {"qwen3_vl": 32, "qwen2_5_vl": 28}

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# Qwen's template, reduced to what the tests send: text and image parts.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] in ('image', 'image_url') or 'image' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS = [
    "Describe the picture in one sentence.",
    "A photo of a red square on a white background, next to a blue circle.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "What color is the object in the middle of the image?",
    "There are three cats, two dogs and a bird sitting on the fence.",
] * 20


def _train_tokenizer(directory: Path, vocab_size: int) -> dict[str, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}


def _text_config(family: str, ids: dict[str, int], vocab_size: int, layers: int, max_len: int) -> dict:
    """A small text model as wide as the tower's output (the mergers project into it)."""
    common = {
        "intermediate_size": 4096,
        "num_hidden_layers": layers,
        "num_key_value_heads": 8 if family == "qwen3_vl" else 4,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_len,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "torch_dtype": "bfloat16",
    }
    if family == "qwen3_vl":
        return {
            **common,
            "hidden_size": VISION["out_hidden_size"],
            "num_attention_heads": 32,
            "head_dim": 128,
            "rope_theta": 5_000_000.0,
            "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True},
            "attention_bias": False,
        }
    return {
        **common,
        "hidden_size": VISION_QWEN2_5["out_hidden_size"],
        "num_attention_heads": 28,  # head_dim 128
        "rope_theta": 1_000_000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "use_sliding_window": False,
        "max_window_layers": layers,
    }


def _config(family: str, ids: dict[str, int], text: dict) -> dict:
    """config.json as the published checkpoint lays it out: Qwen3-VL nests the text model,
    Qwen2.5-VL keeps it at the top level."""
    tokens = {
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
    }
    if family == "qwen3_vl":
        head = {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl"}
        return {**head, "torch_dtype": "bfloat16", "tie_word_embeddings": False, **tokens,
                "text_config": text, "vision_config": VISION}  # fmt: skip
    head = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl"}
    return {**head, **text, **tokens, "vision_config": VISION_QWEN2_5}


def _processor(family: str, tokenizer):
    from transformers import Qwen2_5_VLProcessor, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    vision = VISION if family == "qwen3_vl" else VISION_QWEN2_5
    patch = {
        "patch_size": vision["patch_size"],
        "temporal_patch_size": vision["temporal_patch_size"],
        "merge_size": vision["spatial_merge_size"],
    }
    token_pixels = PIXELS_PER_TOKEN[family] ** 2
    image = Qwen2VLImageProcessor(
        **patch,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        min_pixels=64 * token_pixels,
        max_pixels=4096 * token_pixels,
    )
    if family == "qwen3_vl":
        video = Qwen3VLVideoProcessor(**patch)
        return Qwen3VLProcessor(
            image_processor=image, tokenizer=tokenizer, video_processor=video, chat_template=CHAT_TEMPLATE
        )
    video = Qwen2VLVideoProcessor(**patch)
    return Qwen2_5_VLProcessor(
        image_processor=image, tokenizer=tokenizer, video_processor=video, chat_template=CHAT_TEMPLATE
    )


def make_checkpoint(
    family: str,
    directory: Path,
    *,
    text_layers: int = 2,
    vocab_size: int = 1024,
    max_position_embeddings: int = 8192,
) -> Path:
    """Write a checkpoint of `family` (one of FAMILIES; no weights) to `directory` and return it."""
    from transformers import AutoTokenizer

    if family not in FAMILIES:
        raise ValueError(f"no checkpoint recipe for {family!r}; known: {', '.join(FAMILIES)}")
    directory.mkdir(parents=True, exist_ok=True)
    ids = _train_tokenizer(directory, vocab_size)
    text = _text_config(family, ids, vocab_size, text_layers, max_position_embeddings)
    (directory / "config.json").write_text(json.dumps(_config(family, ids, text), indent=2))
    (directory / "generation_config.json").write_text(
        json.dumps({"eos_token_id": ids["<|im_end|>"], "do_sample": False})
    )
    _processor(family, AutoTokenizer.from_pretrained(directory)).save_pretrained(directory)
    return directory


def family_of(checkpoint: Path) -> str:
    """The family of a checkpoint directory made here (its config's model_type)."""
    return json.loads((checkpoint / "config.json").read_text())["model_type"]


def image_of_tokens(tokens: int, seed: int = 0, *, smooth: bool = False, family: str = "qwen3_vl"):
    """A PIL image that `family` encodes into about `tokens` image tokens.

    Each image token is a 2x2 merge of patches (PIXELS_PER_TOKEN: 32x32 pixels
    for Qwen3-VL's 16-pixel patches, 28x28 for Qwen2.5-VL's 14-pixel ones).
    Random pixels by default; `smooth` draws seeded waves instead, which
    compress well when sent over HTTP.
    """
    import numpy as np
    from PIL import Image

    side = max(1, round(tokens**0.5))
    pixels_per_token = PIXELS_PER_TOKEN[family]
    height, width = side * pixels_per_token, max(1, tokens // side) * pixels_per_token
    rng = np.random.default_rng(seed)
    if smooth:
        y, x = np.mgrid[0:height, 0:width].astype(np.float32)
        fy, fx, phase = rng.uniform(0.005, 0.05, size=3)
        channels = [np.sin(fy * y * (c + 1) + fx * x + phase * c) for c in range(3)]
        pixels = ((np.stack(channels, axis=-1) + 1) * 127.5).astype(np.uint8)
    else:
        pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def image_data_url(image) -> str:
    """The image as a PNG data URL, as an OpenAI client sends it."""
    import base64
    import io

    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
