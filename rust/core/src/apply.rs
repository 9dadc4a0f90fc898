//! Runs a program over a graph: phases in order, each to a fixpoint under its iteration cap, with a report.
//!
//! Order, and so the result, is deterministic: phases in declaration order; within an iteration,
//! rules by priority (higher first) then declaration order; each rule's candidates in the graph's
//! order (new nodes last). A rewrite applies at once, so later candidates see the updated graph.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use crate::explain::{explain_gate, explain_rule, ExplainOptions, MissRecord};
use crate::expr::{Env, Val};
use crate::graph::{Graph, GraphError};
use crate::matcher::Matcher;
use crate::program::{Program, Quantifier};
use crate::registry::Registry;
use crate::rewrite::{apply_rewrite, Refusal};
use crate::workgraph::WorkGraph;

/// Limits and debug hooks for one apply.
#[derive(Clone, Debug, Default)]
pub struct ApplyOptions {
    /// Stop with an error once this many rewrites were applied (a budget; None: no limit).
    pub max_rewrites: Option<u64>,
    /// Stop with an error once this much time has passed (None: no limit).
    pub time_budget: Option<std::time::Duration>,
    /// Debug hook: fail on purpose after this many rewrites, to test that nothing is written.
    pub fail_after_rewrites: Option<u64>,
    /// Explain near misses after each phase settles (off: the matcher pays nothing for it).
    pub explain: Option<ExplainOptions>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ApplyError {
    /// A parameter value does not fit its declared type.
    Param(String),
    /// A limit was hit (rewrite budget or time budget), or the debug failure hook fired.
    Limit(String),
    /// The rewritten graph failed validation: a bug in the engine, reported rather than written.
    InvalidResult(GraphError),
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApplyError::Param(m) | ApplyError::Limit(m) => f.write_str(m),
            ApplyError::InvalidResult(e) => write!(f, "the rewritten graph is invalid: {e}"),
        }
    }
}

impl std::error::Error for ApplyError {}

