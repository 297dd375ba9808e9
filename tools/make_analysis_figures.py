"""Makes the figures of docs/looking-inside.md.

    PYTHONPATH=. python tools/make_analysis_figures.py

About 6 to 10 minutes on two CPU cores. It trains a tiny ViT (4 blocks, width 64,
4 x 4 patches on 32 x 32 images) on scikit-learn's handwritten digits, because
no pretrained weights are needed or downloaded: the figures show what the
tools do on a small trained model next to the same model untrained, not what
a pretrained ViT-B/16 looks like. Writes PNGs to docs/images/ and prints the
numbers quoted in the page.
"""

import json
import os

import keras
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import keras_vit
from keras_vit import analysis

OUT = os.path.join(os.path.dirname(__file__), "..", "docs", "images")
VARIANT = keras_vit.Variant("ViT-digits_4", width=64, depth=4, mlp_dim=128, heads=4,
                            patch_size=4)
IMAGE_SIZE = 32


def digits():
    """Digits 8 x 8 in [0, 16] -> 32 x 32 x 1 in [-1, 1]; a fixed 75/25 split."""
    data = load_digits()
    images = data.images[..., None] / 16.0 * 2.0 - 1.0
    images = keras.ops.convert_to_numpy(
        keras.ops.image.resize(images.astype("float32"), (IMAGE_SIZE, IMAGE_SIZE),
                               interpolation="bilinear"))
    return train_test_split(images, data.target, test_size=0.25, random_state=0,
                            stratify=data.target)


def build():
    return keras_vit.ViT(VARIANT, image_size=IMAGE_SIZE, classes=10, channels=1,
                         name="vit_digits")


def main():
    os.makedirs(OUT, exist_ok=True)
    keras.utils.set_random_seed(0)
    x_train, x_test, y_train, y_test = digits()
    untrained = build()
    trained = build()
    trained.set_weights(untrained.get_weights())  # same start, so the contrast is training
    trained.compile(optimizer=keras.optimizers.Adam(1e-3),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    metrics=["accuracy"])
    trained.fit(x_train, y_train, batch_size=64, epochs=30, verbose=2)
    numbers = {"test_accuracy": float(trained.evaluate(x_test, y_test, verbose=0)[1])}

    probe = analysis.AttentionProbe(trained)
    shown = x_test[:6]
    rollout = probe.attention_rollout(shown)
    analysis.plot_attention_rollout(
        os.path.join(OUT, "rollout_digits.png"), shown, rollout.upsampled,
        titles=[f"label {y}" for y in y_test[:6]], panel_inches=1.3)

    for name, model in (("trained", trained), ("untrained", untrained)):
        distances = analysis.AttentionProbe(model).mean_attention_distance(x_test[:128])
        numbers[f"mean_attention_distance_{name}"] = np.round(distances, 2).tolist()
        analysis.plot_mean_attention_distance(
            os.path.join(OUT, f"attention_distance_{name}.png"), distances,
            (IMAGE_SIZE, IMAGE_SIZE), title=f"tiny ViT on digits, {name}", figsize=(3.6, 3.0))

    analysis.plot_position_embedding_similarity(
        os.path.join(OUT, "position_similarity_digits.png"),
        analysis.position_embedding_similarity(trained),
        title="position embedding similarity, tiny ViT trained on digits")
    components = analysis.patch_embedding_components(trained, num_components=16)
    numbers["patch_components_explained_variance"] = np.round(
        components.explained_variance_ratio, 3).tolist()
    analysis.plot_patch_embedding_components(
        os.path.join(OUT, "patch_components_digits.png"), components.components, columns=8,
        title="first 16 principal components of the 4x4 patch filters (trained on digits)")

    # Few-shot linear probe on the pooled class token, trained vs untrained encoder.
    for name, model in (("trained", trained), ("untrained", untrained)):
        train_features = analysis.pooled_features(model, x_train)
        test_features = analysis.pooled_features(model, x_test)
        for shots in (1, 5, 10, 25):
            accuracies = [analysis.few_shot_linear_eval(train_features, y_train, test_features,
                                                        y_test, shots=shots, seed=seed)
                          for seed in range(5)]
            numbers[f"few_shot_{name}_{shots}"] = round(float(np.mean(accuracies)), 3)
    print(json.dumps(numbers, indent=1))


if __name__ == "__main__":
    main()
