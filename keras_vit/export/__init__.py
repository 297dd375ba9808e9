"""Exports of a classifier: a SavedModel for TF Serving and a TFLite file
(keras_vit/export/saved_model.py), their quantised forms (export/quantized.py), ONNX,
OpenVINO and LiteRT files through Keras' own exporters (export/runtimes.py); a timm Hub folder
(export/pretrained_folder.py) and its upload (export/hub_push.py).

`export_saved_model`, `export_tflite` and `next_version` are read from here as before;
names that left in 0.2 (`model_input`, `has_softmax_head`) are still found, with a
DeprecationWarning (keras_vit/_lazy.py).
"""

from keras_vit import _lazy

__getattr__, __dir__, __all__ = _lazy.attach(__name__, {
    **dict.fromkeys(["export_saved_model", "export_tflite", "next_version"],
                    "keras_vit.export.saved_model"),
    **dict.fromkeys(["export_onnx", "export_openvino", "export_litert"],
                    "keras_vit.export.runtimes"),
    "save_pretrained": "keras_vit.export.pretrained_folder",
    "push_to_hub": "keras_vit.export.hub_push"},
    submodules=("saved_model", "quantized", "runtimes", "pretrained_folder", "timm_config",
                "transformers_folder", "model_card", "hub_push"))