#[derive(Clone, Debug, Default, Serialize)]
pub struct RuleReport {
    pub name: String,
    pub loc: String,
    /// Root candidates examined.
    pub tried: u64,
    /// Candidates where structure and guards matched.
    pub matched: u64,
    /// Rewrites applied.
    pub fired: u64,
    /// Matches refused because the rewrite would delete a node needed elsewhere.
    pub refused_unsafe: u64,
    /// Matches whose rewrite expressions could not be evaluated.
    pub refused_eval: u64,
    /// The first refusal, for diagnosis.
    pub first_refusal: Option<String>,
    /// Iterations in which a gate kept the rule off.
    pub gated_off: u64,
    pub time_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PhaseReport {
    pub name: String,
    pub iterations: u32,
    pub max_iterations: u32,
    /// "fixpoint", or "cap" when the last allowed iteration still rewrote.
    pub stop: String,
    /// Rules that fired in the last iteration when the cap was reached.
    pub still_firing: Vec<String>,
    pub rules: Vec<RuleReport>,
    pub time_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub nodes_before: usize,
    pub nodes_after: usize,
    pub ops_before: BTreeMap<String, usize>,
    pub ops_after: BTreeMap<String, usize>,
    pub params: BTreeMap<String, Value>,
    pub gates: BTreeMap<String, bool>,
    pub phases: Vec<PhaseReport>,
    pub rewrites: u64,
    pub time_ms: f64,
    /// With explain on: why rules did not fire, best near miss first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub near_misses: Vec<MissRecord>,
}

/// Parameter values in program order: from `values` where given, else the declared default.
pub fn param_values(program: &Program, values: &serde_json::Map<String, Value>) -> Result<Vec<Val>, ApplyError> {
    if let Some(unknown) = values.keys().find(|k| !program.params.iter().any(|p| &p.name == *k)) {
        return Err(ApplyError::Param(format!("unknown parameter {unknown:?}")));
    }
    program
        .params
        .iter()
        .map(|p| {
            let v = values.get(&p.name).unwrap_or(&p.default);
            let ok = match p.ty.as_str() {
                "int" => v.is_i64(),
                "float" => v.is_number(),
                "bool" => v.is_boolean(),
                "str" => v.is_string(),
                _ => false,
            };
            if !ok {
                return Err(ApplyError::Param(format!("parameter {} must be a {}, got {v}", p.name, p.ty)));
            }
            Val::from_json(v).map_err(|e| ApplyError::Param(e.0))
        })
        .collect()
}

fn gate_open(program: &Program, gate: usize, graph: &WorkGraph, params: &[Val]) -> bool {
    let g = &program.gates[gate];
    let holds = |slots: &[usize]| Env::new(graph, slots, params).truth(&g.expr) == Ok(true);
    match &g.scan {
        None => holds(&[]),
        Some((quantifier, op)) => {
            let mut nodes = graph.candidates(op).iter().copied().filter(|&i| graph.alive[i]);
            match quantifier {
                Quantifier::Any => nodes.any(|i| holds(&[i])),
                Quantifier::All => nodes.all(|i| holds(&[i])),
            }
        }
    }
}

/// Apply `program` to `graph`. The input graph is consumed; on error nothing is returned.
pub fn apply(
    graph: Graph,
    program: &Program,
    params: &serde_json::Map<String, Value>,
    registry: &Registry,
    options: &ApplyOptions,
) -> Result<(Graph, Report), ApplyError> {
    let start = Instant::now();
    let param_vals = param_values(program, params)?;
    let mut work = WorkGraph::new(graph);
    let nodes_before = work.live_count();
    let ops_before = work.op_counts();
    let mut matcher = Matcher::new();
    let mut rewrites: u64 = 0;
    let mut gates_seen: BTreeMap<String, bool> = BTreeMap::new();
    let mut phases = Vec::with_capacity(program.phases.len());
    let mut near_misses = Vec::new();

    for phase in &program.phases {
        let phase_start = Instant::now();
        let mut reports: Vec<RuleReport> = phase
            .rules
            .iter()
            .map(|&r| RuleReport { name: program.rules[r].name.clone(), loc: program.rules[r].loc.clone(), ..Default::default() })
            .collect();
        let mut iterations = 0;
        let mut stop = "fixpoint";
        let mut still_firing = Vec::new();
        while iterations < phase.max_iterations {
            iterations += 1;
            let mut fired_now = vec![false; phase.rules.len()];
            let mut gate_cache: Vec<Option<bool>> = vec![None; program.gates.len()];
            for (k, &r) in phase.rules.iter().enumerate() {
                let rule = &program.rules[r];
                let rule_start = Instant::now();
                let report = &mut reports[k];
                let mut open = true;
                for &g in &rule.gates {
                    let value = *gate_cache[g].get_or_insert_with(|| gate_open(program, g, &work, &param_vals));
                    gates_seen.insert(program.gates[g].name.clone(), value);
                    open &= value;
                }
                if !open {
                    report.gated_off += 1;
                    continue;
                }
                // Candidates as of now, in graph order; nodes added by this rule wait for the next iteration.
                let mut candidates: Vec<usize> = Vec::new();
                for op in &rule.root_ops {
                    candidates.extend_from_slice(work.candidates(op));
                }
                if rule.root_ops.len() > 1 {
                    candidates.sort_by_key(|&i| work.order_key[i]);
                }
                for root in candidates {
                    if !work.alive[root] {
                        continue;
                    }
                    report.tried += 1;
                    let members = if rule.group.is_some() {
                        match matcher.try_match_group(rule, &work, &param_vals, root) {
                            Some(members) => members,
                            None => continue,
                        }
                    } else {
                        if !matcher.try_match(rule, &work, &param_vals, root) {
                            continue;
                        }
                        vec![matcher.slots.clone()]
                    };
                    report.matched += 1;
                    match apply_rewrite(&mut work, rule, &members, &param_vals) {
                        Ok(_) => {
                            report.fired += 1;
                            fired_now[k] = true;
                            rewrites += 1;
                            if options.fail_after_rewrites.is_some_and(|n| rewrites >= n) {
                                return Err(ApplyError::Limit(format!(
                                    "debug hook: failing on purpose after {rewrites} rewrites"
                                )));
                            }
                            if options.max_rewrites.is_some_and(|n| rewrites > n) {
                                return Err(ApplyError::Limit(format!("rewrite budget of {rewrites} exceeded")));
                            }
                        }
                        Err(refusal) => {
                            let message = match refusal {
                                Refusal::Unsafe(m) => {
                                    report.refused_unsafe += 1;
                                    m
                                }
                                Refusal::Eval(m) => {
                                    report.refused_eval += 1;
                                    m
                                }
                            };
                            report.first_refusal.get_or_insert(message);
                        }
                    }
                    if options.time_budget.is_some_and(|b| start.elapsed() > b) {
                        return Err(ApplyError::Limit(format!(
                            "time budget of {:?} exceeded in rule {}",
                            options.time_budget.unwrap_or_default(),
                            rule.name
                        )));
                    }
                }
                report.time_ms += rule_start.elapsed().as_secs_f64() * 1e3;
            }
            if !fired_now.iter().any(|&f| f) {
                break;
            }
            if iterations == phase.max_iterations {
                stop = "cap";
                still_firing = phase
                    .rules
                    .iter()
                    .zip(&fired_now)
                    .filter(|(_, &f)| f)
                    .map(|(&r, _)| program.rules[r].name.clone())
                    .collect();
            }
        }
        if let Some(ex) = &options.explain {
            for (k, &r) in phase.rules.iter().enumerate() {
                let rule = &program.rules[r];
                if ex.rule.as_ref().is_some_and(|name| *name != rule.name) || (ex.only_unfired && reports[k].fired > 0) {
                    continue;
                }
                match rule.gates.iter().find(|&&g| !gate_open(program, g, &work, &param_vals)) {
                    Some(&g) => near_misses.push(explain_gate(program, g, rule, &phase.name, &work, &param_vals)),
                    None => near_misses.extend(explain_rule(program, rule, &phase.name, &work, &param_vals, ex)),
                }
            }
        }
        phases.push(PhaseReport {
            name: phase.name.clone(),
            iterations,
            max_iterations: phase.max_iterations,
            stop: stop.to_string(),
            still_firing,
            rules: reports,
            time_ms: phase_start.elapsed().as_secs_f64() * 1e3,
        });
    }

    let nodes_after = work.live_count();
    let ops_after = work.op_counts();
    let created = work.created_ids();
    let mut out = work.into_graph();
    out.finish_rewrite(registry, &created).map_err(ApplyError::InvalidResult)?;
    let params_report = program
        .params
        .iter()
        .zip(&param_vals)
        .map(|(p, v)| (p.name.clone(), v.to_json().unwrap_or(Value::Null)))
        .collect();
    let report = Report {
        nodes_before,
        nodes_after,
        ops_before,
        ops_after,
        params: params_report,
        gates: gates_seen,
        phases,
        rewrites,
        time_ms: start.elapsed().as_secs_f64() * 1e3,
        near_misses,
    };
    Ok((out, report))
}
