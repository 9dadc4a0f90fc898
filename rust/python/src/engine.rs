//! Python bindings of the rule engine: Graph and Program objects; errors raised as rlx_rules.errors types.

use std::path::PathBuf;
use std::sync::{PoisonError, RwLock};

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyInt, PyString};

use rlx_rules_core::apply::{apply, apply_borrowed, time_budget_from_secs, ApplyOptions, Report};
use rlx_rules_core::explain::ExplainOptions;
use rlx_rules_core::graph::{Graph, DEFAULT_MAX_BYTES, DEFAULT_MAX_NODES};
use rlx_rules_core::program::Program;
use rlx_rules_core::registry::Registry;

use crate::errors::{core_err, new_err, os_err, Class};

/// A count argument (`max_rewrites`, `max_nodes`, ...): a ParamError if negative; values past u64 mean "no limit".
fn count_arg(name: &str, value: Option<&Bound<'_, PyInt>>) -> PyResult<Option<u64>> {
    let Some(v) = value else { return Ok(None) };
    if v.lt(0)? {
        return Err(new_err(Class::Param, "bad_option", format!("{name} must be an integer >= 0, got {v}")));
    }
    Ok(Some(v.extract::<u64>().unwrap_or(u64::MAX)))
}

fn max_nodes_arg(value: Option<&Bound<'_, PyInt>>) -> PyResult<usize> {
    Ok(count_arg("max_nodes", value)?.map_or(DEFAULT_MAX_NODES, |n| usize::try_from(n).unwrap_or(usize::MAX)))
}

/// A str with a lone surrogate has no UTF-8 form: an error of `class` (kind "json"), not a UnicodeEncodeError.
fn lone_surrogate(class: Class, what: &str) -> PyErr {
    new_err(class, "json", format!("{what}: the text holds a lone surrogate (not valid Unicode)"))
}

/// A validated graph, held in Rust. Immutable: apply returns a new one, unless told to consume this one (the
/// CLI, which never reads its input again), after which every method raises GraphError (kind "consumed").
#[pyclass(name = "Graph", module = "rlx_rules._native", frozen)]
pub struct PyGraph {
    /// The graph, `None` once an apply consumed it. The lock is only ever taken with the GIL released, so a thread
    /// waiting for it never holds up one that needs the GIL to let it go.
    inner: RwLock<Option<Graph>>,
    warnings: Vec<String>,
}

fn consumed() -> PyErr {
    new_err(Class::Graph, "consumed", "this graph was consumed by an apply that took its nodes (consume=True)")
}

impl PyGraph {
    fn new(graph: Graph, warnings: Vec<String>) -> PyGraph {
        PyGraph { inner: RwLock::new(Some(graph)), warnings }
    }

    /// `f` of the graph, run without the GIL; GraphError (kind "consumed") once an apply consumed it.
    fn with<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&Graph) -> R + Send) -> PyResult<R> {
        py.detach(|| {
            let guard = self.inner.read().unwrap_or_else(PoisonError::into_inner);
            guard.as_ref().map(f)
        })
        .ok_or_else(consumed)
    }
}

/// Graphs of at least this many nodes are freed on a thread of their own: freeing 290k nodes takes 20-30 ms that
/// the caller, often a command about to exit, need not wait for.
const BACKGROUND_FREE_NODES: usize = 1 << 16;

impl Drop for PyGraph {
    fn drop(&mut self) {
        let Some(graph) = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner) else {
            return;
        };
        if graph.nodes.len() >= BACKGROUND_FREE_NODES {
            let nodes = std::mem::take(&mut graph.nodes);
            // Where no thread can start, the closure, and the nodes with it, are dropped here instead.
            let _ = std::thread::Builder::new().name("rlx-free".into()).spawn(move || drop(nodes));
        }
    }
}

