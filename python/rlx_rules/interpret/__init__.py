"""The reference interpreter (numpy): numerics, the op table, the op families, weights, and the interpreter."""

from .core import BACKENDS, Interpreter, random_values, run, supported_ops
from .numerics import attention, erf, erfc, gelu, gelu_approx, layer_norm, rms_norm, rope, sigmoid, silu, softmax
from ..errors import UnsupportedOpError
from .optable import register_op
from .weights import load_weights, weights_path

__all__ = [
    "BACKENDS", "Interpreter", "UnsupportedOpError", "attention", "erf", "erfc", "gelu", "gelu_approx",
    "layer_norm", "load_weights", "random_values", "register_op", "rms_norm", "rope", "run", "sigmoid", "silu", "softmax",
    "supported_ops", "weights_path",
]
