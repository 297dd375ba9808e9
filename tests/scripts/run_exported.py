"""Runs an exported ONNX, OpenVINO or LiteRT file in its own runtime, in a process that never
imports keras_vit (nor Keras or TensorFlow): argv = format, file, pixels (.npy, [0, 255]), out
(.npz of each output). What a server without keras_vit does with the file."""

import sys

import numpy as np

format_name, path, pixels_path, out_path = sys.argv[1:5]
pixels = np.load(pixels_path).astype(np.float32)
if format_name == "onnx":
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    outputs = dict(zip(names, session.run(names, {"images": pixels})))
elif format_name == "openvino":
    import openvino as ov

    # float32: the CPU plugin's default is bfloat16 where the processor has it natively.
    compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    outputs = {name: value for port, value in compiled(pixels).items()
               for name in port.get_names() & {"logits", "probabilities", "class_ids"}}
else:
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=path).get_signature_runner("serving_default")
    batches = [runner(images=pixels[i:i + 1]) for i in range(len(pixels))]
    outputs = {name: np.concatenate([batch[name] for batch in batches]) for name in batches[0]}
loaded = sorted(name for name in ("keras_vit", "keras", "tensorflow") if name in sys.modules)
assert not loaded, f"the runtime process imported {loaded}"
np.savez(out_path, **outputs)
