//! The mutable graph that rules run on: flat arenas of nodes, input and consumer edges, and an index by op.
//!
//! Nodes are never moved: a removed node is marked dead, and a new node is appended. A node that
//! replaces a matched root takes over the root's id, so consumers and graph outputs, which refer
//! to ids, need no change; only the arena-index edges are redirected. Every edit costs time in
//! proportion to the edges it touches, never to the graph or to a node's consumer count: each input
//! edge knows its place in its producer's consumer list, so removing a consumer is a swap.
//! The loaded nodes may be borrowed (the graph is then copied only where it survives, at the end).

use std::borrow::Cow;
use std::collections::HashMap;

use crate::graph::{Dim, Graph, IdIndex, Interner, Node, NodeId, Shape, Sym};

mod lists;
mod result;

use lists::{Lists, OpTable};

/// A `rank` entry that sends the reader to the node itself.
const ASK_NODE: u8 = u8::MAX;

/// The rank of `node`'s shape as a `rank` entry.
fn flat_rank(node: &Node) -> u8 {
    node.shape.as_ref().and_then(|s| u8::try_from(s.len()).ok()).filter(|&r| r != ASK_NODE).unwrap_or(ASK_NODE)
}


pub struct WorkGraph<'g> {
    /// The loaded nodes (borrowed or owned), then the nodes rewrites added, by arena index.
    base: Cow<'g, [Node]>,
    added: Vec<Node>,
    alive: Vec<bool>,
    /// Input edges: node i reads `in_data[in_start[i]..in_start[i + 1]]` (arena indices), in input order.
    in_start: Vec<u32>,
    in_data: Vec<u32>,
    /// For each input edge, its position in the producer's consumer list.
    in_pos: Vec<u32>,
    /// Consumer edges of each node: (consumer, input edge); a node that uses x twice appears twice.
    consumers: Lists,
    /// Per node, how many consumer entries repeat a consumer already listed (so `uses` is a subtraction).
    repeated: Vec<u32>,
    /// How many times each node appears in the graph outputs.
    output_count: Vec<u32>,
    /// Sort key for the written order: (position of the original node it replaces, sequence).
    /// (A loaded node's key is (its index, 0); only the added nodes' keys are kept, by added index.)
    added_key: Vec<(u32, u32)>,
    /// The op of each node, as an index into `op_names` (flat, so the matcher's op checks touch no node).
    op_of: Vec<u32>,
    /// The rank of each node's shape, flat like `op_of` ([`ASK_NODE`]: no shape, or a rank too large for it).
    rank: Vec<u8>,
    op_names: Vec<Sym>,
    op_index: HashMap<Sym, u32>,
    /// Shapes and dtypes of created nodes, shared.
    interner: Interner,
    /// Per op (by index), its nodes, live or dead, in arena order.
    by_op: Vec<Vec<u32>>,
    next_id: NodeId,
    sequence: u32,
    name: Option<String>,
    outputs: Vec<NodeId>,
    extra: serde_json::Map<String, serde_json::Value>,
    live: usize,
    /// Arena indices of the nodes that rewrites created.
    created: Vec<u32>,
    /// Nodes whose inputs a forwarding rewrite moved to a node with another id (their id lists are rewritten at
    /// the end; duplicates and dead nodes possible).
    forwarded: Vec<u32>,
    /// The op index of `Input`.
    input_op: u32,
}

impl WorkGraph<'static> {
    /// Build from a loaded (hence valid and topologically ordered) graph, taking its nodes.
    pub fn new(graph: Graph) -> WorkGraph<'static> {
        let Graph { name, nodes, outputs, extra } = graph;
        WorkGraph::build(Cow::Owned(nodes), name, outputs, extra)
    }
}

