"""The architecture tables, and the parser for their names: the paper's ViTs and the families
after it (`table.py`), BiT (`bit.py`), timm's names for them (`timm_names.py`), and every
spelling to its record (`names.py`)."""

from keras_vit.variants.bit import (
    BIT_UNITS,
    BIT_VARIANTS,
    BiTVariant,
    bit_constructor_names,
    get_bit_variant,
)
from keras_vit.variants.names import (
    constructor_names,
    get_architecture,
    get_variant,
    table_variant,
    timm_variant,
    variant_names,
)
from keras_vit.variants.table import CLIP_MEAN_STD, DEMO_VARIANT, FAMILIES, VARIANTS, Variant

__all__ = ["Variant", "VARIANTS", "FAMILIES", "DEMO_VARIANT", "get_variant", "variant_names",
           "constructor_names", "BiTVariant", "BIT_VARIANTS", "get_bit_variant",
           "bit_constructor_names", "get_architecture", "table_variant", "timm_variant",
           "BIT_UNITS", "CLIP_MEAN_STD"]
