"""Towers that pool, resample or tokenize their patches: MiniCPM-V (resampler), Molmo and Molmo2 (attention pooling), Ovis2 (visual tokens)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from vllm_fork_testkit.tower_families.core import (
    SO400M_14,
    TINY_VIT,
    TowerFamily,
    by_size,
    current_dtype,
    randn,
    random_tiles,
    remote_config,
)


def siglip_config(size: str, full: dict[str, Any], **extra: Any):
    """A transformers SigLIP vision config: tiny, or `full` (a released tower)."""
    from transformers import SiglipVisionConfig

    dims = by_size(
        size,
        TINY_VIT,
        full,
    )
    return SiglipVisionConfig(**dims, **extra)


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


def _minicpmv_builder(version: tuple[int, int], llm_hidden: int):
    def build(host: nn.Module, size: str) -> None:
        # The model's __init__ steps for the tower (MiniCPMVBaseModel).
        host.config = remote_config(
            version=".".join(map(str, version)),
            vision_config=siglip_config(size, {**SO400M_14, "image_size": 980}),
            hidden_size=by_size(size, 256, llm_hidden),
            query_num=by_size(size, 8, 64),
            drop_vision_last_layer=False,
        )
        host.version = version
        host.vpm = host.init_vision_module(host.config, None, prefix="vpm")
        host.vision_dim = host.vpm.embeddings.embed_dim
        host.embed_dim = host.config.hidden_size
        host.resampler = host.init_resampler(host.embed_dim, host.vision_dim, None, prefix="resampler")
        from vllm.model_executor.models.minicpmv import Resampler2_5

        if isinstance(host.resampler, Resampler2_5):
            # vLLM's Resampler2_5 (0.33.0, 0.34.0) makes its `pos_embed` buffer on the CPU
            # whatever the build device, and nothing moves it (a non-persistent
            # buffer, loaded with no weight); its forward then indexes it with
            # indices on the input's device, which fails on CUDA. Upstream fixed
            # the same buffer's device by hand (vllm#43844, #43194).
            host.resampler.pos_embed = host.resampler.pos_embed.to(host.resampler.query.device)

    return build


def _minicpmv_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.minicpmv import MiniCPMVImagePixelInputs

    # Slices as the processor cuts them: an overview and 4 slices of a large
    # image (patch grids up to 448/14 = 32 a side), then a small image whole.
    patch = host.config.vision_config.patch_size
    grids = by_size(
        size,
        # Sides in multiples of 4: 4.6 pools 2x2 twice (window merger, merger).
        [(4, 8), (4, 4), (4, 4), (4, 4), (4, 4), (4, 4)],
        [(28, 40), (32, 24), (32, 24), (32, 24), (32, 24), (20, 28)],
    )
    return MiniCPMVImagePixelInputs(
        type="pixel_values",
        # One (3, P, h*w*P) strip of patches per slice.
        pixel_values=[randn(generator, 3, patch, h * w * patch).to(current_dtype()) for h, w in grids],
        tgt_sizes=torch.tensor(grids, dtype=torch.long),
        num_slices=torch.tensor([5, 1]),
    )


def _build_molmo(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.molmo import MolmoVisionBackbone, VisionBackboneConfig

    # MolmoForCausalLM builds `VisionBackboneConfig()` whatever the checkpoint
    # (its defaults are the CLIP ViT-L/14-336 of Molmo-7B-D); the projector
    # takes the language model's sizes. Tiny: 9 layers, for the two feature
    # layers it concatenates (-2 and -9).
    vision = by_size(
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
    host.config = remote_config(hidden_size=by_size(size, 96, 3584), intermediate_size=by_size(size, 192, 37888))
    host.vision_backbone = MolmoVisionBackbone(host.config, vision, None, prefix="vision_backbone")


def _molmo_inputs(host: nn.Module, size: str, generator):
    backbone = host.vision_backbone
    rows, cols = backbone.image_num_patch
    patch = backbone.image_vit.patch_embedding.in_features
    tokens = backbone.llm_patches_per_crop[0] * backbone.llm_patches_per_crop[1]
    # A large image: 12 crops and the global view; a small one: 1 crop and the view.
    crops = by_size(size, [3, 2], [13, 2])
    images = randn(generator, sum(crops), rows * cols, patch).to(current_dtype())
    masks = torch.ones(sum(crops), rows * cols, device=generator.device)
    masks[-1, -cols:] = 0.5  # a partly padded crop
    # Where each crop's pooled tokens go in the prompt (-1: not shown).
    index = torch.arange(sum(crops) * tokens, device=generator.device).view(sum(crops), tokens)
    index[0, -2:] = -1
    return {
        "images": images,
        "image_masks": masks.to(current_dtype()),
        "image_input_idx": index,
        "num_crops": torch.tensor(crops),
    }


MOLMO2_PATCH_TOKEN = 3


def _build_molmo2(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.molmo2 import AdapterConfig, Molmo2VisionBackbone, VitConfig

    vit = by_size(
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
        # SigLIP 2 so400m/14 at 378 as released (transformers' Molmo2VisionConfig
        # defaults): 25 layers, one learned position per patch, 27x27 = 729.
        # vLLM's VitConfig defaults say 27 layers and 577 positions (Molmo 1's
        # CLIP 24x24 + 1), which `add_pos_emb` cannot reshape to a square.
        VitConfig(num_hidden_layers=25, image_num_pos=729),
    )
    # Molmo2-8B's adapter maps to Qwen3-8B (hidden 4096, MLP 12288).
    adapter = by_size(
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
    # Not a tower, so `build_family` does not draw it; its rows are in the encode's
    # output (the prompt tokens around the pooled patches). A fixed draw: the
    # resident and the streamed builds must differ in streaming only.
    weight = embedding.embed_tokens.weight
    if not weight.is_meta:
        with torch.no_grad():
            weight.normal_(generator=torch.Generator(device=weight.device).manual_seed(0))
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
    side = by_size(size, 7, 27)  # patches a side of each crop
    crops = [by_size(size, 3, 5), 1]  # crops and the global view; a small image
    pooling, pooled = [], []
    for image, count in enumerate(crops):
        before = sum(crops[:image])
        cells = [cell for k in range(count) for cell in _pool_2x2(side, side, (before + k) * side * side)]
        pooling += cells
        pooled.append(len(cells))
    tokens = [torch.tensor([1, *[MOLMO2_PATCH_TOKEN] * n, 2]) for n in pooled]
    device = generator.device
    return {
        "pixel_values": randn(generator, sum(crops), side * side, patch_dim).to(current_dtype()),
        "token_pooling": torch.tensor(pooling, device=device),
        "num_pooled_patches": torch.tensor(pooled),
        "image_tokens": torch.cat(tokens).to(device),
        "num_image_tokens": torch.tensor([len(t) for t in tokens]),
    }


def _build_ovis(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.ovis import VisualEmbedding, VisualTokenizer

    backbone = remote_config(
        model_type="aimv2_vision_model",
        num_channels=3,
        rms_norm_eps=1e-5,
        qkv_bias=False,
        mlp_bias=False,
        **by_size(
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
        vocab_size=by_size(size, 256, 65536),
        hidden_stride=2,
        drop_cls_token=False,
        tokenize_function="softmax",
    )
    host.config = remote_config(visual_tokenizer_config=tokenizer, hidden_size=by_size(size, 96, 3584))
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
        flat_data=random_tiles(generator, sum(patches), side),
        # The indicator ids are the table's last 5 rows.
        indicator_tokens=(vocab - 5 + torch.arange(indicators, device=generator.device) % 5),
        patches_per_image=patches,
    )


def _build_minicpmv4_6(host: nn.Module, size: str) -> None:
    from transformers.models.minicpmv4_6.configuration_minicpmv4_6 import MiniCPMV4_6Config
    from vllm.model_executor.models.idefics2_vision_model import Idefics2VisionTransformer
    from vllm.model_executor.models.minicpmv4_6 import (
        MiniCPMV4_6Merger,
        MiniCPMV4_6ViTWindowAttentionMerger,
    )

    vision = by_size(
        size,
        {**TINY_VIT, "num_hidden_layers": 4, "insert_layer_id": 1},
        {},  # transformers' defaults, documented as openbmb/MiniCPM-V-4.6
    )
    config = host.config = MiniCPMV4_6Config(
        vision_config=vision,
        # "model_type" as in the checkpoint's config.json: transformers 5.16 looks it up.
        text_config={"model_type": "qwen3_5_text", "hidden_size": by_size(size, 96, 4096)},
        insert_layer_id=vision.get("insert_layer_id", 6),
    )
    # As MiniCPMV4_6ForConditionalGeneration.__init__. Its encode calls the
    # vpm's embeddings and layers one by one, never `vpm.forward`.
    host.vpm = Idefics2VisionTransformer(
        config.vision_config, quant_config=None, apply_encoder_attention_mask=True, prefix="vpm"
    )
    host.vit_merger = MiniCPMV4_6ViTWindowAttentionMerger(config.vision_config, quant_config=None, prefix="vit_merger")
    host.merger = MiniCPMV4_6Merger(
        hidden_size=config.vision_config.hidden_size, llm_embed_dim=config.text_config.hidden_size
    )


FAMILIES: list[TowerFamily] = [
    TowerFamily(
        "minicpmv",
        "minicpmv:MiniCPMV2_6",
        ("vpm", "resampler"),
        _minicpmv_builder((2, 6), llm_hidden=3584),
        _minicpmv_inputs,
        process="_process_vision_input",
        full_tower="openbmb/MiniCPM-V-2_6",
        works_around="vLLM (0.33.0, 0.34.0) leaves Resampler2_5.pos_embed on the CPU after a CUDA build (its forward "
        "then indexes it with CUDA indices and fails); the harness moves it to the towers' device",
    ),
    TowerFamily(
        "minicpmv4_5",
        "minicpmv:MiniCPMV4_5",
        ("vpm", "resampler"),
        _minicpmv_builder((4, 5), llm_hidden=4096),
        _minicpmv_inputs,
        process="_process_vision_input",
        full_tower="openbmb/MiniCPM-V-4_5",
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
        "ovis",
        "ovis:Ovis",
        ("visual_tokenizer", "vte"),
        _build_ovis,
        _ovis_inputs,
        full_tower="AIDC-AI/Ovis2-8B",
    ),
    TowerFamily(
        "minicpmv4_6",
        "minicpmv4_6:MiniCPMV4_6ForConditionalGeneration",
        ("vpm", "vit_merger", "merger"),
        _build_minicpmv4_6,
        _minicpmv_inputs,
        process="_process_vision_input",
        full_tower="openbmb/MiniCPM-V-4.6",
    ),
]
