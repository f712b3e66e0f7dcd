import keras
import numpy as np
import pytest

from layer_test_helper import run_layer_test
from layers import TimingSignal1D, get_timing_signal_1d


def test_layer_contract():
    inputs = {"inputs": np.random.default_rng(0).normal(size=(2, 7, 6)).astype("float32")}
    run_layer_test(TimingSignal1D, {"max_timescale": 100.0}, inputs, (2, 7, 6))


def test_golden_row_length_4_channels_6():
    # sin(3), sin(0.03), sin(0.0003), cos(3), cos(0.03), cos(0.0003)
    signal = np.asarray(get_timing_signal_1d(4, 6))
    np.testing.assert_allclose(signal[3], [0.14112, 0.03, 0.0003, -0.98999, 0.99955, 1.0], atol=5e-5)
    np.testing.assert_allclose(signal[0], [0, 0, 0, 1, 1, 1], atol=1e-7)


def test_odd_channels_get_a_zero_column():
    signal = np.asarray(get_timing_signal_1d(4, 7))
    np.testing.assert_allclose(signal[:, :6], get_timing_signal_1d(4, 6), atol=1e-7)
    np.testing.assert_array_equal(signal[:, 6], 0.0)


@pytest.mark.parametrize("channels", [2, 3])
def test_one_timescale_is_guarded(channels):
    # n = 1: the max(n - 1, 1) guard avoids dividing by zero; inv_timescale = 1.
    signal = np.asarray(get_timing_signal_1d(3, channels))
    expected = [[0.0, 1.0], [0.841471, 0.540302], [0.909297, -0.416147]]
    np.testing.assert_allclose(signal[:, :2], expected, atol=1e-6)
    assert signal.shape == (3, channels)
    if channels == 3:
        np.testing.assert_array_equal(signal[:, 2], 0.0)


def test_start_index_shifts_positions():
    shifted = np.asarray(get_timing_signal_1d(2, 6, start_index=5))
    np.testing.assert_allclose(shifted, np.asarray(get_timing_signal_1d(7, 6))[5:], atol=1e-6)
    np.testing.assert_allclose(shifted[0, [0, 3]], [-0.958924, 0.283662], atol=1e-6)


def test_any_length_at_call_time():
    layer = TimingSignal1D()
    model = keras.Sequential([keras.Input((None, 8)), layer])
    short = model(np.zeros((1, 4, 8), "float32"))
    long = model(np.zeros((1, 1000, 8), "float32"))
    np.testing.assert_allclose(long[0, :4], short[0], atol=1e-6)
    np.testing.assert_allclose(long[0, 999], get_timing_signal_1d(1000, 8)[999], atol=1e-6)


def test_adds_to_input_and_casts_to_compute_dtype():
    inputs = np.ones((1, 3, 4), "float32")
    layer = TimingSignal1D()
    out = layer(inputs)
    np.testing.assert_allclose(out, 1.0 + np.asarray(get_timing_signal_1d(3, 4))[None], atol=1e-6)
    mixed = TimingSignal1D(dtype="mixed_bfloat16")(inputs)
    assert keras.backend.standardize_dtype(mixed.dtype) == "bfloat16"
    assert layer.count_params() == 0
