"""`train(teacher=...)`: a run distils from an earlier run, records its teacher in run.json and
report.json, saves the student alone, and `compare` shows student, teacher and the student
trained without the teacher side by side; a bad teacher is refused before anything is written.
Each run is one optimizer step of a one-block tiny ViT (test_distillation.py checks the
losses)."""

import dataclasses
import json
import os
import shutil

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.analysis import compare_runs
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.errors import ArgumentError, DatasetError, RunConflictError
from keras_vit.reports import read_report
from keras_vit.training import train
from tests.analysis.test_compare import table_rows
from tests.training.test_distillation import TINY, TINY_DEIT, planted_head

# test_distillation.py's tiny ViT with one block: what a run records and saves of its teacher
# holds at any depth, and each run traces its steps at a cost that grows with the blocks.
ONE_BLOCK = dataclasses.replace(TINY, depth=1)

ONE_STEP = {"dataset": "digits", "steps": 1, "batch_size": 16, "verbose": 0, "execution": "graph"}


def read(folder, name):
    with open(os.path.join(folder, name)) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def student_run(tmp_path_factory):
    """(student run folder, teacher .keras): one run taught by a saved 8 px model (the
    student's 16 px images reach it resized), soft at the defaults but alpha 1."""
    base = tmp_path_factory.mktemp("distilled")
    teacher = str(base / "teacher.keras")
    model = keras_vit.ViT(ONE_BLOCK, image_size=8, classes=10)
    planted_head(model, "head", 0)
    model.save(teacher)
    output = str(base / "student")
    train(model=ONE_BLOCK, output=output, teacher=teacher, distillation_alpha=1.0, **ONE_STEP)
    return output, teacher


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The teacher as a run of its own (8 px), the student it teaches, and the same student
    without it."""
    base = tmp_path_factory.mktemp("distillation")
    folders = {name: str(base / name) for name in ("teacher", "student", "alone")}
    train(model=ONE_BLOCK, image_size=8, output=folders["teacher"], **ONE_STEP)
    train(model=ONE_BLOCK, output=folders["student"], teacher=folders["teacher"],
          distillation_alpha=1.0, **ONE_STEP)
    train(model=ONE_BLOCK, output=folders["alone"], **ONE_STEP)
    return folders


def test_a_run_with_a_teacher_records_it_and_saves_the_student_alone(student_run):
    output, teacher = student_run
    report, record = read(output, "report.json"), read(output, "run.json")
    expected = {"model": os.path.abspath(teacher), "weights": None,
                "distillation": "soft", "temperature": 3.0, "alpha": 1.0}
    assert record["config"]["teacher"] == expected
    assert report["teacher"] == record["teacher"] == {
        **expected, "architecture": keras_vit.ViT(ONE_BLOCK, image_size=8, classes=10).name,
        "classes": 10, "image_size": 8}
    # model.keras is the student: a plain ViT of the student's size, no teacher weights in it.
    model = keras.saving.load_model(os.path.join(output, "model.keras"))
    assert model.input_shape[1] == 16 and model.count_params() == report["parameters"]
    assert model.count_params() == keras_vit.ViT(ONE_BLOCK, image_size=16, classes=10).count_params()
    with open(os.path.join(output, "log.csv")) as f:
        assert "distillation_loss" in f.readline()  # Distiller's own loss trackers reach the log


def test_compare_shows_the_teacher_of_each_run(student_run, tmp_path):
    """The student run beside copies of it recorded without a teacher (the cheap sibling of
    the slow test below, which trains the teacher and the student alone as runs of their own)."""
    output, teacher = student_run
    folders = [output]
    for name in ("teacher_run", "alone"):
        copy = shutil.copytree(output, tmp_path / name)
        report = read(copy, "report.json")
        with open(os.path.join(copy, "report.json"), "w") as f:
            json.dump({**report, "teacher": None}, f)
        folders.append(str(copy))
    compare_runs(folders, str(tmp_path / "cmp"))
    markdown = (tmp_path / "cmp" / "comparison.md").read_text()
    assert table_rows(markdown, "teacher") == [
        [f"{os.path.abspath(teacher)} (soft T=3, alpha 1)", "none", "none"]]


@pytest.mark.slow  # three runs; test_compare_shows_the_teacher_of_each_run is its default sibling
def test_compare_shows_student_teacher_and_the_run_without_teacher(runs, tmp_path):
    assert read(runs["alone"], "report.json")["teacher"] is None
    assert "teacher" not in read(runs["alone"], "run.json")["config"]
    compare_runs([runs["student"], runs["teacher"], runs["alone"]], str(tmp_path / "cmp"))
    markdown = (tmp_path / "cmp" / "comparison.md").read_text()
    teacher = os.path.abspath(runs["teacher"])
    assert table_rows(markdown, "teacher") == [[f"{teacher} (soft T=3, alpha 1)", "none", "none"]]


def test_the_same_call_again_resumes_nothing_and_another_teacher_is_another_run(student_run):
    """The teacher is part of the configuration: the finished run is returned as it is,
    and the same folder with other distillation options is refused."""
    output, teacher = student_run
    again = train(model=ONE_BLOCK, output=output, teacher=teacher, distillation_alpha=1.0, **ONE_STEP)
    assert again == read(output, "report.json")
    with pytest.raises(RunConflictError):
        train(model=ONE_BLOCK, output=output, teacher=teacher, distillation_alpha=0.5, **ONE_STEP)


# A run of its own; test_distillation.py's test_a_distilled_deits_distillation_head_learns_...
# is its default sibling (the heads' gradients and loss on one batch).
@pytest.mark.slow
def test_a_distilled_deit_student_learns_from_the_teacher_and_saves_the_heads_average(
        student_run, tmp_path):
    output = str(tmp_path / "deit")
    report = train(model=TINY_DEIT, output=output, teacher=student_run[1], **ONE_STEP)
    assert report["teacher"]["distillation"] == "hard"  # DeiT's default for its token
    assert report["teacher"]["temperature"] is None
    model = keras.saving.load_model(os.path.join(output, "model.keras"))
    heads = keras.Model(model.input, [model.get_layer(n).output for n in ("head", "head_dist")])
    x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    class_logits, distillation_logits = (keras.ops.convert_to_numpy(h) for h in heads(x))
    # One step moved the zero-initialised heads apart: each learnt from its own target.
    assert np.abs(class_logits - distillation_logits).max() > 0
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)),
                               (class_logits + distillation_logits) / 2, rtol=1e-5, atol=1e-6)


def test_a_bad_teacher_is_refused_in_one_line_before_anything_is_written(tmp_path, cli):
    three = str(tmp_path / "three.keras")
    keras_vit.ViT(ONE_BLOCK, image_size=16, classes=3).save(three)
    torn = tmp_path / "torn.keras"
    torn.write_bytes(b"PK\x03\x04 torn")
    for teacher, family, named in [(three, ArgumentError, "3 classes"),
                                   (str(torn), CheckpointError, "torn.keras")]:
        output = tmp_path / "never"
        with pytest.raises(family) as error:
            train(model=ONE_BLOCK, output=str(output), teacher=teacher, **ONE_STEP)
        assert "\n" not in str(error.value) and named in str(error.value)
        assert not output.exists()
    with pytest.raises(ArgumentError, match="need a teacher"):
        train(model=ONE_BLOCK, output=str(tmp_path / "never"), distillation="hard", **ONE_STEP)
    result = cli(["train", "--model", "demo", "--teacher", three, "--steps", "1",
                  "--output", str(tmp_path / "never")])
    assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "3 classes" in result.stderr


def test_a_reports_teacher_is_checked_against_the_schema(student_run, tmp_path):
    """A report.json whose teacher has a field of the wrong type is refused naming it."""
    copy = shutil.copytree(student_run[0], tmp_path / "edited")
    report = read(copy, "report.json")
    with open(os.path.join(copy, "report.json"), "w") as f:
        json.dump({**report, "teacher": {**report["teacher"], "classes": "ten"}}, f)
    with pytest.raises(DatasetError) as error:
        read_report(os.path.join(copy, "report.json"))
    assert "teacher.classes" in str(error.value) and "\n" not in str(error.value)
