"""Exceptions raised by probeflow.

The classes are declared by the Rust extension (``probeflow._native``), which maps
every reader error onto this small hierarchy in one place (and onto Python's own
``OSError`` family and ``IndexError``); this module is their home:

* :class:`ProbeflowError` — base of everything probeflow raises itself.
* :class:`FormatError` — a file or row is corrupt, truncated, not in the expected
  format, or uses an unsupported feature. The message names the file and the chunk.
* :class:`InvalidInputError` — a value cannot be used (bad address, NaN RTT,
  measurements out of time order …). Also a ``ValueError``.
* :class:`StateError` — an iterator state that cannot be restored here (taken on other
  rows or with other options, of another version, damaged). An ``InvalidInputError``.
* :class:`OptionsError` — an ArrayRecord option string is invalid. Also a ``ValueError``.
* :class:`OutputError` — a job output (or shard files) that must not be read as asked:
  the job has not finished (no ``_SUCCESS``), its format or tokenizer version is not
  this reader's, its manifest names a path outside the output, or the files belong to
  another split or to several outputs. Also a ``ValueError``.
* :class:`RemoteError` — an object store (``s3://``, ``gs://``) could not be reached
  or refused a request (credentials, permissions, network), or a remote URL is
  malformed. Also an ``OSError``. A missing object raises ``FileNotFoundError``.
* :class:`ThreadError` — a thread the reader needs could not be started (the system
  refused it: too many threads, no memory for its stack) or a background thread
  stopped unexpectedly. Nothing is wrong with the input. Also a ``RuntimeError``.
* :class:`InternalError` — a bug in probeflow (a broken invariant, an earlier panic):
  please report it. Also a ``RuntimeError``.

I/O problems raise ``FileNotFoundError``, ``PermissionError`` or ``OSError``; an
index out of range raises ``IndexError``.
"""

from __future__ import annotations

from ._native import (
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
    "ProbeflowError",
    "FormatError",
    "InvalidInputError",
    "StateError",
    "OptionsError",
    "OutputError",
    "RemoteError",
    "ThreadError",
    "InternalError",
]
