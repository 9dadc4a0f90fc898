//! The rule engine without Python: the compiled standard library (a fixture) applied to graphs.

use std::collections::BTreeMap;

use std::time::Duration;

use rlx_rules_core::apply::{apply, apply_borrowed, time_budget_from_secs, ApplyError, ApplyOptions, StopReason};
use rlx_rules_core::graph::Graph;
use rlx_rules_core::program::{Program, ProgramErrorKind};
use rlx_rules_core::registry::Registry;
use serde_json::{json, Map, Value};

const PROGRAM: &str = include_str!("fixtures/default_program.json");
const BERT_2L: &str = include_str!("fixtures/bert_2l.graph.json");

fn program() -> Program {
    Program::from_json_str(PROGRAM).expect("fixture program loads")
}

fn load(text: &str) -> Graph {
    Graph::from_json_str(text, Registry::builtin()).expect("graph loads").0
}

fn run(graph: Graph, params: Value) -> Result<(Graph, rlx_rules_core::apply::Report), ApplyError> {
    let params: Map<String, Value> = params.as_object().cloned().unwrap_or_default();
    apply(graph, &program(), &params, Registry::builtin(), &ApplyOptions::default())
}

fn counts(g: &Graph) -> BTreeMap<String, usize> {
    let mut c = BTreeMap::new();
    for n in &g.nodes {
        *c.entry(n.op.to_string()).or_insert(0) += 1;
    }
    c
}

#[test]
fn bert_two_layers_fuse_to_attention_blocks_and_residual_norms() {
    let (out, report) = run(load(BERT_2L), json!({})).unwrap();
    let c = counts(&out);
    assert_eq!(c.get("FusedAttentionBlock"), Some(&2));
    assert_eq!(c.get("FusedMatMulBiasAct"), Some(&4));
    assert_eq!(c.get("MatMul"), None);
    assert_eq!(c.get("Narrow"), None);
    assert_eq!(report.nodes_before, 60);
    assert_eq!(c.get("FusedResidualLN"), Some(&4));
    assert_eq!(report.nodes_after, 36);
    assert_eq!(report.rewrites, 14);
    assert!(report.phases.iter().all(|p| p.stop == StopReason::Fixpoint));
    assert_eq!(report.gates.get("small_batch_seq"), Some(&true));
    // the fused block's inputs in the seed pass's order
    let block = out.nodes.iter().find(|n| n.op == "FusedAttentionBlock").unwrap();
    let names: Vec<_> = block.inputs.iter().map(|id| out.node(*id).unwrap().name.clone().unwrap_or_default()).collect();
    assert_eq!(names, ["hidden", "layer0.qkv_w", "layer0.out_w", "mask", "layer0.qkv_b", "layer0.out_b"]);
    assert_eq!(block.attrs["num_heads"], json!(4));
    assert_eq!(block.attrs["has_rope"], json!(false));
}

#[test]
fn output_is_deterministic() {
    let a = run(load(BERT_2L), json!({})).unwrap().0.to_json_string();
    for _ in 0..3 {
        assert_eq!(run(load(BERT_2L), json!({})).unwrap().0.to_json_string(), a);
    }
}

#[test]
fn threshold_parameter_closes_the_gate() {
    // batch 1 x seq 8 = 8: open at 8, closed at 7
    let (open, _) = run(load(BERT_2L), json!({"RLX_FUSE_ATTN_THRESHOLD": 8})).unwrap();
    assert_eq!(counts(&open).get("FusedAttentionBlock"), Some(&2));
    let (closed, report) = run(load(BERT_2L), json!({"RLX_FUSE_ATTN_THRESHOLD": 7})).unwrap();
    assert_eq!(counts(&closed).get("FusedAttentionBlock"), None);
    assert_eq!(counts(&closed).get("Attention"), Some(&2));
    assert_eq!(report.gates.get("small_batch_seq"), Some(&false));
}

