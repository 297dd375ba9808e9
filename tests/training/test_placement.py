"""The two placements answer one interface; a run never asks which one it holds.

The placements over several devices or processes run in subprocesses:
tests/training/test_distributed.py (mirrored, multi-worker) and
tests/training/test_jax.py (keras.distribution, via tests/scripts/jax_backend.py).
"""

import json

import keras
import pytest
import tensorflow as tf

from keras_vit.errors import KerasViTError
from keras_vit.training import distribute
from keras_vit.training.placement import (
    JaxDistributionPlacement,
    Placement,
    TFStrategyPlacement,
    _is_chief,
    as_placement,
    get_placement,
)


def one_device_placements():
    # keras.distribution's objects can be made on any backend; only JAX lays out with them.
    distribution = keras.distribution.DataParallel(devices=keras.distribution.list_devices()[:1])
    return [TFStrategyPlacement(tf.distribute.get_strategy()),
            JaxDistributionPlacement(distribution)]


@pytest.mark.parametrize("placement", one_device_placements(), ids=lambda p: type(p).__name__)
def test_each_placement_answers_the_interface(placement):
    assert not type(placement).__abstractmethods__  # every member of Placement is defined
    with placement.scope(), placement.run_scope():
        variable = keras.Variable(1.0)
    assert float(keras.ops.convert_to_numpy(variable)) == 1.0
    assert placement.num_replicas == 1
    assert placement.is_chief is True
    assert placement.worker_output("runs/x") == "runs/x"  # the chief writes the folder itself
    assert placement.task == "worker-0"


def test_get_placement_wraps_the_strategy_get_strategy_chooses():
    placement = get_placement("none")
    assert isinstance(placement, TFStrategyPlacement)
    assert placement.strategy is distribute.get_strategy("none")
    assert as_placement(placement) is placement
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0"])
    assert isinstance(as_placement(mirrored), TFStrategyPlacement)
    distribution = keras.distribution.DataParallel(devices=keras.distribution.list_devices()[:1])
    assert isinstance(as_placement(distribution), JaxDistributionPlacement)
    with pytest.raises(KerasViTError, match="expected a tf.distribute.Strategy"):
        as_placement("mirrored")


def test_non_chief_workers_write_beside_the_run():
    class Worker(Placement):
        run_scope = num_replicas = None
        is_chief, task = False, "worker-1"

    assert Worker(None).worker_output("runs/x") == "runs/x/worker-1"


@pytest.mark.parametrize("cluster, task, chief", [
    ({"worker": ["a:1", "b:1"]}, {"type": "worker", "index": 0}, True),
    ({"worker": ["a:1", "b:1"]}, {"type": "worker", "index": 1}, False),
    ({"chief": ["a:1"], "worker": ["b:1"]}, {"type": "chief", "index": 0}, True),
    ({"chief": ["a:1"], "worker": ["b:1"]}, {"type": "worker", "index": 0}, False),
])
def test_the_multi_worker_chief_follows_tf_config(monkeypatch, cluster, task, chief):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": task}))
    assert _is_chief(tf.distribute.cluster_resolver.TFConfigClusterResolver()) is chief
