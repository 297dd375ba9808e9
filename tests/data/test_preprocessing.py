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
    logits = np.zeros((1, 21843))  # one-hot on the first class
    logits[0, 0] = 9
    top = keras_vit.decode_predictions(logits)[0][0]
    assert top[0] == keras_vit.imagenet_labels(21843)[0][0]
    with pytest.raises(ValueError, match="1000 or 21843"):
        keras_vit.decode_predictions(np.zeros((1, 10)))
    with pytest.raises(ValueError, match="batch, classes"):
        keras_vit.decode_predictions(np.zeros(1000))


# --- one image path: every way in turns a file into the same array ---------------------------

class _Recorder:
    """Stands in for a model: records what it is called with; 3 zero logits per image."""

    def __init__(self, size):
        self.input_shape = (None, *size, 3)
        self.seen = []

    def __call__(self, images, training=False):
        self.seen.append(np.asarray(images))
        return np.zeros((len(images), 3), np.float32)

    def get_layer(self, name):
        raise ValueError(name)


class _Stop(Exception):
    pass


def test_predict_export_folder_dataset_and_analyze_see_the_same_array(tmp_path, monkeypatch):
    """One PNG, resized from 37 x 53 to a non-square 24 x 32: each entry point gives the same
    [-1, 1] array, compared with bilinear resizing done here in NumPy (half-pixel centres)."""
    import keras
    import tensorflow as tf
    from PIL import Image

    from keras_vit import data
    from keras_vit.analysis import figures
    from keras_vit.cli import analyze, main, predict
    from keras_vit.export import export_saved_model

    size = (24, 32)
    pixels = np.random.default_rng(0).integers(0, 256, (37, 53, 3)).astype(np.uint8)
    png = tmp_path / "image.png"
    Image.fromarray(pixels).save(png)
    expected = _bilinear(pixels.astype(np.float64), size) / 127.5 - 1.0

    # predict: the array the model is called with
    recorder = _Recorder(size)
    monkeypatch.setattr(predict, "load_model", lambda args: recorder)
    assert main(["predict", str(png), "--model", "stand-in.keras"]) == 0
    from_predict = recorder.seen[0][0]

    # analyze: the images its attention probe is given
    seen_by_probe = []

    class Probe:
        image_size, channels = size, 3

        def __init__(self, model):
            pass

        def attention_rollout(self, images, batch_size):
            seen_by_probe.append(images)
            raise _Stop  # what analyze does next is not this test's business

    monkeypatch.setattr(analyze, "load_model", lambda args: recorder)
    monkeypatch.setattr(figures, "AttentionProbe", Probe)  # what analyze() builds
    with pytest.raises(_Stop):
        main(["analyze", str(png), "--model", "stand-in.keras", "--output-dir", str(tmp_path / "a")])
    from_analyze = seen_by_probe[0][0]

    # export: serve_bytes of a model whose logits are its (flattened) input
    flat = keras.Sequential([keras.Input((*size, 3)), keras.layers.Flatten()])
    version = export_saved_model(flat, str(tmp_path / "serving"))
    serve_bytes = tf.saved_model.load(version).signatures["serve_bytes"]
    logits = serve_bytes(image_bytes=tf.constant([png.read_bytes()]))["logits"].numpy()
    from_export = logits[0].reshape(*size, 3)

    # the folder dataset: two classes of copies of the file, through the eval pipeline
    for name in ("a", "b"):
        (tmp_path / "folder" / name).mkdir(parents=True)
        for i in range(5):
            (tmp_path / "folder" / name / f"{i}.png").write_bytes(png.read_bytes())
    splits = data.load_image_folder(str(tmp_path / "folder"))
    batch, _ = next(iter(data.make_pipeline(splits.test, size, 1, training=False)))
    from_folder = batch.numpy()[0]

    for name, array in (("predict", from_predict), ("analyze", from_analyze),
                        ("export serve_bytes", from_export), ("folder dataset", from_folder)):
        assert array.shape == (*size, 3), name
        np.testing.assert_allclose(array, from_predict, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(array, expected, atol=1e-4, err_msg=name)


def _bilinear(image, size):
    """Bilinear resize with half-pixel centres and edge clamping (TF's, without antialiasing)."""
    out = image
    for axis, new in ((0, size[0]), (1, size[1])):
        old = out.shape[axis]
        centres = np.clip((np.arange(new) + 0.5) * old / new - 0.5, 0, old - 1)
        low = np.floor(centres).astype(int)
        high = np.minimum(low + 1, old - 1)
        weight = (centres - low).reshape([-1 if a == axis else 1 for a in range(3)])
        out = np.take(out, low, axis=axis) * (1 - weight) + np.take(out, high, axis=axis) * weight
    return out
