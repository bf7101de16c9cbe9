//! `probeflow._native`: Python bindings over `probeflow-reader`.
//!
//! Thin wrappers only: argument conversion, the GIL released around Rust work, and the
//! exceptions ([`errors`]: probeflow's classes, declared here, and the one mapping of
//! `probeflow_reader::Error` onto them and onto Python's own `OSError` family and
//! `IndexError`). The Python package re-exports everything with docstrings and type
//! stubs (`_native.pyi`).

use std::fs::File;
use std::io::BufWriter;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use numpy::IntoPyArray;
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use probeflow_reader::array_record::{
    ArrayRecordReader, ArrayRecordWriter, RecordBuf, WriteSummary, WriterOptions,
};
use probeflow_reader::row::{self, Measurement, RowBuilder, RttCode};
use probeflow_reader::Error;

mod dataset;
mod errors;
mod remote_object;

use errors::to_py as py_err;

fn lock<T>(m: &Mutex<T>) -> PyResult<MutexGuard<'_, T>> {
    m.lock()
        .map_err(|_| errors::internal("internal lock poisoned by an earlier panic"))
}

/// Read-only random access to an ArrayRecord file.
#[pyclass(name = "ArrayRecordReader", module = "probeflow._native", frozen)]
struct PyArrayRecordReader {
    path: String,
    inner: Mutex<Option<Arc<ArrayRecordReader>>>,
    /// Reused between calls so a compressed file keeps its decompression context.
    buf: Mutex<RecordBuf>,
}

impl PyArrayRecordReader {
    fn reader(&self) -> PyResult<Arc<ArrayRecordReader>> {
        lock(&self.inner)?.clone().ok_or_else(|| {
            PyValueError::new_err(format!("ArrayRecordReader({:?}) is closed", self.path))
        })
    }

    fn index(&self, reader: &ArrayRecordReader, index: i64) -> PyResult<u64> {
        let len = reader.len() as i64;
        let i = if index < 0 { index + len } else { index };
        if i < 0 || i >= len {
            return Err(PyIndexError::new_err(format!(
                "record index {index} out of range for {} records",
                len
            )));
        }
        Ok(i as u64)
    }
}

#[pymethods]
impl PyArrayRecordReader {
    #[new]
    #[pyo3(signature = (path, *, verify_hashes = true))]
    fn new(py: Python<'_>, path: PathBuf, verify_hashes: bool) -> PyResult<Self> {
        let mut reader = py
            .detach(|| ArrayRecordReader::open(&path))
            .map_err(py_err)?;
        reader.set_verify_hashes(verify_hashes);
        Ok(PyArrayRecordReader {
            path: path.display().to_string(),
            inner: Mutex::new(Some(Arc::new(reader))),
            buf: Mutex::new(RecordBuf::new()),
        })
    }

    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    #[getter]
    fn writer_options(&self) -> PyResult<Option<String>> {
        Ok(self.reader()?.writer_options().map(str::to_string))
    }

    #[getter]
    fn group_size(&self) -> PyResult<u64> {
        Ok(self.reader()?.group_size())
    }

    #[getter]
    fn num_chunks(&self) -> PyResult<usize> {
        Ok(self.reader()?.num_chunks())
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.reader()?.len() as usize)
    }

    fn __getitem__<'py>(&self, py: Python<'py>, index: i64) -> PyResult<Bound<'py, PyBytes>> {
        let reader = self.reader()?;
        let i = self.index(&reader, index)?;
        let mut buf = lock(&self.buf)?;
        read_bytes(py, &reader, i, &mut buf)
    }

    /// Reads the records at `indices` (in that order), with the GIL released while
    /// each record is read.
    fn read<'py>(&self, py: Python<'py>, indices: Vec<i64>) -> PyResult<Bound<'py, PyList>> {
        let reader = self.reader()?;
        let indices = indices
            .into_iter()
            .map(|i| self.index(&reader, i))
            .collect::<PyResult<Vec<u64>>>()?;
        let mut buf = lock(&self.buf)?;
        let items = indices
            .iter()
            .map(|&i| read_bytes(py, &reader, i, &mut buf))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Reads records `start..stop`.
    fn read_range<'py>(
        &self,
        py: Python<'py>,
        start: u64,
        stop: u64,
    ) -> PyResult<Bound<'py, PyList>> {
        let reader = self.reader()?;
        let records = py
            .detach(|| reader.read_range(start..stop))
            .map_err(py_err)?;
        PyList::new(py, records.iter().map(|r| PyBytes::new(py, r)))
    }

    fn __iter__(&self) -> PyResult<PyRecordIterator> {
        Ok(PyRecordIterator {
            reader: self.reader()?,
            state: Mutex::new((0, RecordBuf::new())),
        })
    }

    /// Releases the memory map; later calls raise `ValueError`.
    fn close(&self) -> PyResult<()> {
        lock(&self.inner)?.take();
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }

    fn __repr__(&self) -> PyResult<String> {
        Ok(match lock(&self.inner)?.as_ref() {
            Some(r) => format!(
                "ArrayRecordReader({:?}, records={}, group_size={})",
                self.path,
                r.len(),
                r.group_size()
            ),
            None => format!("ArrayRecordReader({:?}, closed)", self.path),
        })
    }
}

