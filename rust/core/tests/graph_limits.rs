//! Limits of the graph loader: more nodes than max_nodes is a TooLarge error, checked without keeping them.

use rlx_rules_core::graph::{Graph, GraphErrorKind, DEFAULT_MAX_NODES};
use rlx_rules_core::registry::Registry;

fn graph_of(n: usize) -> String {
    let mut nodes = vec![r#"{"id": 0, "op": "Input", "shape": [1], "dtype": "f32"}"#.to_string()];
    for i in 1..n {
        nodes.push(format!(r#"{{"id": {i}, "op": "Relu", "inputs": [{}], "shape": [1], "dtype": "f32"}}"#, i - 1));
    }
    format!(r#"{{"format": "rlx-graph", "version": 1, "nodes": [{}], "outputs": [{}]}}"#, nodes.join(", "), n - 1)
}

#[test]
fn a_graph_at_the_limit_loads_and_one_over_is_too_large() {
    let reg = Registry::builtin();
    let (g, _) = Graph::from_json_slice_max(graph_of(100).as_bytes(), reg, 100).expect("at the limit");
    assert_eq!(g.nodes.len(), 100);
    let e = Graph::from_json_slice_max(graph_of(101).as_bytes(), reg, 100).unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::TooLarge);
    assert!(e.message.contains("more than 100 nodes"), "{}", e.message);
}

#[test]
fn the_limit_is_checked_before_the_rest_is_validated_but_json_syntax_still_is() {
    let reg = Registry::builtin();
    // nodes past the limit are skipped unread: a dangling input there is not reported, the size is
    let text = graph_of(5).replace(r#""inputs": [3]"#, r#""inputs": [999]"#);
    let e = Graph::from_json_slice_max(text.as_bytes(), reg, 3).unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::TooLarge);
    // broken JSON after the limit is still a JSON error
    let text = graph_of(5);
    let e = Graph::from_json_slice_max(&text.as_bytes()[..text.len() - 20], reg, 3).unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::Json);
}

#[test]
fn the_default_limit_is_ten_million_and_trailing_text_is_refused() {
    assert_eq!(DEFAULT_MAX_NODES, 10_000_000);
    let reg = Registry::builtin();
    let text = format!("{} x", graph_of(2));
    let e = Graph::from_json_slice(text.as_bytes(), reg).unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::Json);
    assert!(Graph::from_json_slice(format!("{}\n  ", graph_of(2)).as_bytes(), reg).is_ok());
}
