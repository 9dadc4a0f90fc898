//! Smoke test of the graph contract: load the BERT attention fixture, order it, write it back.

use rlx_rules_core::graph::Graph;
use rlx_rules_core::registry::Registry;

#[test]
fn bert_attention_fixture_loads_orders_and_round_trips() {
    let text = include_str!("fixtures/bert_attention.json");
    let (g, warnings) = Graph::from_json_str(text, Registry::builtin()).expect("loads");
    assert!(warnings.is_empty(), "{warnings:?}");
    let ids: Vec<u64> = g.nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![0, 1, 2, 3, 5, 6, 7, 8, 9, 4, 10, 11, 12]);
    let out = g.to_json_string();
    let (g2, _) = Graph::from_json_str(&out, Registry::builtin()).expect("reloads");
    assert_eq!(g, g2);
    let (g3, _) = Graph::from_json_str(&g.to_json_string_pretty(), Registry::builtin()).expect("reloads pretty");
    assert_eq!(g, g3);
}
