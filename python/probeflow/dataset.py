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
import types
from typing import Any, Iterator, Mapping, Sequence, Union

import numpy as np

from . import _native
from .errors import InvalidInputError

#: The reader's defaults by option name: the Rust reader's own (``DatasetOptions``),
#: defined there once; :class:`Dataset`'s signature and MaxText's ``network_*`` keys
#: read them from here. ``num_threads`` is the CPUs this process may use, at most 4.
READER_DEFAULTS: Mapping[str, Any] = types.MappingProxyType(dict(_native.READER_DEFAULTS))
_D = READER_DEFAULTS

PathLike = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]
MixtureSources = Union[Mapping[str, float], Sequence[tuple[PathLike, float]]]


def _paths(path: PathLike) -> str | list[str]:
    if isinstance(path, (str, os.PathLike)):
        return os.fspath(path)
    return [os.fspath(p) for p in path]

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
            ``"out/train/shard-*.array_record"``, one shard file, or a list of them; or
            an output on an object store, ``"s3://bucket/out"`` or ``"gs://…"`` (its
            root or manifest), whose shards are fetched into a node-local cache
            (``cache_dir``), verified against the manifest, the shards of the next
            blocks fetched ahead. Only finished outputs are read (``_SUCCESS``, known format and tokenizer
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
            docs/architecture.md, "The sampler"); ``strategy`` is ``"window"`` or
            ``"geometric_stride"``.
        verify: check every shard against the output's manifest (size, blake3, rows)
            before reading; for an output on an object store, hash every cached shard
            again when it is opened (a cached shard is otherwise trusted while its
            size, modification time and inode are those it was verified with).
        cache_dir: where shards of an output on ``s3://`` or ``gs://`` are cached; the
            processes of a node share it (default ``$PROBEFLOW_CACHE_DIR``, else
            ``$XDG_CACHE_HOME/probeflow``, else ``~/.cache/probeflow``).
        cache_limit: the cache's size limit, bytes or a size such as ``"200GiB"``
            (default ``$PROBEFLOW_CACHE_LIMIT``, else none); least recently used shards
            are evicted beyond it. It must hold every shard this process reads (every
            epoch reads every shard): a smaller limit is an error, not a slow run.
        weights: makes this a weighted mixture: ``path`` is then a list of sources
            (each an output, a glob, a file or a list of files), one weight each; see
            :meth:`mixture`.
    """

    def __init__(
        self,
        path: PathLike,
        split: str = "train",
        *,
        seq_len: int = _D["seq_len"],
        batch_size: int = _D["batch_size"],
        seed: int = _D["seed"],
        shard_index: int | None = None,
        shard_count: int | None = None,
        packing: bool = _D["packing"],
        prefetch: int = _D["prefetch"],
        num_threads: int | None = None,
        num_epochs: int | None = _D["num_epochs"],
        drop_remainder: bool = _D["drop_remainder"],
        block_rows: int = _D["block_rows"],
        contexts_per_row: int = _D["contexts_per_row"],
        measurements_per_context: int = _D["measurements_per_context"],
        tokens_per_measurement: int = _D["tokens_per_measurement"],
        timestamp_modes: tuple[float, float, float] = _D["timestamp_modes"],
        partial_drop: tuple[float, float] = _D["partial_drop"],
        strategy: str = _D["strategy"],
        verify: bool = False,
        weights: Sequence[float] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
    ) -> None:
        if (shard_index is None) != (shard_count is None):
            raise ValueError("give both shard_index and shard_count, or neither")
        if shard_index is None or shard_count is None:
            shard_index, shard_count = _default_shards()
        if weights is None:
            paths: Any = _paths(path)
        else:
            if isinstance(path, (str, os.PathLike)):
                raise InvalidInputError("a mixture's sources must be a list (one per weight)")
            paths = [_paths(p) for p in path]
            weights = [float(w) for w in weights]
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
        self._loader = _native._Loader(
            paths,
            **self._options,
            verify=verify,
            weights=weights,
            cache_dir=cache_dir,
            cache_limit=cache_limit,
        )

    @classmethod
    def mixture(cls, sources: MixtureSources, split: str = "train", **options: Any) -> "Dataset":
        """A weighted mixture of several outputs (e.g. two collection periods, or an
        oversampled rare region), as one stream of batches.

        ``sources`` maps each source to its weight: ``{"out/2024": 1.0, "out/2025":
        3.0}``, or a list of ``(source, weight)`` pairs where a source may also be a list
        of shard files. Only the ratios of the weights matter; a weight may be 0.

        Each sequence of a batch comes from source ``s`` with probability
        ``weights[s] / sum(weights)``, drawn deterministically from (seed, rank, ranks,
        sequence number). Every source is read as a :class:`Dataset` of its own would
        read it (with a seed derived from ``seed`` and its place in the list): its own
        epochs (a small source with a large weight is repeated more often), its rows
        disjoint between ranks, its blocks packed on their own. A finite stream
        (``num_epochs``) ends when a picked source has ended.

        The state (``get_state()``) holds every source's position and its weight.
        :meth:`set_state` restores it into a mixture of the same sources (same rows,
        same order) with the same or **other** weights, and :meth:`set_weights` changes
        them on the fly: every source continues where it was, so no row of its current
        block is lost or repeated; only the picks from then on follow the new weights.
        ``set_states`` (elastic resume) works source by source.

        Takes :class:`Dataset`'s other arguments (``seq_len``, ``batch_size``, ``seed``,
        ``shard_index`` …), the same for every source.
        """
        if isinstance(sources, Mapping):
            pairs = list(sources.items())
        else:
            pairs = [tuple(p) for p in sources]
        if not pairs:
            raise InvalidInputError("a mixture needs at least one source")
        for pair in pairs:
            if len(pair) != 2:
                raise InvalidInputError(f"a mixture source must be a (path, weight) pair, not {pair!r}")
        return cls([p for p, _ in pairs], split, weights=[w for _, w in pairs], **options)

    @property
    def weights(self) -> list[float] | None:
        """A mixture's current weights; None for one output."""
        return self._loader.weights

    @property
    def sources(self) -> list[dict[str, Any]]:
        """Each source: its ``name`` (as given), ``rows``, ``weight`` (None for one
        output) and shard ``files``."""
        weights = self._loader.weights or [None] * len(self._loader.source_names)
        return [
            dict(name=n, rows=r, weight=w, files=f)
            for n, r, w, f in zip(
                self._loader.source_names, self._loader.source_rows, weights, self._loader.source_files
            )
        ]

    def set_weights(self, weights: Sequence[float]) -> None:
        """Change a mixture's weights from the last batch returned (prefetched batches
        are dropped): every source continues where it was. Raises InvalidInputError for
        one output, or weights that are not one finite number ≥ 0 per source with at
        least one > 0."""
        self._loader.set_weights([float(w) for w in weights])

    @property
    def options(self) -> dict[str, Any]:
        """The options this dataset was created with."""
        return dict(self._options)

    @property
    def num_rows(self) -> int:
        """Rows in the split (all ranks together; of a mixture, all sources together)."""
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
        """The state after the last batch returned: a small JSON-serialisable dict.

        It records which rows it belongs to (``rows_digest``: a digest of the split's
        shards, each by its blake3, in order), not where they are stored: it restores
        into the same output, or a copy of it in another directory or on an object
        store, and into nothing else."""
        return json.loads(self._loader.state_json())

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from ``get_state``); prefetched batches are dropped.

        Raises StateError (an InvalidInputError) if the state was taken on other rows (another
        output, even one of as many rows, such as the same input with another shard
        count; or a state of an older probeflow, which does not say), by a differently
        configured iterator (seed, ranks, seq_len, batch_size, packing, block_rows), or
        a mixture's state on other sources (a mixture's weights may differ: see
        :meth:`mixture`)."""
        self._loader.set_state_json(json.dumps(state))

    def set_states(self, states: Sequence[dict[str, Any]]) -> None:
        """Continue from the states of **every** rank of a run, whatever its number of
        ranks (``shard_count``): the elastic resume. Give one ``get_state()`` per old
        rank, in any order.

        With as many old ranks as this iterator's ``shard_count`` it is
        :meth:`set_state` of this rank's state (the batch size may differ). Otherwise the rest of each epoch the old
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

        Raises StateError (an InvalidInputError) when a rank's state is missing or repeated, or the
        states were taken on other rows (see :meth:`set_state`) or another
        configuration."""
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
        if not self.closed and self.weights is not None:
            what = f"probeflow.Dataset.mixture({list(zip(self._loader.source_names, self.weights))!r}, "
        else:
            what = f"probeflow.Dataset({self._path!r}, "
        return (
            f"{what}split={o['split']!r}, seq_len={o['seq_len']}, "
            f"batch_size={o['batch_size']}, seed={o['seed']}, shard_index={o['shard_index']}, "
            f"shard_count={o['shard_count']}, packing={o['packing']})"
        )


class RowDataSource:
    """Random access to decoded rows of a split (Grain's ``RandomAccessDataSource``).

    ``source[i]`` is :func:`probeflow.decode_row` of global row ``i``: the row's facts
    and numpy columns. For users who sample in Python.
    """

    def __init__(self, path: PathLike, split: str = "train", *, verify: bool = False) -> None:
        paths = _paths(path)
        schemes = tuple(_native.REMOTE_SCHEMES)
        remote = [p for p in ([paths] if isinstance(paths, str) else paths) if p.startswith(schemes)]
        if remote:
            raise InvalidInputError(
                f"{remote[0]}: RowDataSource reads outputs on local disk; read an output on an "
                "object store with probeflow.Dataset (it caches the shards), or copy it first"
            )
        self._files = _native.resolve_shards([paths] if isinstance(paths, str) else paths, split, verify)
        self._path = path
        self._split = split
        self._readers = [_native.ArrayRecordReader(f) for f in self._files]
        self._starts = np.cumsum([0] + [len(r) for r in self._readers])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> dict[str, Any]:
        return _native.decode_row(self.record(index))

    def record(self, index: int) -> bytes:
        """Global row ``index``'s encoded bytes (the ArrayRecord record)."""
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"row {index} out of range ({len(self)} rows)")
        shard = int(np.searchsorted(self._starts, index, side="right")) - 1
        return self._readers[shard][index - int(self._starts[shard])]

    def __repr__(self) -> str:
        return f"probeflow.RowDataSource({self._path!r}, split={self._split!r})"
