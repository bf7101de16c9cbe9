//! probeflow's Python exceptions, declared here: the classes of `probeflow.errors`
//! (which re-exports them with the stubs' types), and the one conversion of every
//! reader error into one of them, or into Python's own `OSError` family and
//! `IndexError`.
//!
//! ```text
//! probeflow_reader::Error ─► to_py ─► FormatError │ InvalidInputError ─ StateError │ OptionsError
//!                                     │ OutputError │ RemoteError │ ThreadError │ InternalError
//!                                     │ FileNotFoundError, PermissionError, OSError │ IndexError
//! ```
//!
//! Several classes have two bases (`InvalidInputError` is a `ProbeflowError` and a
//! `ValueError`), which `create_exception!` cannot declare: the classes are made once
//! per interpreter with `type(name, bases, namespace)` and kept.

use pyo3::exceptions::{
    PyException, PyFileNotFoundError, PyIndexError, PyOSError, PyPermissionError, PyRuntimeError,
    PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use probeflow_reader::Error;

/// One of probeflow's exception classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Probeflow,
    Format,
    InvalidInput,
    State,
    Options,
    Output,
    Remote,
    Thread,
    Internal,
}

/// Python's classes a declared class derives from, besides probeflow's own.
#[derive(Debug, Clone, Copy)]
enum Builtin {
    Exception,
    ValueError,
    OSError,
    RuntimeError,
}

/// A class as declared: its name, its bases (a class declared before it, then a
/// builtin) and its docstring.
struct Declared {
    class: Class,
    name: &'static str,
    parent: Option<Class>,
    builtin: Option<Builtin>,
    doc: &'static str,
}

/// Every class, in declaration order (a parent before its children).
const CLASSES: [Declared; 9] = [
    Declared {
        class: Class::Probeflow,
        name: "ProbeflowError",
        parent: None,
        builtin: Some(Builtin::Exception),
        doc: "Base class of probeflow's own exceptions.",
    },
    Declared {
        class: Class::Format,
        name: "FormatError",
        parent: Some(Class::Probeflow),
        builtin: None,
        doc: "A corrupt, truncated or unsupported ArrayRecord file or row.",
    },
    Declared {
        class: Class::InvalidInput,
        name: "InvalidInputError",
        parent: Some(Class::Probeflow),
        builtin: Some(Builtin::ValueError),
        doc: "An input value probeflow cannot use.",
    },
    Declared {
        class: Class::State,
        name: "StateError",
        parent: Some(Class::InvalidInput),
        builtin: None,
        doc: "An iterator state that cannot be restored here: taken on other rows or with \
         other options, of another version, or damaged.",
    },
    Declared {
        class: Class::Options,
        name: "OptionsError",
        parent: Some(Class::Probeflow),
        builtin: Some(Builtin::ValueError),
        doc: "An invalid ArrayRecord writer option string.",
    },
    Declared {
        class: Class::Output,
        name: "OutputError",
        parent: Some(Class::Probeflow),
        builtin: Some(Builtin::ValueError),
        doc: "A job output that must not be read as asked (unfinished, other version, paths \
         outside it, another split, several outputs mixed).",
    },
    Declared {
        class: Class::Remote,
        name: "RemoteError",
        parent: Some(Class::Probeflow),
        builtin: Some(Builtin::OSError),
        doc: "An object store could not be reached or refused a request, or a remote URL is \
         malformed.",
    },
    Declared {
        class: Class::Thread,
        name: "ThreadError",
        parent: Some(Class::Probeflow),
        builtin: Some(Builtin::RuntimeError),
        doc: "A thread the reader needs could not be started, or a background thread stopped \
         unexpectedly (not an input problem).",
    },
    Declared {
        class: Class::Internal,
        name: "InternalError",
        parent: Some(Class::Probeflow),
        builtin: Some(Builtin::RuntimeError),
        doc: "A bug in probeflow (an internal invariant broken, an earlier panic): please \
         report it. Nothing is wrong with the input.",
    },
];

static TYPES: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

/// The classes, made at first use.
fn types(py: Python<'_>) -> PyResult<&Vec<Py<PyType>>> {
    TYPES.get_or_try_init(py, || {
        let mut made: Vec<Py<PyType>> = Vec::with_capacity(CLASSES.len());
        for Declared {
            class,
            name,
            parent,
            builtin,
            doc,
        } in CLASSES
        {
            // A class is made after its parent, at its own index.
            debug_assert_eq!(class as usize, made.len());
            let mut bases: Vec<Bound<'_, PyType>> = Vec::new();
            if let Some(parent) = parent {
                bases.push(made[parent as usize].bind(py).clone());
            }
            if let Some(builtin) = builtin {
                bases.push(match builtin {
                    Builtin::Exception => py.get_type::<PyException>(),
                    Builtin::ValueError => py.get_type::<PyValueError>(),
                    Builtin::OSError => py.get_type::<PyOSError>(),
                    Builtin::RuntimeError => py.get_type::<PyRuntimeError>(),
                });
            }
            let namespace = PyDict::new(py);
            namespace.set_item("__doc__", doc)?;
            namespace.set_item("__module__", "probeflow.errors")?;
            let class = py
                .get_type::<PyType>()
                .call1((name, PyTuple::new(py, bases)?, namespace))?
                .cast_into::<PyType>()
                .map_err(PyErr::from)?;
            made.push(class.unbind());
        }
        Ok(made)
    })
}

/// A new exception of `class` with `message`.
pub fn new_err(class: Class, message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| match types(py) {
        Ok(types) => PyErr::from_type(types[class as usize].bind(py).clone(), message),
        Err(e) => e,
    })
}

/// A new [`Class::Internal`] exception (a broken invariant; nothing wrong with the
/// input).
pub fn internal(message: impl Into<String>) -> PyErr {
    new_err(Class::Internal, message)
}

/// The Python exception for a reader error: the one place reader errors cross into
/// Python.
pub fn to_py(e: Error) -> PyErr {
    let message = e.to_string();
    let class = match &e {
        Error::Io { source, .. } => {
            return match source.kind() {
                std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(message),
                std::io::ErrorKind::PermissionDenied => PyPermissionError::new_err(message),
                _ => PyOSError::new_err(message),
            }
        }
        Error::IndexOutOfRange { .. } => return PyIndexError::new_err(message),
        Error::Corrupt { .. } | Error::Unsupported { .. } | Error::Row(_) => Class::Format,
        Error::Options { .. } => Class::Options,
        Error::Input(_) => Class::InvalidInput,
        Error::State(_) => Class::State,
        Error::Output { .. } => Class::Output,
        Error::Remote { .. } => Class::Remote,
        Error::Thread(_) => Class::Thread,
        Error::Internal(_) => Class::Internal,
        Error::Arrow(_) => Class::Probeflow,
    };
    new_err(class, message)
}

/// Adds every class to `module` (`probeflow._native`).
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    for (declared, class) in CLASSES.iter().zip(types(py)?) {
        module.add(declared.name, class.bind(py))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_declared_after_their_parents_in_enum_order() {
        for (i, d) in CLASSES.iter().enumerate() {
            assert_eq!(d.class as usize, i);
            assert!(d.parent.is_none_or(|p| (p as usize) < i));
            assert!(d.parent.is_some() || d.builtin.is_some());
        }
    }
}
