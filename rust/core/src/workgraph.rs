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

use crate::graph::{Dim, Graph, IdIndex, Interner, Name, Node, NodeId, Shape, Sym};
use crate::kernels::simd::prefetch;

mod lists;
mod pages;
mod result;

use lists::{Head, Lists, OpTable};
use pages::huge_vec;

/// A `rank` entry that sends the reader to the node itself.
const ASK_NODE: u8 = u8::MAX;

/// The rank of `node`'s shape as a `rank` entry.
fn flat_rank(node: &Node) -> u8 {
    node.shape.as_ref().and_then(|s| u8::try_from(s.len()).ok()).filter(|&r| r != ASK_NODE).unwrap_or(ASK_NODE)
}

/// The flat fields of one node that matching and editing read, side by side: in a large graph a candidate then
/// costs one or two cache lines, where an array per field cost one miss per field.
#[derive(Clone, Copy, Debug, Default)]
struct Hot {
    id: NodeId,
    /// The op, as an index into `op_names`.
    op: u32,
    /// Input edges: the node reads `in_data[in_start..in_start + in_len]` (arena indices), in input order.
    in_start: u32,
    in_len: u32,
    /// Consumer edges: (consumer, input edge); a node that uses this one twice appears twice.
    consumers: Head,
    /// How many consumer entries repeat a consumer already listed (so `uses` is a subtraction).
    repeated: u32,
    /// How many times the node appears in the graph outputs.
    outputs: u32,
    /// The rank of the shape ([`ASK_NODE`]: no shape, or a rank too large for it).
    rank: u8,
    alive: bool,
}

pub struct WorkGraph<'g> {
    /// The loaded nodes (borrowed or owned), then the nodes rewrites added, by arena index.
    base: Cow<'g, [Node]>,
    added: Vec<Node>,
    /// Per node, by arena index.
    hot: Vec<Hot>,
    /// Input edges (see [`Hot::in_start`]).
    in_data: Vec<u32>,
    /// For each input edge, its position in the producer's consumer list.
    in_pos: Vec<u32>,
    /// The consumer lists (see [`Hot::consumers`]).
    consumers: Lists,
    /// Sort key for the written order: (position of the original node it replaces, sequence).
    /// (A loaded node's key is (its index, 0); only the added nodes' keys are kept, by added index.)
    added_key: Vec<(u32, u32)>,
    op_names: Vec<Sym>,
    op_index: HashMap<Sym, u32>,
    /// Shapes and dtypes of created nodes, shared.
    interner: Interner,
    /// Per op (by index), its nodes, live or dead, in arena order.
    by_op: Vec<Vec<u32>>,
    /// Per op (by index), how many of its nodes are live.
    live_by_op: Vec<u32>,
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

/// The flat form of the loaded nodes, filled in one pass over them.
#[derive(Default)]
struct Flat {
    hot: Vec<Hot>,
    in_data: Vec<u32>,
    ops: OpTable,
    max_id: Option<NodeId>,
}

