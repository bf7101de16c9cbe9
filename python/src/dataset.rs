//! Bindings for the training side: the dataset loader (`_Loader`) and the tokenizer
//! functions. Batches leave as numpy arrays that own the Rust buffers (no copy); the
//! GIL is released while a batch is produced or awaited.

use std::sync::{Mutex, MutexGuard, TryLockError};

use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyReadonlyArray1};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use probeflow_reader::dataset::{
    note_fork_in_child, CacheOptions, DatasetOptions, Loader, RowSource,
};
use probeflow_reader::mixture::{LoaderState, Weights};
use probeflow_reader::packing::BATCH_KEYS;
use probeflow_reader::sampler::{SamplerOptions, Strategy};
use probeflow_reader::tokenizer;

use crate::py_err;

/// A rank's batch stream over one split (see `probeflow.Dataset`).
#[pyclass(name = "_Loader", module = "probeflow._native")]
pub struct PyLoader {
    inner: Mutex<Option<Loader>>,
    /// Each source's shard files (one source unless a mixture).
    files: Vec<Vec<String>>,
    /// Each source's name (how it was given).
    names: Vec<String>,
}

/// One source as given from Python: a path, or a list of shard paths.
fn source_paths(source: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    match source.extract::<String>() {
        Ok(p) => Ok(vec![p]),
        Err(_) => source
            .extract::<Vec<String>>()
            .map_err(|_| PyValueError::new_err("a path must be a string or a list of shard paths")),
    }
}

/// A cache limit as given from Python: bytes, or a size such as `"200GiB"`.
fn parse_cache_limit(limit: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(n) = limit.extract::<u64>() {
        return Ok(n);
    }
    match limit.extract::<String>() {
        Ok(text) => probeflow_reader::remote::cache::parse_limit(&text).map_err(py_err),
        Err(_) => Err(py_err(probeflow_reader::Error::Input(format!(
            "cache_limit must be a number of bytes or a size such as \"200GiB\", not {limit}"
        )))),
    }
}

/// This process's shard-cache counters (outputs on object stores): downloads,
/// downloaded_bytes, hits, refetched (cached files found changed), evicted.
#[pyfunction]
pub fn cache_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = probeflow_reader::remote::cache::cache_stats();
    let d = PyDict::new(py);
    d.set_item("downloads", s.downloads)?;
    d.set_item("downloaded_bytes", s.downloaded_bytes)?;
    d.set_item("hits", s.hits)?;
    d.set_item("refetched", s.refetched)?;
    d.set_item("evicted", s.evicted)?;
    Ok(d)
}

/// A locked loader, or a clear error if another thread is using it or it is closed.
/// Never blocks: blocking while holding the GIL could deadlock with a thread that
/// holds the lock and waits for the GIL.
fn borrow(m: &Mutex<Option<Loader>>) -> PyResult<MutexGuard<'_, Option<Loader>>> {
    match m.try_lock() {
        Ok(g) => Ok(g),
        Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(
            "this Dataset is in use by another thread",
        )),
        Err(TryLockError::Poisoned(_)) => Err(crate::errors::internal(
            "this Dataset failed earlier (internal panic); create a new one",
        )),
    }
}

/// The reader's defaults by `Dataset` option name, from the reader crate's
/// `DatasetOptions::default()` (the one definition; Python's signatures read them
/// from here).
pub fn reader_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = DatasetOptions::default();
    let s = &d.sampler;
    let out = PyDict::new(py);
    out.set_item("seq_len", s.context_len)?;
    out.set_item("batch_size", d.batch_size)?;
    out.set_item("seed", d.seed)?;
    out.set_item("packing", d.packing)?;
    out.set_item("prefetch", d.prefetch)?;
    out.set_item("num_threads", d.num_threads)?;
    out.set_item("num_epochs", d.num_epochs)?;
    out.set_item("drop_remainder", d.drop_remainder)?;
    out.set_item("block_rows", d.block_rows)?;
    out.set_item("contexts_per_row", s.max_contexts_per_row)?;
    out.set_item("measurements_per_context", s.measurements_per_context)?;
    out.set_item("tokens_per_measurement", s.tokens_per_measurement)?;
    let [full, partial, none] = s.timestamp_modes;
    out.set_item("timestamp_modes", (full, partial, none))?;
    out.set_item("partial_drop", s.partial_drop)?;
    out.set_item("strategy", s.strategy.as_str())?;
    Ok(out)
}

