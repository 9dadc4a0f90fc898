//! Graph model of graph.json: load, validate, topologically order and write atomically.
//!
//! The format is documented in `docs/graph-format.md`. Loading runs in three steps:
//! [`load`] reads the JSON leniently into raw records (so a wrong type becomes an error that
//! names the node and the field, not a bare serde position), [`Graph::validate`] checks the
//! structure against the [`Registry`], and [`Graph::toposort`] orders the nodes. [`write`] prints
//! the graph back, keeping unknown fields.

mod check;
mod fast;
mod ids;
mod lean;
mod lenient;
mod load;
mod nodes;
mod read;
#[cfg(test)]
mod scan_tests;
mod split;
mod write;

pub(crate) use check::{check_node_fields, check_registry};
pub use ids::{IdHasher, IdIndex, IdMap};
pub use lean::{Fields, Interner, Shape, Sym};
pub use read::DEFAULT_MAX_BYTES;
pub use write::Writeback;

use std::fmt;
use std::path::Path;

use serde_json::{Map, Value};

use crate::registry::Registry;

/// The id of a node, unique within a graph.
pub type NodeId = u64;

/// A node's input ids: up to two kept inline (most ops have one or two), more on the heap; a slice to read.
pub type Inputs = smallvec::SmallVec<[NodeId; 2]>;

/// A node's name: up to 24 bytes kept inline (most names), longer ones on the heap; a `str` to read.
pub type Name = compact_str::CompactString;

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
    pub name: Option<Name>,
    pub inputs: Inputs,
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
            inputs: Inputs::new(),
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
        let checked = match load::parse(bytes, max_nodes, registry)? {
            (graph, Some(verdict)) => (graph, verdict?), // checked while read
            (graph, None) => Graph::checked(graph, registry)?,
        };
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
}
