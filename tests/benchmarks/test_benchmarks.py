"""The benchmark machinery: FLOP counts, the official-layout files it writes, and a quick run."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import keras_vit
from benchmarks import flops, loading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = keras_vit.Variant("tiny", width=32, depth=2, mlp_dim=64, heads=2, patch_size=8)


def test_vit_b16_forward_flops_match_the_published_count():
    # ViT-B/16 at 224 is 17.56 GMACs per image (fvcore count, as quoted by timm).
    gflop = flops.vit_forward_flops(768, 12, 3072, 16, 224) / 1e9
    assert gflop == pytest.approx(2 * 17.56, rel=0.005)


@pytest.mark.parametrize("class_token_last_block", [False, True])
def test_forward_flops_match_the_model_kernels(class_token_last_block):
    # Independent count from the built model: every kernel is applied once per
    # token (once per patch for the embedding, once per image for the head),
    # plus the two token-by-token attention products of each block. In the
    # class-token model's last block only the key and value columns of the
    # qkv kernel see every token; the rest sees the class token alone.
    image_size, classes = 32, 10
    model = keras_vit.ViT(TINY, image_size=image_size, classes=classes)
    patches = (image_size // TINY.patch_size) ** 2
    tokens = patches + 1
    macs = patches * int(np.prod(model.get_layer("embedding").kernel.shape))
    for i in range(TINY.depth):
        block = model.get_layer(f"encoderblock_{i}")
        queries = block.output.shape[1] if class_token_last_block else tokens
        kernels = [block.attention.qkv_kernel, block.attention.out_kernel,
                   block.mlp.dense_0.kernel, block.mlp.dense_1.kernel]
        macs += queries * sum(int(np.prod(k.shape)) for k in kernels) + 2 * queries * tokens * TINY.width
        macs += (tokens - queries) * 2 * TINY.width * TINY.width  # keys and values of every token
    macs += int(np.prod(model.get_layer("head").kernel.shape))
    assert flops.vit_forward_flops(TINY.width, TINY.depth, TINY.mlp_dim, TINY.patch_size,
                                   image_size, classes,
                                   class_token_last_block=class_token_last_block) == 2 * macs


def test_class_token_last_block_saves_seven_percent_of_vit_b16():
    full = flops.vit_forward_flops(768, 12, 3072, 16, 224)
    fast = flops.vit_forward_flops(768, 12, 3072, 16, 224, class_token_last_block=True)
    assert fast / 1e9 == pytest.approx(32.7, abs=0.05) and 0.06 < 1 - fast / full < 0.08


def test_benchmark_checkpoint_has_the_official_layout():
    # load_weights is strict: any missing, extra or misshapen key would raise.
    arrays = loading.official_arrays(TINY, image_size=32)
    model = keras_vit.ViT(TINY, image_size=32)
    keras_vit.load_weights(model, arrays)
    attention = model.get_layer("encoderblock_1").attention
    prefix = "Transformer/encoderblock_1/MultiHeadDotProductAttention_1"
    expected = np.concatenate([arrays[f"{prefix}/{n}/kernel"].reshape(32, 32)
                               for n in ("query", "key", "value")], axis=1)
    np.testing.assert_array_equal(attention.qkv_kernel.numpy(), expected)


def test_load_weights_still_converts_other_dtypes():
    # assign without a copy for float32 must not skip the cast of float64 files.
    arrays = {k: v.astype(np.float64) for k, v in loading.official_arrays(TINY, 32).items()}
    model = keras_vit.ViT(TINY, image_size=32)
    keras_vit.load_weights(model, arrays)
    assert model.get_layer("head").kernel.dtype == "float32"
    np.testing.assert_allclose(model.get_layer("head").kernel.numpy(), arrays["head/kernel"], rtol=1e-6)


@pytest.mark.slow  # the whole benchmark end to end; its parts are tested above and below
def test_quick_run_writes_json_and_markdown(tmp_path):
    out = subprocess.run([sys.executable, "-m", "benchmarks.run", "--quick", "--modes", "graph,auto",
                          "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "results.json").read_text())
    for section in ("inference", "training"):
        rows = report[section]["2"]
        assert rows["keras_vit (graph)"]["images_per_s"]["median"] > 0
        assert all(r["fraction_of_tf_gemm_peak"] > 0 for n, r in rows.items() if not n.startswith("_"))
    names = ({n for n in report["inference"]["2"] if not n.startswith("_")}
             | {n.split(" unavailable")[0] for n in report["notes"]})
    assert {"keras_vit (graph)"} <= names and len(names) >= 3  # each peer timed or reported missing
    # the exported model in ONNX Runtime and OpenVINO, beside it in the same rounds, inference only
    assert {"onnxruntime (float32)", "onnxruntime (int8)", "openvino (float32)",
            "openvino (bf16)", "openvino (int8)"} <= set(report["inference"]["2"])
    assert not any(name.startswith(("onnxruntime", "openvino")) for name in report["training"]["2"])
    assert report["gemm_gflops"]["tensorflow"]["best"] > 0
    load = report["loading"]["Ti/16"]
    assert load["file_bytes"] > load["weights_bytes"] * 0.9 and load["keras_vit_seconds"]["median"] > 0
    markdown = (tmp_path / "results.md").read_text()
    assert "| batch | model | images/s |" in markdown and "Ti/16" in markdown
    # keras_vit in the mode it chose itself, timed afresh (graph and XLA) in this run.
    assert set(report["execution_choices"]["keras_vit (auto)"].items()) <= {
        (f"{section} 2", mode) for section in ("inference", "training") for mode in ("graph", "xla")}
    assert len(report["execution_choices"]["keras_vit (auto)"]) == 2
    timings = report["execution_timings"]
    assert {key.split(" ", 1)[1] for key in timings} == {"inference", "training"}
    assert all(t["seconds_per_call"]["graph"] > 0 and t["seconds_per_call"]["xla"] > 0
               for t in timings.values())
    assert markdown.count("keras_vit (auto: chose ") == 2


def test_fast_paths_ablation_agrees_numerically_and_runs():
    # main() raises if any formulation's logits differ from keras_vit's.
    from benchmarks import fast_paths

    results = fast_paths.main(["--quick", "--batch", "2"])
    for kind in ("infer", "train"):
        assert set(results[kind]) == {"plain", "fused projections", "keras_vit"}
        assert all(rate > 0 for rate in results[kind].values())


def test_plain_block_matches_keras_vit_block():
    from benchmarks import fast_paths

    block = keras_vit.TransformerBlock(num_heads=2, mlp_dim=16)
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype("float32")
    block(x)
    for w in block.weights:  # biases start at ~0; random ones make the check cover them
        w.assign(np.random.default_rng(1).standard_normal(w.shape).astype("float32") * 0.3)
    np.testing.assert_allclose(fast_paths.plain_block_call(block, x), block(x), atol=1e-5)


def test_attention_formulations_agree_with_the_layer(capsys):
    from benchmarks import attention

    attention.main(["--batch", "1", "--tokens", "5", "--width", "16", "--heads", "2", "--repeats", "1"])
    printed = capsys.readouterr().out
    assert "keras_vit layer" in printed and "split_projections (xla)" in printed


def test_attention_paths_benchmark_times_both_paths(capsys):
    from benchmarks import attention

    cpu = attention.main(["--paths", "--batch", "1", "--tokens", "5", "--width", "16",
                          "--heads", "2", "--repeats", "2"])
    printed = capsys.readouterr().out
    assert set(cpu) == {"dot_product_attention", "dot_product_attention +backward",
                        "explicit matmul-softmax", "explicit matmul-softmax +backward"}
    assert all(len(times) == 2 and min(times) >= 0 for times in cpu.values())
    assert "backend tensorflow" in printed and "paths differ by" in printed


@pytest.mark.slow  # torch.compile of a tiny ViT, forward and training: minutes on 2 cores
def test_quick_run_times_timm_under_torch_compile(tmp_path):
    out = subprocess.run([sys.executable, "-m", "benchmarks.run", "--quick", "--torch-compile",
                          "--only", "timm", "--no-loading", "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "results.json").read_text())
    compiled = "timm VisionTransformer (torch.compile)"
    for section in ("inference", "training"):
        rows = report[section]["2"]
        # Timed, or reported unavailable with the reason (no C++ compiler, say).
        assert (compiled in rows and rows[compiled]["images_per_s"]["median"] > 0) or any(
            note.startswith(f"{compiled} unavailable") for note in report["notes"]), report["notes"]


def test_pipeline_benchmark_quick_mode_times_both_pipelines(capsys):
    """benchmarks/pipeline.py in quick mode (the full run: docs/performance.md)."""
    from benchmarks import pipeline

    result = pipeline.main(["--quick"])
    for name in ("keras_vit", "image_dataset_from_directory"):
        assert len(result[name]["rounds"]) == 2 and result[name]["images_per_s"] > 0
        assert result[name]["per_core"] == pytest.approx(result[name]["images_per_s"] / result["cores"])
    assert result["ratio"] == pytest.approx(result["keras_vit"]["images_per_s"]
                                            / result["image_dataset_from_directory"]["images_per_s"])
    assert "| keras_vit |" in capsys.readouterr().out


def test_folder_ready_benchmark_quick_mode_reports_its_ratio(capsys):
    """benchmarks/folder_ready.py in quick mode (the full run: docs/performance.md)."""
    from benchmarks import folder_ready

    result = folder_ready.main(["--quick"])
    assert result["images"] == 24 and result["ready_seconds"] > 0 and result["decode_pass_seconds"] > 0
    assert result["ratio"] == pytest.approx(result["ready_seconds"] / result["decode_pass_seconds"])
    assert f"ready / decode pass {result['ratio']:.3f}" in capsys.readouterr().out


def _check_scale_report(out, sizes, image_sizes, batches, pipeline_batch):
    """What `benchmarks.scale` must have written to `out`: every measurement of every size,
    the model grid, the plots as PNG files Pillow reads."""
    from PIL import Image

    report = json.loads((out / "scale.json").read_text())
    assert sorted(int(c) for c in report["data"]) == sizes
    for count in sizes:
        row = report["data"][str(count)]
        for kind in ("scan", "predict", "pipeline"):
            assert row[kind]["seconds"] > 0 and row[kind]["peak_rss_mb"] > 100, (kind, row[kind])
        assert row["scan"]["images"] == count and row["scan"]["skipped"] == 0
        # One CSV row per image, none an error row.
        assert row["predict"]["csv_rows"] == count and row["predict"]["csv_error_rows"] == 0
        assert row["predict"]["exit_status"] in (0, None)
        # The training split (the scan holds ceil(20%) out), whole batches only.
        train = count - -(-count // 5)
        assert row["pipeline"]["images"] == train // pipeline_batch * pipeline_batch
        assert row["pipeline"]["images_per_s"] == pytest.approx(
            row["pipeline"]["images"] / row["pipeline"]["seconds"])
    grid = {(e["image_size"], e["batch_size"]): e for e in report["model"]["grid"]}
    assert set(grid) == {(s, b) for s in image_sizes for b in batches}
    for entry in grid.values():
        assert entry.get("skipped") or (entry["images_per_s"] > 0 and entry["peak_rss_mb"] > 100
                                        and entry["calls"] >= 3 and entry["jit_compile"] is not None)
    assert set(report["machine"]) >= {"cpu", "cores", "load_average_start", "load_average_end"}
    assert report["command"].startswith("python -m benchmarks.scale") and report["date"]
    assert len(report["plots"]) == 4
    for name in report["plots"]:
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        with Image.open(out / name) as image:
            image.load()
            assert image.size == (750, 400)
    markdown = (out / "scale.md").read_text()
    assert all(f"| {count:,} |" in markdown for count in sizes)
    assert markdown.count("\n| tiny |") == len(image_sizes) * len(batches)
    return report


def test_scale_quick_mode_measures_every_size_and_configuration(tmp_path):
    """benchmarks/scale.py --quick, in this process (the full run: docs/performance.md)."""
    from benchmarks import scale

    scale.main(["--quick", "--out", str(tmp_path)])
    report = _check_scale_report(tmp_path, [30, 120], [32, 64], [1, 4], pipeline_batch=8)
    assert report["processes"].startswith("in the benchmark's own process")


@pytest.mark.slow  # four fresh TensorFlow processes (~35 s); the default test above runs the same
def test_scale_runs_each_measurement_in_a_fresh_process(tmp_path):  # measurements in-process
    out = subprocess.run([sys.executable, "-m", "benchmarks.scale", "--quick", "--fresh-processes",
                          "--sizes", "30", "--batch-sizes", "1", "--image-sizes", "32",
                          "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = _check_scale_report(tmp_path, [30], [32], [1], pipeline_batch=8)
    assert report["processes"] == "in a fresh Python process"
    assert report["data"]["30"]["predict"]["process_seconds"] > report["data"]["30"]["predict"]["seconds"]


def test_scale_skips_a_model_configuration_over_the_memory_limit_and_says_why():
    from benchmarks import scale

    tiny = {"name": "tiny", "width": 16, "depth": 1, "mlp_dim": 32, "heads": 2, "patch_size": 16}
    grid = scale.model_part([tiny], [32], [1, 2], fresh=False, memory_fraction=1e-6, min_seconds=0,
                            max_seconds=1, classes=10, log=lambda text: None)
    assert [(e["batch_size"], "images_per_s" in e) for e in grid] == [(1, False), (2, False)]
    assert all("of this machine's" in e["skipped"] for e in grid)


@pytest.mark.parametrize("name,image_size", [("B/16", 224), ("L/16", 384)])
def test_scale_parameter_estimate_matches_the_model(name, image_size):
    # Against the built model's own count: the estimate leaves out biases and norms only.
    from benchmarks import scale

    variant = keras_vit.get_variant(name)
    small = keras_vit.Variant("small", width=variant.width // 16, depth=2,
                              mlp_dim=variant.mlp_dim // 16, heads=2, patch_size=variant.patch_size)
    model = keras_vit.ViT(small, image_size=image_size, classes=1000)
    assert scale.parameter_count(small, image_size, 1000) == pytest.approx(model.count_params(),
                                                                           rel=0.02)


def test_scale_photos_are_seeded_within_the_sides_and_linked(tmp_path):
    from PIL import Image

    from benchmarks import scale

    first = scale.write_photos(str(tmp_path / "a"), 12, sides=(40, 60), workers=1)
    again = scale.write_photos(str(tmp_path / "b"), 12, sides=(40, 60), workers=1)
    files = sorted((tmp_path / "a").rglob("*.jpg"))
    assert len(files) == 12 and first == again == sum(f.stat().st_size for f in files)
    assert all(f.read_bytes() == (tmp_path / "b" / f.relative_to(tmp_path / "a")).read_bytes()
               for f in files)
    shapes = set()
    for f in files:
        with Image.open(f) as image:
            assert image.format == "JPEG" and all(40 <= side <= 60 for side in image.size)
            shapes.add(image.size)
    assert len(shapes) > 6  # drawn per image
    scale.link_subset(str(tmp_path / "a"), str(tmp_path / "c"), 5)
    linked = sorted((tmp_path / "c").rglob("*.jpg"))
    assert len(linked) == 5
    assert all(f.stat().st_ino == (tmp_path / "a" / f.relative_to(tmp_path / "c")).stat().st_ino
               for f in linked)


def test_bf16_rows_give_each_family_its_speedup_and_keras_vit_against_timm():
    """`--bf16`'s ratio line from one batch's rows: each family's best bfloat16 mode over its
    best float32 mode, and keras_vit against timm at bfloat16 (ratios worked out by hand)."""
    from benchmarks.run import _precision_lines, _ratio_lines

    def row(rate):
        return {"images_per_s": {"median": rate}}
    section = {"8": {"keras_vit (graph)": row(10.0), "keras_vit (xla)": row(8.0),
                     "keras_vit (graph, mixed_bfloat16)": row(16.0),
                     "keras_vit (xla, mixed_bfloat16)": row(9.0),
                     "timm VisionTransformer": row(5.0),
                     "timm VisionTransformer (autocast bfloat16)": row(4.0),
                     "_tf_gemm_each_round": {}}}
    assert _precision_lines(section) == [
        "Batch 8: bfloat16 / float32 (each's best mode): keras_vit 1.60x, timm VisionTransformer "
        "0.80x. At bfloat16, keras_vit / timm VisionTransformer = 4.00x."]
    # The float32 comparison leaves the bfloat16 rows out.
    assert _ratio_lines(section) == ["Batch 8: keras_vit (best fp32 mode) / timm "
                                     "VisionTransformer = 2.00x."]


@pytest.mark.slow  # test_bf16_rows_give_each_family_its_speedup_and_keras_vit_against_timm covers the table
def test_quick_run_times_timm_under_autocast_beside_keras_vit_bf16(tmp_path):
    out = subprocess.run([sys.executable, "-m", "benchmarks.run", "--quick", "--bf16",
                          "--modes", "graph", "--only", "keras_vit,timm", "--no-loading",
                          "--no-torch-compile", "--train-batch-sizes", "", "--out",
                          str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "results.json").read_text())["inference"]["2"]
    for name in ("keras_vit (graph, mixed_bfloat16)", "timm VisionTransformer (autocast bfloat16)"):
        assert rows[name]["images_per_s"]["median"] > 0
    assert "bfloat16 / float32 (each's best mode)" in (tmp_path / "results.md").read_text()


def _table_rows(markdown):
    """The body rows of the first Markdown table, as lists of cells."""
    lines = [ln for ln in markdown.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]


def test_the_families_benchmark_takes_every_family_from_the_table():
    """benchmarks/families.py times a row of every family in keras_vit.FAMILIES (and of each of
    its kinds), each under a name timm registers and keras_vit reads back as that row."""
    from benchmarks import families
    from tests.oracle import import_timm

    timm = import_timm()
    rows = {name: arch for name, (arch, _) in families.FAMILIES.items() if name in keras_vit.FAMILIES}
    assert {keras_vit.FAMILIES[name].family for name in rows} == \
        {row.family for row in keras_vit.FAMILIES.values()}
    assert {"DeiT-S/16-distilled", "DINOv2-S/14-reg4"} <= set(rows)  # the kinds, not only families
    for name, arch in rows.items():
        assert timm.is_model(arch), arch
        assert keras_vit.get_variant(arch).name == name


# Builds, loads and times timm and keras_vit models of two families (6 s on 2 quiet cores, a
# minute under load); each family's parity with timm is a default test
# (tests/checkpoints/formats/test_timm_families.py).
@pytest.mark.slow
def test_families_benchmark_tiny_mode_checks_parity_and_reports_ratios(tmp_path):
    """benchmarks/families.py --tiny on two families (the full run: docs/performance.md).
    main() raises if keras_vit's and timm's outputs differ beyond the parity bound."""
    from benchmarks import families

    names = ["deit_small_distilled_patch16_224", "vit_base_patch16_siglip_224"]
    report = families.main(["--tiny", "--families", ",".join(names), "--out", str(tmp_path)])
    assert list(report["families"]) == names
    for row in report["families"].values():
        assert row["relative_difference"] <= families.RELATIVE_TOLERANCE and row["mode"] == "graph"
        for side in ("keras_vit", "timm"):
            assert row[side]["images_per_s"]["median"] > 0 and row[side]["images_per_s"]["n"] == 1
        assert row["ratio"] == pytest.approx(row["keras_vit"]["images_per_s"]["median"]
                                             / row["timm"]["images_per_s"]["median"])
    assert json.loads((tmp_path / "families.json").read_text())["batch"] == 2
    rows = _table_rows((tmp_path / "families.md").read_text())
    assert [r[0] for r in rows] == ["DeiT-S/16-distilled", "SigLIP-B/16"]
    for row, name in zip(rows, names):
        assert row[1] == f"`{name}` ({families.FAMILIES[row[0]][1]})"
        assert float(row[5].rstrip("x")) == pytest.approx(report["families"][name]["ratio"], abs=0.006)


def test_load_memory_benchmark_writes_timm_shapes_and_measures_a_load(tmp_path):
    """benchmarks/load_memory.py's parts on a 1-block DINOv2-S, in this process (the full run,
    a fresh process on DINOv2-g: docs/performance.md)."""
    from benchmarks import load_memory
    from keras_vit.checkpoints.formats.safetensors import read_safetensors

    shapes = load_memory.timm_shapes("vit_small_patch14_dinov2", depth=1, img_size=56)
    assert shapes["pos_embed"] == (1, 17, 384) and shapes["blocks.0.ls1.gamma"] == (384,)
    path = str(tmp_path / "small.safetensors")
    size = load_memory.write_random_safetensors(shapes, path)
    arrays = read_safetensors(path)
    assert {k: a.shape for k, a in arrays.items()} == shapes
    assert size > sum(a.nbytes for a in arrays.values())  # and a header
    # Scales near 1, the rest near 0 (std 0.02: the means are within 10 standard errors).
    assert abs(arrays["norm.weight"].mean() - 1) < 0.01
    assert abs(arrays["blocks.0.mlp.fc1.weight"].mean()) < 0.01
    result = load_memory.measure("vit_small_patch14_dinov2", path, 56, False, depth=1)
    assert result["weights_bytes"] == sum(a.nbytes for a in arrays.values())
    # Each high-water mark against the RSS of its own /proc read (a kernel invariant); across
    # reads RSS can fall while another thread of this process frees memory, so no chain.
    assert result["build_peak_rss"] >= result["built_rss"] > 0
    assert result["load_peak_rss"] >= result["load_end_rss"] > 0
    assert result["load_extra"] == result["load_peak_rss"] - result["load_start_rss"]
    report = {"architecture": "vit_small_patch14_dinov2", "file_bytes": size, "tensors": len(shapes),
              "parameters": sum(int(np.prod(s)) for s in shapes.values()),
              "machine": {"cpu": "cpu", "cores": 2}, **result,
              "peak_vs_weights": result["peak"] / result["weights_bytes"],
              "load_extra_vs_weights": result["load_extra"] / result["weights_bytes"]}
    row = _table_rows(load_memory.to_markdown(report))[0]
    assert float(row[4].rstrip("x")) == pytest.approx(report["peak_vs_weights"], abs=0.006)


def test_s16_int8_fits_the_ridge_head_scikit_learn_fits():
    """benchmarks/s16_int8.py's fitted head is ridge regression on one-hot targets with an
    unpenalised bias: scikit-learn's Ridge (alpha = ridge * n) on the same data, to float32."""
    from sklearn.linear_model import Ridge

    from benchmarks import s16_int8

    rng = np.random.default_rng(0)
    features = rng.normal(size=(200, 24))
    labels = rng.integers(0, 10, 200)
    kernel, bias = s16_int8._fit_head(features, labels, ridge=1e-2)
    reference = Ridge(alpha=1e-2 * 200).fit(features, np.eye(10)[labels])
    np.testing.assert_allclose(kernel, reference.coef_.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bias, reference.intercept_, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # an int8 ONNX export of a tiny model per head, on the digits (~40 s)
def test_s16_int8_tiny_run_counts_its_flips(tmp_path):
    """--tiny: each head's record is self-consistent (agreement = 1 - flips / images; a
    near-tie flip is a flip) and written to the JSON file."""
    from benchmarks import s16_int8

    results = s16_int8.main(["--tiny", "--formats", "onnx", "--json", str(tmp_path / "r.json")])
    assert set(results) == {"random", "fitted"}
    for result in results.values():
        record = result["onnx"]
        assert record["top1_agreement"] == pytest.approx(1 - record["flips"] / result["images"])
        assert 0 <= record["near_tie_flips"] <= record["flips"]
    with open(tmp_path / "r.json") as f:
        assert json.load(f) == results