#[pymethods]
impl PyGraph {
    /// Parse and validate graph.json text (at most `max_nodes` nodes; default 10 million).
    #[staticmethod]
    #[pyo3(signature = (text, max_nodes = None))]
    fn from_json(py: Python<'_>, text: &Bound<'_, PyString>, max_nodes: Option<&Bound<'_, PyInt>>) -> PyResult<PyGraph> {
        let text = text.to_str().map_err(|_| lone_surrogate(Class::Graph, "invalid JSON"))?;
        let max = max_nodes_arg(max_nodes)?;
        let loaded = py.detach(|| Graph::from_json_slice_max(text.as_bytes(), Registry::builtin(), max));
        let (inner, warnings) = loaded.map_err(core_err)?;
        Ok(PyGraph::new(inner, warnings.into_iter().map(|w| w.message).collect()))
    }

    /// Read, parse and validate a graph.json file (at most `max_bytes` bytes; default 1 GiB).
    #[staticmethod]
    #[pyo3(signature = (path, max_nodes = None, max_bytes = None))]
    fn load(py: Python<'_>, path: PathBuf, max_nodes: Option<&Bound<'_, PyInt>>, max_bytes: Option<&Bound<'_, PyInt>>) -> PyResult<PyGraph> {
        let max = max_nodes_arg(max_nodes)?;
        let max_bytes = count_arg("max_bytes", max_bytes)?.unwrap_or(DEFAULT_MAX_BYTES);
        let loaded = py.detach(|| Graph::from_path_limits(&path, Registry::builtin(), max, max_bytes));
        let (inner, warnings) = loaded.map_err(core_err)?;
        Ok(PyGraph::new(inner, warnings.into_iter().map(|w| w.message).collect()))
    }

    #[pyo3(signature = (pretty = false))]
    fn to_json(&self, py: Python<'_>, pretty: bool) -> PyResult<String> {
        self.with(py, |g| if pretty { g.to_json_string_pretty() } else { g.to_json_string() })
    }

    /// Write the graph's JSON (the bytes of to_json) to the open file descriptor `fd`, without the GIL; the
    /// descriptor stays open (the caller syncs, closes and renames: rlx_rules.safe_write.atomic_output). A
    /// failed write raises OutputError (an OSError with the errno; kind "io"). Unix only.
    #[pyo3(signature = (fd, pretty = false))]
    fn write_to_fd(&self, py: Python<'_>, fd: i32, pretty: bool) -> PyResult<()> {
        self.with(py, |g| crate::fd_write::write_to_fd(g, fd, pretty))?.map_err(os_err)
    }

    /// Write atomically (temporary file, then rename).
    #[pyo3(signature = (path, pretty = false))]
    fn write(&self, py: Python<'_>, path: PathBuf, pretty: bool) -> PyResult<()> {
        self.with(py, |g| g.write_atomic(&path, pretty))?.map_err(core_err)
    }

    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    #[getter]
    fn name(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.with(py, |g| g.name.clone())
    }

    #[getter]
    fn outputs(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        self.with(py, |g| g.outputs.clone())
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |g| g.nodes.len())
    }

    /// A top-level field of the graph.json that the graph itself does not use (`"weights"`, ...), as JSON
    /// text; None when absent. Reads one field, without writing the whole graph out as to_json does.
    fn field(&self, py: Python<'_>, name: &str) -> PyResult<Option<String>> {
        self.with(py, |g| g.extra.get(name).map(|v| v.to_string()))
    }

    /// Node count per op.
    fn op_counts(&self, py: Python<'_>) -> PyResult<std::collections::BTreeMap<String, usize>> {
        self.with(py, |g| {
            let mut counts = std::collections::BTreeMap::new();
            for n in &g.nodes {
                *counts.entry(n.op.to_string()).or_insert(0) += 1;
            }
            counts
        })
    }
}

/// A compiled, validated matcher program.
#[pyclass(name = "Program", module = "rlx_rules._native", frozen)]
pub struct PyProgram {
    inner: Program,
}

