"""benchmarks/accelerator.py's training rows: one SGD step of keras_vit (Keras' jitted train step)
against timm eager and compiled, in float32, TF32 and bfloat16, at each row's batch (ViT-B/16 at
224 batch 64, ViT-L/16 at 384 batch 16), with peak device memory, and with --largest-batch the
largest batch each library's bfloat16 step runs at (doubling from the row's batch)."""

import copy

import numpy as np

# timm name -> the training row's batch (the targets of docs/performance.md); --tiny: 2.
TRAINING_BATCHES = {"vit_base_patch16_224": 64, "vit_large_patch16_384": 16}
TRAIN_SETTINGS = ("float32", "tf32", "bfloat16")
# --largest-batch: the setting searched, the doublings tried at most (64 -> 1,024; 16 -> 256).
LARGEST_BATCH_SETTING, DOUBLINGS = "bfloat16", 4


def training_batch(name, tiny, batch=None):
    """The batch a training row runs at: --batch, else 2 with --tiny, else the row's."""
    return batch or (2 if tiny else TRAINING_BATCHES.get(name, 64))


def set_remat(model, remat):
    """Each encoder block of `model` rematerialised in training (train's --remat) or not."""
    from keras_vit.layers import TransformerBlock

    for layer in model._flatten_layers():
        if isinstance(layer, TransformerBlock):
            layer.remat = remat
    return model


def training_steps(ours, theirs, images, labels, jax_device, torch_device, options):
    """(steps, memory): {library: {setting: step}}, each step one SGD update (softmax
    cross-entropy on the logits, learning rate 1e-3) on `images` returning the loss, and
    {library: {setting: reading}} of benchmarks.device_memory records (empty unless
    `options["memory"]`). keras_vit: `train_on_batch` of the model compiled by Keras (its
    bfloat16 copy under mixed_bfloat16, head float32); timm: forward under `torch.autocast` for
    bfloat16, backward, step; timm-compiled the same on `torch.compile` of its own copy, where
    GPUs train (tf32, bfloat16). keras_vit-jit is not a training library (Keras' train step is
    already one jax.jit program); its memory is that program's."""
    import jax
    import keras
    import torch

    from benchmarks.device_memory import torch_peak, xla_peak
    from keras_vit.runtime.precision import bfloat16_model

    x_jax, y_jax = jax.device_put(images, jax_device), jax.device_put(labels, jax_device)
    x_torch = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2))).to(torch_device)
    y_torch = torch.from_numpy(labels).to(torch_device)

    def keras_step(model):
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return lambda: np.float32(model.train_on_batch(x_jax, y_jax))

    def keras_step_memory(model):
        """Keras' train step as Keras jits it (state donated), lowered after the first step
        built the optimizer."""
        def read():
            state = tuple([v.value for v in variables] for variables in (
                model.trainable_variables, model.non_trainable_variables,
                model.optimizer.variables, model.metrics_variables))
            step = jax.jit(model.train_step, donate_argnums=0)
            return xla_peak(step.lower(state, (x_jax, y_jax)).compile())
        return read

    def timm_step(model, bfloat16):
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

        def step():
            with torch.autocast(torch_device, torch.bfloat16, enabled=bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x_torch), y_torch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return np.float32(loss.item())
        return step

    # Each setting trains its own copy from the same weights, so the first losses compare.
    keras_models = {"float32": ours, "tf32": keras.models.clone_model(ours),
                    "bfloat16": bfloat16_model(ours)}
    keras_models["tf32"].set_weights(ours.get_weights())
    for model in keras_models.values():
        options["prepare"](set_remat(model, options.get("remat", False)))
    steps = {"keras_vit": {s: keras_step(m) for s, m in keras_models.items()},
             "timm": {s: timm_step(theirs if s == "float32" else copy.deepcopy(theirs),
                                   s == "bfloat16") for s in TRAIN_SETTINGS}}
    if "timm-compiled" in options["libraries"]:
        steps["timm-compiled"] = {
            s: timm_step(torch.compile(copy.deepcopy(theirs), backend=options["compile_backend"]),
                         s == "bfloat16") for s in TRAIN_SETTINGS if s != "float32"}
    memory = {}
    if options["memory"]:
        memory = {"keras_vit": {s: keras_step_memory(m) for s, m in keras_models.items()},
                  **{library: {s: (lambda c=step: torch_peak(c, torch_device))
                               for s, step in by_setting.items()}
                     for library, by_setting in steps.items() if library != "keras_vit"}}
    return steps, memory


def largest_batch(runs_at, batch, doublings=DOUBLINGS):
    """{"largest": the largest of batch, 2 batch, ... (`doublings` times) at which
    `runs_at(b)` returned, "failed_at": the first at which it raised (None: none did),
    "error": that failure, one line}. `runs_at` builds and runs one step at batch b; out of
    memory is an exception on both sides (XLA's RESOURCE_EXHAUSTED, torch's OutOfMemoryError)."""
    from benchmarks.accelerator import one_line

    largest = None
    for b in (batch * 2 ** i for i in range(doublings + 1)):
        try:
            runs_at(b)
        except Exception as error:  # noqa: BLE001 - the search's answer, not a failure
            return {"largest": largest, "failed_at": b, "error": one_line(error)}
        largest = b
    return {"largest": largest, "failed_at": None, "error": None}
