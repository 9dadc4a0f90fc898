//! The load and write fast paths give what the exact paths give: the skipped integer scan, the node writer.

use rlx_rules_core::graph::{Graph, GraphErrorKind};
use rlx_rules_core::registry::Registry;

const SMALL: &str = r#"{"format": "rlx-graph", "version": 1, "nodes": [{"id": 0, "op": "Input", "shape": [2], "dtype": "f32"}, {"id": 1, "op": "Relu", "inputs": [0], "shape": [2], "dtype": "f32"}], "outputs": [1]}"#;

#[test]
fn an_integer_past_64_bits_is_found_at_every_offset_and_a_long_fitting_one_passes() {
    let reg = Registry::builtin();
    // The quick test probes every 18th byte; move the literal across all the phases of that stride.
    for pad in 0..40 {
        let name = "x".repeat(pad);
        for (big, fits) in [("18446744073709551616", false), ("-9223372036854775809", false), ("9999999999999999999", true),
                            ("18446744073709551615", true), ("-9223372036854775808", true), ("1234567890123456789012", false)] {
            let text = SMALL.replace(r#""outputs": [1]"#, &format!("\"outputs\": [1], \"{name}\": {big}"));
            let result = Graph::from_json_slice(text.as_bytes(), reg);
            if fits {
                assert!(result.is_ok(), "{big} at pad {pad}: {:?}", result.err());
            } else {
                let e = result.unwrap_err();
                assert_eq!(e.kind, GraphErrorKind::Json, "{big} at pad {pad}");
                assert!(e.message.contains(&format!("the integer {big} at line 1 column")), "{}", e.message);
            }
        }
    }
}

#[test]
fn long_digit_runs_inside_strings_are_not_numbers() {
    let reg = Registry::builtin();
    let text = SMALL.replace(r#""outputs": [1]"#, r#""outputs": [1], "s": "123456789012345678901234567890", "t": "a\"99999999999999999999999""#);
    assert!(Graph::from_json_slice(text.as_bytes(), reg).is_ok());
}

/// The old pretty writer's node lines: serde_json with a space after `,` and `:` (the oracle for the fast writer).
struct Spaced;

impl serde_json::ser::Formatter for Spaced {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

fn spaced<T: serde::Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::new();
    value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, Spaced)).unwrap();
    String::from_utf8(out).unwrap()
}