fn closed() -> PyErr {
    PyValueError::new_err("I/O operation on a closed Dataset")
}

#[pymethods]
impl PyLoader {
    #[new]
    #[pyo3(signature = (path, split, seq_len, batch_size, seed, shard_index, shard_count,
        packing, prefetch, num_threads, num_epochs, drop_remainder, block_rows,
        contexts_per_row, measurements_per_context, tokens_per_measurement,
        timestamp_modes, partial_drop, strategy, verify=false, weights=None, cache_dir=None,
        cache_limit=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        split: &str,
        seq_len: usize,
        batch_size: usize,
        seed: u64,
        shard_index: u64,
        shard_count: u64,
        packing: bool,
        prefetch: usize,
        num_threads: Option<usize>,
        num_epochs: Option<u64>,
        drop_remainder: bool,
        block_rows: usize,
        contexts_per_row: usize,
        measurements_per_context: usize,
        tokens_per_measurement: usize,
        timestamp_modes: (f64, f64, f64),
        partial_drop: (f64, f64),
        strategy: &str,
        verify: bool,
        weights: Option<Vec<f64>>,
        cache_dir: Option<std::path::PathBuf>,
        cache_limit: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let cache = CacheOptions {
            dir: cache_dir,
            limit: cache_limit.map(parse_cache_limit).transpose()?,
        };
        // One output, or (with weights) a list of sources, each a path or paths.
        let sources: Vec<Vec<String>> = match &weights {
            None => vec![source_paths(path)?],
            Some(_) => path
                .extract::<Vec<Bound<'_, PyAny>>>()
                .map_err(|_| PyValueError::new_err("a mixture's sources must be a list"))?
                .iter()
                .map(source_paths)
                .collect::<PyResult<_>>()?,
        };
        let names: Vec<String> = sources
            .iter()
            .map(|p| match p.as_slice() {
                [one] => one.clone(),
                many => format!("[{}]", many.join(", ")),
            })
            .collect();
        let options = DatasetOptions {
            batch_size,
            seed,
            shard_index,
            shard_count,
            packing,
            block_rows,
            num_epochs,
            drop_remainder,
            prefetch,
            // None: the reader's default, worked out now (the CPUs this process may use).
            num_threads: num_threads.unwrap_or_else(|| DatasetOptions::default().num_threads),
            sampler: SamplerOptions {
                context_len: seq_len,
                measurements_per_context,
                max_contexts_per_row: contexts_per_row,
                tokens_per_measurement,
                timestamp_modes: [timestamp_modes.0, timestamp_modes.1, timestamp_modes.2],
                partial_drop,
                strategy: strategy.parse::<Strategy>().map_err(py_err)?,
            },
        };
        if let Some(w) = &weights {
            // Before opening anything: a bad weight is the error, not a missing path.
            Weights::new(w.clone(), sources.len()).map_err(py_err)?;
        }
        let split = split.to_string();
        let source_names = names.clone();
        let (loader, files) = py
            .detach(
                move || -> probeflow_reader::Result<(Loader, Vec<Vec<String>>)> {
                    let mut opened = Vec::with_capacity(sources.len());
                    let mut files = Vec::with_capacity(sources.len());
                    for (paths, name) in sources.iter().zip(&source_names) {
                        // Errors name the path (and keep their kind).
                        let rows = RowSource::open_paths(paths, &split, verify, &cache)?;
                        files.push(rows.files());
                        opened.push((name.clone(), rows));
                    }
                    let loader = match weights {
                        None => match opened.pop() {
                            Some((_, rows)) => Loader::new(rows, options)?,
                            None => return Err(probeflow_reader::Error::Input("no path".into())),
                        },
                        Some(w) => Loader::mixture(opened, w, options)?,
                    };
                    Ok((loader, files))
                },
            )
            .map_err(py_err)?;
        Ok(PyLoader {
            inner: Mutex::new(Some(loader)),
            files,
            names,
        })
    }

    /// The next batch as a dict of `[batch_size, seq_len]` int32 arrays, or None at the
    /// end of a finite stream.
    fn next_batch<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let mut guard = borrow(&self.inner)?;
        let loader = guard.as_mut().ok_or_else(closed)?;
        let batch = py.detach(|| loader.next_batch()).map_err(py_err)?;
        drop(guard);
        let Some(batch) = batch else {
            return Ok(None);
        };
        let shape = (batch.batch_size, batch.seq_len);
        let d = PyDict::new(py);
        for (name, data) in BATCH_KEYS.iter().zip(batch.into_arrays()) {
            let array = Array2::from_shape_vec(shape, data)
                .map_err(|e| crate::errors::internal(format!("batch shape: {e}")))?;
            d.set_item(*name, array.into_pyarray(py))?;
        }
        Ok(Some(d))
    }

    /// The iterator state after the last batch handed out, as a JSON string.
    fn state_json(&self) -> PyResult<String> {
        let guard = borrow(&self.inner)?;
        let loader = guard.as_ref().ok_or_else(closed)?;
        serde_json::to_string(&loader.state())
            .map_err(|e| crate::errors::internal(format!("state: {e}")))
    }

    /// Continues from a state produced by `state_json` (prefetched batches are dropped).
    fn set_state_json(&self, py: Python<'_>, state: &str) -> PyResult<()> {
        let parsed: LoaderState = parse_state(state, "a probeflow iterator state")?;
        let mut guard = borrow(&self.inner)?;
        let loader = guard.as_mut().ok_or_else(closed)?;
        py.detach(|| loader.set_state(&parsed)).map_err(py_err)
    }

    /// Continues from the states of every rank of a run, as a JSON array (elastic
    /// resume: the run may have had another number of ranks).
    fn set_states_json(&self, py: Python<'_>, states: &str) -> PyResult<()> {
        let parsed: Vec<LoaderState> = parse_state(states, "a list of probeflow iterator states")?;
        let mut guard = borrow(&self.inner)?;
        let loader = guard.as_mut().ok_or_else(closed)?;
        py.detach(|| loader.set_states(&parsed)).map_err(py_err)
    }

    /// Stops the background producer and releases the shards.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = borrow(&self.inner)?;
        if let Some(mut loader) = guard.take() {
            py.detach(move || loader.close());
        }
        Ok(())
    }

    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(borrow(&self.inner)?.is_none())
    }

    /// Changes a mixture's weights from the last batch handed out.
    fn set_weights(&self, py: Python<'_>, weights: Vec<f64>) -> PyResult<()> {
        let mut guard = borrow(&self.inner)?;
        let loader = guard.as_mut().ok_or_else(closed)?;
        py.detach(|| loader.set_weights(weights)).map_err(py_err)
    }

    #[getter]
    fn num_rows(&self) -> PyResult<u64> {
        let guard = borrow(&self.inner)?;
        Ok(guard.as_ref().ok_or_else(closed)?.num_rows())
    }

    /// Rows of each source.
    #[getter]
    fn source_rows(&self) -> PyResult<Vec<u64>> {
        let guard = borrow(&self.inner)?;
        Ok(guard.as_ref().ok_or_else(closed)?.source_rows())
    }

    /// A mixture's weights, None for one output.
    #[getter]
    fn weights(&self) -> PyResult<Option<Vec<f64>>> {
        let guard = borrow(&self.inner)?;
        Ok(guard
            .as_ref()
            .ok_or_else(closed)?
            .weights()
            .map(<[f64]>::to_vec))
    }

    /// Each source's shard files.
    #[getter]
    fn source_files(&self) -> Vec<Vec<String>> {
        self.files.clone()
    }

    /// Each source's name (as given).
    #[getter]
    fn source_names(&self) -> Vec<String> {
        self.names.clone()
    }

    /// Every source's shard files, in order.
    #[getter]
    fn files(&self) -> Vec<String> {
        self.files.concat()
    }
}

