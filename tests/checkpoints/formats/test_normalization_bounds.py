"""A recorded normalisation the model cannot compute in float32 is refused in one line naming
the file: an infinite or subnormal rescale factor, a subnormal std, a std whose scale
1 / (255 std) underflows, a mean whose offset overflows. Each made the model's outputs NaN
(or a traceback) before. The values are written into a transformers folder's
preprocessor_config.json as JSON text, as a user's edit would be."""

import pytest

from keras_vit import CheckpointError
from keras_vit.checkpoints.formats import inspect_checkpoint
from keras_vit.normalization import normalization_problem
from tests.checkpoints.formats.test_transformers_families import _saved

GOOD = ('"rescale_factor": 0.00392156862745098, "image_mean": [0.5, 0.5, 0.5], '
        '"image_std": [0.5, 0.5, 0.5]')


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return _saved(tmp_path_factory.mktemp("clip"), "CLIPVisionModel", "CLIPVisionConfig")[2]


@pytest.mark.parametrize("fields, named", [
    ('"rescale_factor": 1e400, "image_mean": 0.5, "image_std": 0.5', "rescale_factor"),
    ('"rescale_factor": 1e300, "image_mean": 0.5, "image_std": 0.5', "normal numbers"),
    ('"rescale_factor": 1e-300, "image_mean": 0.5, "image_std": 0.5', "normal numbers"),
    ('"image_mean": 0.5, "image_std": 1e-320', "normal numbers"),
    ('"image_mean": 0.5, "image_std": 1e300', "normal numbers"),
    ('"image_mean": 1e300, "image_std": 1e-30', "overflows float32"),
], ids=["rescale-inf", "rescale-1e300", "rescale-1e-300", "std-subnormal", "std-1e300",
        "offset-overflows"])
def test_a_normalisation_float32_cannot_compute_is_one_line(folder, fields, named):
    config = folder + "/preprocessor_config.json"
    with open(config, "w") as f:
        f.write("{" + fields + "}")
    with pytest.raises(CheckpointError) as raised:
        inspect_checkpoint(folder)
    message = str(raised.value)
    assert "\n" not in message and config in message and named in message, message


def test_the_checks_pass_what_sources_record(folder):
    """The check cannot fail everything: the official, ImageNet's and CLIP's own pass, and a
    well-formed config loads as its mean/std."""
    from keras_vit.normalization import IMAGENET_MEAN_STD, OFFICIAL_NORMALIZATION
    from keras_vit.variants import CLIP_MEAN_STD

    for normalization in (OFFICIAL_NORMALIZATION, IMAGENET_MEAN_STD, CLIP_MEAN_STD):
        assert normalization_problem(normalization) is None
    with open(folder + "/preprocessor_config.json", "w") as f:
        f.write("{" + GOOD + "}")
    mean, std = inspect_checkpoint(folder).normalization
    # 0.5 / (255 * 0.00392156862745098): exact to float64 rounding.
    assert mean == pytest.approx((0.5,) * 3, rel=1e-12) and std == pytest.approx((0.5,) * 3, rel=1e-12)
