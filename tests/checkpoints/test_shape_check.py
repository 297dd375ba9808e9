"""The shape check tells apart every two rows whose files differ: rows whose switches the
shape features cannot tell apart have the same official keys, so a new switch that changes
which keys a file has, without its line in shape_check._SWITCHES, fails here (not later, as a
bare file that loads into the wrong row, as PE-spatial's once fitted CLIP's)."""

import collections
import dataclasses

import pytest

import keras_vit
from keras_vit.checkpoints.layout import layout
from keras_vit.checkpoints.shape_check import _SWITCHES, shape_features, variant_fits_shapes
from keras_vit.variants import FAMILIES, VARIANTS


def _small(row):
    """`row`'s switches at one block of width 32 (its MAP head's own sizes kept apart), at two
    patches a side: what keys it has, at little cost."""
    return dataclasses.replace(row, name="small", width=32, depth=1, heads=2, mlp_dim=64,
                               map_heads=4 if row.map_heads else None,
                               map_mlp_dim=96 if row.map_mlp_dim else None,
                               image_size=2 * row.patch_size)


def _official_shapes(variant):
    model = keras_vit.ViT(variant, image_size=variant.image_size, include_top=False)
    return {key: tuple(shape) for row in layout(model) for key, shape in zip(row.keys, row.shapes)}


@pytest.fixture(scope="module")
def row_keys():
    """{one row of each structure (hybrids aside: their trunk is the `hybrid` feature): (its
    rows' names, its small model's official shapes)}."""
    structures = collections.defaultdict(list)
    for row in [*VARIANTS.values(), *FAMILIES.values()]:
        if not row.is_hybrid:
            structures[_small(row)].append(row.name)
    return {small: (names, _official_shapes(small)) for small, names in structures.items()}


def _clashes(row_keys, switches):
    """[the rows' names of each key set] for every set of `switches` features that rows of
    different keys share (each row's small model also fits its own features)."""
    by_switches = collections.defaultdict(dict)
    for small, (names, shapes) in row_keys.items():
        features = shape_features(shapes)
        assert variant_fits_shapes(small, shapes, features), names
        by_switches[tuple(features[name] for name in switches)][frozenset(shapes)] = names
    return [list(keys.values()) for keys in by_switches.values() if len(keys) > 1]


def test_rows_the_shape_features_cannot_tell_apart_have_the_same_keys(row_keys):
    clashes = _clashes(row_keys, _SWITCHES)
    assert not clashes, f"rows of different keys that the shape features take for one: {clashes}"


def test_the_check_finds_a_missing_feature(row_keys):
    """Without the final norm's feature, a PE-spatial row's keys (CLIP's but the final norm)
    and a CLIP row's share their features: the test above fails."""
    clashes = _clashes(row_keys, [name for name in _SWITCHES if name != "final_norm"])
    clashing = {name for clash in clashes for names in clash for name in names}
    assert any(name.startswith("PE-Spatial") for name in clashing), clashes
