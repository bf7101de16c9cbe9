"""MaxText input factories: probeflow batches behind MaxText's data-iterator interface.

MaxText (0.2.5) builds its data iterators in
``maxtext.input_pipeline.input_pipeline_interface.create_data_iterator``, which looks up
its factories (``make_grain_train_iterator``, ``make_grain_eval_iterator``) as module
names at call time and calls each as ``factory(config, mesh, process_indices)``.
:func:`install` replaces the grain pair with :func:`make_train_iterator` and
:func:`make_eval_iterator`, so a run configured as ``dataset_type=grain`` reads
probeflow shards, and MaxText's grain checkpointing saves and restores the data stream.

Data flow per host::

    probeflow.Dataset (shard process_indices.index(jax.process_index()) of
    len(process_indices), local batch = global batch // shard count)
      -> NetworkBatchIterator   (MaxText's ``local_iterator``: get_state() -> bytes,
                                 set_state(bytes); no save/load methods, so MaxText
                                 writes process_<i>-of-<n>.json itself)
      -> MultiHostDataLoadIterator (MaxText: numpy -> global jax.Array)

The train stream is endless; the eval stream reads the ``val`` split (``test`` when the
output has no val split; ``network_eval_split`` chooses) once and starts again from the
beginning on every ``iter()``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import re
from typing import Any, Callable, Iterator

import numpy as np

from ._native import resolve_shards, splits_of
from .dataset import READER_DEFAULTS, Dataset

log = logging.getLogger("probeflow.maxtext")

EVAL_SPLITS = ("auto", "val", "test")


class NetworkConfigError(ValueError):
    """A ``network_*`` option is unknown or has a bad value."""


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _eval_split(text: str) -> str:
    if text not in EVAL_SPLITS:
        raise ValueError(f"expected one of {', '.join(EVAL_SPLITS)}")
    return text


def parse_floats(n: int) -> Callable[[str], tuple[float, ...]]:
    """A parser of exactly ``n`` comma-separated numbers (brackets allowed), for
    command-line options such as ``timestamp_modes``."""

    def parse(text: str) -> tuple[float, ...]:
        parts = [p for p in text.replace("(", "").replace(")", "").replace("[", "").replace("]", "").split(",") if p.strip()]
        if len(parts) != n:
            raise ValueError(f"expected {n} comma-separated numbers, got {text!r}")
        return tuple(float(p) for p in parts)

    return parse


def _weights(text: str) -> tuple[float, ...]:
    """Mixture weights: comma-separated finite numbers ≥ 0, at least one > 0, no empty
    item (``1,,3`` is a mistake, not ``1,3``)."""
    try:
        weights = tuple(float(p) for p in text.split(","))
    except ValueError:
        raise ValueError(f"expected comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(w) and w >= 0 for w in weights) or not any(w > 0 for w in weights):
        raise ValueError(f"weights must be finite numbers ≥ 0, at least one > 0; got {text!r}")
    return weights


@dataclasses.dataclass(frozen=True)
class NetworkOptions:
    """The ``network_*`` keys of a MaxText run (``network_`` prefix stripped).

    ``train_files``/``eval_files``: a job output directory, its ``manifest.json``, a
    glob or a shard file (eval default: the train files; a glob of ``train/`` shards
    has no held-out split and is refused for eval). ``eval_split``: the split eval
    reads, ``auto`` (default: ``val`` when the eval files hold a val split, else
    ``test``), ``val`` or ``test``; eval never reads train rows.
    ``train_weights``: comma-separated weights that make the train stream a weighted
    mixture (:meth:`probeflow.Dataset.mixture`); ``train_files`` is then as many
    comma-separated sources, and ``eval_files`` must be given. A run may resume with
    other weights: every source continues where the checkpoint left it.
    ``cache_dir``/``cache_limit``: the shard cache of outputs on ``s3://`` or
    ``gs://`` (``probeflow.Dataset``'s ``cache_dir`` and ``cache_limit``).
    ``seed``: the reader's seed. ``packing``: default MaxText's ``packing``. The other
    keys are ``probeflow.Dataset``'s options. ``batch_log``: a file that gets one JSON
    line per batch handed to MaxText (sha256 of the arrays and the token arrays), for
    debugging and tests.
    """

    train_files: str = ""
    eval_files: str = ""
    eval_split: str = "auto"
    train_weights: tuple[float, ...] = ()
    seed: int = READER_DEFAULTS["seed"]
    packing: bool | None = None
    prefetch: int = READER_DEFAULTS["prefetch"]
    num_threads: int | None = None
    block_rows: int = READER_DEFAULTS["block_rows"]
    contexts_per_row: int = READER_DEFAULTS["contexts_per_row"]
    measurements_per_context: int = READER_DEFAULTS["measurements_per_context"]
    tokens_per_measurement: int = READER_DEFAULTS["tokens_per_measurement"]
    timestamp_modes: tuple[float, float, float] = READER_DEFAULTS["timestamp_modes"]
    partial_drop: tuple[float, float] = READER_DEFAULTS["partial_drop"]
    strategy: str = READER_DEFAULTS["strategy"]
    cache_dir: str = ""
    cache_limit: str = ""
    batch_log: str = ""

    @classmethod
    def parsers(cls) -> dict[str, Callable[[str], Any]]:
        return {
            "train_files": str,
            "eval_files": str,
            "eval_split": _eval_split,
            "train_weights": _weights,
            "seed": int,
            "packing": _bool,
            "prefetch": int,
            "num_threads": int,
            "block_rows": int,
            "contexts_per_row": int,
            "measurements_per_context": int,
            "tokens_per_measurement": int,
            "timestamp_modes": parse_floats(3),
            "partial_drop": parse_floats(2),
            "strategy": str,
            "cache_dir": str,
            "cache_limit": str,
            "batch_log": str,
        }

    @classmethod
    def from_keys(cls, keys: dict[str, str]) -> "NetworkOptions":
        """From ``{"network_seed": "3", …}`` (values as given on the command line)."""
        parsers = cls.parsers()
        values: dict[str, Any] = {}
        for key, text in keys.items():
            name = key[len("network_"):] if key.startswith("network_") else key
            if name not in parsers:
                known = ", ".join(f"network_{k}" for k in parsers)
                raise NetworkConfigError(f"unknown key {key!r}; known keys: {known}")
            try:
                values[name] = parsers[name](text)
            except ValueError as e:
                raise NetworkConfigError(f"{key}={text!r}: {e}") from None
        opts = cls(**values)
        if not opts.train_files:
            raise NetworkConfigError("network_train_files is required with dataset_type=network")
        if opts.train_weights:
            sources = opts.train_sources()
            if not all(sources):
                raise NetworkConfigError(f"network_train_files={opts.train_files!r}: an empty source between commas")
            if len(sources) != len(opts.train_weights):
                raise NetworkConfigError(
                    f"network_train_weights has {len(opts.train_weights)} weights for "
                    f"{len(sources)} sources in network_train_files: give one weight per source"
                )
            if not opts.eval_files:
                raise NetworkConfigError(
                    "network_eval_files is required when network_train_files is a mixture "
                    "(network_train_weights): say which output eval reads"
                )
        return opts

    def train_sources(self) -> list[str]:
        """A mixture's sources: ``train_files`` split at commas."""
        return [p.strip() for p in self.train_files.split(",")]

    def reader_options(self) -> dict[str, Any]:
        """The ``probeflow.Dataset`` keyword arguments these options set."""
        out = dict(
            seed=self.seed,
            prefetch=self.prefetch,
            block_rows=self.block_rows,
            contexts_per_row=self.contexts_per_row,
            measurements_per_context=self.measurements_per_context,
            tokens_per_measurement=self.tokens_per_measurement,
            timestamp_modes=self.timestamp_modes,
            partial_drop=self.partial_drop,
            strategy=self.strategy,
        )
        if self.num_threads is not None:
            out["num_threads"] = self.num_threads
        if self.cache_dir:
            out["cache_dir"] = self.cache_dir
        if self.cache_limit:
            out["cache_limit"] = self.cache_limit
        return out