impl<'g> WorkGraph<'g> {
    /// Build over a loaded graph without copying its nodes.
    pub fn borrowed(graph: &'g Graph) -> WorkGraph<'g> {
        WorkGraph::build(Cow::Borrowed(&graph.nodes), graph.name.clone(), graph.outputs.clone(), graph.extra.clone())
    }

    fn build(
        base: Cow<'g, [Node]>,
        name: Option<String>,
        outputs: Vec<NodeId>,
        extra: serde_json::Map<String, serde_json::Value>,
    ) -> WorkGraph<'g> {
        let n = base.len();
        // One pass over the nodes for their ids (and edge count), one to build: the nodes are the largest array.
        let mut ids = Vec::with_capacity(n);
        let (mut edges, mut max_id, mut identity) = (0usize, None, true);
        for (i, node) in base.iter().enumerate() {
            ids.push(node.id);
            edges += node.inputs.len();
            max_id = max_id.max(Some(node.id));
            identity &= node.id == i as NodeId;
        }
        // A loaded graph is validated: ids are unique and every input is a node. Writers number nodes 0..n in
        // order, and then an id is its position.
        let index = match identity {
            true => None,
            false => Some(IdIndex::new(ids.iter().copied(), n).unwrap_or(IdIndex::Dense(Vec::new()))),
        };
        drop(ids);
        let position = |id: NodeId| -> u32 {
            match &index {
                None if id < n as NodeId => id as u32,
                None => 0,
                Some(index) => index.get(id).unwrap_or(0) as u32,
            }
        };
        // Room for the nodes and edges that rewrites add (untouched room costs no memory in a large array).
        let (n_room, e_room) = (n + n / 4 + 16, edges + edges / 4 + 16);
        let mut in_start = Vec::with_capacity(n_room + 1);
        let mut in_data = Vec::with_capacity(e_room);
        let mut counts = vec![0u32; n];
        let mut repeated = Vec::with_capacity(n_room);
        repeated.resize(n, 0u32);
        let mut ops = OpTable::default();
        let mut op_of = Vec::with_capacity(n_room);
        let mut rank = Vec::with_capacity(n_room);
        for (i, node) in base.iter().enumerate() {
            rank.push(flat_rank(node));
            in_start.push(in_data.len() as u32);
            let first = in_data.len();
            for &id in &node.inputs {
                let j = position(id);
                if in_data[first..].contains(&j) {
                    repeated[j as usize] += 1;
                }
                in_data.push(j);
                counts[j as usize] += 1;
            }
            let op = ops.intern(&node.op);
            ops.by_op[op as usize].push(i as u32);
            op_of.push(op);
        }
        in_start.push(in_data.len() as u32);
        let mut consumers = Lists::with_lengths(&counts, n_room, e_room + n_room);
        drop(counts);
        let mut in_pos = Vec::with_capacity(e_room);
        in_pos.resize(in_data.len(), 0u32);
        for i in 0..n {
            for e in in_start[i]..in_start[i + 1] {
                in_pos[e as usize] = consumers.push(in_data[e as usize] as usize, (i as u32, e));
            }
        }
        let mut output_count = Vec::with_capacity(n_room);
        output_count.resize(n, 0u32);
        for &id in &outputs {
            let i = match &index {
                None => (id < n as NodeId).then_some(id as usize),
                Some(index) => index.get(id),
            };
            if let Some(i) = i {
                output_count[i] += 1;
            }
        }
        let next_id = max_id.map_or(0, |m| m + 1);
        let mut alive = Vec::with_capacity(n_room);
        alive.resize(n, true);
        let input_op = ops.lookup(&Sym::from("Input"));
        WorkGraph {
            alive,
            added_key: Vec::new(),
            base,
            added: Vec::with_capacity(n / 8),
            in_start,
            in_data,
            in_pos,
            consumers,
            repeated,
            output_count,
            op_of,
            rank,
            op_names: ops.names,
            op_index: ops.index,
            by_op: ops.by_op,
            interner: Interner::default(),
            next_id,
            sequence: 0,
            name,
            outputs,
            extra,
            live: n,
            created: Vec::new(),
            forwarded: Vec::new(),
            input_op,
        }
    }

    /// Number of arena slots (live and dead).
    pub fn len(&self) -> usize {
        self.alive.len()
    }

    pub fn is_empty(&self) -> bool {
        self.alive.is_empty()
    }

    pub fn live_count(&self) -> usize {
        self.live
    }

    /// The node in arena slot `i` (live or dead).
    pub fn node(&self, i: usize) -> &Node {
        match i.checked_sub(self.base.len()) {
            None => &self.base[i],
            Some(k) => &self.added[k],
        }
    }