#[test]
fn bad_parameters_are_errors() {
    assert!(matches!(run(load(BERT_2L), json!({"RLX_FUSE_ATTN_THRESHOLD": "x"})), Err(ApplyError::ParamType(_))));
    assert!(matches!(run(load(BERT_2L), json!({"NOPE": 1})), Err(ApplyError::UnknownParam(_))));
}

#[test]
fn a_graph_output_inside_the_chain_blocks_the_fusion() {
    let mut doc: Value = serde_json::from_str(BERT_2L).unwrap();
    // make layer 0's attention node a graph output
    let attn_id = doc["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "layer0.attn").unwrap()["id"].clone();
    doc["outputs"].as_array_mut().unwrap().push(attn_id);
    let (out, _) = run(load(&doc.to_string()), json!({})).unwrap();
    assert_eq!(counts(&out).get("FusedAttentionBlock"), Some(&1));
    assert_eq!(counts(&out).get("Attention"), Some(&1));
}

#[test]
fn the_failure_hook_is_an_error() {
    let opts = ApplyOptions { fail_after_rewrites: Some(1), ..Default::default() };
    let err = apply(load(BERT_2L), &program(), &Map::new(), Registry::builtin(), &opts).unwrap_err();
    assert!(matches!(err, ApplyError::DebugFailure(_)), "{err:?}");
    assert_eq!(err.kind(), "debug_failure");
}

#[test]
fn a_rewrite_limit_stops_and_returns_the_work_done() {
    let p = program();
    let (_, full) = run(load(BERT_2L), json!({})).unwrap();
    assert_eq!(full.stop, StopReason::Fixpoint);
    assert!(full.rewrites > 3);
    let opts = ApplyOptions { max_rewrites: 3, ..Default::default() };
    let (out, report) = apply(load(BERT_2L), &p, &Map::new(), Registry::builtin(), &opts).unwrap();
    assert_eq!((report.stop, report.rewrites), (StopReason::RewriteLimit, 3));
    assert_eq!(report.phases.last().unwrap().stop, StopReason::RewriteLimit);
    assert!(report.stopped_in_rule.is_some());
    assert!(out.nodes.len() < load(BERT_2L).nodes.len(), "the 3 rewrites are kept");
    assert_eq!(serde_json::to_value(&report).unwrap()["stop"], "rewrite_limit");
    // exactly enough rewrites is a fixpoint, not a limit
    let opts = ApplyOptions { max_rewrites: full.rewrites, ..Default::default() };
    let (_, report) = apply(load(BERT_2L), &p, &Map::new(), Registry::builtin(), &opts).unwrap();
    assert_eq!((report.stop, report.rewrites), (StopReason::Fixpoint, full.rewrites));
}

#[test]
fn a_spent_time_budget_stops_before_any_rewrite() {
    let opts = ApplyOptions { time_budget: Duration::ZERO, ..Default::default() };
    let (out, report) = apply(load(BERT_2L), &program(), &Map::new(), Registry::builtin(), &opts).unwrap();
    assert_eq!((report.stop, report.rewrites), (StopReason::TimeBudget, 0));
    assert_eq!(out.nodes.len(), load(BERT_2L).nodes.len());
    assert_eq!(report.phases.len(), 1, "no phase runs after the limit");
}

#[test]
fn time_budgets_in_seconds_are_clamped_or_refused() {
    assert_eq!(time_budget_from_secs(1e300), Ok(Duration::MAX));
    assert_eq!(time_budget_from_secs(f64::INFINITY), Ok(Duration::MAX));
    assert_eq!(time_budget_from_secs(1.5), Ok(Duration::from_millis(1500)));
    for bad in [-1.0, f64::NAN, f64::NEG_INFINITY] {
        assert_eq!(time_budget_from_secs(bad).unwrap_err().kind(), "bad_option");
    }
    // Duration::MAX cannot be added to an Instant: no deadline, not a panic
    let opts = ApplyOptions { time_budget: Duration::MAX, ..Default::default() };
    assert_eq!(apply(load(BERT_2L), &program(), &Map::new(), Registry::builtin(), &opts).unwrap().1.stop, StopReason::Fixpoint);
}

#[test]
fn the_callers_iteration_limit_caps_a_rule_files_max_iterations() {
    // two rules that undo each other, in a phase that allows 1000 iterations
    let flip = json!({"format": "rlx-program", "version": 1, "phases": [{"name": "flip", "max_iterations": 1000, "rules": ["a", "b"]}],
        "rules": [flip_rule("a", "Relu", "Sigmoid"), flip_rule("b", "Sigmoid", "Relu")]});
    let p = Program::from_json_str(&flip.to_string()).unwrap();
    let g = load(r#"{"format": "rlx-graph", "version": 1, "nodes": [{"id": 0, "op": "Input", "shape": [2]},
        {"id": 1, "op": "Relu", "inputs": [0], "shape": [2]}], "outputs": [1]}"#);
    let opts = ApplyOptions { max_iterations: 5, ..Default::default() };
    let (_, report) = apply(g, &p, &Map::new(), Registry::builtin(), &opts).unwrap();
    let phase = &report.phases[0];
    assert_eq!((phase.iterations, phase.max_iterations, phase.stop), (5, 5, StopReason::IterationCap));
    assert_eq!(phase.still_firing, ["a", "b"]);
    assert_eq!(report.stop, StopReason::IterationCap);
}