def batch_digest(batch: dict[str, np.ndarray]) -> str:
    """sha256 over the batch's arrays in key order (their bytes, shapes and names)."""
    h = hashlib.sha256()
    for key in sorted(batch):
        a = np.ascontiguousarray(batch[key])
        h.update(f"{key}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _decode_state(state: bytes) -> dict[str, Any]:
    try:
        return json.loads(bytes(state).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not a probeflow iterator state: {e}") from None


#: (stream, exception) of every data iterator failure in this process.
_DATA_FAILURES: list[tuple[str, BaseException]] = []


def data_failures() -> list[tuple[str, BaseException]]:
    """The failures of this process's data iterators, as (stream, exception): MaxText
    catches them and stops training as if it had finished, so callers must look."""
    return list(_DATA_FAILURES)


def _position(state: dict[str, Any]) -> Any:
    """A state's position for the batch log: ``[epoch, block, sequence]``, or for a
    mixture ``{"picks": n, "sources": [[epoch, block, sequence], …]}``."""
    if "sources" in state:
        return {
            "picks": state["picks"],
            "sources": [[s["state"]["epoch"], s["state"]["block"], s["state"]["sequence"]] for s in state["sources"]],
        }
    return [state["epoch"], state["block"], state["sequence"]]


class NetworkBatchIterator:
    """One host's batches, as MaxText's ``MultiHostDataLoadIterator.local_iterator``.

    ``get_state()`` returns the reader's JSON state as bytes; ``set_state(bytes)``
    continues from it (batches already prefetched are discarded).
    """

    def __init__(self, dataset: Dataset, batch_log: str = "", stream: str = "train") -> None:
        self._dataset = dataset
        self._batch_log = batch_log
        self._stream = stream

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        state = self._dataset.get_state() if self._batch_log else None
        try:
            batch = next(self._dataset)
        except StopIteration:
            raise
        except Exception as e:
            # MaxText turns this into "Training stopped" and a normal exit: keep it for
            # probeflow.maxtext_train to report and fail with.
            _DATA_FAILURES.append((self._stream, e))
            raise
        if self._batch_log:
            self._log(batch, state)
        return batch

    def _log(self, batch: dict[str, np.ndarray], state: dict[str, Any] | None) -> None:
        o = self._dataset.options
        line = {
            "stream": self._stream,
            "shard_index": o["shard_index"],
            "shard_count": o["shard_count"],
            "position": _position(state) if state else None,
            "sha256": batch_digest(batch),
            "inputs": batch["inputs"].tolist(),
            "inputs_segmentation": batch["inputs_segmentation"].tolist(),
        }
        with open(self._batch_log, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def get_state(self) -> bytes:
        return json.dumps(self._dataset.get_state(), sort_keys=True).encode()

    def set_state(self, state: bytes) -> None:
        self._dataset.set_state(_decode_state(state))

    def set_states(self, states: list[bytes]) -> None:
        """Continues from the states of every host of a checkpoint, whatever their number
        (see :meth:`probeflow.Dataset.set_states`)."""
        self._dataset.set_states([_decode_state(s) for s in states])

    def close(self) -> None:
        self._dataset.close()

    def __repr__(self) -> str:
        return f"NetworkBatchIterator({self._dataset!r})"


class NetworkData:
    """An iterable of batches: each ``iter()`` opens the stream from its beginning."""

    def __init__(self, make_dataset: Callable[[], Dataset], batch_log: str, stream: str) -> None:
        self._make_dataset = make_dataset
        self._batch_log = batch_log
        self._stream = stream
        self._current: NetworkBatchIterator | None = None

    def __iter__(self) -> NetworkBatchIterator:
        if self._current is not None:
            self._current.close()
        self._current = NetworkBatchIterator(self._make_dataset(), self._batch_log, self._stream)
        return self._current

    def close(self) -> None:
        if self._current is not None:
            self._current.close()


def _shard(process_indices: list[int]) -> tuple[int, int]:
    import jax  # noqa: PLC0415  (MaxText brings it)

    me = jax.process_index()
    if me not in process_indices:
        raise RuntimeError(f"process {me} is not among the data-loading processes {process_indices}")
    return process_indices.index(me), len(process_indices)


def _local_batch(global_batch: int, shard_count: int, what: str) -> int:
    if global_batch % shard_count:
        raise NetworkConfigError(
            f"{what} ({global_batch}) must be divisible by the number of data-loading hosts ({shard_count})"
        )
    return global_batch // shard_count


def _packing(options: NetworkOptions, config: Any) -> bool:
    return bool(getattr(config, "packing", True)) if options.packing is None else options.packing


def eval_source(options: NetworkOptions) -> tuple[str, str]:
    """Where the eval stream reads, and which split: ``eval_files``, else the train
    files' output; ``val`` when ``eval_split`` is ``auto`` and those files hold a val
    split, else ``test`` (or the split ``eval_split`` names). Checked now: a glob or
    file list of ``train/`` shards has no held-out split and raises
    :class:`~probeflow.OutputError`; eval never reads train rows."""
    path = options.eval_files or options.train_files
    split = options.eval_split
    if split == "auto":
        split = "val" if "val" in splits_of([path]) else "test"
        log.info("probeflow: eval reads the %s split of %s", split, path)
    resolve_shards([path], split)
    return path, split


def _make_iterator(options: NetworkOptions, config: Any, mesh: Any, process_indices: list[int], stream: str):
    """This host's share of the ``train`` (endless) or ``eval`` (the val or test split
    once) stream, wrapped in MaxText's ``MultiHostDataLoadIterator``."""
    from maxtext.input_pipeline import multihost_dataloading  # noqa: PLC0415

    train = stream == "train"
    shard_index, shard_count = _shard(process_indices)
    batch_key = "global_batch_size_to_load" if train else "global_batch_size_to_load_eval"
    batch = _local_batch(getattr(config, batch_key), shard_count, batch_key)

    path, split = (options.train_files, "train") if train else eval_source(options)

    def make() -> Dataset:
        kw = dict(
            split=split,
            seq_len=config.max_target_length,
            batch_size=batch,
            shard_index=shard_index,
            shard_count=shard_count,
            packing=_packing(options, config),
            num_epochs=None if train else 1,
            **options.reader_options(),
        )
        if train and options.train_weights:
            return Dataset.mixture(list(zip(options.train_sources(), options.train_weights)), **kw)
        return Dataset(path, **kw)

    padding = getattr(config, f"generate_padding_batch_{stream}", False)
    return multihost_dataloading.MultiHostDataLoadIterator(NetworkData(make, options.batch_log, stream), mesh, padding)


def make_train_iterator(options: NetworkOptions, config: Any, mesh: Any, process_indices: list[int]):
    """MaxText's train factory: an endless stream of this host's batches."""
    return _make_iterator(options, config, mesh, process_indices, "train")


def make_eval_iterator(options: NetworkOptions, config: Any, mesh: Any, process_indices: list[int]):
    """MaxText's eval factory: the val (or test) split once, from the start on each
    ``iter()``."""
    return _make_iterator(options, config, mesh, process_indices, "eval")


_STATE_FILE = re.compile(r"process_(\d+)-of-(\d+)\.json")


def read_host_states(directory: Any) -> list[bytes]:
    """The iterator states of every host in a checkpoint's ``iter`` directory (MaxText
    writes one ``process_<i>-of-<n>.json`` per host), in host order. Raises
    ``ValueError`` unless there is exactly one file for each of ``0..n-1`` of one ``n``."""
    found: dict[int, Any] = {}
    counts = set()
    for path in directory.glob("process_*-of-*.json"):
        m = _STATE_FILE.fullmatch(path.name)
        if m:
            found[int(m.group(1))] = path
            counts.add(int(m.group(2)))
    if len(counts) != 1:
        raise ValueError(f"{directory}: iterator states of {sorted(counts) or 'no'} hosts; expected one host count")
    (count,) = counts
    if sorted(found) != list(range(count)):
        missing = sorted(set(range(count)) - set(found))
        raise ValueError(f"{directory}: the iterator states of hosts {missing} of {count} are missing")
    return [found[i].read_text().encode() for i in range(count)]


def _elastic_checkpointable(local: NetworkBatchIterator) -> Any:
    """MaxText's grain checkpointable for restoring ``local`` from the states of all the
    checkpoint's hosts, however many there were."""
    import asyncio  # noqa: PLC0415

    from maxtext.common.grain_utility import GrainCheckpointable  # noqa: PLC0415

    class ElasticRestore(GrainCheckpointable):
        async def load(self, directory: Any) -> Any:
            async def restore() -> None:
                states = await asyncio.to_thread(read_host_states, directory)
                log.info("probeflow: restoring the data stream from the states of %d hosts", len(states))
                local.set_states(states)

            return restore()

    return ElasticRestore(local)


def install(options: NetworkOptions) -> None:
    """Makes MaxText's grain factories build probeflow iterators with ``options``, and
    its checkpoint restore continue the data stream on any number of hosts (each host
    reads every host's state: :meth:`probeflow.Dataset.set_states`)."""
    from maxtext.common import grain_utility  # noqa: PLC0415
    from maxtext.input_pipeline import input_pipeline_interface as interface  # noqa: PLC0415

    def train(config: Any, mesh: Any, process_indices: list[int]):
        return make_train_iterator(options, config, mesh, process_indices)

    def evaluate(config: Any, mesh: Any, process_indices: list[int]):
        return make_eval_iterator(options, config, mesh, process_indices)

    for name, factory in (("make_grain_train_iterator", train), ("make_grain_eval_iterator", evaluate)):
        if not hasattr(interface, name):
            raise RuntimeError(
                f"this MaxText has no input_pipeline_interface.{name}; probeflow supports maxtext 0.2.5"
            )
        setattr(interface, name, factory)

    original_for_restore = grain_utility.for_restore
    if getattr(original_for_restore, "_probeflow", False):
        return

    def for_restore(checkpoint_manager: Any, step: int, data_iterator: Any, expansion_factor_real_data: int) -> Any:
        local = getattr(data_iterator, "local_iterator", None)
        if isinstance(local, NetworkBatchIterator):
            return _elastic_checkpointable(local)
        return original_for_restore(checkpoint_manager, step, data_iterator, expansion_factor_real_data)

    for_restore._probeflow = True  # type: ignore[attr-defined]
    grain_utility.for_restore = for_restore
