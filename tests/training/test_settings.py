"""TrainSettings and the one precision vocabulary: train()'s keyword arguments and a settings
record are the same run, and Keras' policy names are the same precisions as the table's."""

import dataclasses

import keras
import pytest

import keras_vit
from keras_vit.errors import ArgumentError, ArgumentTypeError
from keras_vit.runtime.precision import (
    POLICY_NAMES,
    PRECISION_TABLE,
    PRECISIONS,
    TRAINING_PRECISIONS,
    check_precision,
    training_policy,
)
from keras_vit.training.settings import TrainSettings, resolve


@pytest.mark.parametrize("name", TRAINING_PRECISIONS)
def test_each_training_precision_computes_in_its_own_dtype(name):
    """Keras, not the table, says what a policy computes in: the name is that dtype."""
    assert keras.DTypePolicy(training_policy(name)).compute_dtype == name


@pytest.mark.parametrize("policy", sorted(POLICY_NAMES))
def test_a_keras_policy_name_is_the_same_run_as_its_precision_name(policy):
    """An old run.json records Keras' policy name; the table's name resolves to the same config,
    so the run resumes under either spelling."""
    by_policy = resolve(TrainSettings(precision=policy, epochs=1))
    by_name = resolve(TrainSettings(precision=POLICY_NAMES[policy], epochs=1))
    assert by_policy == by_name and by_name[1]["precision"] == policy


@pytest.mark.parametrize("precision", ["auto", "bf16", None, ["float32"]])
def test_training_refuses_what_it_cannot_run(precision, tmp_path):
    output = tmp_path / "run"
    with pytest.raises(ArgumentError, match="precision must be one of"):
        keras_vit.train(precision=precision, output=str(output), epochs=1)
    assert not output.exists()


def test_inference_and_training_read_one_table():
    assert set(PRECISIONS) | set(TRAINING_PRECISIONS) == set(PRECISION_TABLE)
    assert [p for p in PRECISION_TABLE.values() if not (p.inference or p.training)] == []
    with pytest.raises(ArgumentError, match="not one of"):
        check_precision("float16")  # loss-scaled float16 is training's alone


def test_keyword_arguments_and_a_settings_record_are_one_run():
    settings = TrainSettings(model="demo", epochs=2, seed=3, augment="light1")
    from_keywords = resolve(TrainSettings(**dataclasses.asdict(settings)))
    assert from_keywords == resolve(settings)
    changed = resolve(dataclasses.replace(settings, seed=4))[1]
    assert changed["seed"] == 4 and changed != from_keywords[1]


def test_train_refuses_a_settings_of_another_kind():
    with pytest.raises(ArgumentTypeError, match="TrainSettings"):
        keras_vit.train(settings={"epochs": 1})
