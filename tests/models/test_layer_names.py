"""Every layer of every model keras_vit builds has a declared name and role
(keras_vit/layer_names.py): each FAMILIES row, a plain ViT with pre_logits, a gap ViT, a
hybrid, the head and pooling options, BiT and the hybrid's ResNetV2. A layer added without a
declared name (a Keras default such as "dropout_3") fails here, and with it the layer-wise
decay, precision and checkpoint code that find layers by role.

The models are built at a width of 16 and one block: names and roles do not depend on size."""

import ast
import dataclasses
import pathlib

import keras
import pytest

import keras_vit
from keras_vit import layer_names
from keras_vit.layer_names import Role, block_index, block_name, role_of
from keras_vit.variants import FAMILIES, get_variant

ROLE_ORDER = list(Role)


def _tiny(name, depth=1):
    return dataclasses.replace(get_variant(name), depth=depth, width=16, heads=2, mlp_dim=32)


def _vit(name, **kwargs):
    variant = _tiny(name)
    size = 64 if variant.is_hybrid else 2 * variant.patch_size  # a 2 x 2 patch grid
    if kwargs.get("include_top", True):
        kwargs["classes"] = 3
    return keras_vit.ViT(variant, image_size=size, **kwargs)


# (id, a function building the model): every family row and the options that add layers.
BUILDS = [
    *[(name, lambda name=name: _vit(name)) for name in FAMILIES],
    ("ViT-B_16 with pre_logits", lambda: _vit("ViT-B_16", representation_size=8)),
    ("ViT-S_32-gap-norep", lambda: _vit("ViT-S_32-gap-norep")),
    ("R+ViT-Ti_16", lambda: _vit("R+ViT-Ti_16", include_preprocessing=True)),
    ("ViT-Ti_16 max pooling", lambda: _vit("ViT-Ti_16", include_top=False, pooling="max")),
    ("ViT-Ti_16 all tokens", lambda: _vit("ViT-Ti_16", include_top=False, pooling=None)),
    ("ViT-Ti_16 dynamic", lambda: _vit("ViT-Ti_16", dynamic_image_size=True)),
    ("SigLIP-B/16 features", lambda: _vit("SigLIP-B/16", include_top=False)),
    ("DeiT-S/16-distilled features", lambda: _vit("DeiT-S/16-distilled", include_top=False)),
    ("DeiT-S/16-distilled softmax",
     lambda: _vit("DeiT-S/16-distilled", classifier_activation="softmax")),
    ("BiT-R50x1", lambda: keras_vit.BiT("BiT-R50x1", image_size=32, classes=3,
                                        include_preprocessing=True)),
    ("BiT-R50x1 max pooling", lambda: keras_vit.BiT("BiT-R50x1", image_size=32,
                                                    include_top=False, pooling="max")),
    ("ResNetV2", lambda: keras_vit.ResNetV2("R26+ViT-S_32", image_size=32)),
]


def undeclared(model):
    """The names of `model`'s layers, and the first parts of its variables' paths, that have
    no declared role."""
    names = [layer.name for layer in model.layers] + [v.path.split("/")[0] for v in model.weights]
    return sorted({name for name in names if role_of(name) is None})


@pytest.mark.parametrize("build", [b for _, b in BUILDS], ids=[i for i, _ in BUILDS])
def test_every_layer_has_a_declared_role(build):
    model = build()
    assert undeclared(model) == []
    # The roles follow the model from input to output (Keras lists layers in call order; a
    # second input, NaFlex's grid, where it is first used: inputs are left out of the order).
    roles = [ROLE_ORDER.index(role_of(layer.name)) for layer in model.layers
             if role_of(layer.name) is not Role.INPUT]
    assert roles == sorted(roles), [(layer.name, role_of(layer.name)) for layer in model.layers]


def test_a_layer_without_a_declared_name_is_found():
    model = _vit("ViT-Ti_16")
    extra = keras.layers.Dense(2)  # Keras names it "dense" or "dense_N"
    wrapped = keras.Model(model.inputs, extra(model.outputs[0]))
    assert undeclared(wrapped) == [extra.name]


