"""One check that every layer test runs: serialization, saving, shapes, fit."""

import json
import os
import tempfile

import keras
import numpy as np
import tensorflow as tf


def _functional(layer, inputs):
    symbolic = {name: keras.Input(value.shape[1:], dtype=str(value.dtype), name=name) for name, value in inputs.items()}
    return keras.Model(symbolic, layer(**symbolic)), symbolic


def run_layer_test(layer_class, init_kwargs, inputs, expected_output_shape):
    """Checks a layer end to end.

    Args:
        layer_class: the layer class under test.
        init_kwargs: constructor arguments.
        inputs: dict of call-argument name to numpy array (batch first).
        expected_output_shape: shape of the eager output.
    """
    # Config round trip through JSON.
    layer = layer_class(**init_kwargs)
    serialized = json.dumps(keras.saving.serialize_keras_object(layer))
    restored = keras.saving.deserialize_keras_object(json.loads(serialized))
    assert type(restored) is layer_class
    assert restored.get_config() == layer.get_config()

    # Eager and symbolic shapes agree.
    eager = layer(**inputs)
    assert tuple(eager.shape) == tuple(expected_output_shape)
    model, symbolic = _functional(layer_class(**init_kwargs), inputs)
    assert tuple(model.output.shape[1:]) == tuple(expected_output_shape[1:])

    # `.keras` save and reload gives the same outputs.
    expected = model.predict(inputs, verbose=0)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.keras")
        model.save(path)
        reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(reloaded.predict(inputs, verbose=0), expected, atol=1e-6)

    # One XLA-compiled gradient step gives a finite loss and gradients. Not
    # through `fit`: Keras drops `jit_compile=True` under op determinism, which
    # the tests enable.
    @tf.function(jit_compile=True)
    def step(inputs):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(keras.ops.cast(model(inputs, training=True), "float32")))
        return loss, tape.gradient(loss, model.trainable_variables)

    loss, gradients = step({name: keras.ops.convert_to_tensor(value) for name, value in inputs.items()})
    assert np.isfinite(loss.numpy())
    assert all(np.isfinite(keras.ops.convert_to_numpy(keras.ops.convert_to_tensor(g))).all() for g in gradients)

    # mixed_bfloat16 with the same weights stays close to float32.
    float_layer = layer_class(**init_kwargs)
    float_output = np.asarray(float_layer(**inputs), "float32")
    mixed_layer = layer_class(**init_kwargs, dtype="mixed_bfloat16")
    mixed_layer(**inputs)
    mixed_layer.set_weights(float_layer.get_weights())
    mixed_output = mixed_layer(**inputs)
    assert all(w.dtype == "float32" for w in mixed_layer.weights)
    mixed_output = np.asarray(keras.ops.cast(mixed_output, "float32"))
    scale = max(1.0, float(np.abs(float_output).max()))
    np.testing.assert_allclose(mixed_output, float_output, atol=0.05 * scale)
    return layer
