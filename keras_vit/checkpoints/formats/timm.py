"""timm's VisionTransformer state dicts (safetensors): recognising them.

timm stores torch Linear weights (out, in), a fused `qkv` (3D, D), `cls_token`,
`pos_embed`, `patch_embed.proj` (D, C, p, p), `norm` and `head`; no pre_logits.
The key translation both ways is `layout.timm_to_official` / `layout.official_to_timm`.
"""

__all__ = ["is_timm_layout"]


def is_timm_layout(names):
    return "patch_embed.proj.weight" in names or "patch_embed.backbone.stem.conv.weight" in names