#[pymethods]
impl PyProgram {
    #[new]
    fn new(py: Python<'_>, text: &Bound<'_, PyString>) -> PyResult<PyProgram> {
        let text = text.to_str().map_err(|_| lone_surrogate(Class::Program, "invalid matcher program"))?;
        let inner = py.detach(|| Program::from_json_str(text)).map_err(core_err)?;
        Ok(PyProgram { inner })
    }

    /// Apply to `graph` with resolved parameter values (a JSON object). Returns (new graph, report JSON).
    ///
    /// Limits (`max_rewrites`, `time_budget_s`, `max_iterations` per phase; None: the core's defaults) stop the
    /// apply with the work done, the report's `stop` saying which. With `on_limit="raise"` (the default) a
    /// rewrite or time limit raises ApplyError (kind "rewrite_limit" or "time_budget") whose `.graph` and
    /// `.report` hold that work; with `on_limit="stop"` they are returned.
    /// `explain` turns on near-miss records: "unfired" (rules that fired zero times, best record each),
    /// "best" (every rule, best record) or "all" (every record); `explain_rule` and `explain_node` narrow it.
    /// With `consume=True` the apply takes `graph`'s nodes instead of copying the ones that survive, and `graph`
    /// is left consumed (its methods raise GraphError, kind "consumed"): for a caller that never reads it again.
    #[pyo3(signature = (graph, params_json = "{}", *, max_rewrites = None, time_budget_s = None, max_iterations = None,
                        on_limit = "raise", fail_after_rewrites = None, explain = None, explain_rule = None, explain_node = None,
                        consume = false))]
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        py: Python<'_>,
        graph: &PyGraph,
        params_json: &str,
        max_rewrites: Option<&Bound<'_, PyInt>>,
        time_budget_s: Option<f64>,
        max_iterations: Option<&Bound<'_, PyInt>>,
        on_limit: &str,
        fail_after_rewrites: Option<&Bound<'_, PyInt>>,
        explain: Option<&str>,
        explain_rule: Option<String>,
        explain_node: Option<&Bound<'_, PyInt>>,
        consume: bool,
    ) -> PyResult<(PyGraph, String)> {
        let bad_option = |m: String| new_err(Class::Param, "bad_option", m);
        let explain = match explain {
            None => None,
            Some(mode @ ("unfired" | "best" | "all")) => Some(ExplainOptions {
                rule: explain_rule,
                node: count_arg("explain_node", explain_node)?,
                all: mode == "all",
                only_unfired: mode == "unfired",
            }),
            Some(other) => return Err(bad_option(format!("explain must be unfired, best or all, not {other:?}"))),
        };
        let raise_on_limit = match on_limit {
            "raise" => true,
            "stop" => false,
            other => return Err(bad_option(format!("on_limit must be raise or stop, not {other:?}"))),
        };
        let params: serde_json::Map<String, serde_json::Value> = serde_json::from_str(params_json)
            .map_err(|e| new_err(Class::Param, "param_type", format!("parameters are not a JSON object: {e}")))?;
        let defaults = ApplyOptions::default();
        let options = ApplyOptions {
            max_rewrites: count_arg("max_rewrites", max_rewrites)?.unwrap_or(defaults.max_rewrites),
            time_budget: time_budget_s.map(time_budget_from_secs).transpose().map_err(core_err)?.unwrap_or(defaults.time_budget),
            max_iterations: count_arg("max_iterations", max_iterations)?
                .map_or(defaults.max_iterations, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            fail_after_rewrites: count_arg("fail_after_rewrites", fail_after_rewrites)?,
            explain,
        };
        let result = py.detach(|| {
            let applied = if consume {
                let taken = graph.inner.write().unwrap_or_else(PoisonError::into_inner).take()?;
                apply(taken, &self.inner, &params, Registry::builtin(), &options)
            } else {
                let guard = graph.inner.read().unwrap_or_else(PoisonError::into_inner);
                apply_borrowed(guard.as_ref()?, &self.inner, &params, Registry::builtin(), &options)
            };
            Some(applied.map(|(g, report)| (g, serde_json::to_string(&report).map_err(|e| e.to_string()), report)))
        });
        let (out, report_json, report) = result.ok_or_else(consumed)?.map_err(core_err)?;
        let report_json =
            report_json.map_err(|e| new_err(Class::Apply, "report", format!("the apply report cannot be serialized: {e}")))?;
        let out = PyGraph::new(out, Vec::new());
        if raise_on_limit && report.stop.is_limit() {
            return Err(limit_error(py, &report, &options, out, report_json));
        }
        Ok((out, report_json))
    }

    /// The validated program in postcard's compact binary form, for the compiled-rule cache (lang/cache.py):
    /// `from_bytes` loads it without parsing and validating the JSON again.
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = postcard::to_allocvec(&self.inner)
            .map_err(|e| new_err(Class::Program, "format", format!("the program cannot be serialized: {e}")))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// A program that `to_bytes` of a build with the same `program_layout()` wrote. It is not validated again:
    /// only a caller that knows the bytes are such a program's, whole (the cache checks a SHA-256 of its entry,
    /// keyed by `program_layout()`), may use it. Bytes that do not decode are a ProgramError (kind "format").
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &[u8]) -> PyResult<PyProgram> {
        let decoded = py.detach(|| postcard::from_bytes::<Program>(data));
        let inner = decoded.map_err(|e| new_err(Class::Program, "format", format!("the compact program does not decode: {e}")))?;
        Ok(PyProgram { inner })
    }

    /// Rule names in the order they are tried.
    #[getter]
    fn rule_names(&self) -> Vec<String> {
        self.inner.phases.iter().flat_map(|p| p.rules.iter().map(|&r| self.inner.rules[r].name.clone())).collect()
    }
}

