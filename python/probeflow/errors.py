"""Exceptions raised by probeflow.

The Rust crates have one error enum each; the bindings map them onto this small
hierarchy (and onto Python's own ``OSError`` family and ``IndexError``):

* :class:`ProbeflowError` — base of everything probeflow raises itself.
* :class:`FormatError` — a file or row is corrupt, truncated, not in the expected
  format, or uses an unsupported feature. The message names the file and the chunk.
* :class:`InvalidInputError` — a value cannot be used (bad address, NaN RTT,
  measurements out of time order …). Also a ``ValueError``.
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

I/O problems raise ``FileNotFoundError``, ``PermissionError`` or ``OSError``; an
index out of range raises ``IndexError``.
"""

from __future__ import annotations

__all__ = [
    "ProbeflowError",
    "FormatError",
    "InvalidInputError",
    "OptionsError",
    "OutputError",
    "RemoteError",
    "ThreadError",
]


class ProbeflowError(Exception):
    """Base class of probeflow's own exceptions."""


class FormatError(ProbeflowError):
    """A corrupt, truncated or unsupported ArrayRecord file or row."""


class InvalidInputError(ProbeflowError, ValueError):
    """An input value probeflow cannot encode."""


class OptionsError(ProbeflowError, ValueError):
    """An invalid ArrayRecord writer option string."""


class OutputError(ProbeflowError, ValueError):
    """A job output that must not be read as asked (unfinished, other version, paths
    outside it, another split, several outputs mixed)."""


class RemoteError(ProbeflowError, OSError):
    """An object store could not be reached or refused a request, or a remote URL is
    malformed."""


class ThreadError(ProbeflowError, RuntimeError):
    """A thread the reader needs could not be started, or a background thread stopped
    unexpectedly (not an input problem)."""
