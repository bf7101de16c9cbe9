"""Type stubs for probeflow._native (the Rust extension)."""

from collections.abc import Sequence
from os import PathLike
from types import TracebackType
from typing import Any, Self, TypedDict, final

import numpy as np
import numpy.typing as npt

DEFAULT_MAX_ROW_BYTES: int

class ProbeflowError(Exception): ...
class FormatError(ProbeflowError): ...
class InvalidInputError(ProbeflowError, ValueError): ...
class StateError(InvalidInputError): ...
class OptionsError(ProbeflowError, ValueError): ...
class OutputError(ProbeflowError, ValueError): ...
class RemoteError(ProbeflowError, OSError): ...
class ThreadError(ProbeflowError, RuntimeError): ...
class InternalError(ProbeflowError, RuntimeError): ...
#: URL schemes of object stores (``s3://``, ``gs://``).
REMOTE_SCHEMES: list[str]
#: The release (the workspace's version), as ``probeflow.__version__`` gives it.
VERSION: str
#: The completion marker every finished job output has (``_SUCCESS``), written last.
COMPLETION_MARKER: str
#: Completion markers of earlier releases, still recognised (the overlap job's ``.SUCCESS``).
EARLIER_COMPLETION_MARKERS: list[str]
DEFAULT_ARRAY_RECORD_OPTIONS: str
#: The reader's option defaults by ``Dataset`` option name.
READER_DEFAULTS: dict[str, Any]

class WriteSummary(TypedDict):
    records: int
    chunks: int
    bytes: int

class DecodedRow(TypedDict):
    src_addr: str
    src_id: int
    ip_version: int
    part: int
    first_time: int
    last_time: int
    n_measurements: int
    event_time: npt.NDArray[np.uint64]
    dst_addr: list[str]
    rtt_code: npt.NDArray[np.uint16]
    failed: npt.NDArray[np.bool_]
    rtt_ms: npt.NDArray[np.float64]

@final
class ArrayRecordReader:
    """Memory-mapped, random-access reader of an ArrayRecord file.

    Reads check chunk and block hashes; a damaged file raises
    :class:`probeflow.errors.FormatError` naming the file and chunk.
    """

    def __new__(cls, path: str | PathLike[str], *, verify_hashes: bool = True) -> Self: ...
    @property
    def path(self) -> str: ...
    @property
    def writer_options(self) -> str | None:
        """The option string the writer stored in the footer."""
    @property
    def group_size(self) -> int:
        """Records per chunk (from the first footer entry)."""
    @property
    def num_chunks(self) -> int: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> bytes: ...
    def read(self, indices: Sequence[int]) -> list[bytes]:
        """Records at ``indices``, in that order (GIL released while reading)."""
    def read_range(self, start: int, stop: int) -> list[bytes]:
        """Records ``start`` up to ``stop`` (exclusive)."""
    def __iter__(self) -> _RecordIterator: ...
    def close(self) -> None:
        """Release the file; later calls raise ``ValueError``."""
    def __enter__(self) -> ArrayRecordReader: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

@final
class _RecordIterator:
    """The records of an :class:`ArrayRecordReader`, in order."""

    def __iter__(self) -> _RecordIterator: ...
    def __next__(self) -> bytes: ...

@final
class ArrayRecordWriter:
    """Writes an ArrayRecord file; ``options`` is ArrayRecord's own option string
    (``group_size:N``, ``zstd[:L]``, ``brotli[:L]``, ``snappy``, ``uncompressed``,
    ``window_log:N``, ``pad_to_block_boundary``)."""

    def __new__(cls, path: str | PathLike[str], options: str = ...) -> Self: ...
    @property
    def path(self) -> str: ...
    def write(self, record: bytes) -> None: ...
    def close(self) -> WriteSummary:
        """Write the footer and postscript. Without it the file is incomplete."""
    def __enter__(self) -> ArrayRecordWriter: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

def encode_row(
    src_addr: str,
    event_time: Sequence[int],
    dst_addr: Sequence[str],
    rtt_ms: Sequence[float | None],
    *,
    part: int = 0,
) -> bytes:
    """One row from time-ordered measurements; ``None`` or a negative RTT is a failed ping."""

def build_rows(
    src_addr: str,
    event_time: Sequence[int],
    dst_addr: Sequence[str],
    rtt_ms: Sequence[float | None],
    *,
    max_row_bytes: int = ...,
) -> list[bytes]:
    """Rows of at most ``max_row_bytes``, split at measurement boundaries (part 0, 1, …)."""

def decode_row(record: bytes) -> DecodedRow:
    """A row's facts and columns (``rtt_ms`` is NaN for failed pings)."""