/// Marks this process as a fork child (registered with `os.register_at_fork`).
#[pyfunction]
pub fn _after_fork_in_child() {
    note_fork_in_child();
}

/// Tokens of one measurement (addresses as text, `rtt_code` None for a failed ping,
/// `timestamp`: None, ("abs", t) or ("delta", d); `order` 0..24).
#[pyfunction]
#[pyo3(signature = (src, dst, rtt_code, timestamp=None, order=0))]
pub fn encode_measurement<'py>(
    py: Python<'py>,
    src: &str,
    dst: &str,
    rtt_code: Option<u16>,
    timestamp: Option<(String, u64)>,
    order: usize,
) -> PyResult<Bound<'py, numpy::PyArray1<i32>>> {
    let parse = |t: &str| {
        probeflow_reader::row::addr::parse_addr(t)
            .map(|a| probeflow_reader::row::addr::addr_octets(&a))
            .map_err(py_err)
    };
    let (s, d) = (parse(src)?, parse(dst)?);
    if s.len() != d.len() {
        return Err(py_err(probeflow_reader::Error::Input(format!(
            "{src} and {dst} are of different address families"
        ))));
    }
    if order >= 24 {
        return Err(py_err(probeflow_reader::Error::Input(format!(
            "order {order} is not in 0..24"
        ))));
    }
    let ts = match timestamp {
        None => tokenizer::Timestamp::None,
        Some((kind, v)) if kind == "abs" => tokenizer::Timestamp::Absolute(v),
        Some((kind, v)) if kind == "delta" => tokenizer::Timestamp::Delta(v),
        Some((kind, _)) => {
            return Err(py_err(probeflow_reader::Error::Input(format!(
                "timestamp kind {kind:?} (expected \"abs\" or \"delta\")"
            ))))
        }
    };
    let mut out = Vec::new();
    tokenizer::encode_measurement(
        &mut out,
        &s,
        &d,
        rtt_code.map(probeflow_reader::row::RttCode),
        ts,
        order,
    );
    Ok(out.into_pyarray(py))
}

