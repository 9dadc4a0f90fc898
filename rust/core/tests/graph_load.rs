//! Loading graph.json: what is accepted, and that every rejection names the node and the field.

use rlx_rules_core::graph::{Dim, Graph, GraphError, GraphErrorKind, Sym, Warning};
use rlx_rules_core::registry::Registry;

fn load(text: &str) -> Result<(Graph, Vec<Warning>), GraphError> {
    Graph::from_json_str(text, Registry::builtin())
}

/// A graph document with these nodes (a JSON list body) and outputs.
fn doc(nodes: &str, outputs: &str) -> String {
    format!(
        r#"{{"format": "rlx-graph", "version": 1, "nodes": [{nodes}], "outputs": [{outputs}]}}"#
    )
}

fn err(text: &str) -> GraphError {
    match load(text) {
        Ok(_) => panic!("expected an error for {text}"),
        Err(e) => e,
    }
}

fn assert_err(text: &str, kind: GraphErrorKind, needle: &str) {
    let e = err(text);
    assert_eq!(e.kind, kind, "{}", e.message);
    assert!(
        e.message.contains(needle),
        "message {:?} lacks {:?}",
        e.message,
        needle
    );
}

const X: &str = r#"{"id": 0, "op": "Input", "name": "x", "shape": [2, 4], "dtype": "f32"}"#;

#[test]
fn minimal_graph_loads_with_defaults() {
    let (g, w) = load(&doc(X, "0")).unwrap();
    assert!(w.is_empty());
    assert_eq!(g.name, None);
    assert_eq!(g.outputs, vec![0]);
    let n = &g.nodes[0];
    assert_eq!(
        (n.id, n.op.as_str(), n.name.as_deref()),
        (0, "Input", Some("x"))
    );
    assert!(n.inputs.is_empty() && n.attrs.is_empty() && n.extra.is_empty());
    assert_eq!(n.shape.as_deref(), Some(&[Dim::Static(2), Dim::Static(4)][..]));
    assert_eq!(n.dtype.as_deref(), Some("f32"));
}

#[test]
fn symbolic_dims_and_missing_shape() {
    let nodes = r#"{"id": 0, "op": "Input", "shape": ["batch", 8, "seq"]}, {"id": 1, "op": "Relu", "inputs": [0]}"#;
    let (g, _) = load(&doc(nodes, "1")).unwrap();
    assert_eq!(
        g.nodes[0].shape.as_deref(),
        Some(&[
            Dim::Symbolic("batch".into()),
            Dim::Static(8),
            Dim::Symbolic("seq".into())
        ][..])
    );
    assert_eq!(g.nodes[1].shape, None);
}

#[test]
fn bad_json_reports_line_and_column() {
    assert_err(
        "{\"format\": \"rlx-graph\",\n \"version\": 1,\n \"nodes\": [}",
        GraphErrorKind::Json,
        "line 3",
    );
    assert_err(
        &(doc(X, "0") + " trailing"),
        GraphErrorKind::Json,
        "trailing",
    );
    assert_err("", GraphErrorKind::Json, "invalid JSON");
}

#[test]
fn format_and_version_are_checked() {
    assert_err(
        r#"{"version": 1, "nodes": [], "outputs": []}"#,
        GraphErrorKind::Format,
        "missing field \"format\"",
    );
    assert_err(
        r#"{"format": "onnx", "version": 1, "nodes": [], "outputs": []}"#,
        GraphErrorKind::Format,
        "\"onnx\"",
    );
    assert_err(
        r#"{"format": "rlx-graph", "nodes": [], "outputs": []}"#,
        GraphErrorKind::Format,
        "missing field \"version\"",
    );
    assert_err(
        r#"{"format": "rlx-graph", "version": 2, "nodes": [], "outputs": []}"#,
        GraphErrorKind::Format,
        "unsupported version 2",
    );
    assert_err(
        r#"{"format": "rlx-graph", "version": "1", "nodes": [], "outputs": []}"#,
        GraphErrorKind::Format,
        "unsupported version \"1\"",
    );
    assert_err(
        "[1, 2]",
        GraphErrorKind::Format,
        "the top level must be a graph object, found a list",
    );
    assert_err(
        r#"{"format": "rlx-graph", "version": 1, "outputs": []}"#,
        GraphErrorKind::Format,
        "missing field \"nodes\"",
    );
    assert_err(
        r#"{"format": "rlx-graph", "version": 1, "nodes": {}, "outputs": []}"#,
        GraphErrorKind::Format,
        "field \"nodes\" must be a list",
    );
    assert_err(
        r#"{"format": "rlx-graph", "version": 1, "nodes": []}"#,
        GraphErrorKind::Format,
        "missing field \"outputs\"",
    );
    assert_err(
        r#"{"format": "rlx-graph", "version": 1, "nodes": [], "outputs": [], "nodes": []}"#,
        GraphErrorKind::Format,
        "\"nodes\" is given twice",
    );
}

