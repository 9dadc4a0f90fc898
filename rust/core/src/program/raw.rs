//! The JSON form of a matcher program, as Python writes it (docs/program.md), before validation.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProgram {
    pub(super) format: String,
    pub(super) version: u64,
    #[serde(default)]
    pub(super) params: Vec<RawParam>,
    #[serde(default)]
    pub(super) gates: Vec<RawGate>,
    pub(super) phases: Vec<RawPhase>,
    pub(super) rules: Vec<RawRule>,
}

#[derive(Deserialize)]
pub(super) struct RawParam {
    pub(super) name: String,
    #[serde(rename = "type")]
    pub(super) ty: String,
    pub(super) default: Value,
    #[serde(default)]
    pub(super) env: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    pub(super) loc: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct RawGate {
    pub(super) name: String,
    pub(super) quantifier: Option<String>,
    pub(super) op: Option<String>,
    pub(super) expr: Value,
    #[serde(default)]
    pub(super) loc: String,
    #[serde(default)]
    pub(super) text: String,
}

#[derive(Deserialize)]
pub(super) struct RawPhase {
    pub(super) name: String,
    pub(super) max_iterations: u32,
    pub(super) rules: Vec<String>,
}

#[derive(Deserialize)]
pub(super) struct RawSlot {
    pub(super) name: String,
    pub(super) leaf: bool,
}

#[derive(Deserialize)]
pub(super) struct RawRule {
    pub(super) name: String,
    #[serde(default)]
    pub(super) loc: String,
    pub(super) phase: String,
    #[serde(default)]
    pub(super) priority: i64,
    #[serde(default)]
    pub(super) gates: Vec<String>,
    pub(super) root_ops: Vec<String>,
    pub(super) slots: Vec<RawSlot>,
    pub(super) code: Vec<Value>,
    pub(super) absorb: Vec<usize>,
    pub(super) rewrite: Vec<RawNewNode>,
    #[serde(default)]
    pub(super) group: Option<RawGroup>,
    #[serde(default)]
    pub(super) group_guards: Vec<Value>,
    /// `root => x`: the root's uses read a bound slot instead (the first case whose `when` holds).
    #[serde(default)]
    pub(super) forward: Vec<RawForward>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawForward {
    pub(super) when: Option<Value>,
    pub(super) slot: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGroup {
    pub(super) min: usize,
    pub(super) max: usize,
    pub(super) shared: Vec<usize>,
    pub(super) members: Vec<usize>,
}

#[derive(Deserialize)]
pub(super) struct RawNewNode {
    pub(super) name: String,
    pub(super) op: String,
    pub(super) inputs: Vec<HashMap<String, usize>>,
    pub(super) attrs: Vec<(String, Value)>,
    pub(super) shape: Option<Value>,
    pub(super) dtype: Option<Value>,
    pub(super) replaces: Option<usize>,
    #[serde(default)]
    pub(super) each: bool,
}