def test_the_blocks_are_named_and_counted_from_zero():
    model = keras_vit.ViT(_tiny("ViT-Ti_16", depth=3), image_size=16, classes=3)
    blocks = [layer.name for layer in model.layers if role_of(layer.name) is Role.BLOCK]
    assert blocks == [block_name(i) for i in range(3)] == ["encoderblock_0", "encoderblock_1",
                                                           "encoderblock_2"]
    assert [block_index(name) for name in blocks] == [0, 1, 2]
    assert block_index("encoderblock_x") is None and block_index("encoder_norm") is None


PACKAGE = pathlib.Path(keras_vit.__file__).parent
# The declared names, but the input's "images", a word that also names signatures' inputs and
# records' counts, and NaFlex's input "grid", also a field of keras_vit's .npz record; and the
# blocks' prefix.
DECLARED = {getattr(layer_names, n) for n in layer_names.__all__
            if isinstance(getattr(layer_names, n), str)} - {layer_names.IMAGES, layer_names.GRID}
# Strings that are a layer's name but mean something else where they are spelled.
NOT_LAYER_NAMES = {
    ("__init__.py", "preprocessing"),  # the submodule keras_vit.preprocessing
    ("checkpoints/layout.py", "cls"),  # the official checkpoint keys
    ("checkpoints/layout.py", "dist_token"),
    ("checkpoints/layout.py", "reg_token"),
    ("checkpoints/formats/timm.py", "dist_token"),  # timm's parameter names
    ("checkpoints/formats/timm.py", "reg_token"),
    ("checkpoints/formats/timm.py", "head"),
    ("checkpoints/formats/timm.py", "head_dist"),
    ("checkpoints/formats/dinov2.py", "reg_token"),  # timm's name, renamed to DINOv2's
    ("checkpoints/formats/keras_hub.py", "pre_logits"),  # keras-hub's classifier's names
    ("checkpoints/formats/keras_hub.py", "predictions"),
    ("checkpoints/formats/keras_hub_families.py", "embedding"),  # keras-hub's layer names
    ("checkpoints/formats/keras_hub_families.py", "head"),
    ("checkpoints/formats/npz_metadata.py", "pre_norm"),  # a Variant field
    ("layers/tokens.py", "cls"),  # the class token's weight, named as its official key
    # the preprocessing of record: a catalogue entry's field, a source's attribute, a report's key
    ("checkpoints/catalogue.py", "preprocessing"),
    ("models/vit.py", "preprocessing"),
    ("runtime/evaluation.py", "preprocessing"),
    ("export/timm_config.py", "pre_norm"),  # Variant fields
    ("export/timm_config.py", "embedding_norm"),
    ("export/timm_config.py", "head"),  # timm's pretrained_cfg classifier, its parameter name
}


def spelled_names(source):
    """(text, line) of every string literal of Python `source`, docstrings aside, that is a
    declared layer name or an encoder block's."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.value, node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings
            and (node.value in DECLARED or node.value.startswith("encoderblock_"))]


def test_layer_names_are_spelled_in_layer_names_py_only():
    spelled = [f"{path.relative_to(PACKAGE).as_posix()}:{line}: {text!r}"
               for path in sorted(PACKAGE.rglob("*.py")) if path.name != "layer_names.py"
               for text, line in spelled_names(path.read_text("utf-8"))
               if (path.relative_to(PACKAGE).as_posix(), text) not in NOT_LAYER_NAMES]
    assert spelled == []


def test_the_scan_sees_a_spelled_layer_name():
    source = ('"""The "head" layer."""\n'
              'x = model.get_layer("head")\n'
              'y = f"encoderblock_{i}"\n'
              'z = keras.layers.Dense(3, name="pre_logits")\n')
    assert spelled_names(source) == [("head", 2), ("encoderblock_", 3), ("pre_logits", 4)]
