"""Grain adapters: ``IterDataset`` (with ``set_slice`` for ``mp_prefetch``) whose
iterator has JSON state, so Grain pipelines and ``grain.checkpoint.CheckpointHandler``
work; and :class:`probeflow.RowDataSource` for random access to decoded rows.

``grain`` is imported here only; ``import probeflow`` does not need it.
"""

from __future__ import annotations

from typing import Any

import grain

from .dataset import Dataset, PathLike, RowDataSource


class IterDataset(grain.IterDataset):
    """probeflow batches as a Grain ``IterDataset``.

    Takes :class:`probeflow.Dataset`'s arguments. ``set_slice(slice(k, None, K))`` (what
    Grain's ``mp_prefetch`` calls for worker ``k`` of ``K``) narrows this rank's rows to
    every ``K``-th one, so workers stay disjoint.
    """

    def __init__(self, path: PathLike, split: str = "train", **options: Any) -> None:
        super().__init__()
        self._path = path
        self._split = split
        self._options = options
        self._slice = slice(0, None, 1)

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        del sequential_slice  # probeflow's sharding is strided either way
        self._slice = slice(sl.start or 0, None, sl.step or 1)

    def __iter__(self) -> "DatasetIterator":
        return DatasetIterator(self)

    def __str__(self) -> str:
        return f"probeflow.grain.IterDataset({self._path!r}, split={self._split!r}, slice={self._slice})"


class DatasetIterator(grain.DatasetIterator):
    """Iterator of :class:`IterDataset`; ``get_state()`` is a JSON-serialisable dict."""

    def __init__(self, parent: IterDataset) -> None:
        super().__init__()
        options = dict(parent._options)
        index = options.pop("shard_index", None)
        count = options.pop("shard_count", None)
        if index is None or count is None:
            from .dataset import _default_shards

            index, count = _default_shards()
        worker, workers = parent._slice.start, parent._slice.step
        self._dataset = Dataset(
            parent._path,
            parent._split,
            shard_index=index + count * worker,
            shard_count=count * workers,
            **options,
        )

    def __next__(self) -> dict:
        return next(self._dataset)

    def get_state(self) -> dict[str, Any]:
        return self._dataset.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._dataset.set_state(state)

    def close(self) -> None:
        self._dataset.close()

    def __str__(self) -> str:
        return f"probeflow.grain.DatasetIterator({self._dataset!r})"


__all__ = ["DatasetIterator", "IterDataset", "RowDataSource"]