/// A graph of `n` nodes, stored out of topological order, with every kind of field and string the writer prints by hand.
fn odd_graph(n: u64) -> Graph {
    let mut text = String::from(r#"{"format": "rlx-graph", "version": 1, "name": "odd \"g\"\n\u0001é", "zz": {"b": [1.5, -2, "x\ty"]}, "a": null, "nodes": ["#);
    for i in 0..n {
        let id = n - 1 - i; // the last node first: the writer must order them
        let inputs = if id == 0 { String::new() } else { format!(r#", "inputs": [{}, {}]"#, id - 1, id / 2) };
        let node = match id % 5 {
            0 => format!(r#"{{"id": {id}, "op": "Input", "name": "in\\u{id:04x}\u007f", "shape": ["batch", {id}, 3], "dtype": "f32", "facts": ["nonneg"]}}"#),
            1 => format!(r#"{{"id": {id}, "op": "Custom\"Op"{inputs}, "attrs": {{"neg": -{id}, "f": 0.1, "big": 18446744073709551615, "s": "a\\\\b", "t": true, "l": [1, [2, {{}}]], "n": null}}, "extra\u0002": "e"}}"#),
            2 => format!(r#"{{"id": {id}, "op": "Add"{inputs}, "shape": [], "dtype": "i64", "zeta": -1e300, "alpha": {{"k": [true, false]}}}}"#),
            3 => format!(r#"{{"op": "Relu", "id": {id}, "inputs": [{}], "name": "r{id}"}}"#, id - 1),
            _ => format!(r#"{{"id": {id}, "op": "Mul"{inputs}, "attrs": {{}}, "shape": [2, "n\u00e9"]}}"#),
        };
        text.push_str(&node);
        text.push_str(if i + 1 < n { ", " } else { "" });
    }
    text.push_str(if n == 0 { r#"], "outputs": []}"# } else { r#"], "outputs": [0, 1]}"# }.replace(", 1]", if n > 1 { ", 1]" } else { "]" }).as_str());
    let (g, _) = Graph::from_json_slice(text.as_bytes(), Registry::builtin()).expect("loads");
    g
}

#[test]
fn the_fast_writer_prints_what_serde_prints_in_one_block_and_in_many() {
    for n in [0, 1, 7, 3 * 8192 + 5] {
        let mut g = odd_graph(n);
        g.nodes.reverse(); // out of topological order again (loading sorted them)
        let compact = g.to_json_string();
        assert!(compact == serde_json::to_string(&g).unwrap(), "compact, {n} nodes");
        // pretty: the head, one node per line as the spaced formatter prints it, the tail
        let mut sorted = g.clone();
        sorted.toposort().unwrap();
        let mut expected = format!("{{\n  \"format\": \"rlx-graph\",\n  \"version\": 1,\n  \"name\": {},\n  \"nodes\": [", spaced(sorted.name.as_ref().unwrap()));
        for (k, node) in sorted.nodes.iter().enumerate() {
            expected.push_str(if k == 0 { "\n    " } else { ",\n    " });
            expected.push_str(&spaced(node));
        }
        expected.push_str(if n == 0 { "]" } else { "\n  ]" });
        expected.push_str(&format!(",\n  \"outputs\": {}", spaced(&sorted.outputs)));
        for (k, v) in &sorted.extra {
            expected.push_str(&format!(",\n  {}: {}", spaced(k), spaced(v)));
        }
        expected.push_str("\n}\n");
        assert!(g.to_json_string_pretty() == expected, "pretty, {n} nodes");
    }
}

/// A graph.json of `n` Relu nodes over one input, about 70 bytes a node (over 4 MiB from 60,000 nodes on, where
/// loading reads the nodes list in two parts); `node(i)` may replace node i's text.
fn long_graph(n: usize, node: impl Fn(usize) -> Option<String>) -> String {
    let mut text = String::from(r#"{"format": "rlx-graph", "version": 1, "name": "long", "nodes": ["#);
    for i in 0..n {
        if i > 0 {
            text.push_str(", ");
        }
        let default = if i == 0 {
            r#"{"id": 0, "op": "Input", "shape": [1, 8], "dtype": "f32"}"#.to_string()
        } else {
            format!(r#"{{"id": {i}, "op": "Relu", "name": "r{i}", "inputs": [{}], "shape": [1, 8], "dtype": "f32"}}"#, i - 1)
        };
        text.push_str(&node(i).unwrap_or(default));
    }
    text.push_str(&format!(r#"], "outputs": [{}], "after": {{"k": [1, 2]}}}}"#, n - 1));
    text
}

/// Loading from bytes (in two parts when large) gives what loading the same text as a stream (in one piece) gives:
/// the same graph, or the same error.
fn same_as_one_piece(text: &str) {
    let reg = Registry::builtin();
    let parts = Graph::from_json_slice(text.as_bytes(), reg);
    let one = Graph::from_reader_limits(text.as_bytes(), reg, rlx_rules_core::graph::DEFAULT_MAX_NODES, u64::MAX);
    match (parts, one) {
        (Ok((a, wa)), Ok((b, wb))) => {
            assert!(a == b, "the graphs differ");
            assert_eq!(wa, wb);
        }
        (Err(a), Err(b)) => assert_eq!((a.kind, a.message), (b.kind, b.message)),
        (a, b) => panic!("{:?} vs {:?}", a.map(|_| ()), b.map(|_| ())),
    }
}

#[test]
fn a_large_graph_read_in_two_parts_is_the_graph_read_in_one() {
    let n = 80_000;
    let text = long_graph(n, |_| None);
    assert!(text.len() > 4 << 20);
    same_as_one_piece(&text);
    let (g, _) = Graph::from_json_slice(text.as_bytes(), Registry::builtin()).unwrap();
    assert_eq!(g.nodes.len(), n);
    assert_eq!(g.nodes[n - 1].name.as_deref(), Some(format!("r{}", n - 1).as_str()));
    assert_eq!(g.extra["after"]["k"][1], 2);
    // white box: each part shares its op names through an interner of its own, so two copies of "Relu" show that the
    // list was read in two parts (this test would pass vacuously if it never were)
    assert_ne!(g.nodes[1].op.as_str().as_ptr(), g.nodes[n - 1].op.as_str().as_ptr());
}

#[test]
fn a_cut_inside_a_string_or_a_value_is_not_taken_for_a_node_boundary() {
    // names and attribute values around the middle that look like the place between two nodes
    let fake = r#"}, {\"id\": 5, \"op\": \"Relu\"}, {"#;
    let text = long_graph(80_000, |i| {
        (i > 39_000 && i % 7 == 0).then(|| {
            format!(r#"{{"id": {i}, "op": "Relu", "name": "{fake}", "inputs": [{}], "attrs": {{"a": [{{"x": 1}}, {{"y": 2}}], "s": "{fake}"}}}}"#, i - 1)
        })
    });
    same_as_one_piece(&text);
}

#[test]
fn errors_found_in_either_part_read_as_in_one_piece() {
    let bad_op = |at: usize| move |i: usize| (i == at).then(|| format!(r#"{{"id": {i}, "op": 5, "inputs": [{}]}}"#, i - 1));
    same_as_one_piece(&long_graph(80_000, bad_op(70_000)));
    same_as_one_piece(&long_graph(80_000, bad_op(100)));
    // a dangling input, a duplicate id, a cycle: found after reading, by index
    same_as_one_piece(&long_graph(80_000, |i| (i == 79_000).then(|| format!(r#"{{"id": {i}, "op": "Relu", "inputs": [900000]}}"#))));
    same_as_one_piece(&long_graph(80_000, |i| (i == 79_000).then(|| r#"{"id": 3, "op": "Relu", "inputs": [1]}"#.to_string())));
    // malformed JSON late in the list, and a value nested past serde_json's limit
    same_as_one_piece(&long_graph(80_000, |i| (i == 75_000).then(|| format!(r#"{{"id": {i}, "op": "Relu", "inputs": [{}],}}"#, i - 1))));
    let deep = format!("{}1{}", "[".repeat(126), "]".repeat(126));
    same_as_one_piece(&long_graph(80_000, |i| (i == 75_000).then(|| format!(r#"{{"id": {i}, "op": "Relu", "inputs": [{}], "deep": {deep}}}"#, i - 1))));
    let fits = format!("{}1{}", "[".repeat(90), "]".repeat(90));
    same_as_one_piece(&long_graph(80_000, |i| (i == 75_000).then(|| format!(r#"{{"id": {i}, "op": "Relu", "inputs": [{}], "deep": {fits}}}"#, i - 1))));
    // the nodes list given twice, and trailing text
    let text = long_graph(80_000, |_| None);
    same_as_one_piece(&text.replacen(r#""nodes": ["#, r#""nodes": [], "nodes": ["#, 1));
    same_as_one_piece(&format!("{text} x"));
}

#[test]
fn the_node_limit_holds_when_the_list_is_read_in_two_parts() {
    let text = long_graph(80_000, |_| None);
    let reg = Registry::builtin();
    let e = Graph::from_json_slice_max(text.as_bytes(), reg, 79_999).unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::TooLarge);
    assert!(Graph::from_json_slice_max(text.as_bytes(), reg, 80_000).is_ok());
}
