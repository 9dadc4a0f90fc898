//! Runs a program over a graph: phases in order, each to a fixpoint under its iteration cap, with a report.
//!
//! Order, and so the result, is deterministic: phases in declaration order; within an iteration,
//! rules by priority (higher first) then declaration order; each rule's candidates in the graph's
//! order (new nodes last). A rewrite applies at once, so later candidates see the updated graph.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::explain::{explain_gate, explain_rule, ExplainOptions, MissRecord};
use crate::expr::{Env, Val};
use crate::graph::{Graph, GraphError};
use crate::matcher::Matcher;
use crate::prepared::{intern_ops, Prepared};
use crate::program::{Program, Quantifier};
use crate::registry::Registry;
use crate::rewrite::{Refusal, Rewriter};
use crate::workgraph::WorkGraph;

/// Rewrites per apply unless the caller gives another limit.
pub const DEFAULT_MAX_REWRITES: u64 = 10_000_000;
/// Wall time per apply unless the caller gives another limit.
pub const DEFAULT_TIME_BUDGET: Duration = Duration::from_secs(600);
/// Iterations per phase unless the caller gives another limit; a rule file's `max_iterations` above it is
/// lowered to it.
pub const DEFAULT_MAX_ITERATIONS: u32 = 1000;

/// Limits and debug hooks for one apply. Hitting a limit is not an error: the apply stops and returns the
/// work done, with the limit as its [`StopReason`].
#[derive(Clone, Debug)]
pub struct ApplyOptions {
    /// At most this many rewrites (`u64::MAX`: no limit).
    pub max_rewrites: u64,
    /// At most this much wall time (`Duration::MAX`: no limit).
    pub time_budget: Duration,
    /// At most this many iterations per phase, whatever the program's phases allow.
    pub max_iterations: u32,
    /// Debug hook: fail on purpose after this many rewrites, to test that nothing is written.
    pub fail_after_rewrites: Option<u64>,
    /// Explain near misses after each phase settles (off: the matcher pays nothing for it).
    pub explain: Option<ExplainOptions>,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            max_rewrites: DEFAULT_MAX_REWRITES,
            time_budget: DEFAULT_TIME_BUDGET,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            fail_after_rewrites: None,
            explain: None,
        }
    }
}

/// A time budget given in seconds: refused if negative or not a number, and clamped to `Duration::MAX`
/// (no limit) when too large for a `Duration` (`1e300`).
pub fn time_budget_from_secs(seconds: f64) -> Result<Duration, ApplyError> {
    if seconds.is_nan() || seconds < 0.0 {
        return Err(ApplyError::BadOption(format!("time_budget_s must be a non-negative number, got {seconds}")));
    }
    Ok(Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX))
}

/// Why a phase, or the whole apply, stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// No rule fired in the last iteration.
    Fixpoint,
    /// The phase's last allowed iteration still rewrote (the next phases run).
    IterationCap,
    /// The rewrite limit was reached and one more rewrite was due (nothing runs after it).
    RewriteLimit,
    /// The time budget ran out (nothing runs after it).
    TimeBudget,
}

impl StopReason {
    /// The snake_case name, as the report writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Fixpoint => "fixpoint",
            StopReason::IterationCap => "iteration_cap",
            StopReason::RewriteLimit => "rewrite_limit",
            StopReason::TimeBudget => "time_budget",
        }
    }

    /// Whether it ends the whole apply (a rewrite or time limit), not only a phase.
    pub fn is_limit(self) -> bool {
        matches!(self, StopReason::RewriteLimit | StopReason::TimeBudget)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ApplyError {
    /// A parameter that the program does not declare.
    UnknownParam(String),
    /// A parameter value that does not fit its declared type.
    ParamType(String),
    /// An apply option out of range (a negative time budget).
    BadOption(String),
    /// The debug hook `fail_after_rewrites` fired.
    DebugFailure(String),
    /// The rewritten graph failed validation: a bug in the engine, reported rather than written.
    InvalidResult(GraphError),
}

impl ApplyError {
    /// The stable name of the error's kind, what Python sees as `.kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            ApplyError::UnknownParam(_) => "unknown_param",
            ApplyError::ParamType(_) => "param_type",
            ApplyError::BadOption(_) => "bad_option",
            ApplyError::DebugFailure(_) => "debug_failure",
            ApplyError::InvalidResult(_) => "invalid_result",
        }
    }

    /// Whether it is about a parameter or option the caller gave (Python: ParamError).
    pub fn is_param(&self) -> bool {
        matches!(self, ApplyError::UnknownParam(_) | ApplyError::ParamType(_) | ApplyError::BadOption(_))
    }
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApplyError::UnknownParam(m) | ApplyError::ParamType(m) | ApplyError::BadOption(m) | ApplyError::DebugFailure(m) => {
                f.write_str(m)
            }
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
    /// Why the phase stopped.
    pub stop: StopReason,
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
    /// Phases in order, up to the one a rewrite or time limit stopped (later phases did not run).
    pub phases: Vec<PhaseReport>,
    /// Why the apply stopped: a limit if one was hit, else `iteration_cap` if a phase reached its cap, else
    /// `fixpoint`.
    pub stop: StopReason,
    /// The rule that was running when a rewrite or time limit stopped the apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_in_rule: Option<String>,
    pub rewrites: u64,
    pub time_ms: f64,
    /// With explain on: why rules did not fire, best near miss first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub near_misses: Vec<MissRecord>,
}

