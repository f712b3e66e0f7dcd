"""One switch for the layers' CPU fast path, set once per run.

On CPUs the layers train through hand-written gradients and small
XLA-compiled passes (`layers.fused_gradients`, the hashed masks of
`layers.dropout`, `TransformerBlock`'s `layers.fast_block`), because
TensorFlow's op-by-op kernels spend most of a small model's step on
memory-bound passes. A TPU compiles the whole step with XLA, which fuses
those passes on its own, so there the layers are plain Keras composition.
`pipeline.strategy.configure_runtime` sets the switch from
`train.cpu_fast_path` and the device before any model is built; graphs
traced afterwards keep what it said when they were traced.
"""

import contextlib

_enabled = True


def enabled():
    """Whether layers traced now take the CPU fast path."""
    return _enabled


def set_enabled(value):
    """Turns the CPU fast path on or off for layers traced from now on."""
    global _enabled
    _enabled = bool(value)


@contextlib.contextmanager
def scope(value):
    """The fast path on or off inside the `with` block, as it was after it."""
    previous = _enabled
    set_enabled(value)
    try:
        yield
    finally:
        set_enabled(previous)
