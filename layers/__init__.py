"""Keras layers of the ALBERT-style text classifier, one per module."""

from layers.classification_head import ClassificationHead
from layers.dropout import Dropout
from layers.factorized_embedding import FactorizedEmbedding
from layers.layer_normalization import LayerNormalization
from layers.masked_lm_head import MaskedLMHead
from layers.segment_embedding import SegmentEmbedding
from layers.shared_encoder import SharedEncoder
from layers.timing_signal import TimingSignal1D, get_timing_signal_1d
from layers.transformer_block import TransformerBlock

__all__ = [
    "ClassificationHead",
    "Dropout",
    "FactorizedEmbedding",
    "LayerNormalization",
    "MaskedLMHead",
    "SegmentEmbedding",
    "SharedEncoder",
    "TimingSignal1D",
    "TransformerBlock",
    "get_timing_signal_1d",
]
