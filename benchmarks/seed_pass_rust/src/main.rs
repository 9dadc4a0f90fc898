//! Benchmark baseline: FuseMatMulBiasAct + the seed FuseAttentionBlock pass, hand-written over graph.json (`handwritten`) and through rlx_rules_core (`engine`).
//!
//! Usage:
//!   seed-pass-rust handwritten IN OUT
//!   seed-pass-rust engine PROGRAM_JSON IN OUT
//!   seed-pass-rust breakdown PROGRAM_JSON IN     (the engine's apply, step by step, for profiling)
//!   seed-pass-rust io IN OUT                     (the load and the write, step by step)
//! Both print their phase times (load / pass / write, in ms) and node counts as one JSON line on stdout.
//!
//! The hand-written pass is what a careful engineer would write for exactly these two fusions:
//! typed serde records, an id index, consumer lists, one forward sweep per pass, nodes replaced in
//! place (the fused node keeps the replaced root's id, name, shape and dtype, as the engine does).
//! It keeps only the fields graph.json defines (no round trip of unknown fields) and does no
//! registry validation: that makes it a stronger (faster) baseline than the engine, not a weaker one.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
struct Node {
    id: u64,
    op: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    inputs: Vec<u64>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    attrs: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shape: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dtype: Option<String>,
}

#[derive(Deserialize, Serialize, Debug)]
struct Doc {
    format: String,
    version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    nodes: Vec<Node>,
    outputs: Vec<u64>,
}

/// The graph being rewritten: nodes by position, input and consumer edges as positions.
struct Work {
    nodes: Vec<Node>,
    ins: Vec<Vec<usize>>,
    /// Consumers of each node (a node using x twice appears twice); dead nodes are removed.
    cons: Vec<Vec<usize>>,
    is_out: Vec<bool>,
    alive: Vec<bool>,
}

