//! Reading one object of an output on an object store (`s3://`, `gs://`) in ranges, for
//! the Python reports that stream an output's files (`probeflow.overlap_report`): the
//! size first, then ranges the caller asks for, each one request through the same
//! stores, credentials and retries the shard cache uses, one client per bucket for the
//! process ([`Bucket::shared`]). The GIL is released meanwhile.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use probeflow_reader::remote::store::{Bucket, RemoteUrl};

use crate::py_err;

/// The size in bytes of the object at `url`.
#[pyfunction]
pub fn remote_object_size(py: Python<'_>, url: String) -> PyResult<u64> {
    py.detach(move || {
        let url = RemoteUrl::parse(&url)?;
        Bucket::shared(&url)?.size(&url)
    })
    .map_err(py_err)
}

/// Bytes `start..stop` of the object at `url`.
#[pyfunction]
pub fn remote_object_range<'py>(
    py: Python<'py>,
    url: String,
    start: u64,
    stop: u64,
) -> PyResult<Bound<'py, PyBytes>> {
    if stop < start {
        return Err(py_err(probeflow_reader::Error::Input(format!(
            "range {start}..{stop} of {url} ends before it starts"
        ))));
    }
    let bytes = py
        .detach(move || {
            let url = RemoteUrl::parse(&url)?;
            Bucket::shared(&url)?.get_range(&url, start..stop)
        })
        .map_err(py_err)?;
    Ok(PyBytes::new(py, &bytes))
}
