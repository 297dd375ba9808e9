"""`keras-vit train` with AugReg's regularisation: a tiny digits run with --augment medium2
and --drop-path trains end to end and records what it used in run.json and report.json."""

import json
import os

import pytest

from keras_vit.cli import main
from keras_vit.errors import RunConflictError
from keras_vit.training import train

TINY = ["train", "--dataset", "digits", "--model", "demo", "--recipe", "scratch",
        "--image-size", "8", "--batch-size", "16", "--steps", "2", "--execution", "graph"]


@pytest.mark.slow  # a whole run: about 100 s on 2 loaded cores; the next test is its cheap sibling
def test_medium2_with_drop_path_runs_and_is_recorded(tmp_path, capsys):
    output = str(tmp_path / "run")
    code = main([*TINY, "--augment", "medium2", "--drop-path", "0.1", "--cutmix", "1.0",
                 "--output", output])
    assert code == 0, capsys.readouterr().err
    with open(os.path.join(output, "run.json")) as f:
        recorded = json.load(f)["config"]["recipe"]
    with open(os.path.join(output, "report.json")) as f:
        reported = json.load(f)["recipe"]
    expected = {"augment": "medium2", "randaugment": [2, 15], "mixup": 0.5, "cutmix": 1.0,
                "drop_path_rate": 0.1}
    for recipe in (recorded, reported):
        assert {key: recipe[key] for key in expected} == expected


def test_a_bad_setting_exits_2_in_one_line(tmp_path, capsys):
    code = main([*TINY, "--randaugment", "2,45", "--output", str(tmp_path / "run")])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and "magnitude M in 0 to 30" in err[0]
    assert not os.path.exists(tmp_path / "run")
    code = main([*TINY, "--drop-path", "1", "--output", str(tmp_path / "run")])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and "drop_path must be a rate in [0, 1)" in err[0]


def test_the_augmentation_is_part_of_the_runs_configuration(tmp_path):
    """Without training: a run.json of a run without augmentation, and the same command with
    --augment medium2 is another run, named by each field that differs."""
    output = tmp_path / "run"
    output.mkdir()
    (output / "report.json").write_text("{}")
    config = {"dataset": "digits", "model": "demo", "weights": None, "precision": "float32",
              "seed": 0, "split": {"validation_fraction": 0.1, "validation_seed": 0},
              "recipe": {"augment": "none", "randaugment": None, "mixup": 0.0, "cutmix": 0.0,
                         "drop_path_rate": 0.0}}
    (output / "run.json").write_text(json.dumps({"config": config, "finished": False}))
    (output / "log.csv").write_text("epoch,loss\n0,1.0\n")
    with pytest.raises(RunConflictError) as raised:
        train("digits", model="demo", recipe="scratch", image_size=8, steps=2, output=str(output),
              augment="medium2", drop_path=0.1)
    message = str(raised.value)
    for field in ("recipe.augment 'none' -> 'medium2'", "recipe.mixup 0.0 -> 0.5",
                  "recipe.randaugment None -> [2, 15]", "recipe.drop_path_rate 0.0 -> 0.1"):
        assert field in message