impl Work {
    fn new(mut nodes: Vec<Node>, outputs: &[u64]) -> Result<Work, String> {
        let mut index: HashMap<u64, usize> = HashMap::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            if index.insert(n.id, i).is_some() {
                return Err(format!("duplicate id {}", n.id));
            }
        }
        let lookup = |id: &u64| index.get(id).copied().ok_or_else(|| format!("dangling input {id}"));
        let mut ins: Vec<Vec<usize>> = Vec::with_capacity(nodes.len());
        for n in &nodes {
            ins.push(n.inputs.iter().map(lookup).collect::<Result<_, _>>()?);
        }
        // The passes sweep in topological order, and the output is written in it: sort if the file is not.
        if ins.iter().enumerate().any(|(i, v)| v.iter().any(|&j| j >= i)) {
            let order = toposort(&ins)?;
            let mut pos = vec![0; order.len()];
            for (new, &old) in order.iter().enumerate() {
                pos[old] = new;
            }
            let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
            nodes = order.iter().map(|&o| slots[o].take().unwrap()).collect();
            let old_ins = std::mem::take(&mut ins);
            ins = order.iter().map(|&o| old_ins[o].iter().map(|&j| pos[j]).collect()).collect();
            index = nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
        }
        let mut cons = vec![Vec::new(); nodes.len()];
        for (i, v) in ins.iter().enumerate() {
            for &j in v {
                cons[j].push(i);
            }
        }
        let mut is_out = vec![false; nodes.len()];
        for id in outputs {
            is_out[*index.get(id).ok_or_else(|| format!("output {id} is not a node"))?] = true;
        }
        let alive = vec![true; nodes.len()];
        Ok(Work { nodes, ins, cons, is_out, alive })
    }

    /// Distinct consumer nodes (graph outputs are not uses).
    fn uses(&self, i: usize) -> usize {
        let c = &self.cons[i];
        match c.len() {
            0 | 1 => c.len(),
            2 => 1 + (c[0] != c[1]) as usize,
            _ => {
                let mut v = c.clone();
                v.sort_unstable();
                v.dedup();
                v.len()
            }
        }
    }

    fn rank(&self, i: usize) -> Option<usize> {
        self.nodes[i].shape.as_ref().map(Vec::len)
    }

    fn attr(&self, i: usize, name: &str) -> &Value {
        self.nodes[i].attrs.get(name).unwrap_or(&Value::Null)
    }

    fn kill(&mut self, i: usize) {
        self.alive[i] = false;
        for k in 0..self.ins[i].len() {
            let j = self.ins[i][k];
            if let Some(p) = self.cons[j].iter().position(|&c| c == i) {
                self.cons[j].swap_remove(p);
            }
        }
    }

    /// Turn node `root` into `op(inputs){attrs}`, keeping its id, name, shape, dtype and consumers.
    fn replace(&mut self, root: usize, op: &str, inputs: Vec<usize>, attrs: Map<String, Value>) {
        for k in 0..self.ins[root].len() {
            let j = self.ins[root][k];
            if let Some(p) = self.cons[j].iter().position(|&c| c == root) {
                self.cons[j].swap_remove(p);
            }
        }
        for &j in &inputs {
            self.cons[j].push(root);
        }
        let ids: Vec<u64> = inputs.iter().map(|&j| self.nodes[j].id).collect();
        let n = &mut self.nodes[root];
        n.op = op.to_string();
        n.attrs = attrs;
        n.inputs = ids;
        self.ins[root] = inputs;
    }

    /// `add = Add(mm, bias)` in either operand order, `mm = MatMul(x, w)`, rank(bias) ≤ 1, mm used
    /// once and not an output. Returns (mm, x, w, bias).
    fn matmul_add(&self, add: usize) -> Option<(usize, usize, usize, usize)> {
        if self.nodes[add].op != "Add" || self.ins[add].len() != 2 {
            return None;
        }
        for s in 0..2 {
            let (mm, bias) = (self.ins[add][s], self.ins[add][1 - s]);
            if self.nodes[mm].op == "MatMul"
                && self.ins[mm].len() == 2
                && self.rank(bias).is_some_and(|r| r <= 1)
                && self.uses(mm) == 1
                && !self.is_out[mm]
                && bias != mm
            {
                return Some((mm, self.ins[mm][0], self.ins[mm][1], bias));
            }
        }
        None
    }

    /// FuseMatMulBiasAct: first MatMul+Add+Gelu/Silu (the activation node becomes the fused op),
    /// then MatMul+Add. Returns the number of rewrites.
    fn fuse_matmul_bias_act(&mut self) -> usize {
        let mut fired = 0;
        for act in 0..self.nodes.len() {
            let op = self.nodes[act].op.as_str();
            if !self.alive[act] || !(op == "Gelu" || op == "Silu") || self.ins[act].len() != 1 {
                continue;
            }
            let add = self.ins[act][0];
            if self.uses(add) != 1 || self.is_out[add] {
                continue;
            }
            let Some((mm, x, w, bias)) = self.matmul_add(add) else { continue };
            let mut attrs = Map::new();
            attrs.insert("activation".into(), Value::String(op.to_string()));
            self.kill(add);
            self.kill(mm);
            self.replace(act, "FusedMatMulBiasAct", vec![x, w, bias], attrs);
            fired += 1;
        }
        for add in 0..self.nodes.len() {
            if !self.alive[add] {
                continue;
            }
            let Some((mm, x, w, bias)) = self.matmul_add(add) else { continue };
            let mut attrs = Map::new();
            attrs.insert("activation".into(), Value::Null);
            self.kill(mm);
            self.replace(add, "FusedMatMulBiasAct", vec![x, w, bias], attrs);
            fired += 1;
        }
        fired
    }

    /// The seed's gate: some Input of rank ≥ 2 with static dim0 × dim1 ≤ threshold.
    fn small_batch_seq(&self, threshold: i64) -> bool {
        (0..self.nodes.len()).any(|i| {
            let n = &self.nodes[i];
            if !self.alive[i] || n.op != "Input" {
                return false;
            }
            match n.shape.as_deref() {
                Some([d0, d1, ..]) => match (d0.as_i64(), d1.as_i64()) {
                    (Some(a), Some(b)) => a.checked_mul(b).is_some_and(|p| p <= threshold),
                    _ => false,
                },
                _ => false,
            }
        })
    }

    fn is_plain_fused_mm(&self, i: usize) -> bool {
        self.nodes[i].op == "FusedMatMulBiasAct" && self.ins[i].len() == 3 && self.attr(i, "activation").is_null()
    }

    /// The seed FuseAttentionBlock, rooted at the out projection. Returns the number of rewrites.
    fn fuse_attention_block(&mut self, threshold: i64) -> usize {
        if !self.small_batch_seq(threshold) {
            return 0;
        }
        let mut fired = 0;
        for out in 0..self.nodes.len() {
            if !self.alive[out] || !self.is_plain_fused_mm(out) {
                continue;
            }
            let attn = self.ins[out][0];
            let a = &self.nodes[attn];
            if a.op != "Attention"
                || self.ins[attn].len() != 4
                || self.attr(attn, "mask_kind").as_str() != Some("Custom")
                || !self.attr(attn, "score_scale").is_null()
                || !self.attr(attn, "attn_logit_softcap").is_null()
                || self.uses(attn) != 1
                || self.is_out[attn]
            {
                continue;
            }
            let (Some(heads), Some(head_dim)) = (self.attr(attn, "num_heads").as_i64(), self.attr(attn, "head_dim").as_i64())
            else {
                continue;
            };
            let h = heads * head_dim;
            let (q, k, v, mask) = (self.ins[attn][0], self.ins[attn][1], self.ins[attn][2], self.ins[attn][3]);
            let qkv = match self.ins[q].first() {
                Some(&p) => p,
                None => continue,
            };
            if !self.is_plain_fused_mm(qkv) || self.uses(qkv) != 3 || self.is_out[qkv] {
                continue;
            }
            let Some(rank) = self.rank(qkv) else { continue };
            let last = rank as i64 - 1;
            let narrow_ok = |n: usize, start: i64| {
                self.nodes[n].op == "Narrow"
                    && self.ins[n].len() == 1
                    && self.ins[n][0] == qkv
                    && self.attr(n, "axis").as_i64() == Some(last)
                    && self.attr(n, "start").as_i64() == Some(start)
                    && self.attr(n, "len").as_i64() == Some(h)
                    && self.uses(n) == 1
                    && !self.is_out[n]
            };
            if !(narrow_ok(q, 0) && narrow_ok(k, h) && narrow_ok(v, 2 * h)) || q == k || k == v || q == v {
                continue;
            }
            let (hidden, qkv_w, qkv_b) = (self.ins[qkv][0], self.ins[qkv][1], self.ins[qkv][2]);
            let (out_w, out_b) = (self.ins[out][1], self.ins[out][2]);
            let mut attrs = Map::new();
            attrs.insert("num_heads".into(), json!(heads));
            attrs.insert("head_dim".into(), json!(head_dim));
            attrs.insert("has_bias".into(), Value::Bool(true));
            attrs.insert("has_rope".into(), Value::Bool(false));
            for dead in [attn, q, k, v, qkv] {
                self.kill(dead);
            }
            self.replace(out, "FusedAttentionBlock", vec![hidden, qkv_w, out_w, mask, qkv_b, out_b], attrs);
            fired += 1;
        }
        fired
    }

    /// The live nodes in order (ids never change, and replaced nodes already carry their new inputs).
    fn into_nodes(self) -> Vec<Node> {
        self.nodes.into_iter().zip(self.alive).filter(|(_, a)| *a).map(|(n, _)| n).collect()
    }
}

