//! The lean node model: loaded nodes share their op, dtype, shape and field keys; fields behave as a map.

use rlx_rules_core::graph::{Fields, Graph, Node};
use rlx_rules_core::registry::Registry;
use serde_json::{json, Map};

#[test]
fn loaded_nodes_share_op_dtype_shape_and_attribute_keys() {
    let text = r#"{"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Input", "shape": [2, "n"], "dtype": "f32"},
        {"id": 1, "op": "Relu", "inputs": [0], "shape": [2, "n"], "dtype": "f32", "attrs": {"k": 1}},
        {"id": 2, "op": "Relu", "inputs": [1], "shape": [2, "n"], "dtype": "f32", "attrs": {"k": 2}}],
        "outputs": [2]}"#;
    let g = Graph::from_json_str(text, Registry::builtin()).unwrap().0;
    let (a, b, c) = (&g.nodes[0], &g.nodes[1], &g.nodes[2]);
    assert!(std::ptr::eq(a.shape.as_deref().unwrap(), c.shape.as_deref().unwrap()));
    assert!(std::ptr::eq(a.dtype.as_deref().unwrap(), c.dtype.as_deref().unwrap()));
    assert!(std::ptr::eq(b.op.as_str(), c.op.as_str()));
    let (kb, kc) = (b.attrs.keys().next().unwrap(), c.attrs.keys().next().unwrap());
    assert!(std::ptr::eq(kb.as_str(), kc.as_str()));
    assert_eq!(b.attrs["k"], json!(1));
    assert!(a.attrs.is_empty() && a.extra.is_empty());
}

#[test]
fn fields_compare_as_maps_and_insert_in_place() {
    let mut one: Map<String, _> = Map::new();
    one.insert("a".into(), json!(1));
    one.insert("b".into(), json!([2]));
    let mut two = Map::new();
    two.insert("b".into(), json!([2]));
    two.insert("a".into(), json!(1));
    let (mut f, g) = (Fields::from(one), Fields::from(two));
    assert_eq!(f, g);
    assert_eq!(f.insert("a", json!(3)), Some(json!(1)));
    assert_ne!(f, g);
    assert_eq!(f.insert("c", json!(null)), None);
    let keys: Vec<&str> = f.keys().map(|k| k.as_str()).collect();
    assert_eq!(keys, ["a", "b", "c"]);
    assert_eq!(serde_json::to_string(&f).unwrap(), r#"{"a":3,"b":[2],"c":null}"#);
    assert_eq!(f.to_map().len(), 3);
    assert!(Fields::from(Map::new()).is_empty() && Fields::new() == Fields::default());
}

#[test]
fn a_node_is_small() {
    // The point of the model (issue 16): at a million nodes every byte here is a megabyte.
    assert!(std::mem::size_of::<Node>() <= 96, "{}", std::mem::size_of::<Node>());
}