impl Flat {
    /// One pass over `base`, mapping input ids to positions by `index`, or (None) taking each id as its position,
    /// as writers number nodes 0..n; None when a node breaks that numbering (the caller then builds an index).
    /// A loaded graph is validated: ids are unique and every input is a node (an input that is not yet counts
    /// as node 0, and fails the final check).
    fn fill(base: &[Node], index: Option<&IdIndex>) -> Option<Flat> {
        let n = base.len();
        // Room for the nodes that rewrites add, and a first guess at the edges (untouched room costs no memory).
        let mut hot: Vec<Hot> = huge_vec(n + n / 4 + 16);
        let mut in_data = huge_vec(2 * n + 16);
        let mut ops = OpTable::default();
        let mut max_id = None;
        for (i, node) in base.iter().enumerate() {
            // Entries are written in order (an input of a graph that is not topologically ordered gets its entry
            // early, to count its consumers).
            if hot.len() == i {
                hot.push(Hot::default());
            }
            let first = in_data.len();
            for &id in &node.inputs {
                let j = match index {
                    None if id < n as NodeId => id as u32,
                    None => 0,
                    Some(index) => index.get(id).unwrap_or(0) as u32,
                };
                if j as usize >= hot.len() {
                    hot.resize(j as usize + 1, Hot::default());
                }
                if in_data[first..].contains(&j) {
                    hot[j as usize].repeated += 1;
                }
                in_data.push(j);
                // The expected length of j's consumer list (see `Lists::with_lengths`).
                hot[j as usize].consumers.cap += 1;
            }
            if index.is_none() && node.id != i as NodeId {
                return None;
            }
            max_id = max_id.max(Some(node.id));
            let op = ops.intern(&node.op);
            ops.by_op[op as usize].push(i as u32);
            let h = &mut hot[i];
            h.id = node.id;
            h.op = op;
            h.in_start = first as u32;
            h.in_len = (in_data.len() - first) as u32;
            h.rank = flat_rank(node);
            h.alive = true;
        }
        Some(Flat { hot, in_data, ops, max_id })
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
        // Writers number nodes 0..n in order, and then an id is its position; else an index is built.
        let (flat, index) = match Flat::fill(&base, None) {
            Some(flat) => (flat, None),
            None => {
                let index = IdIndex::new(base.iter().map(|node| node.id), n).unwrap_or(IdIndex::Dense(Vec::new()));
                // With an index, the pass never gives up.
                (Flat::fill(&base, Some(&index)).unwrap_or_default(), Some(index))
            }
        };
        let Flat { mut hot, mut in_data, mut ops, max_id } = flat;
        let edges = in_data.len();
        // Room for the edges that rewrites add.
        let e_room = edges + edges / 4 + 16;
        in_data.reserve(e_room - edges);
        let mut consumers = Lists::with_lengths(hot.iter_mut().map(|h| &mut h.consumers), e_room + n + n / 4 + 16);
        let mut in_pos = huge_vec(e_room);
        in_pos.resize(edges, 0u32);
        for i in 0..n {
            let h = hot[i];
            for e in h.in_start..h.in_start + h.in_len {
                let j = in_data[e as usize] as usize;
                in_pos[e as usize] = consumers.push(&mut hot[j].consumers, (i as u32, e));
            }
        }
        for &id in &outputs {
            let i = match &index {
                None => (id < n as NodeId).then_some(id as usize),
                Some(index) => index.get(id),
            };
            if let Some(i) = i {
                hot[i].outputs += 1;
            }
        }
        let next_id = max_id.map_or(0, |m| m + 1);
        let input_op = ops.lookup(&Sym::from("Input"));
        WorkGraph {
            hot,
            added_key: Vec::with_capacity(n / 4 + 16),
            base,
            // Room for the nodes rewrites add (untouched room costs no memory; growing would copy every node).
            added: huge_vec(n / 4 + 16),
            in_data,
            in_pos,
            consumers,
            op_names: ops.names,
            op_index: ops.index,
            live_by_op: ops.by_op.iter().map(|list| list.len() as u32).collect(),
            by_op: ops.by_op,
            interner: Interner::default(),
            next_id,
            sequence: 0,
            name,
            outputs,
            extra,
            live: n,
            created: Vec::with_capacity(n / 4 + 16),
            forwarded: Vec::new(),
            input_op,
        }
    }

    /// Number of arena slots (live and dead).
    pub fn len(&self) -> usize {
        self.hot.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hot.is_empty()
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
        self.hot[i].alive
    }

    /// The id of node `i` (a flat read: the node itself is not touched).
    pub fn id(&self, i: usize) -> NodeId {
        self.hot[i].id
    }

    /// The inputs of node `i`, as arena indices, in input order.
    pub fn inputs(&self, i: usize) -> &[u32] {
        let h = &self.hot[i];
        &self.in_data[h.in_start as usize..(h.in_start + h.in_len) as usize]
    }

    /// A hint that node `i` will be matched soon: brings its flat fields toward the cache (a candidate further
    /// ahead than the one given to [`prefetch_node`](Self::prefetch_node)). Never reads memory it hints at.
    #[inline]
    pub fn prefetch_flat(&self, i: usize) {
        if i < self.hot.len() {
            prefetch(self.hot.as_ptr().wrapping_add(i).cast());
        }
    }

    /// A hint that node `i` will be matched next: brings its input edges and the node itself toward the cache.
    #[inline]
    pub fn prefetch_node(&self, i: usize) {
        if let Some(h) = self.hot.get(i) {
            prefetch(self.in_data.as_ptr().wrapping_add(h.in_start as usize).cast());
            let node: *const u8 = (self.node(i) as *const Node).cast();
            for line in (0..std::mem::size_of::<Node>()).step_by(64) {
                prefetch(node.wrapping_add(line).cast());
            }
        }
    }

    /// Input `k` of node `i`.
    pub fn input(&self, i: usize, k: usize) -> Option<usize> {
        self.inputs(i).get(k).map(|&j| j as usize)
    }

