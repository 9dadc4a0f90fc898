//! Python bindings of the rule engine: Graph and Program objects; errors raised as rlx_rules.errors types.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};

use rlx_rules_core::apply::{apply, ApplyError, ApplyOptions};
use rlx_rules_core::explain::ExplainOptions;
use rlx_rules_core::graph::{Graph, GraphError, DEFAULT_MAX_NODES};
use rlx_rules_core::program::{Program, ProgramError};
use rlx_rules_core::registry::Registry;

/// Raise `rlx_rules.errors.<class_name>(message)`, so that Python and Rust share one hierarchy.
fn raise(py: Python<'_>, class_name: &str, message: String) -> PyErr {
    let class = py
        .import("rlx_rules.errors")
        .and_then(|m| m.getattr(class_name))
        .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
    match class {
        Ok(class) => PyErr::from_type(class, message),
        Err(e) => e,
    }
}

fn graph_error(py: Python<'_>, e: GraphError) -> PyErr {
    raise(py, "GraphError", e.message)
}

fn program_error(py: Python<'_>, e: ProgramError) -> PyErr {
    raise(py, "ProgramError", e.0)
}

fn apply_error(py: Python<'_>, e: ApplyError) -> PyErr {
    match e {
        ApplyError::Param(m) => raise(py, "ParamError", m),
        other => raise(py, "ApplyError", other.to_string()),
    }
}

/// A validated graph, held in Rust. Immutable: apply returns a new one.
#[pyclass(name = "Graph", module = "rlx_rules._native", frozen)]
pub struct PyGraph {
    inner: Graph,
    warnings: Vec<String>,
}

#[pymethods]
impl PyGraph {
    /// Parse and validate graph.json text (at most `max_nodes` nodes; default 10 million).
    #[staticmethod]
    #[pyo3(signature = (text, max_nodes = None))]
    fn from_json(py: Python<'_>, text: &Bound<'_, PyString>, max_nodes: Option<usize>) -> PyResult<PyGraph> {
        // A str with a lone surrogate has no UTF-8 form: a GraphError, not a UnicodeEncodeError.
        let text = text.to_str().map_err(|_| raise(py, "GraphError", "invalid JSON: the text holds a lone surrogate (not valid Unicode)".to_string()))?;
        let max = max_nodes.unwrap_or(DEFAULT_MAX_NODES);
        let loaded = py.detach(|| Graph::from_json_slice_max(text.as_bytes(), Registry::builtin(), max));
        let (inner, warnings) = loaded.map_err(|e| graph_error(py, e))?;
        Ok(PyGraph { inner, warnings: warnings.into_iter().map(|w| w.message).collect() })
    }

    /// Read, parse and validate a graph.json file.
    #[staticmethod]
    #[pyo3(signature = (path, max_nodes = None))]
    fn load(py: Python<'_>, path: PathBuf, max_nodes: Option<usize>) -> PyResult<PyGraph> {
        let max = max_nodes.unwrap_or(DEFAULT_MAX_NODES);
        let loaded = py.detach(|| Graph::from_path_max(&path, Registry::builtin(), max));
        let (inner, warnings) = loaded.map_err(|e| graph_error(py, e))?;
        Ok(PyGraph { inner, warnings: warnings.into_iter().map(|w| w.message).collect() })
    }

    #[pyo3(signature = (pretty = false))]
    fn to_json(&self, py: Python<'_>, pretty: bool) -> String {
        py.detach(|| if pretty { self.inner.to_json_string_pretty() } else { self.inner.to_json_string() })
    }

    /// Write atomically (temporary file, then rename).
    #[pyo3(signature = (path, pretty = false))]
    fn write(&self, py: Python<'_>, path: PathBuf, pretty: bool) -> PyResult<()> {
        py.detach(|| self.inner.write_atomic(&path, pretty)).map_err(|e| graph_error(py, e))
    }

    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    #[getter]
    fn name(&self) -> Option<String> {
        self.inner.name.clone()
    }

    #[getter]
    fn outputs(&self) -> Vec<u64> {
        self.inner.outputs.clone()
    }

    fn __len__(&self) -> usize {
        self.inner.nodes.len()
    }

    /// Node count per op.
    fn op_counts(&self) -> std::collections::BTreeMap<String, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for n in &self.inner.nodes {
            *counts.entry(n.op.clone()).or_insert(0) += 1;
        }
        counts
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
        let text = text.to_str().map_err(|_| raise(py, "ProgramError", "invalid matcher program: the text holds a lone surrogate (not valid Unicode)".to_string()))?;
        let inner = Program::from_json_str(text).map_err(|e| program_error(py, e))?;
        Ok(PyProgram { inner })
    }

    /// Apply to `graph` with resolved parameter values (a JSON object). Returns (new graph, report JSON).
    ///
    /// `explain` turns on near-miss records: "unfired" (rules that fired zero times, best record each),
    /// "best" (every rule, best record) or "all" (every record); `explain_rule` and `explain_node` narrow it.
    #[pyo3(signature = (graph, params_json = "{}", *, max_rewrites = None, time_budget_s = None, fail_after_rewrites = None,
                        explain = None, explain_rule = None, explain_node = None))]
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        py: Python<'_>,
        graph: &PyGraph,
        params_json: &str,
        max_rewrites: Option<u64>,
        time_budget_s: Option<f64>,
        fail_after_rewrites: Option<u64>,
        explain: Option<&str>,
        explain_rule: Option<String>,
        explain_node: Option<u64>,
    ) -> PyResult<(PyGraph, String)> {
        let explain = match explain {
            None => None,
            Some(mode @ ("unfired" | "best" | "all")) => Some(ExplainOptions {
                rule: explain_rule,
                node: explain_node,
                all: mode == "all",
                only_unfired: mode == "unfired",
            }),
            Some(other) => return Err(raise(py, "ParamError", format!("explain must be unfired, best or all, not {other:?}"))),
        };
        let params: serde_json::Map<String, serde_json::Value> = serde_json::from_str(params_json)
            .map_err(|e| raise(py, "ParamError", format!("parameters are not a JSON object: {e}")))?;
        let time_budget = match time_budget_s {
            Some(s) if !(s.is_finite() && s >= 0.0) => {
                return Err(raise(py, "ParamError", format!("time_budget_s must be a non-negative number, got {s}")))
            }
            Some(s) => Some(Duration::from_secs_f64(s)),
            None => None,
        };
        let options = ApplyOptions { max_rewrites, time_budget, fail_after_rewrites, explain };
        let result = py.detach(|| {
            apply(graph.inner.clone(), &self.inner, &params, Registry::builtin(), &options)
                .map(|(g, report)| (g, serde_json::to_string(&report).unwrap_or_else(|_| "{}".to_string())))
        });
        let (out, report) = result.map_err(|e| apply_error(py, e))?;
        Ok((PyGraph { inner: out, warnings: Vec::new() }, report))
    }

    /// Rule names in the order they are tried.
    #[getter]
    fn rule_names(&self) -> Vec<String> {
        self.inner.phases.iter().flat_map(|p| p.rules.iter().map(|&r| self.inner.rules[r].name.clone())).collect()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGraph>()?;
    m.add_class::<PyProgram>()?;
    Ok(())
}
