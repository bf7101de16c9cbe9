#![no_main]
//! `py_json::loads` against CPython's own `json.loads`, in process: both give the same
//! value (compared by `repr`, which shows every float, int, surrogate and key order) or
//! both refuse the text. The one difference allowed: nesting past `py_json`'s
//! `MAX_NESTING` (900), which it refuses where Python reads on until its recursion
//! limit. Not a harness of probeflow-fuzz (it embeds Python); its corpus is `py_json`'s.

use probeflow_ngram_overlap::py_json::{loads, PyValue, MAX_NESTING};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Our value as the Python object `json.loads` would make.
fn to_python<'py>(py: Python<'py>, value: &PyValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        PyValue::None => py.None().into_bound(py),
        PyValue::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        PyValue::Int(i) => i.into_pyobject(py)?.into_any(),
        PyValue::BigInt(digits) => py
            .import("builtins")?
            .getattr("int")?
            .call1((digits.as_ref(),))?,
        PyValue::Float(f) => f.into_pyobject(py)?.into_any(),
        PyValue::Str(s) => pystr(py, s.as_bytes())?,
        PyValue::List(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_python(py, item)?)?;
            }
            list.into_any()
        }
        PyValue::Dict(items) => {
            let dict = PyDict::new(py);
            for (k, v) in items {
                dict.set_item(pystr(py, k.as_bytes())?, to_python(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

/// A str from WTF-8 (lone surrogates as their 3-byte form), as Python holds it.
fn pystr<'py>(py: Python<'py>, wtf8: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    pyo3::types::PyBytes::new(py, wtf8).call_method1("decode", ("utf-8", "surrogatepass"))
}

/// How deep `text` nests arrays and objects outside strings.
fn depth(text: &str) -> usize {
    let (mut depth, mut most, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in text.bytes() {
        match (in_string, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') => in_string = false,
            (false, _, b'"') => in_string = true,
            (false, _, b'[' | b'{') => {
                depth += 1;
                most = most.max(depth);
            }
            (false, _, b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    most
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let ours = loads(text);
    Python::attach(|py| {
        let json = py.import("json").expect("the json module");
        let theirs = json.getattr("loads").expect("json.loads").call1((text,));
        match (&ours, theirs) {
            (Ok(value), Ok(theirs)) => {
                let ours = to_python(py, value).expect("a Python value");
                let (a, b) = (ours.repr().unwrap(), theirs.repr().unwrap());
                assert_eq!(a.to_str().unwrap(), b.to_str().unwrap(), "{text:?}");
            }
            (Err(_), Err(_)) => {}
            (Err(e), Ok(_)) => assert!(
                e.what == "nested too deep" && depth(text) > MAX_NESTING,
                "{text:?}: py_json refuses ({e}) what json.loads reads"
            ),
            (Ok(_), Err(e)) => panic!("{text:?}: py_json reads what json.loads refuses ({e})"),
        }
    });
});
