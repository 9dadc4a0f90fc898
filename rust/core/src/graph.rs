//! Graph model of graph.json: load, validate, topologically order and write atomically.
//!
//! The format is documented in `docs/graph-format.md`. Loading runs in three steps:
//! [`load`] reads the JSON leniently into raw records (so a wrong type becomes an error that
//! names the node and the field, not a bare serde position), [`Graph::validate`] checks the
//! structure against the [`Registry`], and [`Graph::toposort`] orders the nodes. [`write`] prints
//! the graph back, keeping unknown fields.

mod lean;
mod lenient;
mod load;
mod nodes;
mod read;
mod split;
mod write;

pub use lean::{Fields, Interner, Shape, Sym};
pub use read::DEFAULT_MAX_BYTES;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::fmt;
use std::path::Path;

use serde_json::{Map, Value};

use crate::registry::{OpSpec, Registry};

/// The id of a node, unique within a graph.
pub type NodeId = u64;

/// A fast hasher for node ids: a per-process random key mixed with splitmix64. SipHash dominated
/// the cost of indexing large graphs. The random key keeps hostile ids from being chosen to collide.
#[derive(Clone, Copy)]
pub struct IdHasher(u64);

impl Default for IdHasher {
    fn default() -> Self {
        static KEY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        IdHasher(*KEY.get_or_init(|| {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
        }))
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_add(0x9e37_79b9_7f4a_7c15).rotate_left(23);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A map keyed by node id (or index), with [`IdHasher`].
pub type IdMap<V> = HashMap<NodeId, V, BuildHasherDefault<IdHasher>>;

/// Position by node id: a flat table when the ids are dense (as writers number them, 0..n), else a hash map.
pub enum IdIndex {
    Dense(Vec<u32>),
    Sparse(IdMap<u32>),
}

impl IdIndex {
    /// The index of `ids` (the id at position i maps to i), or the positions (first, second) of the first
    /// id given twice, in the order of the second.
    pub fn new(ids: impl Iterator<Item = NodeId> + Clone, n: usize) -> Result<IdIndex, (usize, usize)> {
        let max = ids.clone().max().unwrap_or(0);
        if max < (2 * n as u64).max(1024) && n < u32::MAX as usize {
            let mut table = vec![u32::MAX; max as usize + 1];
            for (i, id) in ids.enumerate() {
                let slot = &mut table[id as usize];
                if *slot != u32::MAX {
                    return Err((*slot as usize, i));
                }
                *slot = i as u32;
            }
            Ok(IdIndex::Dense(table))
        } else {
            let mut map = IdMap::with_capacity_and_hasher(n, Default::default());
            for (i, id) in ids.enumerate() {
                if let Some(first) = map.insert(id, i as u32) {
                    return Err((first as usize, i));
                }
            }
            Ok(IdIndex::Sparse(map))
        }
    }

    /// The position of the node with id `id`.
    pub fn get(&self, id: NodeId) -> Option<usize> {
        let p = match self {
            IdIndex::Dense(table) => *table.get(usize::try_from(id).ok()?)?,
            IdIndex::Sparse(map) => *map.get(&id)?,
        };
        (p != u32::MAX).then_some(p as usize)
    }
}

/// The `format` string a graph.json must carry.
pub const GRAPH_FORMAT: &str = "rlx-graph";
/// The graph.json `version` this crate reads and writes.
pub const GRAPH_VERSION: u64 = 1;
/// How many nodes a graph.json may hold by default (the `*_max` loaders take another limit).
pub const DEFAULT_MAX_NODES: usize = 10_000_000;

/// One dimension of a shape: a static size, or a symbolic name (`"batch"`; the same name means the
/// same size). JSON: an integer ≥ 0 or a non-empty string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Static(i64),
    Symbolic(String),
}

impl Dim {
    /// The size, if static.
    pub fn as_static(&self) -> Option<i64> {
        match self {
            Dim::Static(n) => Some(*n),
            Dim::Symbolic(_) => None,
        }
    }

