"""Towers fed fixed-size tiles or crops: InternVL, Gemma 3, Llama 4, Idefics3, Step3-VL, LLaVA, PaliGemma, BLIP-2, Phi-3.5-vision, GLM-4V."""

from __future__ import annotations

import torch
import torch.nn as nn

from vllm_fork_testkit.tower_families.core import (
    SO400M_14,
    TINY_LAYERS,
    TINY_VIT,
    TowerFamily,
    by_size,
    current_dtype,
    randn,
    random_tiles,
    remote_config,
)

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


def _internvl_builder(text_hidden: int):
    """InternVLChatModel's tower steps (InternViT-300M-448px), for it and its subclasses."""

    def build(host: nn.Module, size: str) -> None:
        # InternViT's block and embedding options, as InternViT-300M-448px-V2.5 sets them.
        internvit = {
            "qk_normalization": False,
            "norm_type": "layer_norm",
            "layer_norm_eps": 1e-6,
            "hidden_act": "gelu",
            "num_channels": 3,
            "qkv_bias": True,
            "drop_path_rate": 0.0,
            "initializer_factor": 1.0,
        }
        vision = by_size(
            size,
            remote_config(**TINY_VIT, **internvit),
            # InternViT-300M-448px-V2.5 (InternVL3-8B).
            remote_config(
                hidden_size=1024,
                num_attention_heads=16,
                intermediate_size=4096,
                num_hidden_layers=24,
                image_size=448,
                patch_size=14,
                **internvit,
            ),
        )
        config = host.config = remote_config(
            vision_config=vision,
            text_config=remote_config(hidden_size=by_size(size, 96, text_hidden)),
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

    return build


def _internvl_inputs(host: nn.Module, size: str, generator):
    # A 12-tile image (dynamic tiling, thumbnail included) and a 1-tile one.
    tiles = by_size(size, [3, 1], [7, 1])
    return {
        "type": "pixel_values",
        "pixel_values_flat": random_tiles(generator, sum(tiles), host.config.vision_config.image_size),
        "num_patches": torch.tensor(tiles),
    }


def _build_gemma3(host: nn.Module, size: str) -> None:
    from transformers import Gemma3Config
    from vllm.model_executor.models.gemma3_mm import Gemma3MultiModalProjector
    from vllm.model_executor.models.siglip import SiglipVisionModel

    vision = by_size(
        size,
        TINY_VIT,
        # SigLIP-so400m at 896 (Gemma 3 4B/12B/27B).
        {**SO400M_14, "image_size": 896},
    )
    config = host.config = Gemma3Config(
        vision_config={**vision, "vision_use_head": False},
        text_config={"hidden_size": by_size(size, 96, 2560)},
        mm_tokens_per_image=by_size(size, 16, 256),
    )
    host.vision_tower = SiglipVisionModel(config.vision_config, None, prefix="vision_tower")
    host.multi_modal_projector = Gemma3MultiModalProjector(config)


def _gemma3_inputs(host: nn.Module, size: str, generator):
    crops = by_size(size, [2, 1], [3, 1])  # pan-and-scan crops + the image
    return {
        "type": "pixel_values",
        "pixel_values": random_tiles(generator, sum(crops), host.config.vision_config.image_size),
        "num_patches": torch.tensor(crops),
    }


def _build_llama4(host: nn.Module, size: str) -> None:
    from transformers import Llama4Config
    from vllm.model_executor.models.mllama4 import (
        Llama4MultiModalProjector,
        Llama4VisionModel,
    )

    vision = by_size(
        size,
        # The pixel-shuffle MLP takes 4x hidden: intermediate = 4 * hidden.
        {
            **TINY_VIT,
            "intermediate_size": 256,
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
    config = host.config = Llama4Config(vision_config=vision, text_config={"hidden_size": by_size(size, 96, 5120)})
    host.vision_model = Llama4VisionModel(config=config.vision_config, quant_config=None, prefix="vision_model")
    host.multi_modal_projector = Llama4MultiModalProjector(
        config=config, quant_config=None, prefix="multi_modal_projector"
    )


def _llama4_inputs(host: nn.Module, size: str, generator):
    chunks = by_size(size, [3, 1], [5, 1])  # 2x2 tiles + global view, and one tile
    return {
        "type": "pixel_values",
        "pixel_values": random_tiles(generator, sum(chunks), host.config.vision_config.image_size),
        "patches_per_image": torch.tensor(chunks),
        "aspect_ratios": torch.tensor([[2, 2], [1, 1]]),
    }


def _build_idefics3(host: nn.Module, size: str) -> None:
    from transformers import Idefics3Config
    from vllm.model_executor.models.idefics3 import (
        Idefics3Connector,
        Idefics3Model,
        Idefics3VisionTransformer,
    )

    vision = by_size(
        size,
        TINY_VIT,
        # Idefics3-8B-Llama3 (SigLIP-so400m at 364).
        {**SO400M_14, "image_size": 364},
    )
    config = Idefics3Config(
        vision_config=vision,
        text_config={"hidden_size": by_size(size, 96, 4096)},
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

    tiles = by_size(size, [3, 1], [5, 1])  # 2x2 tiles + global image, one tile
    side = host.config.vision_config.image_size
    return Idefics3ImagePixelInputs(
        type="pixel_values",
        pixel_values=random_tiles(generator, sum(tiles), side),
        pixel_attention_mask=torch.ones(sum(tiles), side, side, dtype=torch.bool, device=generator.device),
        num_patches=torch.tensor(tiles),
        resolve_bindings={"h": side, "w": side},
    )


def _build_step3_vl(host: nn.Module, size: str) -> None:
    from vllm.model_executor.layers.conv import Conv2dLayer
    from vllm.model_executor.models.step3_vl import Step3VisionTransformer
    from vllm.transformers_utils.configs.step3_vl import Step3VisionEncoderConfig

    vision = by_size(
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
        hidden_size=by_size(size, 96, 7168),
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
    side, crop = by_size(size, (32, 16), (728, 504))
    crops = [2, 0]
    return {
        "type": "pixel_values",
        "pixel_values": random_tiles(generator, len(crops), side),
        "patch_pixel_values": random_tiles(generator, sum(crops), crop),
        "num_patches": torch.tensor(crops),
    }


def _llava_builder(next_: bool):
    """LLaVA-1.5 (`next_=False`) or LLaVA-NeXT (anyres tiles and a newline
    embedding, a parameter of the model that stays resident)."""

    def build(host: nn.Module, size: str) -> None:
        from transformers import LlavaConfig, LlavaNextConfig
        from vllm.model_executor.models.llava import (
            LlavaMultiModalProjector,
            init_vision_tower_for_llava,
        )

        side = by_size(size, TINY_VIT, CLIP_L14_336)["image_size"]
        config = host.config = (LlavaNextConfig if next_ else LlavaConfig)(
            vision_config={"model_type": "clip_vision_model", **by_size(size, TINY_VIT, CLIP_L14_336)},
            text_config={"hidden_size": by_size(size, 96, 4096)},
            vision_feature_layer=-2,
            vision_feature_select_strategy="default",
            **({"image_grid_pinpoints": [[side, 2 * side], [2 * side, side], [2 * side, 2 * side]]} if next_ else {}),
        )
        # As Llava(Next)ForConditionalGeneration.__init__.
        host.select_layers = None
        host.vision_tower = init_vision_tower_for_llava(
            config, quant_config=None, require_post_norm=False, prefix="vision_tower"
        )
        if next_:
            host.image_newline = nn.Parameter(torch.zeros(config.text_config.hidden_size))
        host.multi_modal_projector = LlavaMultiModalProjector(
            vision_hidden_size=config.vision_config.hidden_size,
            text_hidden_size=config.text_config.hidden_size,
            projector_hidden_act=config.projector_hidden_act,
            multimodal_projector_bias=config.multimodal_projector_bias,
            quant_config=None,
            prefix="multi_modal_projector",
        )

    return build


def _llava_next_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.llava_next import LlavaNextImagePixelInputs

    # anyres: the base view and 2x2 tiles of a large image, 1x2 of a wide one.
    side = host.config.vision_config.image_size
    return LlavaNextImagePixelInputs(
        type="pixel_values",
        pixel_values=[random_tiles(generator, 5, side), random_tiles(generator, 3, side)],
        image_sizes=torch.tensor([[2 * side - 4, 2 * side - 8], [side - 4, 2 * side - 4]]),
    )


def _square_images_inputs(count: int):
    """`count` images at the tower's own square size (LLaVA, PaliGemma)."""

    def inputs(host: nn.Module, size: str, generator):
        side = host.config.vision_config.image_size
        return {"type": "pixel_values", "pixel_values": random_tiles(generator, count, side)}

    return inputs


def _build_paligemma(host: nn.Module, size: str) -> None:
    from transformers import PaliGemmaConfig
    from vllm.model_executor.models.paligemma import PaliGemmaMultiModalProjector
    from vllm.model_executor.models.siglip import SiglipVisionModel

    # PaliGemma 2 3B at 448: SigLIP-so400m/14, projected to Gemma 2's 2304.
    vision = by_size(size, TINY_VIT, {**SO400M_14, "image_size": 448})
    config = host.config = PaliGemmaConfig(
        vision_config={**vision, "projection_dim": by_size(size, 96, 2304)},
        text_config={"hidden_size": by_size(size, 96, 2304)},
    )
    host.vision_tower = SiglipVisionModel(config.vision_config, None, prefix="vision_tower")
    host.multi_modal_projector = PaliGemmaMultiModalProjector(
        vision_hidden_size=config.vision_config.hidden_size,
        projection_dim=config.vision_config.projection_dim,
    )


def _paligemma_inputs(host: nn.Module, size: str, generator):
    side = host.config.vision_config.image_size
    return {"type": "pixel_values", "data": random_tiles(generator, 2, side)}


def _build_blip2(host: nn.Module, size: str) -> None:
    from transformers import Blip2Config
    from vllm.model_executor.models.blip import BlipVisionModel
    from vllm.model_executor.models.blip2 import Blip2QFormerModel

    tiny_qformer = {**TINY_LAYERS, "num_hidden_layers": 2, "encoder_hidden_size": 64}
    # transformers' defaults are Salesforce/blip2-opt-2.7b's ViT-g and Q-Former.
    config = host.config = Blip2Config(
        vision_config=by_size(size, TINY_VIT, {}),
        qformer_config=by_size(size, tiny_qformer, {}),
        text_config={"model_type": "opt", "hidden_size": by_size(size, 96, 2560)},
        num_query_tokens=by_size(size, 8, 32),
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
    return Blip2ImagePixelInputs(type="pixel_values", data=random_tiles(generator, 2, side))


def _build_phi3v(host: nn.Module, size: str) -> None:
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
    from vllm.model_executor.models.phi3v import Phi3HDImageEmbedding

    # The CLIP is fixed (ViT-L/14-336: the HD transform asserts 576 patches of
    # width 1024); `layer_idx` sets its depth: 2 layers on the CPU, 23 in
    # Phi-3.5-vision-instruct (-2).
    config = host.config = remote_config(
        hidden_size=by_size(size, 96, 3072),
        vocab_size=by_size(size, 64, 32064),
        img_processor={"image_dim_out": 1024, "num_img_tokens": 144, "layer_idx": by_size(size, 1, -2)},
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
    sizes = by_size(size, [(336, 672), (336, 336)], [(1008, 1344), (336, 672)])
    crops = 1 + max(h // 336 * (w // 336) for h, w in sizes)
    return Phi3VImagePixelInputs(
        type="pixel_values",
        pixel_values=randn(generator, len(sizes), crops, 3, 336, 336).to(current_dtype()),
        image_sizes=torch.tensor(sizes),
    )


def _build_glm4v(host: nn.Module, size: str) -> None:
    from vllm.model_executor.models.glm4v import EVA2CLIPModel, GLM4VModel

    vision = by_size(
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
        hidden_size=by_size(size, 96, 4096),
        ffn_hidden_size=by_size(size, 192, 13696),
        dtype=current_dtype(),
    )
    # The tower target is GLM4VModel.vision (`_mark_composite_model`); the
    # rest of GLM4VModel is the language model.
    host.transformer = GLM4VModel.__new__(GLM4VModel)
    nn.Module.__init__(host.transformer)
    host.transformer.vision = EVA2CLIPModel(host.config, None, prefix="transformer.vision")


def _glm4v_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.glm4v import GLMVImagePixelInputs

    side = host.config.vision_config["image_size"]
    return GLMVImagePixelInputs(type="pixel_values", data=random_tiles(generator, 2, side))


def _build_interns1(host: nn.Module, size: str) -> None:
    from transformers import InternVLConfig

    # Intern-S1-mini: InternViT-300M-448px (transformers' InternVL defaults)
    # and Qwen3-8B's 4096.
    vision = by_size(
        size,
        {**TINY_LAYERS, "image_size": [32, 32], "patch_size": [4, 4]},
        {},
    )
    config = host.config = InternVLConfig(vision_config=vision, text_config={"hidden_size": by_size(size, 96, 4096)})
    # As InternS1ForConditionalGeneration.__init__.
    host.patch_size = config.vision_config.patch_size[0]
    host.downsample_ratio = config.downsample_ratio
    host.vision_tower = host._init_vision_model(config, None, prefix="vision_tower")
    host.multi_modal_projector = host._init_mlp1(config)


def _interns1_inputs(host: nn.Module, size: str, generator):
    from vllm.model_executor.models.interns1 import InternS1ImagePixelInputs

    tiles = by_size(size, [3, 1], [7, 1])  # dynamic tiles + thumbnail, and one tile
    side = host.config.vision_config.image_size[0]
    return InternS1ImagePixelInputs(
        type="pixel_values", pixel_values=random_tiles(generator, sum(tiles), side), num_patches=torch.tensor(tiles)
    )


FAMILIES: list[TowerFamily] = [
    TowerFamily(
        "internvl",
        "internvl:InternVLChatModel",
        ("vision_model", "mlp1"),
        _internvl_builder(text_hidden=3584),  # Qwen2.5-7B's width
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
        "idefics3",
        "idefics3:Idefics3ForConditionalGeneration",
        ("model.vision_model", "model.connector"),
        _build_idefics3,
        _idefics3_inputs,
        full_tower="HuggingFaceM4/Idefics3-8B-Llama3",
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
        "llava",
        "llava:LlavaForConditionalGeneration",
        ("vision_tower", "multi_modal_projector"),
        _llava_builder(next_=False),
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
        "llava_next",
        "llava_next:LlavaNextForConditionalGeneration",
        ("vision_tower", "multi_modal_projector"),
        _llava_builder(next_=True),
        _llava_next_inputs,
        full_tower="llava-hf/llava-v1.6-mistral-7b-hf",
    ),
    TowerFamily(
        "interns1",
        "interns1:InternS1ForConditionalGeneration",
        ("vision_tower", "multi_modal_projector"),
        _build_interns1,
        _interns1_inputs,
        process="_process_vision_input",
        full_tower="internlm/Intern-S1-mini",
    ),
    TowerFamily(
        "h2ovl",
        "h2ovl:H2OVLChatModel",
        ("vision_model", "mlp1"),
        _internvl_builder(text_hidden=2560),  # H2O-Danube2's width
        _internvl_inputs,
        process="_process_vision_input",
        full_tower="h2oai/h2ovl-mississippi-2b",
    ),
]
