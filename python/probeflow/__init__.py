"""probeflow: network-latency measurements to transformer training data.

This package wraps probeflow's Rust ``reader`` crate:

* :class:`ArrayRecordReader` / :class:`ArrayRecordWriter` — ArrayRecord files,
  byte-compatible with Google's ``array_record``, memory-mapped for reading.
* :func:`encode_row`, :func:`build_rows`, :func:`decode_row` — a *row* is one probe's
  measurements as an Arrow IPC stream (``pyarrow.ipc.open_stream(row)`` reads it too).
* :func:`rtt_encode`, :func:`rtt_decode_us` — the 2-byte RTT code.
* :func:`partition`, :func:`src_id`, :func:`split_of`, :func:`canonical_addr` — where a
  probe's rows go, exactly as the preprocessing job computes it; :func:`splits_of` —
  which splits (train, val, test) an output holds.

* :class:`Dataset` — the training reader: deterministic per-rank batches of packed,
  tokenized contexts (MaxText's six arrays), resumable via ``get_state``/``set_state``,
  over one output or a weighted mixture of several (``Dataset.mixture``);
  :class:`RowDataSource` — random access to decoded rows. An output on ``s3://`` or
  ``gs://`` is read through a node-local shard cache (:func:`cache_stats`).
* :mod:`probeflow.tokenizer` — the 267-token vocabulary, detokenizer, pretty printer;
  :mod:`probeflow.grain` — Grain ``IterDataset`` adapter (imports ``grain``).
* ``python -m probeflow.report OUTPUT --html report.html`` — a one-page report on an
  output and on what the model sees (:mod:`probeflow.report`).
* ``python -m probeflow.maxtext_train`` — train with MaxText on probeflow shards;
  :mod:`probeflow.maxtext_input` — the MaxText input factories it installs (imports
  ``maxtext`` when used). See docs/maxtext.md.

Errors are :mod:`probeflow.errors` classes, ``OSError`` and ``IndexError``.
"""

from __future__ import annotations

from . import _native, errors, tokenizer
from ._native import (
    DEFAULT_ARRAY_RECORD_OPTIONS,
    DEFAULT_MAX_ROW_BYTES,
    ArrayRecordReader,
    ArrayRecordWriter,
    build_rows,
    cache_stats,
    canonical_addr,
    decode_row,
    encode_row,
    partition,
    rtt_decode_us,
    rtt_encode,
    split_of,
    splits_of,
    src_id,
)
from .dataset import READER_DEFAULTS, Dataset, RowDataSource
from .errors import (
    FormatError,
    InternalError,
    InvalidInputError,
    OptionsError,
    OutputError,
    ProbeflowError,
    RemoteError,
    StateError,
    ThreadError,
)

__all__ = [
    "DEFAULT_ARRAY_RECORD_OPTIONS",
    "DEFAULT_MAX_ROW_BYTES",
    "ArrayRecordReader",
    "ArrayRecordWriter",
    "Dataset",
    "READER_DEFAULTS",
    "RowDataSource",
    "tokenizer",
    "FormatError",
    "InternalError",
    "InvalidInputError",
    "OptionsError",
    "OutputError",
    "ProbeflowError",
    "RemoteError",
    "StateError",
    "ThreadError",
    "build_rows",
    "cache_stats",
    "canonical_addr",
    "decode_row",
    "encode_row",
    "errors",
    "partition",
    "rtt_decode_us",
    "rtt_encode",
    "split_of",
    "splits_of",
    "src_id",
]

#: The release: the same as ``coordinator --version``, ``worker --version`` and the wheel's.
__version__: str = _native.VERSION