    /// Whether the size is known.
    pub fn is_static(&self) -> bool {
        matches!(self, Dim::Static(_))
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Symbolic(s) => write!(f, "{s}"),
        }
    }
}

/// One node of a graph. Kept small (136 bytes, and no allocation for the op, dtype or shape when loaded):
/// op names and dtypes are shared [`Sym`]s, shapes shared [`Shape`]s, and attributes and unknown fields
/// [`Fields`] that cost one pointer while empty.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub id: NodeId,
    pub op: Sym,
    pub name: Option<String>,
    pub inputs: Vec<NodeId>,
    /// Attributes, in the order they were read.
    pub attrs: Fields,
    pub shape: Option<Shape>,
    pub dtype: Option<Sym>,
    /// Node fields this crate does not know, kept through a round trip.
    pub extra: Fields,
}

impl Node {
    /// A node with no inputs, attributes, shape or dtype.
    pub fn new(id: NodeId, op: impl Into<Sym>) -> Node {
        Node {
            id,
            op: op.into(),
            name: None,
            inputs: Vec::new(),
            attrs: Fields::new(),
            shape: None,
            dtype: None,
            extra: Fields::new(),
        }
    }

    /// How the node is named in messages: `node 12 ("qkv")`, or `node 12`.
    pub fn label(&self) -> String {
        node_label(self.id, self.name.as_deref())
    }
}

pub(crate) fn node_label(id: NodeId, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("node {id} ({})", quote(name)),
        None => format!("node {id}"),
    }
}

/// A JSON string literal for `s`, for messages.
pub(crate) fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// A graph: nodes (topologically ordered after loading) and the ids of its outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    pub name: Option<String>,
    pub nodes: Vec<Node>,
    pub outputs: Vec<NodeId>,
    /// Top-level fields other than format, version, name, nodes and outputs, kept through a round trip.
    pub extra: Map<String, Value>,
}

/// What went wrong while loading, validating or writing a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphErrorKind {
    /// Not JSON (syntax, end of input, nesting too deep, number out of range).
    Json,
    /// JSON, but not a graph.json: wrong `format` or `version`, a missing or mistyped field, a bad dim.
    Format,
    DuplicateId,
    DanglingInput,
    Cycle,
    BadOutput,
    Arity,
    AttrType,
    Io,
    /// More nodes than the loader's limit ([`DEFAULT_MAX_NODES`] unless given).
    TooLarge,
}

impl GraphErrorKind {
    /// The stable name of the kind (`"cycle"`, `"dangling_input"`, ...), what Python sees as `GraphError.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            GraphErrorKind::Json => "json",
            GraphErrorKind::Format => "format",
            GraphErrorKind::DuplicateId => "duplicate_id",
            GraphErrorKind::DanglingInput => "dangling_input",
            GraphErrorKind::Cycle => "cycle",
            GraphErrorKind::BadOutput => "bad_output",
            GraphErrorKind::Arity => "arity",
            GraphErrorKind::AttrType => "attr_type",
            GraphErrorKind::Io => "io",
            GraphErrorKind::TooLarge => "too_large",
        }
    }
}

/// An error that names the node and the field at fault.
#[derive(Clone, Debug, PartialEq)]
pub struct GraphError {
    pub kind: GraphErrorKind,
    pub message: String,
}

