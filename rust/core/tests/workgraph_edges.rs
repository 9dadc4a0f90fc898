//! The work graph's edge bookkeeping: consumer lists, distinct uses and the result's order stay exact through
//! removals, additions and redirects, including nodes that read the same input twice and hubs.

use rlx_rules_core::graph::{Graph, Node};
use rlx_rules_core::registry::Registry;
use rlx_rules_core::workgraph::WorkGraph;

fn node(id: u64, op: &str, inputs: &[u64]) -> Node {
    let mut n = Node::new(id, op);
    n.inputs = inputs.into();
    n
}

/// x, then `k` consumers Relu(x) and one Add(x, x), all outputs.
fn hub(k: u64) -> Graph {
    let mut g = Graph::new(None);
    g.nodes.push(node(0, "Input", &[]));
    for i in 1..=k {
        g.nodes.push(node(i, "Relu", &[0]));
    }
    g.nodes.push(node(k + 1, "Add", &[0, 0]));
    g.outputs = (1..=k + 1).collect();
    g
}

fn sorted(it: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut v: Vec<usize> = it.collect();
    v.sort_unstable();
    v
}

#[test]
fn consumers_and_uses_follow_removals_and_duplicate_inputs() {
    let mut w = WorkGraph::new(hub(5));
    assert_eq!(w.consumer_count(0), 7, "five Relus and the Add twice");
    assert_eq!(w.uses(0), 6, "distinct consumers");
    w.remove(6); // the Add, which read x twice
    assert_eq!((w.consumer_count(0), w.uses(0)), (5, 5));
    w.remove(2);
    w.remove(4);
    assert_eq!(sorted(w.consumers(0)), [1, 3, 5]);
    assert_eq!(w.uses(0), 3);
    assert_eq!(w.live_count(), 4);
}

#[test]
fn a_redirect_moves_every_consumer_and_output_use_to_the_new_node() {
    // 0 -> 1 (Relu) -> 2 (Add(1, 1)), output 2; replace node 1 by a Gelu with the same id
    let mut g = Graph::new(None);
    g.nodes = vec![node(0, "Input", &[]), node(1, "Relu", &[0]), node(2, "Add", &[1, 1])];
    g.outputs = vec![2, 1];
    let mut w = WorkGraph::new(g);
    let new = w.add(node(1, "Gelu", &[0]), &[0], w.order_key(1).0);
    w.remove(1);
    w.redirect(1, new);
    assert_eq!((w.consumer_count(new), w.uses(new)), (2, 1));
    assert_eq!(w.inputs(2), [new as u32, new as u32]);
    assert!(w.is_output(new) && !w.is_output(1));
    assert_eq!(w.uses(0), 1, "the new node reads x; the removed one no longer does");
    let out = w.into_graph(Registry::builtin()).unwrap();
    let ops: Vec<&str> = out.nodes.iter().map(|n| n.op.as_str()).collect();
    assert_eq!(ops, ["Input", "Gelu", "Add"], "the replacement is written where the root was");
}

#[test]
fn removing_the_consumers_of_a_hub_in_any_order_keeps_the_lists_exact() {
    let k = 2000;
    let mut w = WorkGraph::new(hub(k));
    // from the back, then every other one from the front
    for i in (k / 2 + 1..=k).rev() {
        w.remove(i as usize);
    }
    for i in (1..=k / 2).step_by(2) {
        w.remove(i as usize);
    }
    let left: Vec<usize> = (2..=k as usize / 2).step_by(2).chain([k as usize + 1, k as usize + 1]).collect();
    assert_eq!(sorted(w.consumers(0)), left);
    assert_eq!(w.uses(0), k as usize / 4 + 1);
}

#[test]
fn a_borrowed_graph_is_left_as_it_was() {
    let g = hub(3);
    let mut w = WorkGraph::borrowed(&g);
    w.remove(2);
    let out = w.into_graph(Registry::builtin());
    // node 2 was an output: the result is refused, and the input graph is untouched
    assert!(out.is_err());
    assert_eq!(g, hub(3));
}

#[test]
fn an_unchecked_graph_with_a_missing_input_id_builds_without_panicking() {
    // Ids 0..n in order take the fast path (an id is its position); an input id past the nodes must not index out
    // of bounds there, nor with sparse ids.
    for base in [0, 1000] {
        let mut g = Graph::new(None);
        g.nodes = vec![node(base, "Input", &[]), node(base + 1, "Relu", &[base + 7])];
        g.outputs = vec![base + 1];
        let w = WorkGraph::new(g);
        assert_eq!(w.live_count(), 2);
        assert_eq!(w.inputs(1).len(), 1);
    }
}

#[test]
fn ids_that_stop_being_positions_partway_are_indexed_instead() {
    // Ids 0, 1, 2 are their positions; 10 is not, so the build falls back to an id index for every node.
    let mut g = Graph::new(None);
    g.nodes = vec![
        node(0, "Input", &[]),
        node(1, "Relu", &[0]),
        node(2, "Relu", &[0]),
        node(10, "Add", &[1, 2]),
        node(4, "Add", &[10, 10]),
    ];
    g.outputs = vec![4];
    let mut w = WorkGraph::new(g.clone());
    assert_eq!(w.inputs(3), [1, 2]);
    assert_eq!(w.inputs(4), [3, 3], "id 10 is position 3, not the missing position 10");
    assert_eq!((w.consumer_count(3), w.uses(3)), (2, 1));
    assert_eq!((w.id(3), w.id(4)), (10, 4));
    assert!(w.is_output(4) && !w.is_output(3));
    assert_eq!(w.op_counts().get("Relu"), Some(&2));
    // A new node gets an id past the largest one, and the per-op counts follow every edit.
    assert_eq!(w.fresh_id(), 11);
    let sig = w.add(node(1, "Sigmoid", &[0]), &[0], w.order_key(1).0);
    w.remove(1);
    w.redirect(1, sig);
    let counts = w.op_counts();
    assert_eq!((counts.get("Relu"), counts.get("Sigmoid"), counts.get("Add")), (Some(&1), Some(&1), Some(&2)));
    let out = w.into_graph(Registry::builtin()).unwrap();
    let ids: Vec<(u64, &str)> = out.nodes.iter().map(|n| (n.id, n.op.as_str())).collect();
    assert_eq!(ids, [(0, "Input"), (1, "Sigmoid"), (2, "Relu"), (10, "Add"), (4, "Add")]);
    assert_eq!(out.nodes[3].inputs.as_slice(), [1, 2]);
}
