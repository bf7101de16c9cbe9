"""The tokenizer's vocabulary (267 ids) and helpers to look at what the model sees.

* :data:`VOCAB_SIZE`, :data:`TOKEN_NAMES`, the role ids (``MEASUREMENT_START`` …),
  ``BYTE_BASE`` (byte ``b`` is id ``BYTE_BASE + b``).
* :func:`encode_measurement` — tokens of one measurement.
* :func:`detokenize` — tokens back into measurement dicts (raises on grammar errors).
* :func:`segments` — the contexts of a packed sequence, cut by its segmentation.
* :func:`pretty` — one measurement per line, for people.
"""

from __future__ import annotations

import numpy as np

from ._native import TOKENIZER_VERSION, VOCAB_SIZE, detokenize, encode_measurement, pretty, token_name

MEASUREMENT_START = 0
SRC_IPV4 = 1
SRC_IPV6 = 2
DST_IPV4 = 3
DST_IPV6 = 4
TIMESTAMP_ABS = 5
TIMESTAMP_DELTA1 = 6
TIMESTAMP_DELTA4 = 7
RTT_START = 8
THROUGHPUT_START = 9
FAILED = 10
BYTE_BASE = 11

TOKEN_NAMES: list[str] = [token_name(i) for i in range(VOCAB_SIZE)]


def segments(inputs: np.ndarray, segmentation: np.ndarray) -> list[np.ndarray]:
    """The contexts packed in one sequence (1-D arrays), in order; padding dropped."""
    inputs = np.asarray(inputs)
    segmentation = np.asarray(segmentation)
    out = []
    for seg in np.unique(segmentation[segmentation != 0]):
        out.append(inputs[segmentation == seg].astype(np.int32))
    return out


__all__ = [
    "BYTE_BASE",
    "DST_IPV4",
    "DST_IPV6",
    "FAILED",
    "MEASUREMENT_START",
    "RTT_START",
    "SRC_IPV4",
    "SRC_IPV6",
    "THROUGHPUT_START",
    "TIMESTAMP_ABS",
    "TIMESTAMP_DELTA1",
    "TIMESTAMP_DELTA4",
    "TOKENIZER_VERSION",
    "TOKEN_NAMES",
    "VOCAB_SIZE",
    "detokenize",
    "encode_measurement",
    "pretty",
    "segments",
    "token_name",
]