#[test]
fn node_without_id_or_op() {
    assert_err(
        &doc(r#"{"op": "Input"}"#, ""),
        GraphErrorKind::Format,
        "the node at index 0 of \"nodes\": missing field \"id\"",
    );
    assert_err(
        &doc(r#"{"id": 3, "name": "w"}"#, ""),
        GraphErrorKind::Format,
        "node 3 (\"w\"): missing field \"op\"",
    );
    assert_err(
        &doc(r#"{"id": 3, "op": ""}"#, ""),
        GraphErrorKind::Format,
        "node 3: the op must be a non-empty string, found \"\" (field \"op\")",
    );
    assert_err(
        &doc(r#"{"id": 3, "op": 7}"#, ""),
        GraphErrorKind::Format,
        "found 7 (field \"op\")",
    );
    assert_err(
        &doc(r#"3"#, ""),
        GraphErrorKind::Format,
        "the node at index 0 of \"nodes\" must be an object, found 3",
    );
}

#[test]
fn mistyped_node_fields_name_the_field() {
    let cases = [
        (
            r#"{"id": "a", "op": "Input"}"#,
            "found \"a\" (field \"id\")",
        ),
        (r#"{"id": -1, "op": "Input"}"#, "found -1 (field \"id\")"),
        (r#"{"id": 1.5, "op": "Input"}"#, "found 1.5 (field \"id\")"),
        (
            r#"{"id": 1, "op": "Input", "name": 5}"#,
            "node 1: the name must be a string, found 5 (field \"name\")",
        ),
        (
            r#"{"id": 1, "op": "Relu", "inputs": 0}"#,
            "node 1: the inputs must be a list of node ids, found 0 (field \"inputs\")",
        ),
        (
            r#"{"id": 1, "op": "Relu", "inputs": ["x"]}"#,
            "found \"x\" (field \"inputs\"[0])",
        ),
        (
            r#"{"id": 1, "op": "Input", "attrs": [1]}"#,
            "the attrs must be an object, found a list (field \"attrs\")",
        ),
        (
            r#"{"id": 1, "op": "Input", "dtype": 32}"#,
            "the dtype must be a string, found 32 (field \"dtype\")",
        ),
        (
            r#"{"id": 1, "op": "Input", "shape": 4}"#,
            "the shape must be a list of dims, found 4 (field \"shape\")",
        ),
        (
            r#"{"id": 1, "op": "Input", "id": 2}"#,
            "field \"id\" is given twice",
        ),
        (
            r#"{"id": 1, "op": "Softmax", "attrs": {"axis": 1, "axis": 2}}"#,
            "attribute \"axis\" is given twice",
        ),
    ];
    for (node, needle) in cases {
        assert_err(&doc(node, ""), GraphErrorKind::Format, needle);
    }
}

#[test]
fn many_attributes_keep_their_order_and_a_repeated_one_is_named() {
    // past a handful of keys the loader looks repeats up in a set rather than scanning
    let keys: Vec<String> = (0..40).map(|i| format!("k{}", (i * 7) % 40)).collect();
    let attrs = keys.iter().enumerate().map(|(i, k)| format!("\"{k}\": {i}")).collect::<Vec<_>>().join(", ");
    let (g, _) = load(&doc(&format!(r#"{{"id": 1, "op": "Input", "attrs": {{{attrs}}}}}"#), "")).unwrap();
    let read: Vec<&str> = g.nodes[0].attrs.keys().map(|k| k.as_str()).collect();
    assert_eq!(read, keys.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(g.nodes[0].attrs["k7"], 1);
    for at in [3, 30] {
        let mut twice = keys.clone();
        twice.insert(at + 1, keys[at].clone());
        twice.push(keys[0].clone());
        let attrs = twice.iter().map(|k| format!("\"{k}\": 0")).collect::<Vec<_>>().join(", ");
        let needle = format!("attribute \"{}\" is given twice", keys[at]);
        assert_err(&doc(&format!(r#"{{"id": 1, "op": "Input", "attrs": {{{attrs}}}}}"#), ""), GraphErrorKind::Format, &needle);
    }
}

#[test]
fn bad_dims_are_rejected() {
    for (dim, found) in [
        ("-1", "-1"),
        ("\"\"", "\"\""),
        ("1.5", "1.5"),
        ("true", "true"),
        ("null", "null"),
        ("[1]", "a list"),
    ] {
        let node = format!(r#"{{"id": 4, "op": "Input", "name": "x", "shape": [1, {dim}]}}"#);
        assert_err(
            &doc(&node, "4"),
            GraphErrorKind::Format,
            &format!("node 4 (\"x\"): a dim must be an integer >= 0 or a non-empty string, found {found} (field \"shape\"[1])"),
        );
    }
}

#[test]
fn duplicate_id() {
    let nodes = r#"{"id": 0, "op": "Input", "name": "a"}, {"id": 0, "op": "Input", "name": "b"}"#;
    assert_err(&doc(nodes, "0"), GraphErrorKind::DuplicateId, "node 0 (\"b\"): id 0 is already used by the node at index 0 (node 0 (\"a\")) (field \"id\")");
}

#[test]
fn dangling_input_names_node_and_field() {
    let nodes =
        r#"{"id": 0, "op": "Input"}, {"id": 12, "op": "Add", "name": "qkv", "inputs": [0, 99]}"#;
    let e = err(&doc(nodes, "12"));
    assert_eq!(e.kind, GraphErrorKind::DanglingInput);
    assert_eq!(
        e.message,
        "node 12 (\"qkv\"): input 99 does not exist (field \"inputs\"[1])"
    );
    assert_eq!(e.to_string(), e.message);
}

#[test]
fn cycles_are_rejected_naming_a_node_on_them() {
    // 0 -> 1 -> 2 -> 3 -> 1 (a cycle through 1, 2, 3), plus 4 after it.
    let nodes = r#"{"id": 0, "op": "Input"},
        {"id": 1, "op": "Add", "inputs": [0, 3]},
        {"id": 2, "op": "Relu", "inputs": [1]},
        {"id": 3, "op": "Relu", "inputs": [2]},
        {"id": 4, "op": "Relu", "inputs": [3]}"#;
    let e = err(&doc(nodes, "4"));
    assert_eq!(e.kind, GraphErrorKind::Cycle);
    assert!(e.message.contains("is on a cycle"), "{}", e.message);
    for id in ["1", "2", "3"] {
        assert!(e.message.contains(id), "{}", e.message);
    }
    assert!(!e.message.contains("node 4"), "{}", e.message);
    // A node that is its own input.
    assert_err(
        &doc(r#"{"id": 5, "op": "Relu", "inputs": [5]}"#, "5"),
        GraphErrorKind::Cycle,
        "node 5 is on a cycle: 5 -> 5",
    );
}

#[test]
fn outputs_must_be_nodes() {
    assert_err(
        &doc(X, "0, 7"),
        GraphErrorKind::BadOutput,
        "output 7 is not a node (field \"outputs\"[1])",
    );
    assert_err(
        &doc(X, "\"x\""),
        GraphErrorKind::Format,
        "found \"x\" (field \"outputs\"[0])",
    );
    assert_err(
        &doc(X, "-3"),
        GraphErrorKind::Format,
        "found -3 (field \"outputs\"[0])",
    );
}

#[test]
fn arity_is_checked_against_the_registry() {
    let nodes = format!(r#"{X}, {{"id": 1, "op": "MatMul", "name": "mm", "inputs": [0]}}"#);
    assert_err(
        &doc(&nodes, "1"),
        GraphErrorKind::Arity,
        "node 1 (\"mm\"): op \"MatMul\" takes exactly 2 inputs, found 1 (field \"inputs\")",
    );
    let nodes = format!(
        r#"{X}, {{"id": 1, "op": "Attention", "inputs": [0, 0, 0, 0, 0], "attrs": {{"num_heads": 1, "head_dim": 4, "mask_kind": "None", "score_scale": null, "attn_logit_softcap": null}}}}"#
    );
    assert_err(
        &doc(&nodes, "1"),
        GraphErrorKind::Arity,
        "takes 3 to 4 inputs, found 5",
    );
    assert_err(
        &doc(r#"{"id": 1, "op": "Concat", "attrs": {"axis": 0}}"#, "1"),
        GraphErrorKind::Arity,
        "at least 1 input, found 0",
    );
    let nodes = format!(
        r#"{X}, {{"id": 1, "op": "Concat", "inputs": [0, 0, 0, 0, 0, 0], "attrs": {{"axis": 0}}}}"#
    );
    assert!(load(&doc(&nodes, "1")).is_ok());
}

fn attention(attrs: &str) -> String {
    let nodes = format!(
        r#"{X}, {{"id": 9, "op": "Attention", "name": "attn", "inputs": [0, 0, 0], "attrs": {{{attrs}}}}}"#
    );
    doc(&nodes, "9")
}

#[test]
fn attribute_types_are_checked() {
    let ok = r#""num_heads": 12, "head_dim": 64, "mask_kind": "Custom", "score_scale": null, "attn_logit_softcap": null"#;
    assert!(load(&attention(ok)).is_ok());
    // An integer literal is a valid float.
    assert!(load(&attention(
        &ok.replace("\"score_scale\": null", "\"score_scale\": 1")
    ))
    .is_ok());
    let cases = [
        ("\"num_heads\": 12", "\"num_heads\": \"12\"", "node 9 (\"attn\"): attribute \"num_heads\" of op \"Attention\" must be an integer, found \"12\" (field \"attrs\".\"num_heads\")"),
        ("\"num_heads\": 12", "\"num_heads\": 12.5", "must be an integer, found 12.5"),
        ("\"num_heads\": 12", "\"num_heads\": null", "must be an integer, found null"),
        ("\"num_heads\": 12", "\"num_heads\": 99999999999999999999", "must be an integer"),
        ("\"mask_kind\": \"Custom\"", "\"mask_kind\": \"custom\"", "must be one of \"None\", \"Causal\", \"SlidingWindow\", \"Custom\", \"Bias\", found \"custom\""),
        ("\"score_scale\": null", "\"score_scale\": \"big\"", "must be a number or null, found \"big\""),
        ("\"head_dim\": 64, ", "", "node 9 (\"attn\"): op \"Attention\" needs attribute \"head_dim\" (an integer) (field \"attrs\".\"head_dim\")"),
        ("\"score_scale\": null, ", "", "needs attribute \"score_scale\" (a number or null)"),
    ];
    for (from, to, needle) in cases {
        let attrs = ok.replace(from, to);
        assert_ne!(attrs, ok);
        assert_err(&attention(&attrs), GraphErrorKind::AttrType, needle);
    }
    let narrow = format!(
        r#"{X}, {{"id": 1, "op": "Transpose", "inputs": [0], "attrs": {{"perm": [1, "b"]}}}}"#
    );
    assert_err(
        &doc(&narrow, "1"),
        GraphErrorKind::AttrType,
        "must be a list of integers, found [1,\"b\"]",
    );
    // A dim list takes sizes and symbols, nothing else.
    let reshape = format!(
        r#"{X}, {{"id": 1, "op": "Reshape", "inputs": [0], "attrs": {{"new_shape": [1, 2.5]}}}}"#
    );
    assert_err(
        &doc(&reshape, "1"),
        GraphErrorKind::AttrType,
        "must be a list of dims (integers and symbols), found [1,2.5]",
    );
    let swiglu = format!(
        r#"{X}, {{"id": 1, "op": "FusedSwiGLU", "inputs": [0], "attrs": {{"gate_first": 1}}}}"#
    );
    assert_err(
        &doc(&swiglu, "1"),
        GraphErrorKind::AttrType,
        "must be a boolean, found 1",
    );
}

#[test]
fn optional_attributes_may_be_absent() {
    let swiglu = format!(r#"{X}, {{"id": 1, "op": "FusedSwiGLU", "inputs": [0]}}"#);
    let (g, w) = load(&doc(&swiglu, "1")).unwrap();
    assert!(w.is_empty());
    assert!(g.nodes[1].attrs.is_empty());
}

#[test]
fn unknown_attribute_is_kept_with_a_warning() {
    let attrs = r#""num_heads": 12, "head_dim": 64, "mask_kind": "Custom", "flash": true, "score_scale": null, "attn_logit_softcap": null"#;
    let (g, w) = load(&attention(attrs)).unwrap();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].node, Some(9));
    assert!(
        w[0].message
            .contains("attribute \"flash\" is not in the op registry for op \"Attention\"; kept"),
        "{}",
        w[0].message
    );
    let keys: Vec<&str> = g.nodes[1].attrs.keys().map(Sym::as_str).collect();
    assert_eq!(
        keys,
        [
            "num_heads",
            "head_dim",
            "mask_kind",
            "flash",
            "score_scale",
            "attn_logit_softcap"
        ]
    );
}

#[test]
fn unknown_op_loads_with_one_warning_per_op() {
    let nodes = format!(
        r#"{X}, {{"id": 1, "op": "MyOp", "inputs": [0], "attrs": {{"k": [1, 2]}}}}, {{"id": 2, "op": "MyOp", "inputs": [1]}}, {{"id": 3, "op": "Other"}}"#
    );
    let (g, w) = load(&doc(&nodes, "2")).unwrap();
    assert_eq!(g.nodes.len(), 4);
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(w[0].node, Some(1));
    assert!(
        w[0].message
            .contains("op \"MyOp\" is not in the op registry"),
        "{}",
        w[0].message
    );
    assert!(
        w[0].message.contains("(2 nodes use it)"),
        "{}",
        w[0].message
    );
    assert_eq!(w[1].node, Some(3));
    assert!(!w[1].message.contains("nodes use it"));
    // An empty registry warns for every op but still loads.
    let (_, w) = Graph::from_json_str(&doc(X, "0"), &Registry::empty()).unwrap();
    assert_eq!(w.len(), 1);
}

#[test]
fn nodes_in_any_order_are_sorted_stably() {
    // File order: 5 (uses 3, 4), 4, 3 (uses 1), 2, 1. Stable Kahn takes the earliest ready node.
    let nodes = r#"{"id": 5, "op": "Add", "inputs": [3, 4]},
        {"id": 4, "op": "Input"},
        {"id": 3, "op": "Relu", "inputs": [1]},
        {"id": 2, "op": "Input"},
        {"id": 1, "op": "Input"}"#;
    let (g, _) = load(&doc(nodes, "5")).unwrap();
    let ids: Vec<u64> = g.nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, [4, 2, 1, 3, 5]);
    // An ordered graph keeps its order exactly (ids need not increase).
    let nodes = r#"{"id": 9, "op": "Input"}, {"id": 2, "op": "Input"}, {"id": 7, "op": "Mul", "inputs": [2, 9]}"#;
    let (g, _) = load(&doc(nodes, "7")).unwrap();
    let ids: Vec<u64> = g.nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, [9, 2, 7]);
}

#[test]
fn repeated_inputs_are_fine() {
    let nodes = format!(r#"{X}, {{"id": 1, "op": "Mul", "inputs": [0, 0]}}"#);
    let (g, _) = load(&doc(&nodes, "1")).unwrap();
    assert_eq!(g.nodes[1].inputs.as_slice(), [0, 0]);
}

#[test]
fn hostile_input_gives_errors_not_panics() {
    // Nesting far deeper than serde_json's recursion limit, in an attribute and at the top.
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let nodes = format!(r#"{{"id": 0, "op": "Constant", "attrs": {{"value": {deep}}}}}"#);
    assert_err(&doc(&nodes, "0"), GraphErrorKind::Json, "recursion limit");
    // At the top level the list is skipped without recursion: a plain format error.
    assert_err(
        &deep,
        GraphErrorKind::Format,
        "the top level must be a graph object, found a list",
    );
    // Numbers out of range.
    assert_err(
        &doc(r#"{"id": 1e400, "op": "Input"}"#, ""),
        GraphErrorKind::Json,
        "out of range",
    );
    assert_err(
        &doc(
            r#"{"id": 123456789012345678901234567890, "op": "Input"}"#,
            "",
        ),
        GraphErrorKind::Format,
        "(field \"id\")",
    );
    assert_err(
        &doc(
            r#"{"id": 0, "op": "Input", "shape": [18446744073709551615]}"#,
            "",
        ),
        GraphErrorKind::Format,
        "(field \"shape\"[0])",
    );
    // The largest ids are fine.
    let big = r#"{"id": 18446744073709551615, "op": "Input"}"#;
    assert!(load(&doc(big, "18446744073709551615")).is_ok());
}

#[test]
fn truncated_and_corrupted_documents_never_panic() {
    let text = include_str!("fixtures/bert_attention.json");
    for cut in 0..text.len() {
        if text.is_char_boundary(cut) {
            let _ = load(&text[..cut]);
        }
    }
    // Deterministic single-byte corruptions.
    let bytes = text.as_bytes();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let alphabet = b"{}[]\",:0-9.eE nulltrue\\x";
    for _ in 0..4000 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let pos = (state >> 33) as usize % bytes.len();
        let ch = alphabet[(state >> 13) as usize % alphabet.len()];
        let mut copy = bytes.to_vec();
        copy[pos] = ch;
        let _ = Graph::from_json_slice(&copy, Registry::builtin());
    }
}

#[test]
fn from_path_reports_the_path() {
    let e = Graph::from_path(
        std::path::Path::new("/nonexistent/dir/g.json"),
        Registry::builtin(),
    )
    .unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::Io);
    assert!(
        e.message.contains("/nonexistent/dir/g.json"),
        "{}",
        e.message
    );
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bert_attention.json");
    let (g, _) = Graph::from_path(&path, Registry::builtin()).unwrap();
    assert_eq!(g.name.as_deref(), Some("bert_layer"));
}
