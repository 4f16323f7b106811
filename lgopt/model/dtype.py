"""Element types lgopt knows, with their storage width.

Names follow the compilers' short forms.  ONNX element types map onto them in
:mod:`lgopt.io.onnx_import`.
"""

from __future__ import annotations

from lgopt.errors import LgoptError

DTYPE_BYTES: dict[str, int] = {
    "f32": 4,
    "f16": 2,
    "bf16": 2,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "f64": 8,
    "bool": 1,
}

# Element types a layer-group op may compute in; the others (int32, int64, f64,
# bool) appear only in global layers, biases and shape arithmetic.
COMPUTE_DTYPES = ("f32", "f16", "bf16", "int8", "uint8", "int16")


def dtype_bytes(dtype: str) -> int:
    """Bytes per element; unknown names are input errors, not KeyErrors."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise LgoptError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPE_BYTES)})") from None


def is_integer(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))
