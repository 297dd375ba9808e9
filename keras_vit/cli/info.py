"""`keras-vit info`: the architectures and their catalogued weights."""

__all__ = ["add_parser", "run"]


def add_parser(commands):
    parser = commands.add_parser("info", help="list the architectures and their catalogued weights")
    parser.set_defaults(run=run)
    return parser


def run(args):
    from keras_vit.checkpoints import catalogue
    from keras_vit.variants import BIT_VARIANTS, DEMO_VARIANT, FAMILIES, VARIANTS
    from keras_vit.variants.timm_names import TIMM_ARCHITECTURES

    row = "{:<22}{:>6}{:>6}{:>6}{:>7}  {}"
    print(row.format("variant", "width", "depth", "heads", "stride", "weights"))
    for v in VARIANTS.values():
        tags = ", ".join(c.tag for c in catalogue() if c.variant == v.name and not c.hub) or "-"
        print(row.format(v.name, v.width, v.depth, v.heads, v.total_stride, tags))
    demo = DEMO_VARIANT  # keras_vit's own, not an official architecture: no weights
    print(row.format("demo", demo.width, demo.depth, demo.heads, demo.total_stride,
                     f"- ({demo.name}, keras_vit's tiny ViT for train --model demo)"))
    print("\nThe families after the paper (keras_vit.ViT(\"DINOv2-S/14-reg4\"), or its timm name;"
          " keras_vit.from_pretrained(source) reads the family from the file):")
    print(f"{'variant':<22}{'width':>6}{'depth':>6}{'heads':>6}{'patch':>6}{'res':>5}  timm")
    timm_names = {official: timm for timm, (official, _) in TIMM_ARCHITECTURES.items()}
    for v in FAMILIES.values():
        print(f"{v.name:<22}{v.width:>6}{v.depth:>6}{v.heads:>6}{v.patch_size:>6}"
              f"{v.image_size:>5}  {timm_names.get(v.name, '-')}")
    print("\nBiT ResNetV2, the paper's CNN baseline (train --model BiT-R50x1, ...):")
    print(row.format("model", "width", "depth", "heads", "stride", "weights"))
    for b in BIT_VARIANTS.values():
        tags = ", ".join(c.tag for c in catalogue() if c.variant == b.name)
        print(row.format(b.name, f"x{b.width}", b.depth, "-", 32, tags))
    print("\nHugging Face Hub weights (weights=\"hf://owner/name\", the 'hub' extra):")
    # as wide as the longest licence name (FAIR's non-commercial research licence), plus a space
    hub = [c for c in catalogue() if c.hub]
    licence = max(len("licence"), *(len(c.license or "-") for c in hub)) + 1
    # and the variant column as wide as the longest name (SigLIP2-So400m/16-naflex), plus a space
    name = max(22, *(len(c.variant) + 1 for c in hub))
    print(f"{'variant':<{name}}{'format':<14}{'classes':>8}{'res':>5}{'pre':>6}  "
          f"{'licence':<{licence}}weights=")
    for c in hub:
        print(f"{c.variant:<{name}}{c.format:<14}{c.classes or '-':>8}{c.resolution:>5}"
              f"{c.representation_size or '-':>6}  {c.license or '-':<{licence}}{c.tag}")
    return 0
