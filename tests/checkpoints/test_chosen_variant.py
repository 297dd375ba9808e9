"""`keras_vit.ViT(name, weights=path)`: the name is the caller's, the file holds what it holds.
A file that is not the named architecture is refused in one line naming both, before the model
is built: by its arrays' shapes (every file), and by the architecture the file records where
it records one (what its shapes cannot show: the pooling, the final norm's place, ...)."""

import dataclasses

import pytest

import keras_vit
from keras_vit import CheckpointError
from keras_vit.variants import get_variant
from tests.oracle import random_vit_npz

DEMO = get_variant("demo")


@pytest.fixture
def built(monkeypatch):
    """The variants keras_vit's ViT builder was called with."""
    from keras_vit.models import vit

    calls, build = [], vit._build
    monkeypatch.setattr(vit, "_build", lambda *args, **kwargs: (calls.append(args[0]),
                                                                 build(*args, **kwargs))[1])
    return calls


def _refused(variant, path, built):
    with pytest.raises(CheckpointError) as raised:
        keras_vit.ViT(variant, weights=str(path), image_size=16)
    message = str(raised.value)
    assert "\n" not in message and built == [], (message, built)
    assert f"keras_vit.from_pretrained({str(path)!r})" in message and "Nothing was built" in message
    return message


def test_a_bare_file_of_another_size_is_refused_naming_both(tmp_path, built):
    """An official-layout .npz records no architecture: its shapes name the rows it fits.
    (It was built, then refused in 30 lines of missing keys.)"""
    shallow = dataclasses.replace(DEMO, depth=2, name="shallow")
    path = tmp_path / "shallow.npz"
    random_vit_npz(path, shallow, (4, 4), classes=3)
    message = _refused(DEMO, path, built)
    assert message.startswith(f"{path} holds the weights of another architecture, not "
                              f"{DEMO.name} (depth 4 in {DEMO.name}, 2 in the file)"), message
    keras_vit.ViT(shallow, weights=str(path), image_size=16)  # the file's own architecture loads
    assert built == [shallow]


@pytest.mark.parametrize("field, value", [("classifier", "gap"), ("norm_after_pooling", True)])
def test_a_file_recording_an_architecture_of_the_same_shapes_is_refused_naming_both(
        tmp_path, built, field, value):
    """keras_vit's .npz records its architecture: mean pooling where the file's head was
    trained on the class token (the token kept), or the final norm after the pooling, have
    the same arrays and compute another function. Both loaded silently before."""
    path = tmp_path / "demo.npz"
    keras_vit.save_npz(keras_vit.ViT("demo", image_size=16, classes=3), str(path))
    built.clear()
    other = dataclasses.replace(DEMO, name="other", class_token=True, **{field: value})
    message = _refused(other, path, built)
    assert message.startswith(f"{path} holds {DEMO.name}, not other ("
                              f"{field.replace('_', ' ')} {value} in other, "
                              f"{getattr(DEMO, field)} in the file)"), message


# The Perception Encoder's RoPE grid (indices from 1, the column's frequencies first) on the
# demo's sizes: the same arrays as RoPE's default grid, another rotation of every patch.
ROPED = dataclasses.replace(DEMO, name="roped", rope="eva", rope_reference_grid=4,
                            rope_grid_offset=1.0, rope_grid_indexing="xy")


@pytest.mark.parametrize("field", ["rope_grid_offset", "rope_grid_indexing"])
def test_a_file_recording_another_rope_grid_is_refused_naming_both(tmp_path, built, field):
    """RoPE's grid options leave every array's shape as it is: a PE-core file loaded into a
    variant of the default grid (or the reverse) computed another function without a word."""
    path = tmp_path / "roped.npz"
    keras_vit.save_npz(keras_vit.ViT(ROPED, image_size=16, classes=3), str(path))
    built.clear()
    default = {f.name: f.default for f in dataclasses.fields(ROPED)}[field]
    other = dataclasses.replace(ROPED, name="other", **{field: default})
    message = _refused(other, path, built)
    assert message.startswith(f"{path} holds roped, not other ("
                              f"{field.replace('_', ' ')} {default} in other, "
                              f"{getattr(ROPED, field)} in the file)"), message
