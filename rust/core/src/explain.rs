//! Why a rule did not fire, as data: for each candidate root, how far the pattern matched, and each
//! failed check with its source location and the values involved. Runs only when asked.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::expr::{Env, Val};
use crate::graph::NodeId;
use crate::matcher::{Attempt, Matcher};
use crate::prepared::Prepared;
use crate::program::{BinOp, Builtin, Expr, Instr, Program, Quantifier, Rule};
use crate::workgraph::WorkGraph;

/// What to explain.
#[derive(Clone, Debug, Default)]
pub struct ExplainOptions {
    /// Only this rule (None: every rule).
    pub rule: Option<String>,
    /// Only candidates whose match binds this node id (None: every candidate).
    pub node: Option<NodeId>,
    /// Keep every record, not just the best one per rule.
    pub all: bool,
    /// Only rules that fired zero times (what `apply --explain` adds to its report).
    pub only_unfired: bool,
}

/// One failed check.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FailedCheck {
    /// Source location in the .rlxr file (empty for a structural check).
    pub loc: String,
    /// The check as written, or a description of the structural check.
    pub check: String,
    /// The values involved.
    pub detail: String,
}

/// Why one rule did not fire at one candidate root (or at all, when a gate is closed).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MissRecord {
    pub rule: String,
    pub phase: String,
    pub root: Option<NodeId>,
    pub root_label: Option<String>,
    /// Whether the whole pattern structure matched, so that only guards failed.
    pub structure_matched: bool,
    /// Checks passed out of all (a measure of how near the miss is).
    pub progress: usize,
    pub total: usize,
    /// Binding name → node, for the bindings made.
    pub bindings: BTreeMap<String, String>,
    /// The failed checks, first one first.
    pub failed: Vec<FailedCheck>,
}

impl MissRecord {
    fn rank(&self) -> (bool, usize, std::cmp::Reverse<usize>) {
        (self.structure_matched, self.progress, std::cmp::Reverse(self.failed.len()))
    }
}

