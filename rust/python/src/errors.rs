//! The exception classes of rlx-rules, created once in Rust, and the one conversion of core errors into them.
//!
//! `RlxRulesError` is the base; most classes also derive from a builtin exception (`GraphError` is a
//! `ValueError`, `OutputError` an `OSError`) so that code catching those keeps working. `create_exception!`
//! takes a single base, so the classes are made with Python's `type(name, bases, namespace)` once, when the
//! module loads. Every instance raised from Rust carries `.kind`, a stable string from the core
//! ([`CoreError::kind`]); the classes and kinds are documented in `docs/errors.md`.

use pyo3::exceptions::{PyException, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use rlx_rules_core::error::{CoreError, ErrorClass};

/// An exception class of rlx-rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Base,
    Graph,
    Program,
    Param,
    Apply,
    Kernel,
    Output,
}

/// The builtin exception a class also derives from.
#[derive(Clone, Copy)]
enum Also {
    Nothing,
    ValueError,
    OsError,
}

/// (class, name, also derives from, docstring); the base comes first.
const CLASSES: [(Class, &str, Also, &str); 7] = [
    (Class::Base, "RlxRulesError", Also::Nothing,
     "Base class of every error that rlx-rules raises on bad input. `kind` names the cause (None if unset)."),
    (Class::Graph, "GraphError", Also::ValueError,
     "A graph failed to load, validate or write. kind: json, format, duplicate_id, dangling_input, cycle, \
      bad_output, arity, attr_type, io, too_large."),
    (Class::Program, "ProgramError", Also::ValueError,
     "A compiled matcher program was malformed or of an unsupported version. kind: json, format, version, \
      invalid, builtins."),
    (Class::Param, "ParamError", Also::ValueError,
     "A parameter or an argument got a value it cannot take. kind: unknown_param, param_type, bad_option, \
      argument."),
    (Class::Apply, "ApplyError", Also::Nothing,
     "Applying rules failed; no output was written. kind: invalid_result, debug_failure, report, and (only with \
      on_limit=\"raise\") rewrite_limit, time_budget."),
    (Class::Kernel, "KernelError", Also::ValueError,
     "A fused kernel refused its arguments or failed. kind: shape, layout, argument, internal."),
    (Class::Output, "OutputError", Also::OsError,
     "A file could not be written (the weights archive, a graph streamed to a file descriptor). kind: io."),
];

static TYPES: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

fn create(py: Python<'_>) -> PyResult<Vec<Py<PyType>>> {
    let type_ = py.get_type::<PyType>();
    let mut made: Vec<Py<PyType>> = Vec::with_capacity(CLASSES.len());
    for (_, name, also, doc) in CLASSES {
        let namespace = PyDict::new(py);
        namespace.set_item("__module__", "rlx_rules.errors")?;
        namespace.set_item("__doc__", doc)?;
        namespace.set_item("kind", py.None())?;
        let bases = match (made.first(), also) {
            (None, _) => PyTuple::new(py, [py.get_type::<PyException>()])?,
            (Some(base), Also::Nothing) => PyTuple::new(py, [base.bind(py).clone()])?,
            (Some(base), Also::ValueError) => PyTuple::new(py, [base.bind(py).clone(), py.get_type::<PyValueError>()])?,
            (Some(base), Also::OsError) => PyTuple::new(py, [base.bind(py).clone(), py.get_type::<PyOSError>()])?,
        };
        let class = type_.call1((name, bases, namespace))?.cast_into::<PyType>()?;
        made.push(class.unbind());
    }
    Ok(made)
}

/// The Python class of `class`.
pub fn class_of<'py>(py: Python<'py>, class: Class) -> PyResult<&'py Bound<'py, PyType>> {
    let types = TYPES.get_or_try_init(py, || create(py))?;
    let k = CLASSES.iter().position(|c| c.0 == class).unwrap_or(0);
    Ok(types[k].bind(py))
}

/// An exception of `class` with `message` and `.kind` set to `kind`.
pub fn new_err(class: Class, kind: &str, message: impl Into<String>) -> PyErr {
    let message = message.into();
    made(class, kind, |cls| cls.call1((message,)))
}

/// An I/O error as OutputError (kind "io"): `errno` and `strerror` set as an OSError's when the system gave a
/// code, so that `str(e)` reads like Python's own ("[Errno 28] No space left on device").
pub fn os_err(e: std::io::Error) -> PyErr {
    let Some(code) = e.raw_os_error() else {
        return new_err(Class::Output, "io", e.to_string());
    };
    let text = e.to_string();
    let strerror = text.strip_suffix(&format!(" (os error {code})")).unwrap_or(&text).to_string();
    made(Class::Output, "io", |cls| cls.call1((code, strerror)))
}

/// The exception that `call` makes of the class, with `.kind` set (or the error that making it raised).
fn made(class: Class, kind: &str, call: impl for<'py> FnOnce(&Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>>) -> PyErr {
    Python::attach(|py| {
        let value = class_of(py, class).and_then(|cls| {
            let value = call(cls)?;
            value.setattr("kind", kind)?;
            Ok(PyErr::from_value(value))
        });
        value.unwrap_or_else(|e| e)
    })
}

/// The one conversion of a core error: its class, its kind and its message.
pub fn core_err(e: impl Into<CoreError>) -> PyErr {
    let e = e.into();
    let class = match e.class() {
        ErrorClass::Graph => Class::Graph,
        ErrorClass::Program => Class::Program,
        ErrorClass::Param => Class::Param,
        ErrorClass::Apply => Class::Apply,
    };
    new_err(class, e.kind(), e.message())
}

/// Add every class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    for (class, name, _, _) in CLASSES {
        m.add(name, class_of(py, class)?)?;
    }
    Ok(())
}
