"""Plot helpers write PNGs of the promised size; `keras-vit analyze` writes them all."""

import json
import os
import pathlib

import keras
import matplotlib.image
import numpy as np
import pytest

import keras_vit
from keras_vit import analysis
from keras_vit.cli import main


def _pixels(path):
    """(height, width) of a PNG as written."""
    return matplotlib.image.imread(path).shape[:2]


def test_rollout_figure(tmp_path):
    images = np.random.default_rng(0).uniform(0, 255, size=(3, 32, 48, 3))
    maps = np.random.default_rng(1).uniform(size=(3, 32, 48))
    path = analysis.plot_attention_rollout(tmp_path / "rollout.png", images, maps,
                                           titles=["a", "b", "c"], dpi=50, panel_inches=2)
    assert _pixels(path) == (2 * 2 * 50, 3 * 2 * 50)


def test_distance_figure(tmp_path):
    distances = np.random.default_rng(0).uniform(0, 40, size=(4, 3))
    path = analysis.plot_mean_attention_distance(tmp_path / "d.png", distances, (64, 64),
                                                 title="t", dpi=80, figsize=(4, 3))
    assert _pixels(path) == (240, 320)
    with pytest.raises(ValueError, match="layers, heads"):
        analysis.plot_mean_attention_distance(tmp_path / "x.png", distances[0])


def test_similarity_figure(tmp_path):
    similarity = np.random.default_rng(0).uniform(-1, 1, size=(3, 4, 3, 4))
    path = analysis.plot_position_embedding_similarity(tmp_path / "s.png", similarity, dpi=60,
                                                       figsize=(5, 4))
    assert _pixels(path) == (240, 300)


def test_components_figure(tmp_path):
    components = np.random.default_rng(0).normal(size=(10, 8, 8, 3))
    path = analysis.plot_patch_embedding_components(tmp_path / "c.png", components, columns=5,
                                                    dpi=50, panel_inches=1.0)
    assert _pixels(path) == (2 * 50, 5 * 50)
    with pytest.raises(ValueError, match="not images"):
        analysis.plot_patch_embedding_components(tmp_path / "x.png", np.ones((2, 1, 1, 64)))


def test_analyze_command(tmp_path, capsys):
    variant = keras_vit.Variant("ViT-tiny_8", width=32, depth=2, mlp_dim=64, heads=4,
                                patch_size=8)
    model_path = tmp_path / "tiny.keras"
    keras_vit.ViT(variant, image_size=(32, 48), classes=3).save(model_path)
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):  # a different size from the model's: the command resizes
        keras.utils.save_img(folder / f"{i}.png", rng.uniform(0, 255, size=(40, 50, 3)))
    out = tmp_path / "out"
    assert main(["analyze", str(folder), "--model", str(model_path), "--output-dir", str(out),
                 "--rollout-images", "2"]) == 0
    printed = capsys.readouterr().out.split()
    for name in ("attention_rollout.png", "attention_distance.png",
                 "position_embedding_similarity.png", "patch_embedding_components.png"):
        assert (out / name).stat().st_size > 0
        assert str(out / name) in printed
    assert _pixels(out / "attention_rollout.png") == (400, 400)  # 2 images, 2 x 2 in at 100 dpi
    report = json.loads((out / "analysis.json").read_text())
    assert report["images"] == 3 and report["grid_size"] == [4, 6] and report["stride"] == [8, 8]
    assert np.array(report["mean_attention_distance_pixels"]).shape == (2, 4)


def test_analyze_as_a_library_function_on_pixels(tmp_path):
    # A hybrid: its patch embedding reads 512 ResNet channels, not images, so no figure of it.
    hybrid = keras_vit.Variant("R-tiny", 64, 1, 128, 2, 1, "token", (1, 1))
    model = keras_vit.ViT(hybrid, image_size=(32, 48), classes=3)
    pixels = np.random.default_rng(0).uniform(0, 255, size=(3, 32, 48, 3))
    written = analysis.analyze(model, pixels, tmp_path / "out", rollout_images=1, batch_size=2)
    assert [os.path.basename(path) for path in written] == [
        "attention_rollout.png", "attention_distance.png", "position_embedding_similarity.png",
        "analysis.json"]
    assert sorted(os.listdir(tmp_path / "out")) == sorted(map(os.path.basename, written))
    assert _pixels(written[0]) == (400, 200)  # 1 image: 2 panels of 2 in at 100 dpi, stacked
    report = json.loads(pathlib.Path(written[-1]).read_text())
    assert report["images"] == 3 and report["grid_size"] == [4, 6] and report["stride"] == [8, 8]
    assert report["patch_components_explained_variance"] is None
    assert np.array(report["mean_attention_distance_pixels"]).shape == (1, 2)
    with pytest.raises(keras_vit.ArgumentError, match=r"pixels \(N, 32, 48, 3\)"):
        analysis.analyze(model, pixels[..., :1], tmp_path / "bad")


def test_analyze_command_errors(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "missing.png"), "--model", "Ti/16"]) == 2
    assert capsys.readouterr().err == (f"keras-vit analyze: error: No such image file or folder: "
                                       f"{tmp_path / 'missing.png'}\n")
