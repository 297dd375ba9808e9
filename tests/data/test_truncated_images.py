"""A JPEG whose header is intact but whose data is cut is skipped and named wherever the
pipeline reads it, training included, and the counts are of the images read; the pipeline's
functions give AutoGraph nothing to warn about."""

import json
import os
import textwrap

import numpy as np
import pytest
from PIL import Image

from keras_vit import cli, data


def write_jpegs(root, count=20, classes=2):
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        folder = os.path.join(root, f"class{i % classes}")
        os.makedirs(folder, exist_ok=True)
        paths.append(os.path.join(folder, f"{i:03d}.jpg"))
        Image.fromarray(rng.integers(0, 256, (24, 32, 3), np.uint8)).save(paths[-1], quality=90)
    return paths


def cut(path):
    """Keeps the first half of the file: the header (and its declared size) survives."""
    with open(path, "rb") as f:
        whole = f.read()
    with open(path, "wb") as f:
        f.write(whole[:len(whole) // 2])
    with Image.open(path) as image:  # Pillow, another decoder: the header reads ...
        assert image.size == (32, 24)
        with pytest.raises(OSError, match="truncated"):  # ... the pixels do not
            image.load()


# In a fresh process: AutoGraph warns once per function a process converts, so only a first
# conversion shows whether it can read the pipeline's functions.
SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    from PIL import Image
    sys.path.insert(0, os.getcwd())
    from tests.data.test_truncated_images import cut
    from keras_vit import data

    root = sys.argv[1]
    splits = data.load_image_folder(root, validation_fraction=0.25)
    names = {name: [p.decode() for p, _ in split.as_numpy_iterator()]
             for name, split in (("train", splits.train), ("validation", splits.validation))}
    for name in ("train", "validation"):
        cut(names[name][0])
    read = {}
    for name, split, training in (("train", splits.train, True),
                                  ("validation", splits.validation, False)):
        batches = data.make_pipeline(split, 16, 1, training=training, repeat=False, seed=0)
        read[name] = sum(len(labels) for _, labels in batches)
    print(json.dumps({"names": names, "read": read, "skipped": splits.skipped_files,
                      "counted": {n: splits.count_read(n) for n in names}}))
""")


def test_a_cut_jpeg_is_skipped_named_and_not_counted_in_training_and_held_out(tmp_path, python):
    root = str(tmp_path / "photos")
    write_jpegs(root)
    result = python(["-c", SCRIPT, root], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    names = out["names"]
    cut_files = [names["train"][0], names["validation"][0]]
    assert sorted(out["skipped"]) == sorted(cut_files)
    for name in ("train", "validation"):
        assert out["read"][name] == out["counted"][name] == len(names[name]) - 1
    assert "AutoGraph" not in result.stderr and "WARNING:tensorflow" not in result.stderr, \
        result.stderr[-3000:]


def test_train_names_each_skipped_file_on_stderr(tmp_path, monkeypatch, capsys):
    """The command's printing, given a report (the run itself: the slow test below)."""
    import keras_vit.training

    skipped = [str(tmp_path / "a" / "cut.jpg"), str(tmp_path / "b" / "gone.jpg")]
    report = {"accuracy": 0.5, "num_test": 4, "num_validation": 2,
              "skipped_files": {"count": 2, "files": skipped},
              "unsupported_files": {"count": 0, "files": []}}
    monkeypatch.setattr(keras_vit.training, "train", lambda **kwargs: report)
    assert cli.main(["train", "--dataset", str(tmp_path), "--output", str(tmp_path / "run")]) == 0
    captured = capsys.readouterr()
    assert "skipped 2 unreadable files" in captured.out
    assert captured.err.splitlines() == [
        f"keras-vit train: skipped unreadable file {path} (left out of the counts)"
        for path in skipped]


@pytest.mark.slow  # a training run; the pipeline and the printing are tested above by default
def test_a_training_run_counts_and_names_a_jpeg_cut_after_the_scan(tmp_path, monkeypatch):
    from keras_vit.training import run

    root = str(tmp_path / "photos")
    write_jpegs(root, 20)
    chosen = {}

    def scan_then_cut(source, data_dir=None, **split):
        splits = data.load_dataset(source, data_dir=data_dir, **split)
        chosen["train"] = [p.decode() for p, _ in splits.train.as_numpy_iterator()]
        cut(chosen["train"][0])
        return splits
    monkeypatch.setattr(run, "load_dataset", scan_then_cut)
    # Two epochs of whole batches read more examples than the split holds, so every
    # training file is read at least once.
    report = run.train(root, model="demo", recipe="scratch", image_size=16, batch_size=4,
                       epochs=2, output=str(tmp_path / "run"), verbose=0)
    assert report["skipped_files"] == {"count": 1, "files": [chosen["train"][0]]}
    assert report["num_train"] == len(chosen["train"]) - 1
