//! The matcher's direct guard checks agree with the expression evaluator: a check holds exactly when its
//! guard evaluates to true, on every binding of a small graph with shared, repeated, symbolic and missing data.

use rlx_rules_core::expr::Env;
use rlx_rules_core::graph::{Dim, Graph, Node, Shape};
use rlx_rules_core::prepared::Check;
use rlx_rules_core::program::{BinOp, Builtin, Expr};
use rlx_rules_core::workgraph::WorkGraph;
use serde_json::{json, Value};

fn node(id: u64, op: &str, inputs: &[u64], shape: Option<Vec<Dim>>, attrs: Value) -> Node {
    let mut n = Node::new(id, op);
    n.inputs = inputs.into();
    n.shape = shape.map(Shape::from);
    n.attrs = attrs.as_object().cloned().unwrap_or_default().into();
    n
}

/// Nodes with no shape, static and symbolic shapes of several ranks, attributes of each JSON kind, a node read
/// twice by one consumer, a node with three consumers, and graph outputs.
fn graph() -> Graph {
    let s = |d: &[i64]| Some(d.iter().map(|&k| Dim::Static(k)).collect::<Vec<_>>());
    let sym = Some(vec![Dim::Symbolic("batch".into()), Dim::Static(8)]);
    let mut g = Graph::new(None);
    g.nodes = vec![
        node(0, "Input", &[], sym.clone(), json!({})),
        node(1, "Param", &[], s(&[4]), json!({})),
        node(2, "Param", &[], None, json!({})),
        node(3, "Add", &[0, 0], sym, json!({"axis": 1, "mode": "x"})),
        node(4, "Mul", &[3, 1], s(&[4, 8]), json!({"axis": 1.0, "mode": null, "list": [1, 2]})),
        node(5, "Relu", &[3], s(&[4, 8]), json!({"axis": -1})),
        node(6, "Relu", &[3], s(&[]), json!({"mode": "x"})),
        node(7, "Add", &[4, 5], s(&[4, 8]), json!({})),
    ];
    g.outputs = vec![6, 7, 7];
    g
}

fn call(b: Builtin, slots: &[usize]) -> Expr {
    Expr::Call(b, slots.iter().map(|&s| Expr::Slot(s)).collect())
}

fn bin(op: BinOp, l: Expr, r: Expr) -> Expr {
    Expr::Bin(op, Box::new(l), Box::new(r))
}

fn attr(key: &str, slot: usize) -> Expr {
    Expr::Attr(key.into(), Box::new(Expr::Slot(slot)))
}

/// Guards of every shape the checks cover, over slots 0 and 1.
fn guards() -> Vec<Expr> {
    let cmps = [BinOp::Eq, BinOp::Ne, BinOp::Lt, BinOp::Le, BinOp::Gt, BinOp::Ge];
    let mut guards = Vec::new();
    for op in cmps {
        for n in [0, 1, 2, 3] {
            guards.push(bin(op, call(Builtin::Uses, &[0]), Expr::Lit(json!(n))));
            guards.push(bin(op, call(Builtin::Rank, &[1]), Expr::Lit(json!(n))));
        }
    }
    guards.push(Expr::Not(Box::new(call(Builtin::IsOutput, &[0]))));
    guards.push(Expr::Not(Box::new(call(Builtin::IsOutput, &[0, 1]))));
    for lit in [json!(1), json!(1.0), json!(-1), json!("x"), json!(null), json!(true), json!([1, 2]), json!({"a": 1})] {
        for key in ["axis", "mode", "list", "absent"] {
            guards.push(bin(BinOp::Eq, attr(key, 0), Expr::Lit(lit.clone())));
            guards.push(bin(BinOp::Ne, attr(key, 1), Expr::Lit(lit.clone())));
        }
    }
    guards.push(bin(BinOp::Eq, call(Builtin::Shape, &[0]), call(Builtin::Shape, &[1])));
    // An attribute against integer arithmetic: ranks (some nodes have none, one is symbolic), attributes of every
    // kind (a float, a string, a missing one), an overflow.
    let int = |n: i64| Expr::Lit(json!(n));
    for key in ["axis", "mode", "absent"] {
        for op in [BinOp::Eq, BinOp::Ne] {
            guards.push(bin(op, attr(key, 0), bin(BinOp::Sub, call(Builtin::Rank, &[1]), int(1))));
            guards.push(bin(op, attr(key, 1), bin(BinOp::Mul, attr("axis", 0), attr(key, 1))));
            guards.push(bin(op, attr(key, 0), bin(BinOp::Add, attr("axis", 1), bin(BinOp::Mul, int(2), call(Builtin::Rank, &[0])))));
            guards.push(bin(op, attr(key, 0), bin(BinOp::Mul, attr("axis", 1), int(i64::MAX))));
            guards.push(bin(op, attr(key, 1), bin(BinOp::Sub, int(i64::MIN), attr("axis", 0))));
            guards.push(bin(op, attr(key, 0), call(Builtin::Rank, &[1])));
        }
    }
    guards
}

#[test]
fn every_direct_check_agrees_with_the_evaluator() {
    let g = graph();
    let work = WorkGraph::borrowed(&g);
    let mut checked = 0;
    for guard in guards() {
        let check = Check::of(&guard).unwrap_or_else(|| panic!("no direct form for {guard:?}"));
        for a in 0..g.nodes.len() {
            for b in 0..g.nodes.len() {
                let slots = [a, b];
                let evaluated = Env::new(&work, &slots, &[]).truth(&guard) == Ok(true);
                assert_eq!(check.holds(&work, &slots, &[]), evaluated, "{guard:?} at nodes {a}, {b}");
                checked += 1;
            }
        }
    }
    assert!(checked > 5000);
}

#[test]
fn other_guards_keep_the_evaluator() {
    // A float literal, an attribute against a division or a float, and `is_output` not negated have no direct form.
    let kept = [
        bin(BinOp::Eq, call(Builtin::Uses, &[0]), Expr::Lit(json!(1.0))),
        bin(BinOp::Eq, attr("axis", 0), bin(BinOp::Div, call(Builtin::Rank, &[0]), Expr::Lit(json!(1)))),
        bin(BinOp::Eq, attr("axis", 0), bin(BinOp::Sub, call(Builtin::Rank, &[0]), Expr::Lit(json!(1.5)))),
        call(Builtin::IsOutput, &[0]),
        bin(BinOp::Lt, attr("axis", 0), Expr::Lit(json!(2))),
    ];
    for guard in kept {
        assert!(Check::of(&guard).is_none(), "{guard:?}");
    }
}