/// Reads record `i` with the GIL released and copies it into a new `bytes`.
fn read_bytes<'py>(
    py: Python<'py>,
    reader: &ArrayRecordReader,
    i: u64,
    buf: &mut RecordBuf,
) -> PyResult<Bound<'py, PyBytes>> {
    let record = py.detach(|| reader.read(i, buf)).map_err(py_err)?;
    Ok(PyBytes::new(py, record))
}

/// Iterator over the records of a reader, decoding each chunk once.
#[pyclass(name = "_RecordIterator", module = "probeflow._native", frozen)]
struct PyRecordIterator {
    reader: Arc<ArrayRecordReader>,
    state: Mutex<(u64, RecordBuf)>,
}

#[pymethods]
impl PyRecordIterator {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let mut state = lock(&self.state)?;
        let (next, buf) = &mut *state;
        if *next >= self.reader.len() {
            return Ok(None);
        }
        let i = *next;
        *next += 1;
        read_bytes(py, &self.reader, i, buf).map(Some)
    }
}

fn summary_dict<'py>(py: Python<'py>, s: &WriteSummary) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("records", s.records)?;
    d.set_item("chunks", s.chunks)?;
    d.set_item("bytes", s.bytes)?;
    Ok(d)
}

/// Writes an ArrayRecord file.
#[pyclass(name = "ArrayRecordWriter", module = "probeflow._native", frozen)]
struct PyArrayRecordWriter {
    path: String,
    inner: Mutex<Option<ArrayRecordWriter<BufWriter<File>>>>,
    summary: Mutex<Option<WriteSummary>>,
}

#[pymethods]
impl PyArrayRecordWriter {
    #[new]
    #[pyo3(signature = (path, options = probeflow_reader::array_record::DEFAULT_WRITER_OPTIONS))]
    fn new(py: Python<'_>, path: PathBuf, options: &str) -> PyResult<Self> {
        let options: WriterOptions = options.parse().map_err(py_err)?;
        let writer = py
            .detach(|| ArrayRecordWriter::create(&path, options))
            .map_err(py_err)?;
        Ok(PyArrayRecordWriter {
            path: path.display().to_string(),
            inner: Mutex::new(Some(writer)),
            summary: Mutex::new(None),
        })
    }

    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// Appends one record (bytes).
    fn write(&self, py: Python<'_>, record: &[u8]) -> PyResult<()> {
        let mut guard = lock(&self.inner)?;
        let writer = guard.as_mut().ok_or_else(|| {
            PyValueError::new_err(format!("ArrayRecordWriter({:?}) is closed", self.path))
        })?;
        if record.len() < 1 << 16 {
            writer.write(record).map_err(py_err)
        } else {
            py.detach(|| writer.write(record)).map_err(py_err)
        }
    }

