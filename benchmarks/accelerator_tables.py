"""benchmarks/accelerator.py's report as Markdown: speed, agreement, training and memory tables."""

import re


def _attention_note(report):
    if "keras_vit_fused_attention" not in report:
        return ""
    path = "fused" if report["keras_vit_fused_attention"] else "explicit"
    return f" keras_vit's attention: {report.get('attention', 'auto')} ({path})."


def _verbatim(text):
    """`text` as a Markdown code span: a library's error message, whose brackets would
    otherwise read as links (`[executable_name='...'] [tf-allocator-allocation-error='']`)."""
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _rate(summary):
    return f"{summary['median']:.0f} ({summary['min']:.0f}-{summary['max']:.0f})"


def _speed_table(rows, libraries, first_label):
    """Markdown rows of images/s per library, keras_vit against each other library, and first
    calls, one line per (model, setting); a model that failed gets one line saying so."""
    others = [lib for lib in libraries if lib != "keras_vit"]
    lines = ["| model | setting | " + " | ".join(f"{lib} images/s" for lib in libraries)
             + " | " + " | ".join(f"keras_vit / {lib}" for lib in others)
             + f" | {first_label} {' / '.join(libraries)} (s) |",
             "| --- | --- |" + " ---: |" * (2 * len(libraries))]
    for row in rows:
        if "error" in row or "parity_failed" in row:
            lines.append(f"| {row['title']} | {'failed' if 'error' in row else 'parity failed'} "
                         f"|" + " |" * (2 * len(libraries)))
            continue
        for s, by_library in row["images_per_s"].items():
            rates = [_rate(by_library[lib]) if lib in by_library else "" for lib in libraries]
            ratios = [f"{row['ratio_to'][s][lib]:.2f}x" if lib in row["ratio_to"][s] else ""
                      for lib in others]
            first = " / ".join(f"{row['first_call_seconds'][f'{lib} {s}']:.1f}"
                               if f"{lib} {s}" in row["first_call_seconds"] else "-"
                               for lib in libraries)
            lines.append(f"| {row['title']} | {s} | {' | '.join(rates)} | {' | '.join(ratios)} "
                         f"| {first} |")
    return lines


def _memory_table(rows, libraries):
    """Markdown rows of each call's peak device memory (GiB), the resident part in brackets."""
    def cell(record):
        if not record:
            return ""
        if "error" in record:
            return "failed"
        return f"{record['peak_bytes'] / 2**30:.2f} ({record['resident_bytes'] / 2**30:.2f})"

    lines = []
    for row in rows:
        peaks = row.get("peak_memory")
        if not peaks:
            continue
        present = [lib for lib in libraries if any(k.startswith(f"{lib} ") for k in peaks)]
        if not lines:
            lines = ["| model | setting | " + " | ".join(present) + " |",
                     "| --- | --- |" + " ---: |" * len(present)]
        for s in dict.fromkeys(k.split(" ", 1)[1] for k in peaks):
            lines.append(f"| {row['title']} | {s} | "
                         + " | ".join(cell(peaks.get(f"{lib} {s}")) for lib in present) + " |")
    return lines


def _largest(found):
    if found["failed_at"] is None:
        return f"{found['largest']} (every batch tried ran)"
    return f"{found['largest']} (failed at {found['failed_at']})"


def to_markdown(report):
    m = report["machine"]
    v = m["versions"]
    libraries = report.get("libraries", ["keras_vit", "timm"])
    size = report["image_size"]
    size = f"{size} px" if isinstance(size, int) else "each model's resolution (224 px; 384 " \
                                                      "for ViT-L/16 384)"
    lines = [f"Device: {m['torch_device']} ({m['device_kind']}); jax {v['jax']}, keras "
             f"{v['keras']}, torch {v['torch']} (CUDA {v['torch_cuda']}), timm {v['timm']}. "
             f"Batch {report['batch']} at {size}, random weights, "
             f"{report['repeats']} interleaved rounds, median images/s (min-max); inputs on the "
             f"device, logits back on the host.{_attention_note(report)}", ""]
    lines += _speed_table(report["models"].values(), libraries, "first call")
    lines += ["", "Agreement with each library's own float32 outputs (top-1 agreement, largest "
              "output difference), and keras_vit against timm in float32 (relative):", "",
              "| model | " + " | ".join(f"{lib} {s}" for lib in libraries
                                         for s in ("tf32", "bfloat16")) + " | float32 parity |",
              "| --- |" + " ---: |" * (2 * len(libraries) + 1)]
    for row in report["models"].values():
        if "error" in row:
            continue
        parity = row["parity_relative_difference"]
        parity = "none" if parity is None else f"{parity:.1e}"
        if "parity_failed" in row:
            lines.append(f"| {row['title']} |" + " |" * (2 * len(libraries))
                         + f" {parity} (failed) |")
            continue
        a = row["agreement_with_float32"]
        cells = [f"{a[lib][s]['top1_agreement']:.3f}, {a[lib][s]['max_logit_difference']:.2g}"
                 if s in a.get(lib, {}) else "-" for lib in libraries for s in ("tf32", "bfloat16")]
        lines.append(f"| {row['title']} | {' | '.join(cells)} | {parity} |")
    training = report.get("training", {})
    if training:
        train_libraries = [lib for lib in libraries if lib != "keras_vit-jit"]
        batches = ", ".join(f"{row['title']} {row.get('batch', report['batch'])}"
                            for row in training.values())
        lines += ["", f"Training step ({report['training_step']}), batch: {batches}:", ""]
        lines += _speed_table(training.values(), train_libraries, "first step")
        searched = [row for row in training.values() if "largest_batch" in row]
        if searched:
            lines += ["", "Largest batch whose bfloat16 training step ran (doubling from the "
                      "row's): " + "; ".join(
                          f"{row['title']} " + ", ".join(
                              f"{lib} {_largest(found)}" for lib, found in row["largest_batch"].items())
                          for row in searched)]
        lines += ["", "First losses (the same weights and labels): "
                  + "; ".join(f"{row['title']} {key} {loss:.4f}" for row in training.values()
                              for key, loss in row.get("first_loss", {}).items())]
    memory = _memory_table([*report["models"].values(), *training.values()], libraries)
    if memory:
        lines += ["", "Peak device memory per call, GiB (resident before it: parameters and "
                  "inputs); keras_vit: the XLA program's buffer assignment (inference: the "
                  "forward Keras' predict step jits; training: Keras' train step), timm: "
                  "torch.cuda.max_memory_allocated:", "", *memory]
    lines += ["", *(f"Setting {k}: {t}." for k, t in report["settings"].items())]
    lines += [f"{lib}: {text}." for lib, text in report.get("library_calls", {}).items()
              if lib in libraries]
    rows = [*report["models"].values(), *training.values()]
    lines += [f"Failed: {row['title']}: {_verbatim(row['error'])}" for row in rows if "error" in row]
    lines += [f"Failed: {row['title']} {key}: {_verbatim(text)}" for row in rows
              for key, text in row.get("errors", {}).items()]
    lines += [f"Note: {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"