#[test]
fn a_graph_that_grows_is_placed_alike_whether_the_apply_owns_it_or_borrows_it() {
    // `a = Relu(x) => b = Relu(x); a => Add(b, b)` adds a node per rewrite: the result has more nodes than were
    // loaded, so the owned apply cannot place them in the loaded nodes' own array.
    let new = |name: &str, op: &str, inputs: Value, replaces: Value| {
        let of_root = |f: &str| json!({"call": f, "args": [{"slot": 0}]});
        json!({"name": name, "op": op, "inputs": inputs, "attrs": [], "shape": of_root("shape"), "dtype": of_root("dtype"),
               "replaces": replaces})
    };
    let mut rule = flip_rule("double", "Relu", "Relu");
    rule["rewrite"] = json!([new("b", "Relu", json!([{"slot": 1}]), Value::Null), new("a", "Add", json!([{"new": 0}, {"new": 0}]), json!(0))]);
    let grow = json!({"format": "rlx-program", "version": 1, "phases": [{"name": "flip", "max_iterations": 3, "rules": ["double"]}],
        "rules": [rule]});
    let p = Program::from_json_str(&grow.to_string()).unwrap();
    let text = r#"{"format": "rlx-graph", "version": 1, "nodes": [{"id": 0, "op": "Input", "shape": [2], "dtype": "f32"},
        {"id": 1, "op": "Relu", "inputs": [0], "shape": [2], "dtype": "f32"},
        {"id": 2, "op": "Relu", "inputs": [1], "shape": [2], "dtype": "f32"}], "outputs": [2]}"#;
    let opts = ApplyOptions::default();
    let (owned, report) = apply(load(text), &p, &Map::new(), Registry::builtin(), &opts).unwrap();
    let (borrowed, _) = apply_borrowed(&load(text), &p, &Map::new(), Registry::builtin(), &opts).unwrap();
    assert_eq!(report.stop, StopReason::IterationCap);
    assert!(owned.nodes.len() > 3, "the graph grew: {} nodes", owned.nodes.len());
    assert_eq!(owned.to_json_string(), borrowed.to_json_string());
}

/// `n = FROM(x) => TO(x)` as compiled rule JSON.
fn flip_rule(name: &str, from: &str, to: &str) -> Value {
    json!({"name": name, "phase": "flip", "root_ops": [from], "slots": [{"name": "n", "leaf": false}, {"name": "x", "leaf": true}],
        "code": [{"i": "op", "slot": 0, "ops": [from]}, {"i": "arity", "slot": 0, "n": 1}, {"i": "input", "slot": 0, "index": 0, "to": 1}],
        "absorb": [], "rewrite": [{"name": "n", "op": to, "inputs": [{"slot": 1}], "attrs": [], "shape": null, "dtype": null, "replaces": 0}]})
}