    pub fn is_alive(&self, i: usize) -> bool {
        self.alive[i]
    }

    /// The inputs of node `i`, as arena indices, in input order.
    pub fn inputs(&self, i: usize) -> &[u32] {
        &self.in_data[self.in_start[i] as usize..self.in_start[i + 1] as usize]
    }

    /// Input `k` of node `i`.
    pub fn input(&self, i: usize, k: usize) -> Option<usize> {
        self.inputs(i).get(k).map(|&j| j as usize)
    }

    /// The live consumers of node `i`, once per use, in no particular order.
    pub fn consumers(&self, i: usize) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.consumers.get(i).iter().map(|&(c, _)| c as usize)
    }

    /// Number of consumer entries of node `i` (a node that uses it twice counts twice).
    pub fn consumer_count(&self, i: usize) -> usize {
        self.consumers.len[i] as usize
    }

    /// Number of distinct live consumer nodes (graph outputs do not count).
    pub fn uses(&self, i: usize) -> usize {
        (self.consumers.len[i] - self.repeated[i]) as usize
    }

    pub fn is_output(&self, i: usize) -> bool {
        self.output_count[i] > 0
    }

    /// The sort key of node `i` in the written order (position of the node it replaced, sequence).
    pub fn order_key(&self, i: usize) -> (u32, u32) {
        match i.checked_sub(self.base.len()) {
            None => (i as u32, 0),
            Some(k) => self.added_key[k],
        }
    }

    /// The op of node `i`.
    pub fn op(&self, i: usize) -> &str {
        &self.op_names[self.op_of[i] as usize]
    }

    /// The op of node `i`, as an op index.
    pub fn op_id(&self, i: usize) -> u32 {
        self.op_of[i]
    }

    /// The op index of `op`, if a node has had it or it was interned.
    pub fn op_index(&self, op: &str) -> Option<u32> {
        self.op_index.get(op).copied()
    }

    /// The op index of `op`, added (with no nodes) if new.
    pub fn intern_op(&mut self, op: &str) -> u32 {
        if let Some(&k) = self.op_index.get(op) {
            return k;
        }
        let k = self.op_names.len() as u32;
        let sym = self.interner.sym(op);
        self.op_index.insert(sym.clone(), k);
        self.op_names.push(sym);
        self.by_op.push(Vec::new());
        k
    }

    /// The name of op index `op`.
    pub fn op_name(&self, op: u32) -> &Sym {
        &self.op_names[op as usize]
    }

    /// The rank of node `i`'s shape (None: it has no shape).
    pub fn rank(&self, i: usize) -> Option<usize> {
        match self.rank[i] {
            ASK_NODE => self.node(i).shape.as_ref().map(|s| s.len()),
            r => Some(r as usize),
        }
    }

    /// Whether node `i` is a graph `Input`.
    pub fn is_input(&self, i: usize) -> bool {
        self.op_of[i] == self.input_op
    }

    /// Nodes with op `op`, live or dead, in arena order.
    pub fn candidates(&self, op: &str) -> &[u32] {
        self.op_index.get(op).map_or(&[], |&k| self.by_op[k as usize].as_slice())
    }

    /// Nodes with op index `op`, live or dead, in arena order.
    pub fn candidates_of(&self, op: u32) -> &[u32] {
        self.by_op.get(op as usize).map_or(&[], Vec::as_slice)
    }

    /// The shared copy of a shape, for a created node.
    pub fn intern_shape(&mut self, dims: &[Dim]) -> Shape {
        self.interner.shape(dims)
    }

    /// The shared copy of a dtype, for a created node.
    pub fn intern_sym(&mut self, s: &str) -> Sym {
        self.interner.sym(s)
    }

    /// The name of node `i`, a rewrite's root that the caller removes in the same rewrite, moved out where the
    /// graph owns it (else copied): the node that replaces the root takes over its name.
    pub fn take_name(&mut self, i: usize) -> Option<String> {
        match i.checked_sub(self.base.len()) {
            Some(k) => self.added[k].name.take(),
            None => match &mut self.base {
                Cow::Owned(nodes) => nodes[i].name.take(),
                Cow::Borrowed(nodes) => nodes[i].name.clone(),
            },
        }
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
        let (s, t) = (self.in_start[i] as usize, self.in_start[i + 1] as usize);
        for e in s..t {
            let j = self.in_data[e] as usize;
            if self.in_data[s..e].contains(&(j as u32)) {
                self.repeated[j] -= 1;
            }
            if let Some((_, moved)) = self.consumers.swap_remove(j, self.in_pos[e]) {
                self.in_pos[moved as usize] = self.in_pos[e];
            }
        }
    }

    /// Append a node whose inputs are the live arena nodes `inputs`, ordered at `position`.
    pub fn add(&mut self, mut node: Node, inputs: &[usize], position: u32) -> usize {
        let op = self.intern_op(&node.op);
        // Share the op, and a shape or dtype that no other node holds yet, with the nodes that have the same.
        node.op = self.op_names[op as usize].clone();
        if let Some(shape) = node.shape.as_mut().filter(|s| std::sync::Arc::strong_count(s) == 1) {
            *shape = self.interner.shape(shape);
        }
        if let Some(dtype) = node.dtype.as_mut() {
            *dtype = self.interner.sym(dtype);
        }
        node.attrs.intern_keys(&mut self.interner);
        self.add_op(node, op, inputs, position)
    }

    /// [`add`](Self::add) for a node whose op is op index `op` (its op, shape, dtype and keys already shared).
    pub fn add_op(&mut self, node: Node, op: u32, inputs: &[usize], position: u32) -> usize {
        let i = self.alive.len();
        self.consumers.add_list();
        self.repeated.push(0);
        for (k, &j) in inputs.iter().enumerate() {
            if inputs[..k].contains(&j) {
                self.repeated[j] += 1;
            }
            let e = self.in_data.len() as u32;
            self.in_data.push(j as u32);
            self.in_pos.push(self.consumers.push(j, (i as u32, e)));
        }
        self.in_start.push(self.in_data.len() as u32);
        self.by_op[op as usize].push(i as u32);
        self.op_of.push(op);
        self.rank.push(flat_rank(&node));
        self.sequence += 1;
        self.added_key.push((position, self.sequence));
        self.added.push(node);
        self.output_count.push(0);
        self.alive.push(true);
        self.live += 1;
        self.created.push(i as u32);
        i
    }

    /// Move the consumers and output uses of `old` (dead or about to die) onto `new`, which has the same id
    /// and no consumers yet.
    pub fn redirect(&mut self, old: usize, new: usize) {
        debug_assert_eq!(self.consumers.len[new], 0);
        // The consumer list moves whole, so every edge keeps its place in it.
        self.consumers.give(old, new);
        for &(_, e) in self.consumers.get(new) {
            self.in_data[e as usize] = new as u32;
        }
        self.repeated[new] += std::mem::take(&mut self.repeated[old]);
        self.output_count[new] += std::mem::take(&mut self.output_count[old]);
    }

    /// Move the consumers and output uses of `old` (dead or about to die) onto `new`, an existing live node
    /// with another id (a forwarding rewrite). The consumers' input ids are fixed in `into_graph`.
    pub fn forward(&mut self, old: usize, new: usize) {
        let same_id = self.node(old).id == self.node(new).id;
        for k in self.consumers.take(old) {
            let (c, e) = self.consumers.data[k];
            if self.inputs(c as usize).contains(&(new as u32)) {
                self.repeated[new] += 1;
            }
            self.in_data[e as usize] = new as u32;
            self.in_pos[e as usize] = self.consumers.push(new, (c, e));
            if !same_id {
                self.forwarded.push(c);
            }
        }
        self.repeated[old] = 0;
        if self.output_count[old] > 0 {
            self.output_count[new] += std::mem::take(&mut self.output_count[old]);
            let (from, to) = (self.node(old).id, self.node(new).id);
            self.outputs.iter_mut().filter(|o| **o == from).for_each(|o| *o = to);
        }
    }

    /// Count live nodes per op (from the op index, which holds every node, live or dead).
    pub fn op_counts(&self) -> std::collections::BTreeMap<String, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for (op, list) in self.op_names.iter().zip(&self.by_op) {
            let n = list.iter().filter(|&&i| self.alive[i as usize]).count();
            if n > 0 {
                counts.insert(op.to_string(), n);
            }
        }
        counts
    }

}
