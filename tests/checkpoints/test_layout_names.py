"""The official checkpoint keys are spelled in keras_vit/checkpoints/layout.py only: every other
module, the format tables included, names them through layout's constants."""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAYOUT_MODULE = "keras_vit/checkpoints/layout.py"
# Pieces of official key paths (official-checkpoints.md's key tree: the ViT's, the hybrids'
# trunk, BiT's). A "/" is part of each, so that a layer named after its key ("posembed_input",
# "MlpBlock_3") is not a key; a piece that ends a longer name ("patch_embedding/" in keras-hub's
# paths) is not one either (the lookbehind).
KEY_PIECES = re.compile(r"(?<![\w])(?:Transformer/|encoderblock_\d*/|encoder_norm/|posembed_input/"
                        r"|MultiHeadDotProductAttention_\d/|MlpBlock_\d/|LayerNorm_\d/|Dense_[01]/"
                        r"|embedding/|/unit(?:\d+|\{\w*\})|gn_root/|conv_root/|gn_proj/|conv_proj/|head/"
                        r"|pre_logits/|resnet/|root_block/|standardized_conv2d/)")
# The one official key without a "/": the class token. A layer named after it (name="cls", or
# its constant in the module that declares the layers' names) is the model's name for the
# layer, not a key.
BARE_KEYS = {"cls"}
LAYER_NAMES_MODULE = "keras_vit/layer_names.py"


def _docstrings(tree):
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def key_literals(source):
    """(text, line) of every string literal of Python `source` that spells an official key;
    f-strings with "{}" for their fields; docstrings are prose and are skipped."""
    tree = ast.parse(source)
    skipped = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "name":
            skipped.add(id(node.value))  # a layer's or a weight's name
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            skipped.update(id(v) for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            text = node.value
        else:
            continue
        if KEY_PIECES.search(text) or (text in BARE_KEYS and id(node) not in skipped):
            found.append((text, node.lineno))
    return found


def test_the_official_keys_are_spelled_in_layout_py_only():
    outside = [f"{path.relative_to(ROOT)}:{line}: {text!r}"
               for path in sorted((ROOT / "keras_vit").rglob("*.py"))
               if str(path.relative_to(ROOT)) != LAYOUT_MODULE
               for text, line in key_literals(path.read_text())
               if not (str(path.relative_to(ROOT)) == LAYER_NAMES_MODULE and text in BARE_KEYS)]
    assert not outside, ("official checkpoint keys spelled outside " + LAYOUT_MODULE
                         + " (name them through its constants):\n" + "\n".join(outside))


def test_the_scan_sees_keys_where_they_are_spelled():
    """Each kind of spelling is found: so the test above can fail."""
    spelled = ('KEY = "Transformer/encoderblock_{i}/LayerNorm_0/scale"\n'
               'x = f"block{s}/unit{u}/conv1/kernel"\n'
               'y = arrays["cls"]\n'
               'z = {"head/kernel": 1, "pre_logits/bias": 2, "embedding/kernel": 3}\n'
               'w = "resnet/root_block/standardized_conv2d/kernel"\n')
    assert len(key_literals(spelled)) == 7
    in_layout = " ".join(text for text, _ in key_literals((ROOT / LAYOUT_MODULE).read_text()))
    for piece in ("Transformer/", "MultiHeadDotProductAttention_1/", "MlpBlock_3/", "/unit",
                  "gn_root/", "conv_root/", "posembed_input/", "head/", "embedding/", "resnet/"):
        assert piece in in_layout, piece


def test_names_and_prose_are_not_keys():
    """A layer named after its key, a docstring and a longer name ending in a key's piece."""
    prose = ('"""Loads embedding/kernel and cls."""\n'
             'layer = ClassToken(name="cls")\n'
             'path = "vit_patching_and_embedding/patch_embedding/kernel"\n'
             'block = get_layer("posembed_input")\n')
    assert key_literals(prose) == []