/// Kahn's algorithm, taking the earliest ready node first (stable for an ordered graph).
fn toposort(ins: &[Vec<usize>]) -> Result<Vec<usize>, String> {
    let n = ins.len();
    let mut indeg: Vec<usize> = ins.iter().map(Vec::len).collect();
    let mut cons = vec![Vec::new(); n];
    for (i, v) in ins.iter().enumerate() {
        for &j in v {
            cons[j].push(i);
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> =
        (0..n).filter(|&i| indeg[i] == 0).map(std::cmp::Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(std::cmp::Reverse(i)) = ready.pop() {
        order.push(i);
        for &c in &cons[i] {
            indeg[c] -= 1;
            if indeg[c] == 0 {
                ready.push(std::cmp::Reverse(c));
            }
        }
    }
    if order.len() != n {
        return Err("the graph has a cycle".into());
    }
    Ok(order)
}

fn threshold() -> i64 {
    std::env::var("RLX_FUSE_ATTN_THRESHOLD").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}

/// Both passes on a parsed document; returns (nodes before, nodes after, rewrites).
fn run_passes(doc: &mut Doc) -> Result<(usize, usize, usize), String> {
    let before = doc.nodes.len();
    let mut work = Work::new(std::mem::take(&mut doc.nodes), &doc.outputs)?;
    let mut fired = work.fuse_matmul_bias_act();
    fired += work.fuse_attention_block(threshold());
    doc.nodes = work.into_nodes();
    Ok((before, doc.nodes.len(), fired))
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn handwritten(input: &Path, output: &Path) -> Result<Value, String> {
    let t0 = Instant::now();
    let bytes = std::fs::read(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let mut doc: Doc = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", input.display()))?;
    drop(bytes);
    let load_ms = ms(t0);
    let t1 = Instant::now();
    let (before, after, rewrites) = run_passes(&mut doc)?;
    let pass_ms = ms(t1);
    let t2 = Instant::now();
    let file = std::fs::File::create(output).map_err(|e| format!("{}: {e}", output.display()))?;
    let mut w = BufWriter::with_capacity(1 << 16, file);
    serde_json::to_writer(&mut w, &doc).map_err(|e| e.to_string())?;
    w.flush().map_err(|e| e.to_string())?;
    let write_ms = ms(t2);
    Ok(json!({"mode": "handwritten", "nodes_before": before, "nodes_after": after, "rewrites": rewrites,
              "load_ms": load_ms, "pass_ms": pass_ms, "write_ms": write_ms, "total_ms": ms(t0)}))
}

fn engine(program: &Path, input: &Path, output: &Path) -> Result<Value, String> {
    use rlx_rules_core::{apply, graph::Graph, program::Program, registry::Registry};
    let t0 = Instant::now();
    let text = std::fs::read_to_string(program).map_err(|e| format!("{}: {e}", program.display()))?;
    let prog = Program::from_json_str(&text).map_err(|e| format!("{}: {e}", program.display()))?;
    let program_ms = ms(t0);
    let t1 = Instant::now();
    let (graph, _warnings) = Graph::from_path(input, Registry::builtin()).map_err(|e| e.to_string())?;
    let load_ms = ms(t1);
    let t2 = Instant::now();
    let (fused, report) = apply::apply(graph, &prog, &Map::new(), Registry::builtin(), &apply::ApplyOptions::default())
        .map_err(|e| e.to_string())?;
    let pass_ms = ms(t2);
    let t3 = Instant::now();
    fused.write_atomic(output, false).map_err(|e| e.to_string())?;
    let write_ms = ms(t3);
    let phases: f64 = report.phases.iter().map(|p| p.time_ms).sum();
    Ok(json!({"mode": "engine", "nodes_before": report.nodes_before, "nodes_after": report.nodes_after,
              "rewrites": report.rewrites, "program_ms": program_ms, "load_ms": load_ms, "pass_ms": pass_ms,
              "phases_ms": phases, "write_ms": write_ms, "total_ms": ms(t0)}))
}

/// The load and the write of a graph, step by step (no pass): the file read, the parse with its checks, the checks
/// alone, the printing into memory, and the atomic write.
fn io_phases(input: &Path, output: &Path) -> Result<Value, String> {
    use rlx_rules_core::{graph::Graph, registry::Registry};
    let t = Instant::now();
    let bytes = std::fs::read(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let read_ms = ms(t);
    let t = Instant::now();
    let (graph, _) = Graph::from_json_slice(&bytes, Registry::builtin()).map_err(|e| e.to_string())?;
    let parse_check_ms = ms(t);
    drop(bytes);
    let t = Instant::now();
    graph.validate(Registry::builtin()).map_err(|e| e.to_string())?;
    let check_ms = ms(t);
    let t = Instant::now();
    let (_, _) = Graph::from_path(input, Registry::builtin()).map_err(|e| e.to_string())?;
    let load_ms = ms(t);
    let t = Instant::now();
    let mut text = Vec::new();
    graph.write_to(&mut text, false).map_err(|e| e.to_string())?;
    let print_ms = ms(t);
    let t = Instant::now();
    graph.write_atomic(output, false).map_err(|e| e.to_string())?;
    let write_ms = ms(t);
    Ok(json!({"mode": "io", "nodes": graph.nodes.len(), "read_ms": read_ms, "parse_check_ms": parse_check_ms,
              "check_ms": check_ms, "load_ms": load_ms, "print_ms": print_ms, "write_ms": write_ms}))
}

/// Where the engine's apply spends time outside its rule phases: the same steps apply() runs, timed one by one.
fn breakdown(program: &Path, input: &Path) -> Result<Value, String> {
    use rlx_rules_core::{apply, graph::Graph, program::Program, registry::Registry, workgraph::WorkGraph};
    let text = std::fs::read_to_string(program).map_err(|e| e.to_string())?;
    let prog = Program::from_json_str(&text).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let (graph, _) = Graph::from_path(input, Registry::builtin()).map_err(|e| e.to_string())?;
    let load_ms = ms(t);
    let copy = graph.clone();
    let t = Instant::now();
    let work = WorkGraph::new(copy);
    let workgraph_new_ms = ms(t);
    let t = Instant::now();
    let _ = work.op_counts();
    let op_counts_ms = ms(t);
    let t = Instant::now();
    let out = work.into_graph(Registry::builtin()).map_err(|e| e.to_string())?;
    let into_graph_ms = ms(t);
    let t = Instant::now();
    drop(out);
    let drop_ms = ms(t);
    let t = Instant::now();
    let (_, report) = apply::apply(graph, &prog, &Map::new(), Registry::builtin(), &apply::ApplyOptions::default())
        .map_err(|e| e.to_string())?;
    let apply_ms = ms(t);
    let phases: Vec<Value> = report.phases.iter().map(|p| json!([p.name, p.time_ms])).collect();
    Ok(json!({"mode": "breakdown", "load_ms": load_ms, "workgraph_new_ms": workgraph_new_ms,
              "op_counts_ms_each_of_2": op_counts_ms, "into_graph_ms": into_graph_ms, "drop_ms": drop_ms,
              "apply_ms": apply_ms, "phases_ms": phases}))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["handwritten", input, output] => handwritten(Path::new(input), Path::new(output)),
        ["engine", program, input, output] => engine(Path::new(program), Path::new(input), Path::new(output)),
        ["breakdown", program, input] => breakdown(Path::new(program), Path::new(input)),
        ["io", input, output] => io_phases(Path::new(input), Path::new(output)),
        _ => {
            eprintln!("usage: seed-pass-rust handwritten IN OUT\n       seed-pass-rust engine PROGRAM_JSON IN OUT");
            std::process::exit(2);
        }
    };
    match result {
        Ok(times) => println!("{times}"),
        Err(e) => {
            eprintln!("seed-pass-rust: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BERT encoder from primitive ops, as rlx_rules.examples.bert_encoder builds it (hidden 64, 4 heads).
    fn bert(layers: usize, batch: i64, output_inside: bool) -> Doc {
        let mut nodes: Vec<Node> = Vec::new();
        let mut add = |op: &str, inputs: &[u64], attrs: Value, shape: &[i64]| -> u64 {
            let id = nodes.len() as u64;
            let Value::Object(attrs) = attrs else { panic!() };
            nodes.push(Node {
                id,
                op: op.into(),
                name: None,
                inputs: inputs.to_vec(),
                attrs,
                shape: Some(shape.iter().map(|&d| json!(d)).collect()),
                dtype: Some("f32".into()),
            });
            id
        };
        let (h, s, f) = (64i64, 8i64, 256i64);
        let mut x = add("Input", &[], json!({}), &[batch, s, h]);
        let mask = add("Input", &[], json!({}), &[batch, s]);
        let mut extra_out = Vec::new();
        for _ in 0..layers {
            let (w, b) = (add("Param", &[], json!({}), &[h, 3 * h]), add("Param", &[], json!({}), &[3 * h]));
            let mm = add("MatMul", &[x, w], json!({}), &[batch, s, 3 * h]);
            let qkv = add("Add", &[b, mm], json!({}), &[batch, s, 3 * h]);
            let n: Vec<u64> = (0..3)
                .map(|j| add("Narrow", &[qkv], json!({"axis": 2, "start": j * h, "len": h}), &[batch, s, h]))
                .collect();
            let attn = add("Attention", &[n[0], n[1], n[2], mask],
                json!({"num_heads": 4, "head_dim": 16, "mask_kind": "Custom", "score_scale": null, "attn_logit_softcap": null}),
                &[batch, s, h]);
            if output_inside {
                extra_out.push(attn);
            }
            let (ow, ob) = (add("Param", &[], json!({}), &[h, h]), add("Param", &[], json!({}), &[h]));
            let o = add("MatMul", &[attn, ow], json!({}), &[batch, s, h]);
            let o = add("Add", &[o, ob], json!({}), &[batch, s, h]);
            let r = add("Add", &[o, x], json!({}), &[batch, s, h]);
            let (w1, b1) = (add("Param", &[], json!({}), &[h, f]), add("Param", &[], json!({}), &[f]));
            let up = add("MatMul", &[r, w1], json!({}), &[batch, s, f]);
            let up = add("Add", &[up, b1], json!({}), &[batch, s, f]);
            let g = add("Gelu", &[up], json!({}), &[batch, s, f]);
            let (w2, b2) = (add("Param", &[], json!({}), &[f, h]), add("Param", &[], json!({}), &[h]));
            let d = add("MatMul", &[g, w2], json!({}), &[batch, s, h]);
            let d = add("Add", &[d, b2], json!({}), &[batch, s, h]);
            x = add("Add", &[d, r], json!({}), &[batch, s, h]);
        }
        extra_out.push(x);
        Doc { format: "rlx-graph".into(), version: 1, name: None, nodes, outputs: extra_out }
    }

    fn counts(doc: &Doc) -> std::collections::BTreeMap<String, usize> {
        let mut c = std::collections::BTreeMap::new();
        for n in &doc.nodes {
            *c.entry(n.op.clone()).or_insert(0) += 1;
        }
        c
    }

    #[test]
    fn two_layers_fuse_twice() {
        let mut doc = bert(2, 1, false);
        let (before, after, rewrites) = run_passes(&mut doc).unwrap();
        let c = counts(&doc);
        assert_eq!(c.get("FusedAttentionBlock"), Some(&2));
        assert_eq!(c.get("FusedMatMulBiasAct"), Some(&4));
        assert_eq!(c.get("MatMul"), None);
        assert_eq!(c.get("Gelu"), None);
        assert_eq!(rewrites, 2 * 5);
        assert_eq!(before - after, 2 * 10);
        // Inputs of the fused block in the seed's order; the fused node keeps the out projection's id.
        let fab = doc.nodes.iter().find(|n| n.op == "FusedAttentionBlock").unwrap();
        assert_eq!(fab.inputs, vec![0, 2, 10, 1, 3, 11]);
        assert_eq!(fab.id, 13);
        // Written back topologically ordered, with every input present.
        let pos: HashMap<u64, usize> = doc.nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
        assert!(doc.nodes.iter().enumerate().all(|(i, n)| n.inputs.iter().all(|j| pos[j] < i)));
    }

    #[test]
    fn gate_and_outputs_block_attention_fusion() {
        let mut big = bert(1, 16, false); // 16 × 8 = 128 > 64
        run_passes(&mut big).unwrap();
        assert_eq!(counts(&big).get("FusedAttentionBlock"), None);
        assert_eq!(counts(&big).get("FusedMatMulBiasAct"), Some(&4));
        let mut out = bert(1, 1, true); // the Attention is a graph output
        run_passes(&mut out).unwrap();
        assert_eq!(counts(&out).get("FusedAttentionBlock"), None);
        assert_eq!(counts(&out).get("Attention"), Some(&1));
    }
}