/// Parses tokens (one context or segment, no padding) into measurement dicts; raises
/// InvalidInputError on a grammar error.
#[pyfunction]
pub fn detokenize<'py>(
    py: Python<'py>,
    tokens: PyReadonlyArray1<'py, i32>,
) -> PyResult<Bound<'py, PyList>> {
    let toks = tokens.as_slice()?.to_vec();
    let ms = py
        .detach(move || tokenizer::detokenize(&toks))
        .map_err(py_err)?;
    let list = PyList::empty(py);
    for m in ms {
        let d = PyDict::new(py);
        d.set_item("src_addr", m.src.to_string())?;
        d.set_item("dst_addr", m.dst.to_string())?;
        d.set_item("rtt_code", m.rtt.map(|c| c.0))?;
        d.set_item("rtt_ms", m.rtt.map(|c| c.millis()))?;
        d.set_item("failed", m.rtt.is_none())?;
        let (kind, value) = match m.timestamp {
            tokenizer::Timestamp::None => (None, None),
            tokenizer::Timestamp::Absolute(t) => (Some("abs"), Some(t)),
            tokenizer::Timestamp::Delta(t) => (Some("delta"), Some(t)),
        };
        d.set_item("timestamp_kind", kind)?;
        d.set_item("timestamp_value", value)?;
        d.set_item("time", m.time)?;
        let fields: Vec<&str> = m
            .fields
            .iter()
            .map(|f| match f {
                tokenizer::Field::Source => "source",
                tokenizer::Field::Destination => "destination",
                tokenizer::Field::Result => "result",
                tokenizer::Field::Timestamp => "timestamp",
            })
            .collect();
        d.set_item("fields", fields)?;
        d.set_item("start", m.start)?;
        list.append(d)?;
    }
    Ok(list)
}

/// Tokens for people: one measurement per line.
#[pyfunction]
pub fn pretty(tokens: PyReadonlyArray1<'_, i32>) -> PyResult<String> {
    Ok(tokenizer::pretty(tokens.as_slice()?))
}

/// The name of a token id.
#[pyfunction]
pub fn token_name(id: i32) -> String {
    tokenizer::token_name(id)
}

/// Iterator state(s) from JSON; a `StateError` saying it is not `what`.
fn parse_state<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> PyResult<T> {
    serde_json::from_str(text)
        .map_err(|e| py_err(probeflow_reader::Error::State(format!("not {what}: {e}"))))
}

/// The splits `paths` hold (`"train"`, `"val"`, `"test"`, in that order): an
/// output's manifest's splits, or the split directories of a glob's files.
#[pyfunction]
pub fn splits_of(py: Python<'_>, paths: Vec<String>) -> PyResult<Vec<&'static str>> {
    py.detach(move || probeflow_reader::output::splits_of(&paths))
        .map(|splits| splits.into_iter().map(|s| s.as_str()).collect())
        .map_err(py_err)
}

/// The shard files of `split` named by `paths` (output directories, manifests, globs
/// or files), in global row order, checked (`_SUCCESS`, versions, split, one output);
/// `verify` also checks every file's size, blake3 and rows against the manifest. For
/// one output on an object store, its split's shard URLs (checked the same way).
#[pyfunction]
#[pyo3(signature = (paths, split, verify=false))]
pub fn resolve_shards(
    py: Python<'_>,
    paths: Vec<String>,
    split: String,
    verify: bool,
) -> PyResult<Vec<String>> {
    py.detach(move || probeflow_reader::output::shard_names(&paths, &split, verify))
        .map_err(py_err)
}
