"""Where the bytes of a model's float32 and int8 TFLite files go, section by section.

    python -m benchmarks.tflite_bytes --model runs/digits/model.keras

Exports the model's float32 TFLite file and its int8 one (`keras_vit.export_tflite`,
calibrated on `--calibration-images` images of the digits training split, as the Serving
page's measurement) and prints, for each, the bytes of each section of the flatbuffer, read
with TensorFlow Lite's schema reader (`tensorflow.lite.tools.flatbuffer_utils`, not public
API: fine for a measurement). The weights are their buffers' bytes, by the type of the
tensor that holds them. Every other row is what the file loses when that section is removed
after the rows above it (the file re-written by flatbuffer_utils each time), so it counts
the section's own bytes with their offsets, length prefixes and padding:

    tensor names              every tensor's name string
    per-channel quantisation  the scales (float32) and zero points (int64) of every channel
                              of a per-channel tensor (int8 weights, int32 biases) beyond its
                              first
    per-tensor quantisation   the rest of the quantisation tables: one scale and zero point
                              per quantised tensor, and the empty tables of float tensors
    operators                 the op tables: their input and output indices and options
    tensor tables             each tensor's type, shape, shape signature and buffer index
    rest                      the file less all of the above: operator codes, the buffer
                              table, signature defs, metadata, alignment of the weights
                              (the converter writes an int8 file about 1.4 KB smaller than
                              flatbuffer_utils re-writes it, which shows here)

Then the int8 file's budget at 30% of the float32 file's size, and what is left of it once
the weights are in.
"""

import argparse
import os
import tempfile
from pathlib import Path

SECTIONS = ("tensor names", "per-channel quantisation", "per-tensor quantisation",
            "operators", "tensor tables")


def sections(content):
    """{row: bytes} of the TFLite file `content` (bytes): "<TYPE> weights" for each tensor
    type holding constant data, then SECTIONS, then "rest"; the rows sum to len(content)."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(content)
    types = {value: name for name, value in vars(schema.TensorType).items()
             if not name.startswith("_")}
    rows, seen = {}, set()
    for graph in model.subgraphs:
        for tensor in graph.tensors:
            data = model.buffers[tensor.buffer].data
            if data is not None and len(data) and tensor.buffer not in seen:
                seen.add(tensor.buffer)
                key = f"{types[tensor.type]} weights"
                rows[key] = rows.get(key, 0) + len(data)

    tensors = [t for graph in model.subgraphs for t in graph.tensors]

    def no_names():
        for tensor in tensors:
            tensor.name = None

    def one_channel():
        for tensor in tensors:
            q = tensor.quantization
            if q is not None and q.scale is not None and len(q.scale) > 1:
                q.scale, q.zeroPoint = q.scale[:1], q.zeroPoint[:1]

    def no_quantisation():
        for tensor in tensors:
            tensor.quantization = None

    def no_weights():  # measured, not a row: the weights' bytes are counted above
        for buffer in model.buffers:
            buffer.data = None

    def no_operators():
        for graph in model.subgraphs:
            graph.operators = []

    def no_tensors():
        for graph in model.subgraphs:
            graph.tensors, graph.inputs, graph.outputs = [], [], []

    size = len(flatbuffer_utils.convert_object_to_bytearray(model))
    for row, remove in zip((*SECTIONS[:3], None, *SECTIONS[3:]),
                           (no_names, one_channel, no_quantisation, no_weights, no_operators,
                            no_tensors)):
        remove()
        smaller = len(flatbuffer_utils.convert_object_to_bytearray(model))
        if row is not None:
            rows[row] = size - smaller
        size = smaller
    rows["rest"] = len(content) - sum(rows.values())
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a digits model's .keras file")
    parser.add_argument("--calibration-images", type=int, default=200)
    args = parser.parse_args(argv)

    import keras

    from keras_vit.export import export_tflite, quantized

    model = keras.saving.load_model(args.model, compile=False)
    calibration, _ = quantized.calibration_pixels("digits", tuple(model.input_shape[1:3]),
                                                  args.calibration_images)
    with tempfile.TemporaryDirectory() as folder:
        files = {"float32": export_tflite(model, os.path.join(folder, "float32.tflite")),
                 "int8": export_tflite(model, os.path.join(folder, "int8.tflite"),
                                       quantize="int8", calibration=calibration)}
        contents = {mode: Path(path).read_bytes() for mode, path in files.items()}
    measured = {mode: sections(content) for mode, content in contents.items()}
    float_size = len(contents["float32"])
    weight_rows = sorted({row for rows in measured.values() for row in rows
                          if row.endswith("weights")}, reverse=True)  # INT8, INT32, FLOAT32
    print(f"{model.name}, {model.count_params():,} parameters")
    print("| section | float32 file | int8 file | int8, of the float32 file |")
    print("|---|---|---|---|")
    for row in [*weight_rows, *SECTIONS, "rest", "file"]:
        values = {mode: len(contents[mode]) if row == "file" else rows.get(row, 0)
                  for mode, rows in measured.items()}
        print(f"| {row} | {values['float32']:,} B | {values['int8']:,} B | "
              f"{values['int8'] / float_size:.1%} |")
    weights = sum(value for row, value in measured["int8"].items() if row.endswith("weights"))
    budget = int(0.3 * float_size)
    graph = sum(measured["int8"][row] for row in ("operators", "tensor tables", "rest"))
    print(f"30% of the float32 file: {budget:,} B; the int8 file's weights {weights:,} B "
          f"leave {budget - weights:,} B for the rest, against {graph:,} B of operators, "
          f"tensor tables and rest alone (no names, no quantisation parameters).")


if __name__ == "__main__":
    main()
