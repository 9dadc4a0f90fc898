//! The mutable graph that rules run on: an arena of nodes with consumer lists and an index by op.
//!
//! Nodes are never moved: a removed node is marked dead, and a new node is appended. A node that
//! replaces a matched root takes over the root's id, so consumers and graph outputs, which refer
//! to ids, need no change; only the arena-index edges are redirected.

use std::collections::HashMap;

use crate::graph::{Graph, IdMap, Node, NodeId};

pub struct WorkGraph {
    pub nodes: Vec<Node>,
    pub alive: Vec<bool>,
    /// Input edges as arena indices, parallel to `nodes[i].inputs`.
    pub inputs: Vec<Vec<usize>>,
    /// Consumer edges as arena indices; a node that uses x twice appears twice.
    pub consumers: Vec<Vec<usize>>,
    /// How many times each node appears in the graph outputs.
    pub output_count: Vec<u32>,
    /// Sort key for the written order: (position of the original node it replaces, sequence).
    pub order_key: Vec<(usize, u64)>,
    pub by_op: HashMap<String, Vec<usize>>,
    index_of: IdMap<usize>,
    next_id: NodeId,
    sequence: u64,
    name: Option<String>,
    outputs: Vec<NodeId>,
    extra: serde_json::Map<String, serde_json::Value>,
    live: usize,
    /// Arena indices of the nodes that rewrites created.
    created: Vec<usize>,
}

impl WorkGraph {
    /// Build from a loaded (hence valid and topologically ordered) graph.
    pub fn new(graph: Graph) -> WorkGraph {
        let n = graph.nodes.len();
        let mut index_of = IdMap::with_capacity_and_hasher(n, Default::default());
        for (i, node) in graph.nodes.iter().enumerate() {
            index_of.insert(node.id, i);
        }
        let mut inputs = Vec::with_capacity(n);
        let mut consumers = vec![Vec::new(); n];
        let mut by_op: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, node) in graph.nodes.iter().enumerate() {
            let ins: Vec<usize> = node.inputs.iter().map(|id| index_of[id]).collect();
            for &j in &ins {
                consumers[j].push(i);
            }
            inputs.push(ins);
            // Look up by &str first: cloning the op name for every node was a measurable cost.
            match by_op.get_mut(node.op.as_str()) {
                Some(list) => list.push(i),
                None => {
                    by_op.insert(node.op.clone(), vec![i]);
                }
            }
        }
        let mut output_count = vec![0u32; n];
        for id in &graph.outputs {
            output_count[index_of[id]] += 1;
        }
        let next_id = graph.nodes.iter().map(|n| n.id).max().map_or(0, |m| m + 1);
        WorkGraph {
            alive: vec![true; n],
            order_key: (0..n).map(|i| (i, 0)).collect(),
            nodes: graph.nodes,
            inputs,
            consumers,
            output_count,
            by_op,
            index_of,
            next_id,
            sequence: 0,
            name: graph.name,
            outputs: graph.outputs,
            extra: graph.extra,
            live: n,
            created: Vec::new(),
        }
    }

    pub fn live_count(&self) -> usize {
        self.live
    }

    pub fn index_of(&self, id: NodeId) -> Option<usize> {
        self.index_of.get(&id).copied()
    }

    /// Number of distinct live consumer nodes (graph outputs do not count).
    pub fn uses(&self, i: usize) -> usize {
        let c = &self.consumers[i];
        if c.len() <= 16 {
            // no allocation: a consumer counts once, at its first position
            return c.iter().enumerate().filter(|&(k, x)| !c[..k].contains(x)).count();
        }
        let mut seen: Vec<usize> = c.clone();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    }

    pub fn is_output(&self, i: usize) -> bool {
        self.output_count[i] > 0
    }

    /// Live nodes with op `op`, among the first `limit` entries of the index, in arena order.
    pub fn candidates(&self, op: &str) -> &[usize] {
        self.by_op.get(op).map_or(&[], Vec::as_slice)
    }

    pub fn fresh_id(&mut self) -> NodeId {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Remove a node: it must have no live consumers outside nodes removed with it.
    pub fn remove(&mut self, i: usize) {
        if !self.alive[i] {
            return;
        }
        self.alive[i] = false;
        self.live -= 1;
        for k in 0..self.inputs[i].len() {
            let j = self.inputs[i][k];
            if let Some(pos) = self.consumers[j].iter().position(|&c| c == i) {
                self.consumers[j].swap_remove(pos);
            }
        }
    }

    /// Append a node whose inputs are the live arena nodes `inputs`, ordered at `position`.
    pub fn add(&mut self, node: Node, inputs: Vec<usize>, position: usize) -> usize {
        let i = self.nodes.len();
        for &j in &inputs {
            self.consumers[j].push(i);
        }
        match self.by_op.get_mut(node.op.as_str()) {
            Some(list) => list.push(i),
            None => {
                self.by_op.insert(node.op.clone(), vec![i]);
            }
        }
        self.sequence += 1;
        self.order_key.push((position, self.sequence));
        self.index_of.insert(node.id, i);
        self.nodes.push(node);
        self.inputs.push(inputs);
        self.consumers.push(Vec::new());
        self.output_count.push(0);
        self.alive.push(true);
        self.live += 1;
        self.created.push(i);
        i
    }

    /// Ids of the live nodes that rewrites created (the only ones the registry has not checked).
    pub fn created_ids(&self) -> IdMap<()> {
        self.created.iter().filter(|&&i| self.alive[i]).map(|&i| (self.nodes[i].id, ())).collect()
    }

    /// Move the consumers and output uses of `old` (dead or about to die) onto `new`, which has the same id.
    pub fn redirect(&mut self, old: usize, new: usize) {
        let consumers = std::mem::take(&mut self.consumers[old]);
        for &c in &consumers {
            for slot in self.inputs[c].iter_mut() {
                if *slot == old {
                    *slot = new;
                }
            }
        }
        self.consumers[new].extend(consumers);
        self.output_count[new] += std::mem::take(&mut self.output_count[old]);
        self.index_of.insert(self.nodes[new].id, new);
    }

    /// Count live nodes per op (from the op index, which holds every node, live or dead).
    pub fn op_counts(&self) -> std::collections::BTreeMap<String, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for (op, list) in &self.by_op {
            let n = list.iter().filter(|&&i| self.alive[i]).count();
            if n > 0 {
                counts.insert(op.clone(), n);
            }
        }
        counts
    }

    /// The live nodes as a Graph, in (replaced position, sequence) order.
    pub fn into_graph(self) -> Graph {
        let WorkGraph { mut nodes, alive, order_key, name, outputs, extra, .. } = self;
        let mut order: Vec<usize> = (0..nodes.len()).filter(|&i| alive[i]).collect();
        // Keys are unique ((i, 0) for loaded nodes, a fresh sequence number for added ones), so an
        // unstable sort gives the same order.
        order.sort_unstable_by_key(|&i| order_key[i]);
        // Move each live node out once (an empty Node left behind allocates nothing).
        let nodes = order.into_iter().map(|i| std::mem::replace(&mut nodes[i], Node::new(0, String::new()))).collect();
        Graph { name, nodes, outputs, extra }
    }
}