fn label(graph: &WorkGraph, i: usize) -> String {
    let n = graph.node(i);
    let shape = n
        .shape
        .as_ref()
        .map(|s| format!(" [{}]", s.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")))
        .unwrap_or_default();
    match &n.name {
        Some(name) => format!("%{} {:?} {}{}", n.id, name, n.op, shape),
        None => format!("%{} {}{}", n.id, n.op, shape),
    }
}

fn cmp_symbol(op: BinOp) -> &'static str {
    match op {
        BinOp::Eq => "==",
        BinOp::Ne => "!=",
        BinOp::Lt => "<",
        BinOp::Le => "<=",
        BinOp::Gt => ">",
        BinOp::Ge => ">=",
        _ => "?",
    }
}

/// The values behind a failed condition, such as `uses = 4 (consumers %12 %13 %14 %57), expected == 3`.
pub fn describe(env: &Env<'_>, program: &Program, e: &Expr) -> String {
    let value = |x: &Expr| match env.eval(x) {
        Ok(Val::Node(i)) => label(env.graph, i),
        Ok(v) => v.to_string(),
        Err(err) => format!("<{}>", err.0),
    };
    let context = |x: &Expr| -> String {
        match x {
            Expr::Call(Builtin::Uses, args) => match env.eval(&args[0]) {
                Ok(Val::Node(i)) => {
                    let mut consumers: Vec<usize> = env.graph.consumers(i).collect();
                    consumers.sort_unstable();
                    consumers.dedup();
                    let ids: Vec<String> = consumers.iter().map(|&c| format!("%{}", env.graph.node(c).id)).collect();
                    format!(" (consumers {})", ids.join(" "))
                }
                _ => String::new(),
            },
            Expr::Param(p) => {
                let decl = &program.params[*p];
                match &decl.env {
                    Some(var) => format!(" (param {}; env {var}, default {})", decl.name, decl.default),
                    None => format!(" (param {}, default {})", decl.name, decl.default),
                }
            }
            _ => String::new(),
        }
    };
    match e {
        Expr::Bin(op @ (BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge), l, r) => {
            format!("{}{} {} {}{} is false", value(l), context(l), cmp_symbol(*op), value(r), context(r))
        }
        Expr::Not(inner) => match inner.as_ref() {
            Expr::Call(Builtin::IsOutput, args) => {
                let outs: Vec<String> = args
                    .iter()
                    .filter_map(|a| match env.eval(a) {
                        Ok(Val::Node(i)) if env.graph.is_output(i) => Some(label(env.graph, i)),
                        _ => None,
                    })
                    .collect();
                format!("graph outputs: {}", outs.join(", "))
            }
            other => format!("{} is true", value(other)),
        },
        Expr::In { value: v, negated, .. } => {
            format!("{} is {}in the set", value(v), if *negated { "" } else { "not " })
        }
        other => match env.eval(other) {
            Err(err) => format!("cannot be evaluated: {}", err.0),
            Ok(v) => format!("is {v}"),
        },
    }
}

fn structural(rule: &Rule, graph: &WorkGraph, attempt: &Attempt, pc: usize) -> FailedCheck {
    let slot_label = |s: usize| {
        let i = attempt.slots[s];
        let bound = if i == usize::MAX { "unbound".to_string() } else { label(graph, i) };
        format!("{} = {bound}", rule.slot_names[s])
    };
    let check = match &rule.code[pc] {
        Instr::Op { slot, ops } => format!("{} must be {}", slot_label(*slot), ops.join("|")),
        Instr::Arity { slot, n } => format!(
            "{} must have {n} inputs, has {}",
            slot_label(*slot),
            attempt.slots.get(*slot).filter(|&&i| i < graph.len()).map_or(0, |&i| graph.inputs(i).len())
        ),
        Instr::Input { slot, index, to } => {
            format!("input {index} of {} must be {}", slot_label(*slot), rule.slot_names[*to])
        }
        Instr::Same { slot, index, same_as } => format!(
            "input {index} of {} must be the same node as {}",
            slot_label(*slot),
            slot_label(*same_as)
        ),
        Instr::Distinct { .. } => "the pattern's op bindings must be distinct nodes".to_string(),
        Instr::Commute { .. } | Instr::Guard { .. } => "check".to_string(),
    };
    FailedCheck { loc: rule.loc.clone(), check, detail: "pattern structure".to_string() }
}

/// Explain `rule` at every live candidate root of `graph`.
pub fn explain_rule(program: &Program, rule: &Rule, phase: &str, graph: &WorkGraph, params: &[Val], options: &ExplainOptions) -> Vec<MissRecord> {
    let mut matcher = Matcher::new();
    let prep = Prepared::new(rule, graph);
    let mut records = Vec::new();
    let mut candidates: Vec<usize> = rule.root_ops.iter().flat_map(|op| graph.candidates(op).iter().map(|&i| i as usize)).collect();
    candidates.retain(|&i| graph.is_alive(i));
    candidates.sort_by_key(|&i| graph.order_key(i));
    for root in candidates {
        let attempt = matcher.explain_at(&prep, graph, params, root);
        if attempt.structure_matched && attempt.failures.is_empty() {
            if let Some(record) = explain_group_at(program, &prep, phase, graph, params, root, &mut matcher, options) {
                records.push(record);
            }
            continue; // otherwise a match (refused as unsafe, or a group's later member): the report covers it
        }
        let bound: Vec<usize> = attempt.slots.iter().copied().filter(|&i| i != usize::MAX).collect();
        if let Some(node) = options.node {
            if !bound.iter().any(|&i| graph.node(i).id == node) {
                continue;
            }
        }
        let env = Env::new(graph, &attempt.slots, params);
        let failed = attempt
            .failures
            .iter()
            .map(|&pc| match &rule.code[pc] {
                Instr::Guard { expr, loc, text } => FailedCheck { loc: loc.clone(), check: text.clone(), detail: describe(&env, program, expr) },
                _ => structural(rule, graph, &attempt, pc),
            })
            .collect();
        let bindings = attempt
            .slots
            .iter()
            .enumerate()
            .filter(|(_, &i)| i != usize::MAX)
            .map(|(s, &i)| (rule.slot_names[s].clone(), label(graph, i)))
            .collect();
        records.push(MissRecord {
            rule: rule.name.clone(),
            phase: phase.to_string(),
            root: Some(graph.node(root).id),
            root_label: Some(label(graph, root)),
            structure_matched: attempt.structure_matched,
            progress: if attempt.structure_matched {
                rule.code.len() - attempt.failures.len()
            } else {
                attempt.progress + 1 - attempt.failures.len()
            },
            total: rule.code.len(),
            bindings,
            failed,
        });
    }
    records.sort_by_key(|r| std::cmp::Reverse(r.rank()));
    if !options.all {
        records.truncate(1);
    }
    records
}

/// A group rule whose member pattern matched at `root`: the group's size and guards, if any fail.
#[allow(clippy::too_many_arguments)]
fn explain_group_at(program: &Program, prep: &Prepared, phase: &str, graph: &WorkGraph, params: &[Val], root: usize,
                    matcher: &mut Matcher, options: &ExplainOptions) -> Option<MissRecord> {
    let rule = prep.rule;
    let group = rule.group.as_ref()?;
    let (members, size_ok, failed_guards) = matcher.explain_group(prep, graph, params, root)?;
    if size_ok && failed_guards.is_empty() {
        return None;
    }
    if let Some(node) = options.node {
        if !members.iter().flatten().any(|&i| i != usize::MAX && graph.node(i).id == node) {
            return None;
        }
    }
    let mut failed = Vec::new();
    let ids: Vec<String> = members.iter().map(|m| format!("%{}", graph.node(m[0]).id)).collect();
    if !size_ok {
        failed.push(FailedCheck {
            loc: rule.loc.clone(),
            check: format!("group of {} to {} {}", group.min, group.max, rule.root_ops.join("|")),
            detail: format!("{} members: {}", members.len(), ids.join(" ")),
        });
    }
    let env = Env::for_group(graph, &members, &group.per_member, params);
    for k in failed_guards {
        if let Instr::Guard { expr, loc, text } = &rule.group_guards[k] {
            failed.push(FailedCheck { loc: loc.clone(), check: text.clone(), detail: describe(&env, program, expr) });
        }
    }
    let bindings = rule
        .slot_names
        .iter()
        .enumerate()
        .map(|(s, name)| {
            let nodes: Vec<String> = members.iter().map(|m| format!("%{}", graph.node(m[s]).id)).collect();
            (name.clone(), nodes.join(" "))
        })
        .collect();
    Some(MissRecord {
        rule: rule.name.clone(),
        phase: phase.to_string(),
        root: Some(graph.node(root).id),
        root_label: Some(label(graph, root)),
        structure_matched: true,
        progress: rule.code.len() + rule.group_guards.len() + 1 - failed.len(),
        total: rule.code.len() + rule.group_guards.len() + 1,
        bindings,
        failed,
    })
}

/// Why a closed gate is closed: per scanned node, the first failing part, with its values.
pub fn explain_gate(program: &Program, gate: usize, rule: &Rule, phase: &str, graph: &WorkGraph, params: &[Val]) -> MissRecord {
    let g = &program.gates[gate];
    let conjuncts = split_and(&g.expr);
    // The first failing part of the gate for one scanned node (or for the plain expression).
    let first_failure = |slots: &[usize]| -> Option<String> {
        let env = Env::new(graph, slots, params);
        conjuncts.iter().find(|part| env.truth(part) != Ok(true)).map(|part| describe(&env, program, part))
    };
    let mut details = Vec::new();
    match &g.scan {
        None => details.extend(first_failure(&[])),
        Some((quantifier, op)) => {
            let nodes: Vec<usize> = graph.candidates(op).iter().map(|&i| i as usize).filter(|&i| graph.is_alive(i)).collect();
            if nodes.is_empty() {
                details.push(format!("the graph has no {op} node"));
            }
            for i in nodes {
                if let Some(why) = first_failure(&[i]) {
                    details.push(format!("{}: {why}", label(graph, i)));
                    if *quantifier == Quantifier::All {
                        break;
                    }
                }
            }
        }
    }
    MissRecord {
        rule: rule.name.clone(),
        phase: phase.to_string(),
        root: None,
        root_label: None,
        structure_matched: false,
        progress: 0,
        total: rule.code.len(),
        bindings: BTreeMap::new(),
        failed: vec![FailedCheck { loc: g.loc.clone(), check: format!("gate {}: {}", g.name, g.text), detail: details.join("; ") }],
    }
}

fn split_and(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::Bin(BinOp::And, l, r) => {
            let mut parts = split_and(l);
            parts.extend(split_and(r));
            parts
        }
        other => vec![other],
    }
}
