"""The checkpoints the GPU engine and server tests make (vllm_fork_testkit/vlm_checkpoint.py), checked on
the CPU: a GPU session is too scarce to find a broken config or processor there.

For each family: transformers and vLLM's own config loader read the directory as the published
checkpoint's family, with the full-size tower's dimensions; the saved processor turns an image of
N tokens (image_of_tokens) into exactly the image tokens the engine tests count on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fork_testkit import vlm_checkpoint as ckpt

ARCHITECTURES = {
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
}


@pytest.fixture(scope="module", params=ckpt.FAMILIES)
def checkpoint(request, tmp_path_factory) -> Path:
    return ckpt.make_checkpoint(request.param, tmp_path_factory.mktemp(request.param))


def test_configs_read_as_the_family_with_the_full_size_tower(checkpoint):
    from transformers import AutoConfig
    from vllm.transformers_utils.config import get_config

    family = ckpt.family_of(checkpoint)
    vision = ckpt.VISION if family == "qwen3_vl" else ckpt.VISION_QWEN2_5
    for config in (AutoConfig.from_pretrained(checkpoint), get_config(str(checkpoint), trust_remote_code=False)):
        assert config.model_type == family
        assert config.architectures == [ARCHITECTURES[family]]
        assert config.vision_config.depth == vision["depth"]
        assert config.vision_config.hidden_size == vision["hidden_size"]
        text = config.get_text_config()
        assert text.hidden_size == vision["out_hidden_size"]  # the mergers project into it
        assert text.num_hidden_layers == 2
        assert text.hidden_size // text.num_attention_heads == 128


@pytest.mark.parametrize("tokens", [64, 256, 2223])
def test_an_image_of_n_tokens_becomes_n_image_tokens(checkpoint, tokens):
    from transformers import AutoProcessor

    family = ckpt.family_of(checkpoint)
    processor = AutoProcessor.from_pretrained(checkpoint)
    image = ckpt.image_of_tokens(tokens, seed=1, family=family)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe it."}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    assert prompt.count("<|image_pad|>") == 1
    batch = processor(text=[prompt], images=[image], return_tensors="pt")
    side = round(tokens**0.5)
    expected = side * (tokens // side)  # image_of_tokens' grid of merged patches
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert int((batch["input_ids"] == pad).sum()) == expected
    assert abs(expected - tokens) <= 0.02 * tokens
