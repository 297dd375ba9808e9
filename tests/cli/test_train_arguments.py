"""Each `keras-vit train` flag reaches `keras_vit.training.train` as the value the user gave,
checked without training (the runs themselves: tests/training)."""

import pytest

from keras_vit import cli

# The command a report stands for: train() returns it and the command prints from it.
REPORT = {"accuracy": 0.5, "num_test": 4, "num_validation": 2,
          "skipped_files": {"count": 0, "files": []},
          "unsupported_files": {"count": 0, "files": []}}


@pytest.fixture
def received(monkeypatch):
    import keras_vit.training

    calls = []

    def record(**kwargs):
        calls.append(kwargs)
        return REPORT

    monkeypatch.setattr(keras_vit.training, "train", record)
    return calls


@pytest.mark.parametrize("flags, expected", [
    # The Fine-tuning page's commands.
    (["--augment", "medium2", "--drop-path", "0.1"],
     {"augment": "medium2", "drop_path": 0.1, "mixup": None, "cutmix": None,
      "randaugment": None}),
    (["--randaugment", "2,10", "--mixup", "0.2", "--cutmix", "1.0"],
     {"randaugment": "2,10", "mixup": 0.2, "cutmix": 1.0, "augment": None}),
    (["--layer-decay", "0.75", "--ema", "0.999"], {"layer_decay": 0.75, "ema": 0.999}),
    (["--ema"], {"ema": 0.9999}),  # the flag alone: its documented default
    (["--lora-rank", "4", "--lora-targets", "query, value,mlp"],
     {"lora_rank": 4, "lora_targets": ["query", "value", "mlp"]}),
    (["--remat"], {"remat": True}),
    ([], {"layer_decay": None, "ema": None, "drop_path": None, "augment": None, "remat": False}),
])
def test_each_flag_reaches_train(received, tmp_path, flags, expected):
    output = str(tmp_path / "run")
    assert cli.main(["train", "--dataset", "digits", *flags, "--output", output]) == 0
    (kwargs,) = received
    assert {key: kwargs.get(key) for key in expected} == expected
    assert kwargs["dataset"] == "digits" and kwargs["output"] == output
    if "--lora-rank" not in flags:
        assert "lora_rank" not in kwargs