    /// The live consumers of node `i`, once per use, in no particular order.
    pub fn consumers(&self, i: usize) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.consumers.get(&self.hot[i].consumers).iter().map(|&(c, _)| c as usize)
    }

    /// Number of consumer entries of node `i` (a node that uses it twice counts twice).
    pub fn consumer_count(&self, i: usize) -> usize {
        self.hot[i].consumers.len as usize
    }

    /// Number of distinct live consumer nodes (graph outputs do not count).
    pub fn uses(&self, i: usize) -> usize {
        let h = &self.hot[i];
        (h.consumers.len - h.repeated) as usize
    }

    pub fn is_output(&self, i: usize) -> bool {
        self.hot[i].outputs > 0
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
        &self.op_names[self.hot[i].op as usize]
    }

    /// The op of node `i`, as an op index.
    pub fn op_id(&self, i: usize) -> u32 {
        self.hot[i].op
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
        self.live_by_op.push(0);
        k
    }

    /// The name of op index `op`.
    pub fn op_name(&self, op: u32) -> &Sym {
        &self.op_names[op as usize]
    }

    /// The rank of node `i`'s shape (None: it has no shape).
    pub fn rank(&self, i: usize) -> Option<usize> {
        match self.hot[i].rank {
            ASK_NODE => self.node(i).shape.as_ref().map(|s| s.len()),
            r => Some(r as usize),
        }
    }

    /// Whether node `i` is a graph `Input`.
    pub fn is_input(&self, i: usize) -> bool {
        self.hot[i].op == self.input_op
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
    pub fn take_name(&mut self, i: usize) -> Option<Name> {
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
        if !self.hot[i].alive {
            return;
        }
        self.hot[i].alive = false;
        self.live -= 1;
        self.live_by_op[self.hot[i].op as usize] -= 1;
        let (s, t) = (self.hot[i].in_start as usize, (self.hot[i].in_start + self.hot[i].in_len) as usize);
        for e in s..t {
            let j = self.in_data[e] as usize;
            if self.in_data[s..e].contains(&(j as u32)) {
                self.hot[j].repeated -= 1;
            }
            if let Some((_, moved)) = self.consumers.swap_remove(&mut self.hot[j].consumers, self.in_pos[e]) {
                self.in_pos[moved as usize] = self.in_pos[e];
            }
        }
    }

    /// Append a node whose inputs are the live arena nodes `inputs`, ordered at `position`.
    pub fn add(&mut self, mut node: Node, inputs: &[usize], position: u32) -> usize {
        let op = self.intern_op(&node.op);
        // Share the op, and a shape or dtype that no other node holds yet, with the nodes that have the same.
        node.op = self.op_names[op as usize].clone();
        if let Some(shape) = node.shape.as_mut().filter(|s| s.is_unique()) {
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
        let i = self.hot.len();
        let in_start = self.in_data.len() as u32;
        for (k, &j) in inputs.iter().enumerate() {
            if inputs[..k].contains(&j) {
                self.hot[j].repeated += 1;
            }
            let e = self.in_data.len() as u32;
            self.in_data.push(j as u32);
            self.in_pos.push(self.consumers.push(&mut self.hot[j].consumers, (i as u32, e)));
        }
        self.hot.push(Hot {
            id: node.id,
            op,
            in_start,
            in_len: inputs.len() as u32,
            consumers: self.consumers.add_list(),
            repeated: 0,
            outputs: 0,
            rank: flat_rank(&node),
            alive: true,
        });
        self.by_op[op as usize].push(i as u32);
        self.live_by_op[op as usize] += 1;
        self.sequence += 1;
        self.added_key.push((position, self.sequence));
        self.added.push(node);
        self.live += 1;
        self.created.push(i as u32);
        i
    }

    /// Move the consumers and output uses of `old` (dead or about to die) onto `new`, which has the same id
    /// and no consumers yet.
    pub fn redirect(&mut self, old: usize, new: usize) {
        debug_assert_eq!(self.hot[new].consumers.len, 0);
        // The consumer list moves whole (the empty one of `new` goes to `old`), so every edge keeps its place in it.
        let empty = self.hot[new].consumers;
        let list = std::mem::replace(&mut self.hot[old].consumers, empty);
        self.hot[new].consumers = list;
        for &(_, e) in self.consumers.get(&list) {
            self.in_data[e as usize] = new as u32;
        }
        let (repeated, outputs) = (std::mem::take(&mut self.hot[old].repeated), std::mem::take(&mut self.hot[old].outputs));
        self.hot[new].repeated += repeated;
        self.hot[new].outputs += outputs;
    }

    /// Move the consumers and output uses of `old` (dead or about to die) onto `new`, an existing live node
    /// with another id (a forwarding rewrite). The consumers' input ids are fixed in `into_graph`.
    pub fn forward(&mut self, old: usize, new: usize) {
        let same_id = self.hot[old].id == self.hot[new].id;
        for k in Lists::take(&mut self.hot[old].consumers) {
            let (c, e) = self.consumers.data[k];
            if self.inputs(c as usize).contains(&(new as u32)) {
                self.hot[new].repeated += 1;
            }
            self.in_data[e as usize] = new as u32;
            self.in_pos[e as usize] = self.consumers.push(&mut self.hot[new].consumers, (c, e));
            if !same_id {
                self.forwarded.push(c);
            }
        }
        self.hot[old].repeated = 0;
        if self.hot[old].outputs > 0 {
            let outputs = std::mem::take(&mut self.hot[old].outputs);
            self.hot[new].outputs += outputs;
            let (from, to) = (self.hot[old].id, self.hot[new].id);
            self.outputs.iter_mut().filter(|o| **o == from).for_each(|o| *o = to);
        }
    }

    /// Count live nodes per op (kept up to date by every edit, so this reads no node).
    pub fn op_counts(&self) -> std::collections::BTreeMap<String, usize> {
        self.op_names
            .iter()
            .zip(&self.live_by_op)
            .filter(|(_, &n)| n > 0)
            .map(|(op, &n)| (op.to_string(), n as usize))
            .collect()
    }

}
