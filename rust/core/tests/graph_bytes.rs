//! Written graph.json is byte-identical to what the writer produced before the lean node model (issue 16).
//!
//! The expected files in `fixtures/written/` were produced by the node model that kept every field as an
//! owned `String`/`Vec`/`Map` (commit 226c310); to recreate them deliberately, run
//! `RLX_BLESS_WRITTEN=1 cargo test -p rlx-rules-core --test graph_bytes`.

use std::path::{Path, PathBuf};

use rlx_rules_core::apply::{apply, ApplyOptions};
use rlx_rules_core::graph::Graph;
use rlx_rules_core::program::Program;
use rlx_rules_core::registry::Registry;
use serde_json::Map;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The inputs: the bundled example, and the core tests' graph fixtures (unknown fields, attrs, symbolic dims).
fn inputs() -> Vec<(&'static str, PathBuf)> {
    let fixtures = root().join("rust/core/tests/fixtures");
    vec![
        ("bert_encoder", root().join("examples/bert_encoder.graph.json")),
        ("bert_2l", fixtures.join("bert_2l.graph.json")),
        ("bert_attention", fixtures.join("bert_attention.json")),
    ]
}

fn check(name: &str, actual: &str) {
    let path = root().join("rust/core/tests/fixtures/written").join(name);
    if std::env::var_os("RLX_BLESS_WRITTEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(expected == actual, "{name}: the written graph differs from {}", path.display());
}

fn load(path: &Path) -> Graph {
    Graph::from_path(path, Registry::builtin()).expect("loads").0
}

#[test]
fn load_and_write_is_byte_identical_to_the_previous_writer() {
    for (name, path) in inputs() {
        let graph = load(&path);
        check(&format!("{name}.compact.json"), &graph.to_json_string());
        check(&format!("{name}.pretty.json"), &graph.to_json_string_pretty());
    }
}

#[test]
fn applied_graphs_are_byte_identical_to_the_previous_writer() {
    let text = std::fs::read_to_string(root().join("rust/core/tests/fixtures/default_program.json")).unwrap();
    let program = Program::from_json_str(&text).expect("program loads");
    for (name, path) in inputs() {
        let (out, _) = apply(load(&path), &program, &Map::new(), Registry::builtin(), &ApplyOptions::default())
            .expect("applies");
        check(&format!("{name}.applied.json"), &out.to_json_string());
        // The file writer streams; it must print the same bytes as the string form.
        let dir = std::env::temp_dir().join(format!("rlx_graph_bytes_{}_{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("out.json");
        out.write_atomic(&file, false).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), out.to_json_string(), "{name}: file vs string");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