/// A hash of what defines `Program.to_bytes`' layout and meaning (the core's RESOLVED_LAYOUT sources and this
/// crate's version), as hex: part of the compiled-rule cache's key, so that bytes written by another build are
/// never decoded.
#[pyfunction]
fn program_layout() -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let halves = [0u8, 1].map(|seed| {
        let mut h = DefaultHasher::new();
        (seed, env!("CARGO_PKG_VERSION"), rlx_rules_core::program::RESOLVED_LAYOUT).hash(&mut h);
        h.finish()
    });
    format!("{:016x}{:016x}", halves[0], halves[1])
}

/// The SHA-256 of `parts` concatenated, as hex: the compiled-rule cache's hash (hashlib's would load OpenSSL,
/// ~12 million instructions, in a start that the cache keeps short).
#[pyfunction]
fn sha256_hex(py: Python<'_>, parts: Vec<PyBackedBytes>) -> String {
    use sha2::{Digest, Sha256};
    py.detach(|| {
        let mut h = Sha256::new();
        for part in &parts {
            h.update(part.as_ref());
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGraph>()?;
    m.add_class::<PyProgram>()?;
    m.add_function(wrap_pyfunction!(program_layout, m)?)?;
    m.add_function(wrap_pyfunction!(sha256_hex, m)?)?;
    Ok(())
}

/// ApplyError for a rewrite or time limit (with `on_limit="raise"`), holding the work done as `.graph` and
/// `.report`.
fn limit_error(py: Python<'_>, report: &Report, options: &ApplyOptions, graph: PyGraph, report_json: String) -> PyErr {
    let rule = report.stopped_in_rule.as_deref().unwrap_or("?");
    let message = if report.stop == rlx_rules_core::apply::StopReason::RewriteLimit {
        format!("rewrite budget of {} exceeded in rule {rule}: stopped after {} rewrites", options.max_rewrites, report.rewrites)
    } else {
        format!("time budget of {:?} exceeded in rule {rule}: stopped after {} rewrites", options.time_budget, report.rewrites)
    };
    let err = new_err(Class::Apply, report.stop.as_str(), message);
    let value = err.value(py);
    let attached = Py::new(py, graph).and_then(|g| value.setattr("graph", g)).and_then(|()| value.setattr("report", report_json));
    match attached {
        Ok(()) => err,
        Err(e) => e,
    }
}