    /// Finishes the file (footer and postscript) and returns
    /// `{"records", "chunks", "bytes"}`. Closing twice returns the same summary.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let writer = lock(&self.inner)?.take();
        let mut summary = lock(&self.summary)?;
        if let Some(writer) = writer {
            *summary = Some(py.detach(|| writer.finish()).map_err(py_err)?);
        }
        match summary.as_ref() {
            Some(s) => summary_dict(py, s),
            None => Err(PyValueError::new_err(
                "the writer failed before it was closed",
            )),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> PyResult<String> {
        let open = lock(&self.inner)?.is_some();
        Ok(format!(
            "ArrayRecordWriter({:?}, {})",
            self.path,
            if open { "open" } else { "closed" }
        ))
    }
}

fn parse_addr(text: &str) -> PyResult<IpAddr> {
    row::parse_addr(text).map_err(py_err)
}

fn measurements(
    event_time: Vec<u64>,
    dst_addr: Vec<String>,
    rtt_ms: Vec<Option<f64>>,
) -> PyResult<Vec<Measurement>> {
    if event_time.len() != dst_addr.len() || event_time.len() != rtt_ms.len() {
        return Err(py_err(Error::Input(format!(
            "event_time, dst_addr and rtt_ms must have the same length ({}, {}, {})",
            event_time.len(),
            dst_addr.len(),
            rtt_ms.len()
        ))));
    }
    event_time
        .into_iter()
        .zip(dst_addr)
        .zip(rtt_ms)
        .map(|((t, d), r)| {
            Ok(Measurement {
                event_time: t,
                dst_addr: parse_addr(&d)?,
                rtt: match r {
                    None => None,
                    Some(ms) => RttCode::from_ms(ms).map_err(py_err)?,
                },
            })
        })
        .collect()
}

/// Encodes one row (an Arrow IPC stream) from time-ordered measurements.
#[pyfunction]
#[pyo3(signature = (src_addr, event_time, dst_addr, rtt_ms, *, part = 0))]
fn encode_row<'py>(
    py: Python<'py>,
    src_addr: &str,
    event_time: Vec<u64>,
    dst_addr: Vec<String>,
    rtt_ms: Vec<Option<f64>>,
    part: u32,
) -> PyResult<Bound<'py, PyBytes>> {
    let src = parse_addr(src_addr)?;
    let ms = measurements(event_time, dst_addr, rtt_ms)?;
    let row = py
        .detach(|| row::encode_row(src, part, &ms))
        .map_err(py_err)?;
    Ok(PyBytes::new(py, &row.bytes))
}

/// Cuts a source's time-ordered measurements into rows of at most `max_row_bytes`.
#[pyfunction]
#[pyo3(signature = (src_addr, event_time, dst_addr, rtt_ms, *, max_row_bytes = row::DEFAULT_MAX_ROW_BYTES))]
fn build_rows<'py>(
    py: Python<'py>,
    src_addr: &str,
    event_time: Vec<u64>,
    dst_addr: Vec<String>,
    rtt_ms: Vec<Option<f64>>,
    max_row_bytes: usize,
) -> PyResult<Bound<'py, PyList>> {
    let src = parse_addr(src_addr)?;
    let ms = measurements(event_time, dst_addr, rtt_ms)?;
    let rows = py
        .detach(|| {
            let mut b = RowBuilder::new(src, max_row_bytes)?;
            let mut rows = Vec::new();
            for m in &ms {
                rows.extend(b.push(m)?);
            }
            rows.extend(b.finish()?);
            Ok::<_, Error>(rows)
        })
        .map_err(py_err)?;
    PyList::new(py, rows.iter().map(|r| PyBytes::new(py, &r.bytes)))
}

/// Decodes a row into its facts and numpy columns.
#[pyfunction]
fn decode_row<'py>(py: Python<'py>, record: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let view = row::decode_row(record).map_err(py_err)?;
    let n = view.len();
    let d = PyDict::new(py);
    let m = &view.meta;
    d.set_item("src_addr", m.src_addr.to_string())?;
    d.set_item("src_id", m.src_id)?;
    d.set_item("ip_version", m.ip_version())?;
    d.set_item("part", m.part)?;
    d.set_item("first_time", m.first_time)?;
    d.set_item("last_time", m.last_time)?;
    d.set_item("n_measurements", m.n_measurements)?;
    let times: Vec<u64> = (0..n).map(|i| view.event_time(i)).collect();
    let dst: Vec<String> = (0..n).map(|i| view.dst_addr(i).to_string()).collect();
    let codes: Vec<u16> = (0..n).map(|i| view.rtt(i).map_or(0, |c| c.0)).collect();
    let failed: Vec<bool> = (0..n).map(|i| view.rtt(i).is_none()).collect();
    let rtt_ms: Vec<f64> = (0..n)
        .map(|i| view.rtt(i).map_or(f64::NAN, |c| c.millis()))
        .collect();
    d.set_item("event_time", times.into_pyarray(py))?;
    d.set_item("dst_addr", dst)?;
    d.set_item("rtt_code", codes.into_pyarray(py))?;
    d.set_item("failed", failed.into_pyarray(py))?;
    d.set_item("rtt_ms", rtt_ms.into_pyarray(py))?;
    Ok(d)
}