/// Parameter values in program order: from `values` where given, else the declared default.
pub fn param_values(program: &Program, values: &serde_json::Map<String, Value>) -> Result<Vec<Val>, ApplyError> {
    if let Some(unknown) = values.keys().find(|k| !program.params.iter().any(|p| &p.name == *k)) {
        return Err(ApplyError::UnknownParam(format!("unknown parameter {unknown:?}")));
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
                return Err(ApplyError::ParamType(format!("parameter {} must be a {}, got {v}", p.name, p.ty)));
            }
            Val::from_json(v).map_err(|e| ApplyError::ParamType(e.0))
        })
        .collect()
}

fn gate_open(program: &Program, gate: usize, graph: &WorkGraph, params: &[Val]) -> bool {
    let g = &program.gates[gate];
    let holds = |slots: &[usize]| Env::new(graph, slots, params).truth(&g.expr) == Ok(true);
    match &g.scan {
        None => holds(&[]),
        Some((quantifier, op)) => {
            let mut nodes = graph.candidates(op).iter().map(|&i| i as usize).filter(|&i| graph.is_alive(i));
            match quantifier {
                Quantifier::Any => nodes.any(|i| holds(&[i])),
                Quantifier::All => nodes.all(|i| holds(&[i])),
            }
        }
    }
}

/// Apply `program` to `graph`. The input graph is consumed. A rewrite or time limit stops the apply with the
/// work done so far (every rewrite is whole), its report saying which limit; errors return nothing.
pub fn apply(
    graph: Graph,
    program: &Program,
    params: &serde_json::Map<String, Value>,
    registry: &Registry,
    options: &ApplyOptions,
) -> Result<(Graph, Report), ApplyError> {
    let start = Instant::now();
    let param_vals = param_values(program, params)?;
    run(WorkGraph::new(graph), start, program, param_vals, registry, options)
}

/// [`apply`] to a graph the caller keeps: only the nodes that survive are copied, at the end.
pub fn apply_borrowed(
    graph: &Graph,
    program: &Program,
    params: &serde_json::Map<String, Value>,
    registry: &Registry,
    options: &ApplyOptions,
) -> Result<(Graph, Report), ApplyError> {
    let start = Instant::now();
    let param_vals = param_values(program, params)?;
    run(WorkGraph::borrowed(graph), start, program, param_vals, registry, options)
}

