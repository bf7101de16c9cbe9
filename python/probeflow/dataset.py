"""The training dataset: deterministic per-rank batches of packed, tokenized contexts.

``Dataset`` opens a preprocessed output (its directory or ``manifest.json``, a glob of
shard files, one file or a list of them) for one split, memory-mapped, and yields dicts
of ``[batch_size, seq_len]`` int32 numpy arrays with MaxText's six keys (``inputs``,
``inputs_segmentation``, ``inputs_position``, ``targets``, ``targets_segmentation``,
``targets_position``), targets already shifted as MaxText's ``ShiftData`` leaves them.

Batches are produced by Rust threads in the background (``prefetch`` batches ahead);
the GIL is released while producing and waiting. ``get_state()`` returns a small
JSON-serialisable dict; ``set_state()`` continues the exact same stream.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator, Sequence, Union

import numpy as np

from . import _native

PathLike = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]

def _after_fork_in_child() -> None:
    _native._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _default_shards() -> tuple[int, int]:
    try:
        import jax  # noqa: PLC0415  (optional dependency)
    except ImportError:
        return 0, 1
    return int(jax.process_index()), int(jax.process_count())


class Dataset:
    """An iterator of training batches for one rank (``shard_index`` of ``shard_count``).

    Args:
        path: a job output directory or its ``manifest.json``, a glob such as
            ``"out/train/shard-*.array_record"``, one shard file, or a list of them.
            Only finished outputs are read (``_SUCCESS``, known format and tokenizer
            versions); files of a job output must be in its manifest.
        split: ``"train"``, ``"val"`` or ``"test"``. Globs and files honour it too: a file in
            another split's directory raises :class:`~probeflow.OutputError`, as do
            shards of several outputs (another manifest or another ``-of-N``).
        seq_len: tokens per sequence (the context length).
        batch_size: sequences per batch.
        seed: seeds the epoch order and every sampling draw.
        shard_index, shard_count: this rank and the number of ranks; default
            ``jax.process_index()`` / ``jax.process_count()`` when jax is importable,
            else 0 / 1. Ranks see disjoint rows that together cover every row each epoch.
        packing: pack several contexts per sequence (``*_segmentation`` 1, 2, …); off
            gives one padded context per sequence.
        prefetch: batches produced ahead in the background (0: on ``next()``).
        num_threads: threads that sample rows (default: up to 4, the CPUs available).
        num_epochs: None repeats forever; otherwise the stream ends after that many.
        drop_remainder: at the end of a finite stream drop a partial last batch instead
            of padding it with empty sequences.
        block_rows: rows whose contexts are shuffled and packed together.
        contexts_per_row, measurements_per_context, tokens_per_measurement,
        timestamp_modes, partial_drop, strategy: the sampler's numbers (see
            ARCHITECTURE.md, "The sampler"); ``strategy`` is ``"window"`` or
            ``"geometric_stride"``.
    """

    def __init__(
        self,
        path: PathLike,
        split: str = "train",
        *,
        seq_len: int = 1024,
        batch_size: int = 8,
        seed: int = 0,
        shard_index: int | None = None,
        shard_count: int | None = None,
        packing: bool = True,
        prefetch: int = 4,
        num_threads: int | None = None,
        num_epochs: int | None = None,
        drop_remainder: bool = False,
        block_rows: int = 256,
        contexts_per_row: int = 16,
        measurements_per_context: int = 30,
        tokens_per_measurement: int = 30,
        timestamp_modes: tuple[float, float, float] = (0.4, 0.3, 0.3),
        partial_drop: tuple[float, float] = (0.1, 0.9),
        strategy: str = "window",
        verify: bool = False,
    ) -> None:
        if (shard_index is None) != (shard_count is None):
            raise ValueError("give both shard_index and shard_count, or neither")
        if shard_index is None or shard_count is None:
            shard_index, shard_count = _default_shards()
        if num_threads is None:
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            num_threads = max(1, min(4, cpus))
        if isinstance(path, (str, os.PathLike)):
            paths: str | list[str] = os.fspath(path)
        else:
            paths = [os.fspath(p) for p in path]
        self._options = dict(
            split=split,
            seq_len=seq_len,
            batch_size=batch_size,
            seed=seed,
            shard_index=shard_index,
            shard_count=shard_count,
            packing=packing,
            prefetch=prefetch,
            num_threads=num_threads,
            num_epochs=num_epochs,
            drop_remainder=drop_remainder,
            block_rows=block_rows,
            contexts_per_row=contexts_per_row,
            measurements_per_context=measurements_per_context,
            tokens_per_measurement=tokens_per_measurement,
            timestamp_modes=tuple(timestamp_modes),
            partial_drop=tuple(partial_drop),
            strategy=strategy,
        )
        self._path = paths
        self._loader = _native._Loader(paths, **self._options, verify=verify)

    @property
    def options(self) -> dict[str, Any]:
        """The options this dataset was created with."""
        return dict(self._options)

    @property
    def num_rows(self) -> int:
        """Rows in the split (all ranks together)."""
        return self._loader.num_rows

    @property
    def files(self) -> list[str]:
        """The shard files, in global row order."""
        return self._loader.files

    @property
    def closed(self) -> bool:
        return self._loader.closed

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        batch = self._loader.next_batch()
        if batch is None:
            raise StopIteration
        return batch

    def get_state(self) -> dict[str, Any]:
        """The state after the last batch returned: a small JSON-serialisable dict."""
        return json.loads(self._loader.state_json())

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from ``get_state``); prefetched batches are dropped.

        Raises InvalidInputError if the state belongs to differently configured
        iterator (seed, ranks, rows, seq_len, batch_size, packing, block_rows)."""
        self._loader.set_state_json(json.dumps(state))

    def set_states(self, states: Sequence[dict[str, Any]]) -> None:
        """Continue from the states of **every** rank of a run, whatever its number of
        ranks (``shard_count``): the elastic resume. Give one ``get_state()`` per old
        rank, in any order.

        With as many old ranks as this iterator's ``shard_count`` it is
        :meth:`set_state` of this rank's state. Otherwise the rest of each epoch the old
        ranks were in is dealt out to the new ranks: over all new ranks, no row of those
        epochs is read twice and none is skipped, and a block of rows a rank had partly
        delivered is rebuilt from the same random keys, so its remaining contexts are
        delivered (by one new rank) and its delivered ones are not. Later epochs are
        dealt normally. It costs O(old + new ranks), not a replay. The new ranks'
        batches differ from the old ones' (other ranks, other packing of the rest);
        they are deterministic: the same states and options give the same batches. The
        seed, split rows, ``seq_len``, ``packing`` and ``block_rows`` must match; the
        batch size may change. The resulting state records the re-dealt epochs
        (``"version": 2``) and restores exactly with :meth:`set_state`.

        Raises InvalidInputError when a rank's state is missing or repeated, or the
        states belong to another dataset or configuration."""
        self._loader.set_states_json(json.dumps(list(states)))

    def close(self) -> None:
        """Stop the background threads. Further use raises ValueError."""
        self._loader.close()

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        o = self._options
        return (
            f"probeflow.Dataset({self._path!r}, split={o['split']!r}, seq_len={o['seq_len']}, "
            f"batch_size={o['batch_size']}, seed={o['seed']}, shard_index={o['shard_index']}, "
            f"shard_count={o['shard_count']}, packing={o['packing']})"
        )


class RowDataSource:
    """Random access to decoded rows of a split (Grain's ``RandomAccessDataSource``).

    ``source[i]`` is :func:`probeflow.decode_row` of global row ``i``: the row's facts
    and numpy columns. For users who sample in Python.
    """

    def __init__(self, path: PathLike, split: str = "train", *, verify: bool = False) -> None:
        paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        self._files = _native.resolve_shards([os.fspath(p) for p in paths], split, verify)
        self._path = path
        self._split = split
        self._readers = [_native.ArrayRecordReader(f) for f in self._files]
        self._starts = np.cumsum([0] + [len(r) for r in self._readers])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> dict[str, Any]:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"row {index} out of range ({len(self)} rows)")
        shard = int(np.searchsorted(self._starts, index, side="right")) - 1
        return _native.decode_row(self._readers[shard][index - int(self._starts[shard])])

    def __repr__(self) -> str:
        return f"probeflow.RowDataSource({self._path!r}, split={self._split!r})"