#[test]
fn malformed_programs_are_refused_not_run() {
    for bad in [
        "",
        "{}",
        r#"{"format": "rlx-program", "version": 2, "phases": [], "rules": []}"#,
        r#"{"format": "other", "version": 1, "phases": [], "rules": []}"#,
        r#"{"format": "rlx-program", "version": 1, "phases": [], "rules": [], "surprise": 1}"#,
    ] {
        assert!(Program::from_json_str(bad).is_err(), "accepted {bad:?}");
    }
    // a slot read before it is bound, an out-of-range absorb, and a rewrite that replaces nothing
    let base = json!({"format": "rlx-program", "version": 1, "phases": [{"name": "flip", "max_iterations": 1, "rules": ["a"]}],
        "rules": [flip_rule("a", "Relu", "Sigmoid")]});
    assert!(Program::from_json_str(&base.to_string()).is_ok());
    let mut doc = base.clone();
    doc["rules"][0]["code"][0] = json!({"i": "same", "slot": 0, "index": 0, "as": 1});
    let err = Program::from_json_str(&doc.to_string()).unwrap_err();
    assert!(err.message.contains("before it is bound") && err.kind == ProgramErrorKind::Invalid, "{err:?}");
    let mut doc = base.clone();
    doc["rules"][0]["absorb"] = json!([99]);
    assert!(Program::from_json_str(&doc.to_string()).is_err());
    let mut doc = base;
    doc["rules"][0]["rewrite"][0]["replaces"] = Value::Null;
    assert!(Program::from_json_str(&doc.to_string()).is_err());
}

#[test]
fn deeply_nested_program_expressions_are_refused() {
    let mut e = json!({"lit": true});
    for _ in 0..100 {
        e = json!({"un": "not", "e": e});
    }
    let mut doc: Value = serde_json::from_str(PROGRAM).unwrap();
    doc["rules"][1]["code"][0] = json!({"i": "guard", "expr": e});
    assert!(Program::from_json_str(&doc.to_string()).is_err());
}

#[test]
fn has_fact_reads_the_node_facts_and_malformed_facts_do_not_load() {
    // rule halves_neg: Neg(Neg(x)) -> Mul(x, 1.0) where x is [_, 4] and has the fact "halves_equal"
    let program = Program::from_json_str(include_str!("fixtures/has_fact_program.json")).expect("program loads");
    let graph = |facts: &str| {
        format!(
            r#"{{"format": "rlx-graph", "version": 1, "nodes": [
                {{"id": 0, "op": "Input", "name": "x", "shape": [2, 4], "dtype": "f32"{facts}}},
                {{"id": 1, "op": "Neg", "inputs": [0], "shape": [2, 4], "dtype": "f32"}},
                {{"id": 2, "op": "Neg", "inputs": [1], "shape": [2, 4], "dtype": "f32"}}],
               "outputs": [2]}}"#
        )
    };
    let fired = |facts: &str| {
        let (out, _) = apply(load(&graph(facts)), &program, &Map::new(), Registry::builtin(), &ApplyOptions::default())
            .expect("applies");
        counts(&out).get("Mul").copied().unwrap_or(0)
    };
    assert_eq!(fired(r#", "facts": ["halves_equal"]"#), 1);
    assert_eq!(fired(r#", "facts": ["causal_keep", "halves_equal"]"#), 1);
    assert_eq!(fired(""), 0);
    assert_eq!(fired(r#", "facts": []"#), 0);
    assert_eq!(fired(r#", "facts": ["causal_keep"]"#), 0);
    for bad in [r#", "facts": "halves_equal""#, r#", "facts": [1]"#] {
        let err = Graph::from_json_str(&graph(bad), Registry::builtin()).unwrap_err();
        assert!(err.to_string().contains("facts"), "{err}");
    }
}
