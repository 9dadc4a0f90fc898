//! Node by node: nothing read for one node carries over to the next, and strings that need escaping print as serde_json prints them.

use rlx_rules_core::graph::{Dim, Graph};
use rlx_rules_core::registry::Registry;

fn load(text: &str) -> Graph {
    Graph::from_json_str(text, Registry::builtin()).expect("loads").0
}

#[test]
fn fields_of_one_node_do_not_carry_over_to_the_next() {
    // Node 1 has every field; node 2, read right after it, has none of the optional ones.
    let text = r#"{"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Input", "name": "x", "shape": [2, "n"], "dtype": "f32"},
        {"id": 1, "op": "Softmax", "name": "s", "inputs": [0], "attrs": {"axis": -1, "note": "kept"},
         "shape": [2, "n"], "dtype": "f32", "tag": [1, 2]},
        {"id": 2, "op": "Widget", "inputs": [1]}
    ], "outputs": [2]}"#;
    let g = load(text);
    let last = &g.nodes[2];
    assert_eq!(last.id, 2);
    assert_eq!(last.name, None);
    assert_eq!(last.inputs.as_slice(), [1]);
    assert!(last.attrs.is_empty(), "attrs carried over: {:?}", last.attrs);
    assert_eq!(last.shape, None);
    assert_eq!(last.dtype, None);
    assert!(last.extra.is_empty(), "extra fields carried over: {:?}", last.extra);
    // and the full node kept all of its own
    let full = &g.nodes[1];
    assert_eq!(full.name.as_deref(), Some("s"));
    assert_eq!(full.attrs.len(), 2);
    assert_eq!(full.shape.as_deref(), Some(&[Dim::Static(2), Dim::Symbolic("n".into())][..]));
    assert_eq!(full.extra.get("tag"), Some(&serde_json::json!([1, 2])));
}

#[test]
fn strings_that_need_escaping_print_as_serde_json_prints_them() {
    // Quotes, backslashes, control characters, DEL and non-ASCII, in names, ops, attribute keys and values,
    // symbolic dims and extra fields, at lengths below and above the bytes tested at once.
    let odd = [
        "plain",
        "q\"uote",
        "back\\slash",
        "tab\there",
        "nl\nx",
        "\u{1}",
        "\u{7f}del",
        "é ü 漢字 😀",
        "a long name with a \"quote\" well past the sixteenth byte",
        "a long name with nothing to escape, well past thirty-two bytes",
        "0123456789abcdef0123456789abcdef\u{1f}",
    ];
    let mut nodes = Vec::new();
    for (i, s) in odd.iter().enumerate() {
        let s = serde_json::to_string(s).unwrap();
        nodes.push(format!(
            r#"{{"id": {i}, "op": {s}, "name": {s}, "attrs": {{{s}: {s}}}, "shape": [{s}], "dtype": {s}, "x{i}": {s}}}"#
        ));
    }
    let text = format!(
        r#"{{"format": "rlx-graph", "version": 1, "name": "n\"1", "nodes": [{}], "outputs": [0]}}"#,
        nodes.join(", ")
    );
    let g = load(&text);
    assert_eq!(g.nodes[1].name.as_deref(), Some("q\"uote"));
    assert_eq!(g.to_json_string(), serde_json::to_string(&g).unwrap());
    let again = load(&g.to_json_string());
    assert_eq!(again, g);
}