impl GraphError {
    pub fn new(kind: GraphErrorKind, message: impl Into<String>) -> GraphError {
        GraphError {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for GraphError {}

/// Something accepted but worth telling: an op or attribute the registry does not know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    pub node: Option<NodeId>,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Graph {
    /// An empty graph.
    pub fn new(name: Option<String>) -> Graph {
        Graph {
            name,
            nodes: Vec::new(),
            outputs: Vec::new(),
            extra: Map::new(),
        }
    }

    /// Parse, validate and topologically order a graph.json document.
    pub fn from_json_str(
        text: &str,
        registry: &Registry,
    ) -> Result<(Graph, Vec<Warning>), GraphError> {
        Graph::from_json_slice(text.as_bytes(), registry)
    }

    /// [`Graph::from_json_str`] on bytes (UTF-8 JSON).
    pub fn from_json_slice(
        bytes: &[u8],
        registry: &Registry,
    ) -> Result<(Graph, Vec<Warning>), GraphError> {
        Graph::from_json_slice_max(bytes, registry, DEFAULT_MAX_NODES)
    }

    /// [`Graph::from_json_slice`] with a limit on the number of nodes (a `TooLarge` error above it).
    pub fn from_json_slice_max(
        bytes: &[u8],
        registry: &Registry,
        max_nodes: usize,
    ) -> Result<(Graph, Vec<Warning>), GraphError> {
        let checked = Graph::checked(load::parse(bytes, max_nodes)?, registry)?;
        read::check_integers(bytes)?;
        Ok(checked)
    }

    /// A graph as parsed, validated and topologically ordered.
    fn checked(mut graph: Graph, registry: &Registry) -> Result<(Graph, Vec<Warning>), GraphError> {
        let (warnings, order) = graph.check(registry)?;
        if let Some(order) = order {
            graph.apply_order(&order);
        }
        Ok((graph, warnings))
    }

    /// Read, validate and topologically order a graph.json file. Errors start with the path.
    pub fn from_path(
        path: &Path,
        registry: &Registry,
    ) -> Result<(Graph, Vec<Warning>), GraphError> {
        Graph::from_path_max(path, registry, DEFAULT_MAX_NODES)
    }

    /// [`Graph::from_path`] with a limit on the number of nodes (a `TooLarge` error above it).
    pub fn from_path_max(
        path: &Path,
        registry: &Registry,
        max_nodes: usize,
    ) -> Result<(Graph, Vec<Warning>), GraphError> {
        Graph::from_path_limits(path, registry, max_nodes, DEFAULT_MAX_BYTES)
    }

    /// Check an in-memory graph as loading does: unique ids, existing inputs, no cycle, outputs
    /// that are nodes, arity and attribute types from the registry, valid dims. The nodes need not
    /// be in topological order (see [`Graph::toposort`]).
    pub fn validate(&self, registry: &Registry) -> Result<Vec<Warning>, GraphError> {
        self.check(registry).map(|(warnings, _)| warnings)
    }

    /// Order the nodes topologically, stably: Kahn's algorithm that always takes the earliest ready
    /// node in the current order, so an ordered graph is left unchanged.
    pub fn toposort(&mut self) -> Result<(), GraphError> {
        let index = self.id_index()?;
        let ordered = self.inputs_ordered(&index)?;
        if let Some(order) = self.topo_order(&index, ordered)? {
            self.apply_order(&order);
        }
        Ok(())
    }

    /// Map from node id to position in `nodes`; a `DuplicateId` error if two nodes share an id.
    pub fn id_index(&self) -> Result<IdIndex, GraphError> {
        IdIndex::new(self.nodes.iter().map(|n| n.id), self.nodes.len()).map_err(|(first, i)| {
            let (node, other) = (&self.nodes[i], &self.nodes[first]);
            GraphError::new(
                GraphErrorKind::DuplicateId,
                format!(
                    "{}: id {} is already used by the node at index {first} ({}) (field \"id\")",
                    node.label(),
                    node.id,
                    other.label()
                ),
            )
        })
    }

    /// The node with this id (a linear scan; build [`Graph::id_index`] for many lookups).
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// One past the largest id in use (0 for an empty graph): a fresh id for a new node.
    pub fn next_id(&self) -> NodeId {
        self.nodes
            .iter()
            .map(|n| n.id.saturating_add(1))
            .max()
            .unwrap_or(0)
    }

    /// Compact JSON; nodes in topological order (the current order, if the graph has a cycle).
    pub fn to_json_string(&self) -> String {
        write::to_string(self, false)
    }

    /// Indented JSON with one node per line (diff-friendly); nodes in topological order.
    pub fn to_json_string_pretty(&self) -> String {
        write::to_string(self, true)
    }

    /// Write the graph to `path` through a temporary file in the same folder, synced and renamed
    /// over `path`, so that `path` never holds a half-written graph.
    pub fn write_atomic(&self, path: &Path, pretty: bool) -> Result<(), GraphError> {
        write::write_atomic(path, |out| write::write_to(self, pretty, out))
    }

    /// Write the graph as graph.json to `out` (the bytes of [`Graph::to_json_string`], or of the pretty
    /// form), node by node; `out` is neither flushed nor synced. A failed write is a `GraphError` of kind io.
    pub fn write_to<W: std::io::Write>(&self, out: &mut W, pretty: bool) -> Result<(), GraphError> {
        write::write_to(self, pretty, out)
            .map_err(|e| GraphError::new(GraphErrorKind::Io, format!("cannot write the graph: {e}")))
    }

    /// All checks of [`Graph::validate`]; also returns a topological order when the current one
    /// is not (`None`: already ordered).
    fn check(&self, registry: &Registry) -> Result<(Vec<Warning>, Option<Vec<usize>>), GraphError> {
        let index = self.id_index()?;
        for node in &self.nodes {
            check_node_fields(node)?;
        }
        let ordered = self.inputs_ordered(&index)?;
        let order = self.topo_order(&index, ordered)?;
        self.check_outputs(&index)?;
        let warnings = check_registry(self.nodes.iter(), registry)?;
        Ok((warnings, order))
    }

    /// Whether every input comes before its consumer. A `DanglingInput` error for the first input that is not a node.
    pub(crate) fn inputs_ordered(&self, index: &IdIndex) -> Result<bool, GraphError> {
        let mut ordered = true;
        for (i, node) in self.nodes.iter().enumerate() {
            for (k, input) in node.inputs.iter().enumerate() {
                match index.get(*input) {
                    Some(p) => ordered &= p < i,
                    None => {
                        return Err(GraphError::new(
                            GraphErrorKind::DanglingInput,
                            format!(
                                "{}: input {input} does not exist (field \"inputs\"[{k}])",
                                node.label()
                            ),
                        ))
                    }
                }
            }
        }
        Ok(ordered)
    }

    fn check_outputs(&self, index: &IdIndex) -> Result<(), GraphError> {
        for (k, out) in self.outputs.iter().enumerate() {
            if index.get(*out).is_none() {
                return Err(GraphError::new(
                    GraphErrorKind::BadOutput,
                    format!("output {out} is not a node (field \"outputs\"[{k}])"),
                ));
            }
        }
        Ok(())
    }

    /// A stable topological order (positions in `nodes`), or `None` if the nodes are already
    /// ordered; `ordered` comes from [`Graph::inputs_ordered`], which found every input in `index`.
    pub(crate) fn topo_order(
        &self,
        index: &IdIndex,
        ordered: bool,
    ) -> Result<Option<Vec<usize>>, GraphError> {
        if ordered {
            return Ok(None);
        }
        // The position of every input, node after node, in one flat list.
        let positions: Vec<usize> = self.nodes.iter().flat_map(|n| n.inputs.iter().map(|id| index.get(*id).unwrap_or(0))).collect();
        let positions = positions.as_slice();
        let n = self.nodes.len();
        // Where each node's inputs start in `positions`.
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0usize);
        for node in &self.nodes {
            offsets.push(offsets[offsets.len() - 1] + node.inputs.len());
        }
        // Consumers of each node, as a compressed adjacency list.
        let mut start = vec![0usize; n + 1];
        for &p in positions {
            start[p + 1] += 1;
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut consumers = vec![0usize; positions.len()];
        let mut pending = vec![0usize; n];
        for i in 0..n {
            for &p in &positions[offsets[i]..offsets[i + 1]] {
                consumers[fill[p]] = i;
                fill[p] += 1;
            }
            pending[i] = offsets[i + 1] - offsets[i];
        }
        let mut ready: BinaryHeap<Reverse<usize>> =
            (0..n).filter(|&i| pending[i] == 0).map(Reverse).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(Reverse(i)) = ready.pop() {
            order.push(i);
            for &c in &consumers[start[i]..start[i + 1]] {
                pending[c] -= 1;
                if pending[c] == 0 {
                    ready.push(Reverse(c));
                }
            }
        }
        if order.len() == n {
            return Ok(Some(order));
        }
        Err(self.cycle_error(positions, &offsets, &pending))
    }

    /// Find a cycle among the nodes left with pending inputs and describe it.
    fn cycle_error(&self, positions: &[usize], offsets: &[usize], pending: &[usize]) -> GraphError {
        // Every node left has an input that is also left, so walking inputs must loop.
        let Some(first) = pending.iter().position(|&p| p > 0) else {
            return GraphError::new(GraphErrorKind::Cycle, "the graph has a cycle");
        };
        let mut seen_at: HashMap<usize, usize> = HashMap::new();
        let mut path: Vec<usize> = Vec::new();
        let mut cur = first;
        loop {
            if let Some(&at) = seen_at.get(&cur) {
                let cycle = &path[at..];
                let start = self.nodes[cycle[0]].label();
                let mut ids: Vec<String> = cycle
                    .iter()
                    .take(12)
                    .map(|&i| self.nodes[i].id.to_string())
                    .collect();
                if cycle.len() > 12 {
                    ids.push("...".to_string());
                }
                ids.push(self.nodes[cycle[0]].id.to_string());
                return GraphError::new(
                    GraphErrorKind::Cycle,
                    format!(
                        "{start} is on a cycle: {} (each node takes the next as an input; field \"inputs\")",
                        ids.join(" -> ")
                    ),
                );
            }
            seen_at.insert(cur, path.len());
            path.push(cur);
            match positions[offsets[cur]..offsets[cur + 1]]
                .iter()
                .copied()
                .find(|&p| pending[p] > 0)
            {
                Some(p) => cur = p,
                None => return GraphError::new(GraphErrorKind::Cycle, "the graph has a cycle"),
            }
        }
    }

    fn apply_order(&mut self, order: &[usize]) {
        let mut slots: Vec<Option<Node>> = std::mem::take(&mut self.nodes)
            .into_iter()
            .map(Some)
            .collect();
        self.nodes = order
            .iter()
            .filter_map(|&i| slots.get_mut(i).and_then(Option::take))
            .collect();
    }
}

/// Registry lookups by an op's shared string: a loaded graph's ops are a handful of [`Sym`]s, so a short list
/// compared by address answers most lookups without comparing strings (two live `Sym`s at one address and of one
/// length hold the same text).
struct SpecCache<'r> {
    registry: &'r Registry,
    seen: Vec<(*const u8, usize, Option<&'r OpSpec>)>,
}

impl<'r> SpecCache<'r> {
    /// How many ops the list remembers; lookups of others go to the registry.
    const SIZE: usize = 32;

    fn get(&mut self, op: &Sym) -> Option<&'r OpSpec> {
        let key = (op.as_ptr(), op.len());
        if let Some(&(_, _, spec)) = self.seen.iter().find(|(p, n, _)| (*p, *n) == key) {
            return spec;
        }
        let spec = self.registry.get(op);
        if self.seen.len() < Self::SIZE {
            self.seen.push((key.0, key.1, spec));
        }
        spec
    }
}

/// Registry checks (arity, attribute types) of `nodes`.
pub(crate) fn check_registry<'a>(nodes: impl Iterator<Item = &'a Node>, registry: &Registry) -> Result<Vec<Warning>, GraphError> {
    let mut warnings = Vec::new();
    // One warning per unknown op, and per unknown (op, attribute), at its first node.
    let mut unknown_ops: HashMap<&str, (usize, usize)> = HashMap::new(); // op -> (warning, count)
    let mut unknown_attrs: HashMap<(&str, &str), ()> = HashMap::new();
    let mut specs = SpecCache { registry, seen: Vec::new() };
    for node in nodes {
        let Some(spec) = specs.get(&node.op) else {
            match unknown_ops.get_mut(node.op.as_str()) {
                Some((_, count)) => *count += 1,
                None => {
                    unknown_ops.insert(&node.op, (warnings.len(), 1));
                    warnings.push(Warning {
                        node: Some(node.id),
                        message: format!(
                            "{}: op {} is not in the op registry; loaded unchecked and matched by name",
                            node.label(),
                            quote(&node.op)
                        ),
                    });
                }
            }
            continue;
        };
        let n = node.inputs.len();
        if !spec.arity.accepts(n) {
            return Err(GraphError::new(
                GraphErrorKind::Arity,
                format!(
                    "{}: op {} takes {}, found {n} (field \"inputs\")",
                    node.label(),
                    quote(&node.op),
                    spec.arity
                ),
            ));
        }
        for (attr, attr_spec) in &spec.attrs {
            match node.attrs.get(attr) {
                Some(value) if !attr_spec.accepts(value) => {
                    return Err(GraphError::new(
                        GraphErrorKind::AttrType,
                        format!(
                            "{}: attribute {} of op {} must be {}, found {} (field \"attrs\".{})",
                            node.label(),
                            quote(attr),
                            quote(&node.op),
                            attr_spec.expected(),
                            describe_value(value),
                            quote(attr)
                        ),
                    ));
                }
                Some(_) => {}
                None if !attr_spec.optional => {
                    return Err(GraphError::new(
                        GraphErrorKind::AttrType,
                        format!(
                            "{}: op {} needs attribute {} ({}) (field \"attrs\".{})",
                            node.label(),
                            quote(&node.op),
                            quote(attr),
                            attr_spec.expected(),
                            quote(attr)
                        ),
                    ));
                }
                None => {}
            }
        }
        if node.attrs.len() > spec.attrs.len()
            || node.attrs.keys().any(|k| !spec.attrs.contains_key(k.as_str()))
        {
            for key in node.attrs.keys() {
                if !spec.attrs.contains_key(key.as_str())
                    && unknown_attrs
                        .insert((node.op.as_str(), key.as_str()), ())
                        .is_none()
                {
                    warnings.push(Warning {
                        node: Some(node.id),
                        message: format!(
                            "{}: attribute {} is not in the op registry for op {}; kept (field \"attrs\".{})",
                            node.label(),
                            quote(key),
                            quote(&node.op),
                            quote(key)
                        ),
                    });
                }
            }
        }
    }
    // Say how many nodes carry each unknown op.
    for &(w, count) in unknown_ops.values() {
        if count > 1 {
            warnings[w]
                .message
                .push_str(&format!(" ({count} nodes use it)"));
        }
    }
    Ok(warnings)
}

/// Checks of one node that need no other node: a non-empty op, valid dims.
pub(crate) fn check_node_fields(node: &Node) -> Result<(), GraphError> {
    if node.op.is_empty() {
        return Err(GraphError::new(
            GraphErrorKind::Format,
            format!(
                "{}: the op must be a non-empty string (field \"op\")",
                node.label()
            ),
        ));
    }
    if let Some(shape) = &node.shape {
        for (k, dim) in shape.iter().enumerate() {
            let bad = match dim {
                Dim::Static(n) => *n < 0,
                Dim::Symbolic(s) => s.is_empty(),
            };
            if bad {
                let found = match dim {
                    Dim::Static(n) => n.to_string(),
                    Dim::Symbolic(s) => quote(s),
                };
                return Err(GraphError::new(
                    GraphErrorKind::Format,
                    format!(
                        "{}: a dim must be an integer >= 0 or a non-empty string, found {found} (field \"shape\"[{k}])",
                        node.label()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A short description of a JSON value for messages (long values are cut).
pub(crate) fn describe_value(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        let cut: String = text.chars().take(57).collect();
        format!("{cut}...")
    } else {
        text
    }
}
