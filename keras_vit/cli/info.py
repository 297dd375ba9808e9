"""`keras-vit info`: the architectures and their catalogued weights."""

__all__ = ["add_parser", "run"]


def add_parser(commands):
    parser = commands.add_parser("info", help="list the architectures and their catalogued weights")
    parser.set_defaults(run=run)
    return parser


def run(args):
    from keras_vit.checkpoints import catalogue
    from keras_vit.variants import VARIANTS

    print(f"{'variant':<22}{'width':>6}{'depth':>6}{'heads':>6}{'stride':>7}  weights")
    for v in VARIANTS.values():
        tags = ", ".join(c.tag for c in catalogue() if c.variant == v.name and not c.hub) or "-"
        print(f"{v.name:<22}{v.width:>6}{v.depth:>6}{v.heads:>6}{v.total_stride:>7}  {tags}")
    print("\nHugging Face Hub weights (weights=\"hf://owner/name\", the 'hub' extra):")
    print(f"{'variant':<14}{'format':<14}{'classes':>8}{'res':>5}{'pre':>6}  weights=")
    for c in catalogue():
        if c.hub:
            print(f"{c.variant:<14}{c.format:<14}{c.classes or '-':>8}{c.resolution:>5}"
                  f"{c.representation_size or '-':>6}  {c.tag}")
    return 0
