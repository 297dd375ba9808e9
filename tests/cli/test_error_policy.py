"""Every sub-command follows one error policy: one line on stderr, nothing on stdout, exit 2."""

import ast
import os

import pytest

from keras_vit.cli import build_parser, main
from keras_vit.cli.main import COMMANDS

# (sub-command, argv): a usage error argparse catches, and a bad input found when running.
BAD = [
    ("info", ["info", "--verbose-please"]),
    ("train", ["train", "--recipe", "sota"]),
    ("train", ["train", "--model", "Q/3", "--output", "{tmp}/run"]),
    ("train", ["train", "--dataset", "{tmp}/no/such/folder", "--output", "{tmp}/run"]),
    ("predict", ["predict", "--model", "Ti/16"]),
    ("predict", ["predict", "{tmp}/missing.png", "--model", "Ti/16"]),
    ("predict", ["predict", "{tmp}/a.png", "--saved-model", "{tmp}", "--weights", "x.npz"]),
    ("evaluate", ["evaluate", "--model", "{tmp}/model.keras", "--output", "{tmp}/eval"]),
    ("evaluate", ["evaluate", "--model", "{tmp}/missing.keras", "--dataset", "digits",
                  "--output", "{tmp}/eval"]),
    ("evaluate", ["evaluate", "--model", "Q/3", "--dataset", "digits", "--output", "{tmp}/eval"]),
    ("export", ["export", "--model", "Ti/16", "--output", "{tmp}/out", "--format", "onnx"]),
    ("export", ["export", "--model", "B/17", "--output", "{tmp}/out"]),
    ("export", ["export", "--model", "{tmp}/missing.keras", "--output", "{tmp}/out"]),
    ("analyze", ["analyze", "{tmp}/missing.png", "--model", "Ti/16"]),
    ("analyze", ["analyze", "{tmp}/a.png", "--model", "Ti/16", "--image-size", "1", "2", "3"]),
    ("compare", ["compare", "{tmp}"]),
    ("compare", ["compare", "{tmp}/no_run", "--output", "{tmp}/cmp"]),
]

# Near-miss names: the one line also says which name was meant.
NEAR_MISSES = [
    (["train", "--recipe", "finetun"], '"finetune"'),
    (["train", "--model", "B/17", "--output", "{tmp}/run"], '"B/16"'),
    (["train", "--dataset", "tf_flower", "--output", "{tmp}/run"], '"tf_flowers"'),
    (["train", "--dataset", "digit", "--output", "{tmp}/run"], '"digits"'),
    (["export", "--model", "Ti/16", "--weights", "imagenet21", "--output", "{tmp}/out"],
     '"imagenet21k"'),
    (["export", "--model", "Ti/16", "--output", "{tmp}/out", "--format", "tflit"], '"tflite"'),
]


def _run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's usage errors leave through sys.exit
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_every_sub_command_is_covered():
    assert {command for command, _ in BAD} == {c.__name__.rsplit(".", 1)[-1] for c in COMMANDS}


@pytest.mark.parametrize("command,argv", BAD, ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_bad_input_is_one_line_on_stderr_and_exit_2(command, argv, tmp_path, capsys):
    (tmp_path / "a.png").write_bytes(b"")  # exists, for the cases that fail on something else
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    code, out, err = _run(argv, capsys)
    assert code == 2, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"keras-vit {command}: error: "), err


@pytest.mark.parametrize("argv,meant", NEAR_MISSES, ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_a_near_miss_name_says_which_was_meant(argv, meant, tmp_path, capsys):
    code, out, err = _run([arg.format(tmp=tmp_path) for arg in argv], capsys)
    assert code == 2, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"keras-vit {argv[0]}: error: ")
    assert f"Did you mean {meant}?" in lines[0], err
    assert len(lines[0]) < 600, "the line lists no catalogue of names"
    assert not os.path.exists(tmp_path / "run"), "a refused run writes nothing"


def test_predict_with_random_weights_warns(tmp_path, capsys):
    from PIL import Image

    path = str(tmp_path / "a.png")
    Image.new("RGB", (32, 32), (200, 30, 30)).save(path)
    code, out, err = _run(["predict", path, "--model", "Ti/16", "--image-size", "32"], capsys)
    assert code == 0, err
    assert err.splitlines() == [
        "keras-vit predict: warning: --model Ti/16 without --weights has random weights, so these "
        "predictions mean nothing; add --weights (keras-vit info lists them)."]
    assert out.splitlines()[0] == path and len(out.splitlines()) == 6


def test_a_bad_argument_in_a_fresh_process(fresh_command):
    """The installed entry point behaves the same: exit status 2, the error as the one line
    before the launcher's own (tests/conftest.py FRESH_COMMAND)."""
    code, stdout, stderr = fresh_command
    assert code == 2, stderr
    assert stdout == ""
    assert stderr.splitlines()[0] == (
        "keras-vit train: error: argument --epochs: invalid int value: 'many' "
        "(see keras-vit train --help)")
    assert stderr.splitlines()[1].startswith("heavy modules: "), stderr


def test_help_imports_no_tensorflow(tmp_path, fresh_command):
    """`keras-vit --help`, run as pip's script runs it: Keras and TensorFlow stay unimported.

    (benchmarks/cli_startup.py times it.)"""
    from benchmarks.cli_startup import run_help, write_launcher

    _, result = run_help(write_launcher(str(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: keras-vit")
    for command in ("info", "train", "predict", "evaluate", "export", "analyze", "compare"):
        assert command in result.stdout
    assert result.stderr.strip().splitlines()[-1] == "heavy modules: []", result.stderr
    # A sub-command still runs, loading the core when it needs it (the import did not): train's
    # --epochs is one of its deferred arguments, which import the core (tests/conftest.py).
    code, _, stderr = fresh_command
    assert code == 2 and "argument --epochs: invalid int value" in stderr, stderr
    heavy = stderr.strip().splitlines()[-1]
    assert heavy.startswith("heavy modules: "), stderr
    assert {"keras", "tensorflow"} <= set(ast.literal_eval(heavy[len("heavy modules: "):]))


def test_every_model_command_takes_the_same_model_flags():
    commands = build_parser().parse_args(["info"]).commands
    for name in ("predict", "evaluate", "export", "analyze"):
        commands[name].complete()  # sub-commands add some flags on first use
        flags = {option for action in commands[name]._actions for option in action.option_strings}
        assert {"--model", "--weights", "--image-size", "--classes"} <= flags, name


def test_info_lists_the_official_variants_and_the_demo_apart(capsys):
    """One row per entry of VARIANTS, then the demo, which has no weights."""
    from keras_vit.variants import DEMO_VARIANT, VARIANTS

    assert main(["info"]) == 0
    table = capsys.readouterr().out.split("\n\n")[0].splitlines()[1:]
    assert [row.split()[0] for row in table] == [*VARIANTS, "demo"]
    assert table[-1].split()[1:6] == [str(DEMO_VARIANT.width), str(DEMO_VARIANT.depth),
                                      str(DEMO_VARIANT.heads), str(DEMO_VARIANT.total_stride), "-"]
