import numpy as np
import pytest

import keras_vit


def test_preprocess_input_maps_pixels_to_minus_one_one():
    x = np.array([0, 127.5, 255], dtype=np.float32)
    np.testing.assert_allclose(keras_vit.preprocess_input(x), [-1, 0, 1])
    np.testing.assert_allclose(np.asarray(keras_vit.preprocess_input(np.uint8([0, 255]))), [-1, 1])


def test_decode_predictions_uses_the_imagenet_order():
    logits = np.full((2, 1000), -5.0)
    logits[0, 207] = 10  # golden retriever in ILSVRC-2012 order
    logits[1, 1] = 10  # goldfish
    decoded = keras_vit.decode_predictions(logits, top=3)
    assert decoded[0][0][:2] == ("n02099601", "golden retriever")
    assert decoded[1][0][:2] == ("n01443537", "goldfish")
    assert len(decoded[0]) == 3 and decoded[0][0][2] > 0.99


def test_decode_predictions_21k_and_bad_shapes():
    assert len(keras_vit.imagenet_labels(21843)) == 21843
    assert keras_vit.decode_predictions(np.eye(21843)[:1] * 9)[0][0][0] == keras_vit.imagenet_labels(21843)[0][0]
    with pytest.raises(ValueError, match="1000 or 21843"):
        keras_vit.decode_predictions(np.zeros((1, 10)))
    with pytest.raises(ValueError, match="batch, classes"):
        keras_vit.decode_predictions(np.zeros(1000))