fn run(
    mut work: WorkGraph<'_>,
    start: Instant,
    program: &Program,
    param_vals: Vec<Val>,
    registry: &Registry,
    options: &ApplyOptions,
) -> Result<(Graph, Report), ApplyError> {
    // No deadline when the budget reaches past what an Instant can hold.
    let deadline = start.checked_add(options.time_budget);
    let nodes_before = work.live_count();
    let ops_before = work.op_counts();
    // Every op the rules name gets an op index now, so that the prepared rules stay valid as nodes are added.
    intern_ops(&mut work, program.rules.iter());
    let prepared: Vec<Prepared> = program.rules.iter().map(|rule| Prepared::new(rule, &work)).collect();
    let mut matcher = Matcher::new();
    let mut rewriter = Rewriter::new();
    let mut rewrites: u64 = 0;
    let mut gates_seen: BTreeMap<String, bool> = BTreeMap::new();
    let mut phases = Vec::with_capacity(program.phases.len());
    let mut near_misses = Vec::new();
    let mut limit: Option<(StopReason, String)> = None;
    let mut candidates: Vec<usize> = Vec::new();

    for phase in &program.phases {
        let phase_start = Instant::now();
        let mut reports: Vec<RuleReport> = phase
            .rules
            .iter()
            .map(|&r| RuleReport { name: program.rules[r].name.clone(), loc: program.rules[r].loc.clone(), ..Default::default() })
            .collect();
        let max_iterations = phase.max_iterations.min(options.max_iterations);
        let mut iterations = 0;
        let mut stop = StopReason::Fixpoint;
        let mut still_firing = Vec::new();
        // Explain looks at the graph as the phase found it (after the phase, a rule's own rewrites would hide
        // the candidates it fired on); which records are kept depends on what fired, known after the phase.
        let mut phase_misses: Vec<(usize, Vec<MissRecord>)> = Vec::new();
        if let Some(ex) = &options.explain {
            for (k, &r) in phase.rules.iter().enumerate() {
                let rule = &program.rules[r];
                if ex.rule.as_ref().is_some_and(|name| *name != rule.name) {
                    continue;
                }
                let records = match rule.gates.iter().find(|&&g| !gate_open(program, g, &work, &param_vals)) {
                    Some(&g) => vec![explain_gate(program, g, rule, &phase.name, &work, &param_vals)],
                    None => explain_rule(program, rule, &phase.name, &work, &param_vals, ex),
                };
                phase_misses.push((k, records));
            }
        }
        'iterations: while iterations < max_iterations {
            iterations += 1;
            let mut fired_now = vec![false; phase.rules.len()];
            let mut gate_cache: Vec<Option<bool>> = vec![None; program.gates.len()];
            for (k, &r) in phase.rules.iter().enumerate() {
                let rule = &program.rules[r];
                let prep = &prepared[r];
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
                candidates.clear();
                for &op in &prep.root_ops {
                    candidates.extend(work.candidates_of(op).iter().map(|&i| i as usize));
                }
                if prep.root_ops.len() > 1 && !candidates.is_sorted_by_key(|&i| work.order_key(i)) {
                    candidates.sort_by_key(|&i| work.order_key(i));
                }
                for (n, &root) in candidates.iter().enumerate() {
                    // In a large graph the candidates lie far apart: fetch the ones ahead while this one is tried.
                    if let Some(&far) = candidates.get(n + 16) {
                        work.prefetch_flat(far);
                    }
                    if let Some(&near) = candidates.get(n + 8) {
                        work.prefetch_node(near);
                    }
                    // Reading the clock costs; every 64 candidates is often enough.
                    if n % 64 == 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                        stop = StopReason::TimeBudget;
                    }
                    if stop == StopReason::TimeBudget || !work.is_alive(root) {
                        if stop.is_limit() {
                            break;
                        }
                        continue;
                    }
                    report.tried += 1;
                    let group_members;
                    let members = if rule.group.is_some() {
                        match matcher.try_match_group(prep, &work, &param_vals, root) {
                            Some(members) => {
                                group_members = members;
                                group_members.as_slice()
                            }
                            None => continue,
                        }
                    } else {
                        if !matcher.try_match(prep, &work, &param_vals, root) {
                            continue;
                        }
                        std::slice::from_ref(&matcher.slots)
                    };
                    report.matched += 1;
                    if rewrites >= options.max_rewrites {
                        stop = StopReason::RewriteLimit;
                        break;
                    }
                    match rewriter.apply(&mut work, prep, members, &param_vals) {
                        Ok(_) => {
                            report.fired += 1;
                            fired_now[k] = true;
                            rewrites += 1;
                            if options.fail_after_rewrites.is_some_and(|n| rewrites >= n) {
                                return Err(ApplyError::DebugFailure(format!(
                                    "debug hook: failing on purpose after {rewrites} rewrites"
                                )));
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
                }
                report.time_ms += rule_start.elapsed().as_secs_f64() * 1e3;
                if stop.is_limit() {
                    limit = Some((stop, rule.name.clone()));
                    break 'iterations;
                }
            }
            if !fired_now.iter().any(|&f| f) {
                break;
            }
            if iterations == max_iterations {
                stop = StopReason::IterationCap;
                still_firing = phase
                    .rules
                    .iter()
                    .zip(&fired_now)
                    .filter(|(_, &f)| f)
                    .map(|(&r, _)| program.rules[r].name.clone())
                    .collect();
            }
        }
        if let (Some(ex), None) = (&options.explain, &limit) {
            for (k, records) in phase_misses {
                if !(ex.only_unfired && reports[k].fired > 0) {
                    near_misses.extend(records);
                }
            }
        }
        phases.push(PhaseReport {
            name: phase.name.clone(),
            iterations,
            max_iterations,
            stop,
            still_firing,
            rules: reports,
            time_ms: phase_start.elapsed().as_secs_f64() * 1e3,
        });
        if limit.is_some() {
            break;
        }
    }

    let nodes_after = work.live_count();
    let ops_after = work.op_counts();
    let out = work.into_graph(registry).map_err(ApplyError::InvalidResult)?;
    let params_report = program
        .params
        .iter()
        .zip(&param_vals)
        .map(|(p, v)| (p.name.clone(), v.to_json().unwrap_or(Value::Null)))
        .collect();
    let capped = phases.iter().any(|p| p.stop == StopReason::IterationCap);
    let (stop, stopped_in_rule) = match limit {
        Some((reason, rule)) => (reason, Some(rule)),
        None if capped => (StopReason::IterationCap, None),
        None => (StopReason::Fixpoint, None),
    };
    let report = Report {
        nodes_before,
        nodes_after,
        ops_before,
        ops_after,
        params: params_report,
        gates: gates_seen,
        phases,
        stop,
        stopped_in_rule,
        rewrites,
        time_ms: start.elapsed().as_secs_f64() * 1e3,
        near_misses,
    };
    Ok((out, report))
}
