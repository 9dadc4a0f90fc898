//! Writing graph.json: field order, topological order, round trips, pretty form, atomic writes.

use rlx_rules_core::graph::{Dim, Graph, GraphErrorKind, Node};
use rlx_rules_core::registry::Registry;
use serde_json::json;

fn load(text: &str) -> Graph {
    Graph::from_json_str(text, Registry::builtin())
        .expect("loads")
        .0
}

const FIXTURE: &str = include_str!("fixtures/bert_attention.json");

#[test]
fn fixture_is_ordered_on_load_and_round_trips() {
    let g = load(FIXTURE);
    let ids: Vec<u64> = g.nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, [0, 1, 2, 3, 5, 6, 7, 8, 9, 4, 10, 11, 12]);
    assert_eq!(load(&g.to_json_string()), g);
    assert_eq!(load(&g.to_json_string_pretty()), g);
    // Writing is deterministic and a second round trip is byte-identical.
    assert_eq!(
        load(&g.to_json_string()).to_json_string(),
        g.to_json_string()
    );
}

#[test]
fn unknown_fields_survive_a_round_trip() {
    let g = load(FIXTURE);
    assert_eq!(
        g.extra.get("producer"),
        Some(&json!({"tool": "test", "rev": 3}))
    );
    let mask = g.nodes.iter().find(|n| n.id == 3).unwrap();
    assert_eq!(mask.extra.get("note"), Some(&json!("kept")));
    let text = g.to_json_string();
    assert!(
        text.contains(r#""producer":{"tool":"test","rev":3}"#),
        "{text}"
    );
    assert!(text.contains(r#""dtype":"f32","note":"kept"}"#), "{text}");
    let again = load(&text);
    assert_eq!(again.extra, g.extra);
    assert_eq!(
        again.nodes.iter().find(|n| n.id == 3).unwrap().extra,
        mask.extra
    );
}

#[test]
fn compact_output_has_the_documented_field_order() {
    let text = r#"{"outputs": [1], "zz": 1, "nodes": [
        {"extra": true, "dtype": "f32", "shape": [2], "attrs": {}, "inputs": [0], "op": "Relu", "id": 1},
        {"id": 0, "op": "Input", "name": "x", "inputs": []}],
      "name": "g", "version": 1, "format": "rlx-graph"}"#;
    let g = load(text);
    assert_eq!(
        g.to_json_string(),
        r#"{"format":"rlx-graph","version":1,"name":"g","nodes":[{"id":0,"op":"Input","name":"x"},{"id":1,"op":"Relu","inputs":[0],"shape":[2],"dtype":"f32","extra":true}],"outputs":[1],"zz":1}"#
    );
}

#[test]
fn pretty_output_puts_one_node_per_line() {
    let g = load(FIXTURE);
    let text = g.to_json_string_pretty();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "{");
    assert_eq!(lines[1], r#"  "format": "rlx-graph","#);
    assert_eq!(lines[2], r#"  "version": 1,"#);
    let node_lines: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("    {\"id\": "))
        .collect();
    assert_eq!(node_lines.len(), g.nodes.len());
    assert!(text.contains(r#"    {"id": 0, "op": "Input", "name": "hidden", "shape": [1, 8, 768], "dtype": "f32"},"#), "{text}");
    assert!(
        text.contains(r#""attrs": {"axis": 2, "start": 0, "len": 768}"#),
        "{text}"
    );
    assert!(text.ends_with("}\n"));
    let empty = Graph::new(None);
    assert_eq!(load(&empty.to_json_string_pretty()), empty);
}

fn node(id: u64, op: &str, inputs: &[u64]) -> Node {
    let mut n = Node::new(id, op);
    n.inputs = inputs.into();
    n
}

#[test]
fn in_memory_graphs_are_written_in_topological_order() {
    let mut g = Graph::new(Some("built".into()));
    g.nodes.push(node(2, "Relu", &[1]));
    g.nodes.push(node(1, "Relu", &[0]));
    g.nodes.push(node(0, "Input", &[]));
    g.outputs = vec![2];
    assert!(
        g.validate(Registry::builtin()).is_ok(),
        "validate does not need order"
    );
    let reloaded = load(&g.to_json_string());
    let ids: Vec<u64> = reloaded.nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, [0, 1, 2]);
    g.toposort().unwrap();
    assert_eq!(g, reloaded);
    assert_eq!(g.next_id(), 3);
}

#[test]
fn validate_catches_broken_in_memory_graphs() {
    let reg = Registry::builtin();
    let base = load(FIXTURE);

    let mut g = base.clone();
    g.nodes.retain(|n| n.id != 9);
    let e = g.validate(reg).unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::DanglingInput);
    assert!(
        e.message.contains("input 9 does not exist"),
        "{}",
        e.message
    );

    let mut g = base.clone();
    g.outputs.push(77);
    assert_eq!(g.validate(reg).unwrap_err().kind, GraphErrorKind::BadOutput);

    let mut g = base.clone();
    g.nodes[0].inputs.push(12);
    g.nodes[0].op = "Relu".into();
    assert_eq!(g.validate(reg).unwrap_err().kind, GraphErrorKind::Cycle);
    assert_eq!(
        g.clone().toposort().unwrap_err().kind,
        GraphErrorKind::Cycle
    );

    let mut g = base.clone();
    g.nodes[1].id = 0;
    assert_eq!(
        g.validate(reg).unwrap_err().kind,
        GraphErrorKind::DuplicateId
    );

    let mut g = base.clone();
    g.nodes[0].shape = Some(vec![Dim::Static(-1)].into());
    assert_eq!(g.validate(reg).unwrap_err().kind, GraphErrorKind::Format);

    let mut g = base.clone();
    g.nodes[0].shape = Some(vec![Dim::Symbolic(String::new())].into());
    assert_eq!(g.validate(reg).unwrap_err().kind, GraphErrorKind::Format);

    let mut g = base.clone();
    let attn = g.nodes.iter_mut().find(|n| n.op == "Attention").unwrap();
    attn.attrs.insert("num_heads", json!("twelve"));
    assert_eq!(g.validate(reg).unwrap_err().kind, GraphErrorKind::AttrType);

    let mut g = base;
    let attn = g.nodes.iter_mut().find(|n| n.op == "Attention").unwrap();
    attn.inputs.truncate(2);
    assert_eq!(g.validate(reg).unwrap_err().kind, GraphErrorKind::Arity);
}

#[test]
fn extra_fields_named_like_known_fields_are_not_duplicated() {
    let mut g = load(FIXTURE);
    g.extra.insert("nodes".into(), json!(5));
    g.nodes[0].extra.insert("id", json!("x"));
    let again = load(&g.to_json_string());
    assert_eq!(again.nodes.len(), g.nodes.len());
    assert!(again.nodes[0].extra.is_empty());
}

#[test]
fn write_atomic_writes_and_replaces_without_leftovers() {
    let dir = std::env::temp_dir().join(format!("rlx-graph-write-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("out.json");
    std::fs::write(&path, "old contents").unwrap();
    let g = load(FIXTURE);
    g.write_atomic(&path, false).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), g.to_json_string());
    g.write_atomic(&path, true).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        g.to_json_string_pretty()
    );
    let (back, _) = Graph::from_path(&path, Registry::builtin()).unwrap();
    assert_eq!(back, g);
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["out.json"], "no temporary file is left behind");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn write_atomic_into_a_missing_folder_is_a_clear_io_error() {
    let path = std::env::temp_dir()
        .join("rlx-graph-no-such-dir-7f3a")
        .join("g.json");
    let e = load(FIXTURE).write_atomic(&path, false).unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::Io);
    assert!(
        e.message.contains(&path.display().to_string()),
        "{}",
        e.message
    );
    assert!(!path.exists());
}

#[test]
fn writing_over_a_folder_fails_and_keeps_it() {
    let dir = std::env::temp_dir().join(format!("rlx-graph-over-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("target.json")).unwrap();
    let e = load(FIXTURE)
        .write_atomic(&dir.join("target.json"), false)
        .unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::Io);
    assert!(dir.join("target.json").is_dir());
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "temporary file removed"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
