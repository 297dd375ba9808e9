"""The transformers layout of a save_pretrained folder, for the families transformers has a
class of: config.json (model_type, sizes, activation, epsilon), model.safetensors in that
class's keys, preprocessor_config.json (the mean/std). `AutoModel.from_pretrained(folder)`
builds ViTModel / ViTForImageClassification, Dinov2Model, Dinov2WithRegistersModel,
SiglipVisionModel or CLIPVisionModel(WithProjection); keras_vit's transformers readers
(checkpoints/formats/transformers*.py) read it back.
"""

import numpy as np

from keras_vit.checkpoints.formats.rows import from_official
from keras_vit.checkpoints.formats.transformers import TRANSFORMERS_ROWS
from keras_vit.checkpoints.formats.transformers_families import FAMILY_SOURCES
from keras_vit.checkpoints.layout import PRE_LOGITS_KERNEL_KEY, official_arrays
from keras_vit.errors import ArgumentError

__all__ = ["transformers_layout", "TRANSFORMERS_FAMILIES"]

# keras_vit's family -> (transformers model type, its vision model class, the prefix of the
# tower's keys in that class).
TRANSFORMERS_FAMILIES = {"ViT": ("vit", "ViTModel", ""), "DINOv2": ("dinov2", "Dinov2Model", ""),
                         "SigLIP": ("siglip_vision_model", "SiglipVisionModel", "vision_model."),
                         "CLIP": ("clip_vision_model", "CLIPVisionModel", "vision_model.")}


def _activation(variant, approximate_gelu):
    if variant.activation == "quick_gelu":
        return "quick_gelu"
    return "gelu_pytorch_tanh" if approximate_gelu else "gelu"


def transformers_layout(model, variant, metadata, classes, labels):
    """(config.json, preprocessor_config.json, state dict) of `model` in transformers' layout;
    a family or structure transformers has no class for is refused in one line."""
    family = variant.family
    plain = family == "ViT" and variant.classifier == "token" and not variant.is_hybrid
    if family not in TRANSFORMERS_FAMILIES or (family == "ViT" and not plain):
        raise ArgumentError(f"transformers has no class for {variant.name} in keras_vit's "
                            f"layout (it writes {', '.join(TRANSFORMERS_FAMILIES)} towers); "
                            "save it in timm's layout.")
    model_type, architecture, prefix = TRANSFORMERS_FAMILIES[family]
    arrays = official_arrays(model)
    if family == "ViT" and PRE_LOGITS_KERNEL_KEY in arrays:
        raise ArgumentError("transformers' ViTModel pools through a tanh layer of its own; a "
                            "model with pre_logits is not written in its layout.")
    if family == "DINOv2" and variant.register_tokens:
        model_type, architecture = "dinov2_with_registers", "Dinov2WithRegistersModel"
    if classes and family in ("DINOv2", "SigLIP"):
        raise ArgumentError(f"transformers' {architecture} is a backbone; build the model with "
                            "include_top=False, or save it in timm's layout.")
    height = model.input_shape[1]
    config = {"model_type": model_type, "hidden_size": variant.width,
              "num_hidden_layers": variant.depth, "num_attention_heads": variant.heads,
              "image_size": height, "patch_size": variant.patch_size, "num_channels": 3,
              "layer_norm_eps": metadata["layer_norm_epsilon"],
              "hidden_act": _activation(variant, metadata["approximate_gelu"])}
    if family == "DINOv2":
        if variant.feed_forward == "swiglu":
            raise ArgumentError("DINOv2's SwiGLU giant: transformers sizes its MLP from "
                                "mlp_ratio by its own rounding; save it in timm's layout.")
        if variant.mlp_dim % variant.width:  # transformers' Dinov2Config takes an int ratio
            raise ArgumentError(f"transformers' DINOv2 sizes its MLP as a whole multiple of the "
                                f"width; {variant.mlp_dim} is not one of {variant.width}: save "
                                "it in timm's layout.")
        config.update(mlp_ratio=variant.mlp_dim // variant.width, layerscale_value=1.0,
                      use_swiglu_ffn=False)
        if variant.register_tokens:
            config["num_register_tokens"] = variant.register_tokens
    else:
        config["intermediate_size"] = variant.mlp_dim
    rows = TRANSFORMERS_ROWS if family == "ViT" else FAMILY_SOURCES[model_type].rows
    sd = from_official(rows, arrays, f"transformers {model_type}")
    if model_type.startswith("dinov2"):
        sd["embeddings.mask_token"] = np.zeros((1, variant.width), np.float32)
        if variant.register_tokens:  # the class token's position, folded into it, unfolded
            positions = sd["embeddings.position_embeddings"]
            sd["embeddings.position_embeddings"] = np.concatenate(
                [np.zeros_like(positions[:, :1]), positions], axis=1)
    head = {k: sd.pop(k) for k in [k for k in sd if k.startswith(("classifier", "visual_projection"))]}
    sd = {prefix + key: value for key, value in sd.items()}
    if family == "ViT" and head:
        sd = {"vit." + key: value for key, value in sd.items()}
        architecture = "ViTForImageClassification"
        names = labels or [str(i) for i in range(classes)]
        config.update(id2label=dict(enumerate(names)),
                      label2id={name: i for i, name in enumerate(names)})
    if family == "CLIP" and head:
        architecture = "CLIPVisionModelWithProjection"
        config["projection_dim"] = classes
    sd.update(head)
    config["architectures"] = [architecture]
    mean, std = metadata["normalization"]
    processor = {"do_resize": True, "size": {"height": height, "width": height},
                 "resample": 2, "do_rescale": True, "rescale_factor": 1 / 255,
                 "do_normalize": True, "image_mean": list(mean), "image_std": list(std)}
    return config, processor, {k: np.ascontiguousarray(v, np.float32) for k, v in sd.items()}