/// The 2-byte RTT code of an RTT in ms (`None` for a failed ping, i.e. negative).
#[pyfunction]
fn rtt_encode(rtt_ms: f64) -> PyResult<Option<u16>> {
    Ok(RttCode::from_ms(rtt_ms).map_err(py_err)?.map(|c| c.0))
}

/// The RTT in microseconds that a code stands for.
#[pyfunction]
fn rtt_decode_us(code: u16) -> u64 {
    RttCode(code).micros()
}

/// The canonical text of an address (IPv4-mapped IPv6 becomes IPv4).
#[pyfunction]
fn canonical_addr(addr: &str) -> PyResult<String> {
    Ok(parse_addr(addr)?.to_string())
}

/// `u64_le(blake3(canonical_text)[0..8])`.
#[pyfunction]
fn src_id(addr: &str) -> PyResult<u64> {
    Ok(row::src_id(&parse_addr(addr)?))
}

/// The shard a source's rows go to: `src_id(addr) % shards`.
#[pyfunction]
fn partition(addr: &str, shards: u32) -> PyResult<u32> {
    row::partition(&parse_addr(addr)?, shards).map_err(py_err)
}

/// `"train"`, `"val"` or `"test"` for a source, given the job's split seed and its
/// test and val fractions.
#[pyfunction]
#[pyo3(signature = (addr, seed, test_fraction, val_fraction = 0.0))]
fn split_of(
    addr: &str,
    seed: u64,
    test_fraction: f64,
    val_fraction: f64,
) -> PyResult<&'static str> {
    let rule = row::SplitRule::new(seed, test_fraction, val_fraction).map_err(py_err)?;
    Ok(rule.split(&parse_addr(addr)?).as_str())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<PyArrayRecordReader>()?;
    m.add_class::<PyArrayRecordWriter>()?;
    m.add_class::<PyRecordIterator>()?;
    m.add_function(wrap_pyfunction!(encode_row, m)?)?;
    m.add_function(wrap_pyfunction!(build_rows, m)?)?;
    m.add_function(wrap_pyfunction!(decode_row, m)?)?;
    m.add_function(wrap_pyfunction!(rtt_encode, m)?)?;
    m.add_function(wrap_pyfunction!(rtt_decode_us, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_addr, m)?)?;
    m.add_function(wrap_pyfunction!(src_id, m)?)?;
    m.add_function(wrap_pyfunction!(partition, m)?)?;
    m.add_function(wrap_pyfunction!(split_of, m)?)?;
    m.add_class::<dataset::PyLoader>()?;
    m.add_function(wrap_pyfunction!(dataset::_after_fork_in_child, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::encode_measurement, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::detokenize, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::pretty, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::token_name, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::resolve_shards, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::splits_of, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::cache_stats, m)?)?;
    m.add_function(wrap_pyfunction!(remote_object::remote_object_size, m)?)?;
    m.add_function(wrap_pyfunction!(remote_object::remote_object_range, m)?)?;
    m.add("READER_DEFAULTS", dataset::reader_defaults(m.py())?)?;
    m.add("VOCAB_SIZE", probeflow_reader::tokenizer::VOCAB_SIZE)?;
    m.add(
        "TOKENIZER_VERSION",
        probeflow_reader::tokenizer::TOKENIZER_VERSION,
    )?;
    m.add("DEFAULT_MAX_ROW_BYTES", row::DEFAULT_MAX_ROW_BYTES)?;
    m.add(
        "REMOTE_SCHEMES",
        probeflow_reader::output::REMOTE_SCHEMES.to_vec(),
    )?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "COMPLETION_MARKER",
        probeflow_reader::output::COMPLETION_MARKER,
    )?;
    m.add(
        "EARLIER_COMPLETION_MARKERS",
        probeflow_reader::output::EARLIER_COMPLETION_MARKERS.to_vec(),
    )?;
    m.add(
        "DEFAULT_ARRAY_RECORD_OPTIONS",
        probeflow_reader::array_record::DEFAULT_WRITER_OPTIONS,
    )?;
    Ok(())
}
