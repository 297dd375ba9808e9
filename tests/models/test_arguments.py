"""keras_vit.models.arguments: the checks ViT, BiT and ResNetV2 share, with one wording each;
and the memory check (keras_vit.memory) each constructor runs before it builds."""

import pytest

import keras_vit
from keras_vit.models import bit, resnet, vit

CONSTRUCTORS = {
    "ViT": lambda **kw: keras_vit.ViT("Ti/16", **kw),
    "BiT": lambda **kw: keras_vit.BiT("R50x1", **kw),
    "ResNetV2": lambda **kw: keras_vit.ResNetV2("R+Ti/16", **kw),
}

REFUSED = [
    ({"image_size": 32.0}, "image_size must be a positive int or (height, width) of ints, got 32.0."),
    ({"image_size": (32, "32")}, "image_size must be a positive int or (height, width) of ints"),
    ({"image_size": 0}, "image_size must be a positive int or (height, width) of ints, got 0."),
    ({"image_size": (32, 32, 32)}, "image_size must be a positive int or (height, width) of ints"),
    ({"channels": 0}, "channels must be a positive int, got 0."),
    ({"channels": 2.5}, "channels must be a positive int, got 2.5."),
    ({"channels": True}, "channels must be a positive int, got True."),
    ({"name": ""}, "name must be a non-empty str, got ''."),
    ({"name": 7}, "name must be a non-empty str, got 7."),
]


@pytest.fixture
def nothing_is_built(monkeypatch):
    """A refusal must come before any weights are looked up or any layer is made."""
    def fail(*args, **kwargs):
        raise AssertionError("built or looked up weights before refusing")
    for module in (vit, bit, resnet):
        monkeypatch.setattr(module, "resolve_weights", fail)
    monkeypatch.setattr(vit, "_build", fail)
    monkeypatch.setattr(bit, "_build", fail)


@pytest.mark.parametrize("constructor", sorted(CONSTRUCTORS))
@pytest.mark.parametrize("arguments,message", REFUSED, ids=[str(a) for a, _ in REFUSED])
def test_every_constructor_refuses_the_same_mistakes_in_the_same_words(constructor, arguments,
                                                                       message, nothing_is_built):
    with pytest.raises(keras_vit.ArgumentError) as refused:
        CONSTRUCTORS[constructor](**arguments)
    assert str(refused.value).startswith(message)


@pytest.mark.parametrize("constructor", ["ViT", "BiT"])
def test_the_head_arguments_are_checked_alike(constructor, nothing_is_built):
    build = CONSTRUCTORS[constructor]
    with pytest.raises(keras_vit.ArgumentError, match="include_top=False leaves out"):
        build(include_top=False, classes=5)
    with pytest.raises(keras_vit.ArgumentError, match="classes must be a positive int, got 0"):
        build(classes=0)
    with pytest.raises(keras_vit.ArgumentError, match="include_top must be True or False, got 1"):
        build(include_top=1)
    with pytest.raises(keras_vit.ArgumentError,
                       match="include_preprocessing must be True or False, got 'yes'"):
        build(include_preprocessing="yes")


def test_resnet_takes_what_the_checks_let_through():
    """The checks refuse mistakes only: a numpy int size and a (height, width) list build."""
    import numpy as np

    model = keras_vit.ResNetV2("R+Ti/16", image_size=[np.int64(32), 48], channels=np.int32(1))
    assert model.input_shape == (None, 32, 48, 1)


@pytest.mark.parametrize("constructor,variant", [(keras_vit.ViT, "B/16"), (keras_vit.BiT, "R50x1")])
def test_a_size_that_cannot_fit_is_refused_by_the_constructor_before_building(
        constructor, variant, nothing_is_built):
    """A library call gets the command's early refusal: SizeError naming the argument, and
    nothing allocated first (the fixture fails any build)."""
    with pytest.raises(keras_vit.SizeError, match="image_size .* cannot fit") as refused:
        constructor(variant, image_size=10 ** 6)
    assert refused.value.parameter == "image_size"
    with pytest.raises(keras_vit.SizeError, match="classes .* cannot fit") as refused:
        constructor(variant, classes=10 ** 12)
    assert refused.value.parameter == "classes"