def rtt_encode(rtt_ms: float) -> int | None:
    """The 2-byte RTT code (``None`` for negative = failed; NaN raises)."""

def rtt_decode_us(code: int) -> int:
    """Microseconds a code stands for: ``mantissa << exponent``."""

def canonical_addr(addr: str) -> str:
    """Canonical text of an address; IPv4-mapped IPv6 becomes IPv4."""

def src_id(addr: str) -> int:
    """``u64_le(blake3(canonical_addr(addr))[0:8])``."""

def partition(addr: str, shards: int) -> int:
    """``src_id(addr) % shards``: the shard a source's rows are written to."""

def split_of(addr: str, seed: int, test_fraction: float, val_fraction: float = 0.0) -> str:
    """``"train"``, ``"val"`` or ``"test"``, as the preprocessing job assigns it:
    ``bucket = u64_le(blake3(u64_le(seed) ‖ canonical_addr(addr))[0:8]) % 1_000_000``;
    test below ``test_fraction × 1e6``, val below ``(test_fraction + val_fraction) × 1e6``,
    else train. Raises :class:`InvalidInputError` for fractions outside 0..1 or adding
    up to more than 1."""

# --- training reader (probeflow.Dataset wraps _Loader) ---

VOCAB_SIZE: int
TOKENIZER_VERSION: str

@final
class _Loader:
    def __new__(
        cls,
        path: str | list[str] | list[str | list[str]],
        split: str,
        seq_len: int,
        batch_size: int,
        seed: int,
        shard_index: int,
        shard_count: int,
        packing: bool,
        prefetch: int,
        num_threads: int | None,
        num_epochs: int | None,
        drop_remainder: bool,
        block_rows: int,
        contexts_per_row: int,
        measurements_per_context: int,
        tokens_per_measurement: int,
        timestamp_modes: tuple[float, float, float],
        partial_drop: tuple[float, float],
        strategy: str,
        verify: bool = False,
        weights: list[float] | None = None,
        cache_dir: str | PathLike[str] | None = None,
        cache_limit: int | str | None = None,
    ) -> Self: ...
    def next_batch(self) -> dict[str, npt.NDArray[np.int32]] | None: ...
    def state_json(self) -> str: ...
    def set_state_json(self, state: str) -> None: ...
    def set_states_json(self, states: str) -> None: ...
    def set_weights(self, weights: list[float]) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def num_rows(self) -> int: ...
    @property
    def source_rows(self) -> list[int]: ...
    @property
    def weights(self) -> list[float] | None: ...
    @property
    def source_files(self) -> list[list[str]]: ...
    @property
    def source_names(self) -> list[str]: ...
    @property
    def files(self) -> list[str]: ...

def remote_object_size(url: str) -> int:
    """The size in bytes of the object at ``url`` (``s3://…``, ``gs://…``)."""
def remote_object_range(url: str, start: int, stop: int) -> bytes:
    """Bytes ``start..stop`` of the object at ``url`` (one request)."""
def _after_fork_in_child() -> None:
    """Marks this process as a fork child: loaders start fresh producer threads."""

def splits_of(paths: list[str]) -> list[str]:
    """The splits ``paths`` hold, in the order train, val, test: an output's manifest's
    splits, or the split directories of a glob's or file list's files."""

def cache_stats() -> dict[str, int]:
    """This process's shard-cache counters for outputs on object stores: ``downloads``,
    ``downloaded_bytes``, ``hits``, ``refetched`` (cached files found changed and
    downloaded again) and ``evicted``."""

def resolve_shards(paths: list[str], split: str, verify: bool = False) -> list[str]:
    """The shard files of ``split`` named by ``paths`` (directories, manifests, globs,
    files), checked: ``_SUCCESS``, versions, split, one output; ``verify`` also checks
    sizes, blake3 and rows against the manifest. For one output on ``s3://`` or
    ``gs://``: its split's shard URLs, nothing downloaded. Raises OutputError or
    FormatError."""

def encode_measurement(
    src: str,
    dst: str,
    rtt_code: int | None,
    timestamp: tuple[str, int] | None = None,
    order: int = 0,
) -> npt.NDArray[np.int32]:
    """Tokens of one measurement; ``timestamp`` is ``("abs", t)`` or ``("delta", d)``."""

def detokenize(tokens: npt.NDArray[np.int32]) -> list[dict[str, Any]]:
    """Measurements (dicts) from tokens; raises InvalidInputError on a grammar error."""

def pretty(tokens: npt.NDArray[np.int32]) -> str:
    """Tokens for people: one measurement per line."""

def token_name(id: int) -> str:
    """A role name, or ``0xNN`` for a byte token."""
