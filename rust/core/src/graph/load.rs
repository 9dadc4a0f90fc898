//! Lenient serde reading of graph.json into raw records, then conversion with field-level errors.
//!
//! Every field is read into a shape that cannot fail on a wrong type ([`Atom`], [`List`]), so a
//! mistyped field is reported as "node 12: field \"inputs\"[1] ..." instead of a serde position.
//! Only malformed JSON (and nesting deeper than serde_json's recursion limit) fails in serde.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{
    read, split, node_label, quote, Dim, Fields, Graph, GraphError, GraphErrorKind, Interner, Node, NodeId, Sym,
    GRAPH_FORMAT, GRAPH_VERSION,
};

/// Parse graph.json bytes into a [`Graph`] with its nodes in file order (not yet validated).
/// More than `max_nodes` nodes is a `TooLarge` error; the rest of the list is then skipped
/// without being kept, so an oversized file costs time but no memory.
pub(super) fn parse(bytes: &[u8], max_nodes: usize) -> Result<Graph, GraphError> {
    if bytes.starts_with(read::BOM) {
        return Err(read::bom_error());
    }
    // Valid UTF-8 checked once, in bulk, rather than string by string; invalid UTF-8 is left to serde_json, whose
    // error says where.
    let raw = match std::str::from_utf8(bytes) {
        Ok(text) => {
            if let Some(graph) = split::parse(text, max_nodes) {
                return Ok(graph);
            }
            parse_raw(serde_json::Deserializer::from_str(text), max_nodes)
        }
        Err(_) => parse_raw(serde_json::Deserializer::from_slice(bytes), max_nodes),
    };
    raw?.into_graph()
}

/// [`parse`] on JSON that streams in (a FIFO, a device): `reader` stops it at its byte limit, and checks the
/// integers (see [`read::check_integers`]) and the first bytes as they pass.
pub(super) fn parse_stream<R: std::io::Read>(reader: &mut read::Bounded<R>, max_nodes: usize) -> Result<Graph, GraphError> {
    let raw = parse_raw(serde_json::Deserializer::from_reader(&mut *reader), max_nodes);
    reader.finish(raw)?.into_graph()
}

fn parse_raw<'de, R: serde_json::de::Read<'de>>(mut de: serde_json::Deserializer<R>, max_nodes: usize) -> Result<RawGraph, GraphError> {
    GraphSeed(max_nodes)
        .deserialize(&mut de)
        .and_then(|raw| de.end().map(|()| raw))
        .map_err(json_error)
}

fn json_error(e: serde_json::Error) -> GraphError {
    let kind = match e.classify() {
        serde_json::error::Category::Io => GraphErrorKind::Io,
        _ => GraphErrorKind::Json,
    };
    GraphError::new(kind, format!("invalid JSON: {e}"))
}

fn format_error(message: String) -> GraphError {
    GraphError::new(GraphErrorKind::Format, message)
}

/// A JSON value read without keeping the contents of lists and objects.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Atom {
    U64(u64),
    I64(i64),
    F64(f64),
    Str(String),
    Bool(bool),
    Null,
    List,
    Object,
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::U64(v) => write!(f, "{v}"),
            Atom::I64(v) => write!(f, "{v}"),
            Atom::F64(v) => write!(f, "{v:?}"),
            Atom::Str(s) if s.chars().count() > 40 => {
                let cut: String = s.chars().take(37).collect();
                write!(f, "{}...", quote(&cut))
            }
            Atom::Str(s) => f.write_str(&quote(s)),
            Atom::Bool(b) => write!(f, "{b}"),
            Atom::Null => f.write_str("null"),
            Atom::List => f.write_str("a list"),
            Atom::Object => f.write_str("an object"),
        }
    }
}

struct AtomVisitor;

impl<'de> Visitor<'de> for AtomVisitor {
    type Value = Atom;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_u64<E>(self, v: u64) -> Result<Atom, E> {
        Ok(Atom::U64(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Atom, E> {
        Ok(if v >= 0 {
            Atom::U64(v as u64)
        } else {
            Atom::I64(v)
        })
    }
    fn visit_f64<E>(self, v: f64) -> Result<Atom, E> {
        Ok(Atom::F64(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Atom, E> {
        Ok(Atom::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Atom, E> {
        Ok(Atom::Str(v))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Atom, E> {
        Ok(Atom::Bool(v))
    }
    fn visit_unit<E>(self) -> Result<Atom, E> {
        Ok(Atom::Null)
    }
    fn visit_none<E>(self) -> Result<Atom, E> {
        Ok(Atom::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Atom, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Atom::List)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Atom, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Atom::Object)
    }
}

impl<'de> Deserialize<'de> for Atom {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Atom, D::Error> {
        d.deserialize_any(AtomVisitor)
    }
}

/// A list element that converts from an atom (a node id, a dim).
trait Item: Sized {
    fn from_atom(atom: Atom) -> Result<Self, Atom>;
}

impl Item for NodeId {
    fn from_atom(atom: Atom) -> Result<NodeId, Atom> {
        match atom {
            Atom::U64(id) => Ok(id),
            other => Err(other),
        }
    }
}

impl Item for Dim {
    fn from_atom(atom: Atom) -> Result<Dim, Atom> {
        match atom {
            Atom::U64(n) if n <= i64::MAX as u64 => Ok(Dim::Static(n as i64)),
            Atom::Str(s) if !s.is_empty() => Ok(Dim::Symbolic(s)),
            other => Err(other),
        }
    }
}

/// A list of items (`T`: the items, or `()` when they were left in a buffer, see [`ListSeed`]); or the position
/// and value of the first element that is not an item; or whatever stood where a list was expected.
#[derive(Debug)]
pub(super) enum List<T> {
    Items(T),
    Bad(usize, Atom),
    Not(Atom),
}

impl<'de, T: Item> Deserialize<'de> for List<Vec<T>> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<List<Vec<T>>, D::Error> {
        let mut items = Vec::new();
        Ok(match ListSeed(&mut items).deserialize(d)? {
            List::Items(()) => List::Items(items),
            List::Bad(k, atom) => List::Bad(k, atom),
            List::Not(atom) => List::Not(atom),
        })
    }
}

/// Reads a list, its items into the buffer `.0` (cleared first; reused from node to node, so that a node's inputs
/// and shape are copied out once, at their size, and nothing is allocated per list).
struct ListSeed<'a, T>(&'a mut Vec<T>);

impl<'de, T: Item> DeserializeSeed<'de> for ListSeed<'_, T> {
    type Value = List<()>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<List<()>, D::Error> {
        struct V<'a, T>(&'a mut Vec<T>);
        impl<'de, T: Item> Visitor<'de> for V<'_, T> {
            type Value = List<()>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<List<()>, A::Error> {
                let items = self.0;
                items.clear();
                let mut bad = None;
                while let Some(atom) = seq.next_element::<Atom>()? {
                    if bad.is_none() {
                        match T::from_atom(atom) {
                            Ok(item) => items.push(item),
                            Err(atom) => bad = Some((items.len(), atom)),
                        }
                    }
                }
                Ok(match bad {
                    None => List::Items(()),
                    Some((k, atom)) => List::Bad(k, atom),
                })
            }
            fn visit_u64<E>(self, v: u64) -> Result<List<()>, E> {
                Ok(List::Not(Atom::U64(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<List<()>, E> {
                AtomVisitor.visit_i64(v).map(List::Not)
            }
            fn visit_f64<E>(self, v: f64) -> Result<List<()>, E> {
                Ok(List::Not(Atom::F64(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<List<()>, E> {
                Ok(List::Not(Atom::Str(v.to_owned())))
            }
            fn visit_bool<E>(self, v: bool) -> Result<List<()>, E> {
                Ok(List::Not(Atom::Bool(v)))
            }
            fn visit_unit<E>(self) -> Result<List<()>, E> {
                Ok(List::Not(Atom::Null))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<List<()>, A::Error> {
                AtomVisitor.visit_map(map).map(List::Not)
            }
        }
        d.deserialize_any(V(self.0))
    }
}

/// A string read straight into the interner (an op, a dtype, an attribute name), or whatever stood there instead.
#[derive(Debug)]
enum Named {
    Sym(Sym),
    Not(Atom),
}

/// Reads a [`Named`] through the interner `.0`, without a String of its own.
struct NamedSeed<'a>(&'a mut Interner);

impl<'de> DeserializeSeed<'de> for NamedSeed<'_> {
    type Value = Named;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Named, D::Error> {
        struct V<'a>(&'a mut Interner);
        impl<'de> Visitor<'de> for V<'_> {
            type Value = Named;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E>(self, v: &str) -> Result<Named, E> {
                Ok(Named::Sym(self.0.sym(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Named, E> {
                Ok(Named::Not(Atom::U64(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Named, E> {
                AtomVisitor.visit_i64(v).map(Named::Not)
            }
            fn visit_f64<E>(self, v: f64) -> Result<Named, E> {
                Ok(Named::Not(Atom::F64(v)))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Named, E> {
                Ok(Named::Not(Atom::Bool(v)))
            }
            fn visit_unit<E>(self) -> Result<Named, E> {
                Ok(Named::Not(Atom::Null))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Named, A::Error> {
                AtomVisitor.visit_seq(seq).map(Named::Not)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Named, A::Error> {
                AtomVisitor.visit_map(map).map(Named::Not)
            }
        }
        d.deserialize_any(V(self.0))
    }
}

/// An object of attributes, or whatever stood where one was expected.
#[derive(Debug)]
enum Attrs {
    Pairs(Option<String>), // the attributes are in the seed's buffer, in the order read; a key given twice
    Not(Atom),
}

/// Reads [`Attrs`], their names shared through the interner `.0`, the pairs into the buffer `.1` (cleared first).
struct AttrsSeed<'a>(&'a mut Interner, &'a mut Vec<(Sym, Value)>);

/// Above this many attributes, a key given twice is found through a set rather than by scanning.
const SCAN_KEYS: usize = 16;

impl<'de> DeserializeSeed<'de> for AttrsSeed<'_> {
    type Value = Attrs;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Attrs, D::Error> {
        struct V<'a>(&'a mut Interner, &'a mut Vec<(Sym, Value)>);
        impl<'de> Visitor<'de> for V<'_> {
            type Value = Attrs;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Attrs, A::Error> {
                let out = self.1;
                out.clear();
                let mut seen: HashSet<Sym> = HashSet::new();
                let mut dup = None;
                while let Some(key) = map.next_key_seed(KeySeed(&mut *self.0))? {
                    let value: Value = map.next_value()?;
                    if out.len() == SCAN_KEYS {
                        seen.extend(out.iter().map(|(k, _)| k.clone()));
                    }
                    let given = if out.len() < SCAN_KEYS { out.iter().any(|(k, _)| *k == key) } else { !seen.insert(key.clone()) };
                    if given {
                        // as a map would: the value replaced in place, the key kept where it first stood
                        dup.get_or_insert_with(|| key.to_string());
                        if let Some(slot) = out.iter_mut().find(|(k, _)| *k == key) {
                            slot.1 = value;
                        }
                    } else {
                        out.push((key, value));
                    }
                }
                Ok(Attrs::Pairs(dup))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Attrs, A::Error> {
                AtomVisitor.visit_seq(seq).map(Attrs::Not)
            }
            fn visit_u64<E>(self, v: u64) -> Result<Attrs, E> {
                Ok(Attrs::Not(Atom::U64(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Attrs, E> {
                AtomVisitor.visit_i64(v).map(Attrs::Not)
            }
            fn visit_f64<E>(self, v: f64) -> Result<Attrs, E> {
                Ok(Attrs::Not(Atom::F64(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Attrs, E> {
                Ok(Attrs::Not(Atom::Str(v.to_owned())))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Attrs, E> {
                Ok(Attrs::Not(Atom::Bool(v)))
            }
            fn visit_unit<E>(self) -> Result<Attrs, E> {
                Ok(Attrs::Not(Atom::Null))
            }
        }
        d.deserialize_any(V(self.0, self.1))
    }
}

/// An object key read straight into the interner.
struct KeySeed<'a>(&'a mut Interner);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Sym;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Sym, D::Error> {
        struct V<'a>(&'a mut Interner);
        impl<'de> Visitor<'de> for V<'_> {
            type Value = Sym;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E>(self, v: &str) -> Result<Sym, E> {
                Ok(self.0.sym(v))
            }
        }
        d.deserialize_str(V(self.0))
    }
}

/// The key of a node field, matched without allocating for known names.
enum NodeKey {
    Id,
    Op,
    Name,
    Inputs,
    Attrs,
    Shape,
    Dtype,
    Other(String),
}

impl<'de> Deserialize<'de> for NodeKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NodeKey, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NodeKey;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E>(self, v: &str) -> Result<NodeKey, E> {
                Ok(match v {
                    "id" => NodeKey::Id,
                    "op" => NodeKey::Op,
                    "name" => NodeKey::Name,
                    "inputs" => NodeKey::Inputs,
                    "attrs" => NodeKey::Attrs,
                    "shape" => NodeKey::Shape,
                    "dtype" => NodeKey::Dtype,
                    other => NodeKey::Other(other.to_owned()),
                })
            }
        }
        d.deserialize_str(V)
    }
}

/// One element of `nodes`, as read.
#[derive(Debug, Default)]
struct RawNode {
    not_object: Option<Atom>,
    duplicate: Option<String>,
    id: Option<Atom>,
    op: Option<Named>,
    name: Option<Atom>,
    inputs: Option<List<()>>, // the items in the reader's buffers (Buffers)
    attrs: Option<Attrs>,
    shape: Option<List<()>>,
    dtype: Option<Named>,
    extra: Map<String, Value>,
}

pub(super) fn set<T>(slot: &mut Option<T>, value: T, key: &str, duplicate: &mut Option<String>) {
    if slot.is_some() && duplicate.is_none() {
        *duplicate = Some(key.to_string());
    }
    *slot = Some(value);
}

/// Where a node's inputs, dims and attributes are read before they are copied out at their size.
#[derive(Default)]
pub(super) struct Buffers {
    inputs: Vec<NodeId>,
    dims: Vec<Dim>,
    attrs: Vec<(Sym, Value)>,
}

/// Reads the node at index `index`, its op, dtype and attribute names shared through `interner`, and converts it
/// (unless `convert` is false: after an error, the rest of the list is only read).
pub(super) struct NodeSeed<'a> {
    pub(super) interner: &'a mut Interner,
    pub(super) buffers: &'a mut Buffers,
    pub(super) index: usize,
    pub(super) convert: bool,
}

impl<'de> DeserializeSeed<'de> for NodeSeed<'_> {
    type Value = Option<Result<Node, GraphError>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct V<'a>(&'a mut Interner, &'a mut Buffers);
        impl<'de> Visitor<'de> for V<'_> {
            type Value = RawNode;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a node object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawNode, A::Error> {
                let mut n = RawNode::default();
                let mut dup = None;
                while let Some(key) = map.next_key::<NodeKey>()? {
                    match key {
                        NodeKey::Id => set(&mut n.id, map.next_value()?, "id", &mut dup),
                        NodeKey::Op => set(&mut n.op, map.next_value_seed(NamedSeed(&mut *self.0))?, "op", &mut dup),
                        NodeKey::Inputs => {
                            set(&mut n.inputs, map.next_value_seed(ListSeed(&mut self.1.inputs))?, "inputs", &mut dup)
                        }
                        NodeKey::Name => set(&mut n.name, map.next_value()?, "name", &mut dup),
                        NodeKey::Attrs => {
                            set(&mut n.attrs, map.next_value_seed(AttrsSeed(&mut *self.0, &mut self.1.attrs))?, "attrs", &mut dup)
                        }
                        NodeKey::Shape => set(&mut n.shape, map.next_value_seed(ListSeed(&mut self.1.dims))?, "shape", &mut dup),
                        NodeKey::Dtype => {
                            set(&mut n.dtype, map.next_value_seed(NamedSeed(&mut *self.0))?, "dtype", &mut dup)
                        }
                        NodeKey::Other(k) => {
                            let v: Value = map.next_value()?;
                            if n.extra.insert(k.clone(), v).is_some() && dup.is_none() {
                                dup = Some(k);
                            }
                        }
                    }
                }
                n.duplicate = dup;
                Ok(n)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<RawNode, A::Error> {
                Ok(not_object(AtomVisitor.visit_seq(seq)?))
            }
            fn visit_u64<E>(self, v: u64) -> Result<RawNode, E> {
                Ok(not_object(Atom::U64(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<RawNode, E> {
                Ok(not_object(Atom::I64(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<RawNode, E> {
                Ok(not_object(Atom::F64(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<RawNode, E> {
                Ok(not_object(Atom::Str(v.to_owned())))
            }
            fn visit_bool<E>(self, v: bool) -> Result<RawNode, E> {
                Ok(not_object(Atom::Bool(v)))
            }
            fn visit_unit<E>(self) -> Result<RawNode, E> {
                Ok(not_object(Atom::Null))
            }
        }
        let raw = d.deserialize_any(V(&mut *self.interner, &mut *self.buffers))?;
        Ok(self.convert.then(|| raw.into_node(self.index, self.interner, self.buffers)))
    }
}

impl Named {
    /// What was read, as an [`Atom`] (for a message).
    fn into_atom(self) -> Atom {
        match self {
            Named::Sym(s) => Atom::Str(s.to_string()),
            Named::Not(atom) => atom,
        }
    }
}

fn not_object(atom: Atom) -> RawNode {
    RawNode {
        not_object: Some(atom),
        ..RawNode::default()
    }
}

/// The `nodes` field: the nodes converted as they are read (with the first node error, if any),
/// or whatever stood there instead of a list.
#[derive(Debug)]
pub(super) enum RawNodes {
    Items(Vec<Node>, Option<GraphError>),
    Not(Atom),
}

/// Reads `nodes`, keeping at most `.0` of them.
struct NodesSeed(usize);

impl<'de> DeserializeSeed<'de> for NodesSeed {
    type Value = RawNodes;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RawNodes, D::Error> {
        struct V(usize);
        impl<'de> Visitor<'de> for V {
            type Value = RawNodes;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawNodes, A::Error> {
                let mut nodes = Vec::new();
                let mut interner = Interner::default();
                let mut buffers = Buffers::default();
                let mut error = None;
                let mut index = 0;
                while index < self.0 {
                    let seed = NodeSeed { interner: &mut interner, buffers: &mut buffers, index, convert: error.is_none() };
                    let Some(read) = seq.next_element_seed(seed)? else {
                        return Ok(RawNodes::Items(nodes, error));
                    };
                    match read {
                        Some(Ok(node)) => nodes.push(node),
                        Some(Err(e)) => error = Some(e),
                        None => {}
                    }
                    index += 1;
                }
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    return Ok(RawNodes::Items(nodes, error));
                }
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                drop(nodes);
                let limit = self.0;
                Ok(RawNodes::Items(Vec::new(), Some(GraphError::new(
                    GraphErrorKind::TooLarge,
                    format!("the graph has more than {limit} nodes, the loader's limit (max_nodes; raise it to load a larger graph)"),
                ))))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawNodes, A::Error> {
                AtomVisitor.visit_map(map).map(RawNodes::Not)
            }
            fn visit_u64<E>(self, v: u64) -> Result<RawNodes, E> {
                Ok(RawNodes::Not(Atom::U64(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<RawNodes, E> {
                Ok(RawNodes::Not(Atom::I64(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<RawNodes, E> {
                Ok(RawNodes::Not(Atom::F64(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<RawNodes, E> {
                Ok(RawNodes::Not(Atom::Str(v.to_owned())))
            }
            fn visit_bool<E>(self, v: bool) -> Result<RawNodes, E> {
                Ok(RawNodes::Not(Atom::Bool(v)))
            }
            fn visit_unit<E>(self) -> Result<RawNodes, E> {
                Ok(RawNodes::Not(Atom::Null))
            }
        }
        d.deserialize_any(V(self.0))
    }
}

/// The top-level object, as read.
#[derive(Debug, Default)]
pub(super) struct RawGraph {
    pub(super) not_object: Option<Atom>,
    pub(super) duplicate: Option<String>,
    pub(super) format: Option<Atom>,
    pub(super) version: Option<Atom>,
    pub(super) name: Option<Atom>,
    pub(super) nodes: Option<RawNodes>,
    pub(super) outputs: Option<List<Vec<NodeId>>>,
    pub(super) extra: Map<String, Value>,
}

/// Reads the top-level object, keeping at most `.0` nodes.
struct GraphSeed(usize);

impl<'de> DeserializeSeed<'de> for GraphSeed {
    type Value = RawGraph;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RawGraph, D::Error> {
        struct V(usize);
        impl<'de> Visitor<'de> for V {
            type Value = RawGraph;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a graph object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawGraph, A::Error> {
                let mut g = RawGraph::default();
                let mut dup = None;
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "format" => set(&mut g.format, map.next_value()?, "format", &mut dup),
                        "version" => set(&mut g.version, map.next_value()?, "version", &mut dup),
                        "name" => set(&mut g.name, map.next_value()?, "name", &mut dup),
                        "nodes" => set(&mut g.nodes, map.next_value_seed(NodesSeed(self.0))?, "nodes", &mut dup),
                        "outputs" => set(&mut g.outputs, map.next_value()?, "outputs", &mut dup),
                        _ => {
                            let v: Value = map.next_value()?;
                            if g.extra.insert(key.clone(), v).is_some() && dup.is_none() {
                                dup = Some(key);
                            }
                        }
                    }
                }
                g.duplicate = dup;
                Ok(g)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<RawGraph, A::Error> {
                Ok(RawGraph {
                    not_object: Some(AtomVisitor.visit_seq(seq)?),
                    ..RawGraph::default()
                })
            }
            fn visit_u64<E>(self, v: u64) -> Result<RawGraph, E> {
                Ok(RawGraph {
                    not_object: Some(Atom::U64(v)),
                    ..RawGraph::default()
                })
            }
            fn visit_i64<E>(self, v: i64) -> Result<RawGraph, E> {
                Ok(RawGraph {
                    not_object: Some(Atom::I64(v)),
                    ..RawGraph::default()
                })
            }
            fn visit_f64<E>(self, v: f64) -> Result<RawGraph, E> {
                Ok(RawGraph {
                    not_object: Some(Atom::F64(v)),
                    ..RawGraph::default()
                })
            }
            fn visit_str<E>(self, v: &str) -> Result<RawGraph, E> {
                Ok(RawGraph {
                    not_object: Some(Atom::Str(v.to_owned())),
                    ..RawGraph::default()
                })
            }
            fn visit_bool<E>(self, v: bool) -> Result<RawGraph, E> {
                Ok(RawGraph {
                    not_object: Some(Atom::Bool(v)),
                    ..RawGraph::default()
                })
            }
            fn visit_unit<E>(self) -> Result<RawGraph, E> {
                Ok(RawGraph {
                    not_object: Some(Atom::Null),
                    ..RawGraph::default()
                })
            }
        }
        d.deserialize_any(V(self.0))
    }
}

impl RawGraph {
    pub(super) fn into_graph(self) -> Result<Graph, GraphError> {
        if let Some(found) = self.not_object {
            return Err(format_error(format!(
                "the top level must be a graph object, found {found}"
            )));
        }
        if let Some(key) = self.duplicate {
            return Err(format_error(format!(
                "top-level field {} is given twice",
                quote(&key)
            )));
        }
        match self.format {
            Some(Atom::Str(s)) if s == GRAPH_FORMAT => {}
            Some(other) => {
                return Err(format_error(format!(
                    "field \"format\" must be \"{GRAPH_FORMAT}\", found {other}"
                )))
            }
            None => {
                return Err(format_error(format!(
                    "missing field \"format\" (a graph.json starts with \"format\": \"{GRAPH_FORMAT}\")"
                )))
            }
        }
        match self.version {
            Some(Atom::U64(GRAPH_VERSION)) => {}
            Some(other) => {
                return Err(format_error(format!(
                    "unsupported version {other} (field \"version\"; this build reads version {GRAPH_VERSION})"
                )))
            }
            None => return Err(format_error("missing field \"version\"".to_string())),
        }
        let name = match self.name {
            None | Some(Atom::Null) => None,
            Some(Atom::Str(s)) => Some(s),
            Some(other) => {
                return Err(format_error(format!(
                    "field \"name\" must be a string, found {other}"
                )))
            }
        };
        let nodes = match self.nodes {
            Some(RawNodes::Items(nodes, None)) => nodes,
            Some(RawNodes::Items(_, Some(error))) => return Err(error),
            Some(RawNodes::Not(other)) => {
                return Err(format_error(format!(
                    "field \"nodes\" must be a list, found {other}"
                )))
            }
            None => return Err(format_error("missing field \"nodes\"".to_string())),
        };
        let outputs = match self.outputs {
            Some(List::Items(ids)) => ids,
            Some(List::Bad(k, other)) => {
                return Err(format_error(format!(
                    "an output must be a node id (an integer >= 0), found {other} (field \"outputs\"[{k}])"
                )))
            }
            Some(List::Not(other)) => {
                return Err(format_error(format!("field \"outputs\" must be a list of node ids, found {other}")))
            }
            None => return Err(format_error("missing field \"outputs\"".to_string())),
        };
        Ok(Graph {
            name,
            nodes,
            outputs,
            extra: self.extra,
        })
    }
}

impl RawNode {
    /// The node, its op, dtype and shape shared through `interner`.
    fn into_node(self, index: usize, interner: &mut Interner, buffers: &mut Buffers) -> Result<Node, GraphError> {
        let at = || format!("the node at index {index} of \"nodes\"");
        if let Some(found) = self.not_object {
            return Err(format_error(format!(
                "{} must be an object, found {found}",
                at()
            )));
        }
        let id: NodeId = match self.id {
            Some(Atom::U64(id)) => id,
            Some(other) => {
                return Err(format_error(format!(
                    "{}: the id must be an integer >= 0, found {other} (field \"id\")",
                    at()
                )))
            }
            None => return Err(format_error(format!("{}: missing field \"id\"", at()))),
        };
        // The name first, so that later messages can show it.
        let name = match self.name {
            None | Some(Atom::Null) => None,
            Some(Atom::Str(s)) => Some(s),
            Some(other) => {
                return Err(format_error(format!(
                    "{}: the name must be a string, found {other} (field \"name\")",
                    node_label(id, None)
                )))
            }
        };
        let label = || node_label(id, name.as_deref());
        if let Some(key) = self.duplicate {
            return Err(format_error(format!(
                "{}: field {} is given twice",
                label(),
                quote(&key)
            )));
        }
        let op = match self.op {
            Some(Named::Sym(s)) if !s.is_empty() => s,
            Some(other) => {
                let other = other.into_atom();
                return Err(format_error(format!(
                    "{}: the op must be a non-empty string, found {other} (field \"op\")",
                    label()
                )))
            }
            None => return Err(format_error(format!("{}: missing field \"op\"", label()))),
        };
        let inputs = match self.inputs {
            None => Vec::new(),
            Some(List::Items(())) => buffers.inputs.as_slice().into(),
            Some(List::Bad(k, other)) => {
                return Err(format_error(format!(
                    "{}: an input must be a node id (an integer >= 0), found {other} (field \"inputs\"[{k}])", label()
                )))
            }
            Some(List::Not(other)) => {
                return Err(format_error(format!(
                    "{}: the inputs must be a list of node ids, found {other} (field \"inputs\")", label()
                )))
            }
        };
        let attrs = match self.attrs {
            None => Vec::new(),
            Some(Attrs::Pairs(None)) => buffers.attrs.drain(..).collect(),
            Some(Attrs::Pairs(Some(key))) => {
                return Err(format_error(format!(
                    "{}: attribute {} is given twice (field \"attrs\")",
                    label(),
                    quote(&key)
                )))
            }
            Some(Attrs::Not(other)) => {
                return Err(format_error(format!(
                    "{}: the attrs must be an object, found {other} (field \"attrs\")",
                    label()
                )))
            }
        };
        let shape = match self.shape {
            None | Some(List::Not(Atom::Null)) => None,
            Some(List::Items(())) => Some(interner.shape(&buffers.dims)),
            Some(List::Bad(k, other)) => {
                return Err(format_error(format!(
                    "{}: a dim must be an integer >= 0 or a non-empty string, found {other} (field \"shape\"[{k}])", label()
                )))
            }
            Some(List::Not(other)) => {
                return Err(format_error(format!(
                    "{}: the shape must be a list of dims, found {other} (field \"shape\")", label()
                )))
            }
        };
        let dtype = match self.dtype {
            None | Some(Named::Not(Atom::Null)) => None,
            Some(Named::Sym(s)) => Some(s),
            Some(Named::Not(other)) => {
                return Err(format_error(format!(
                    "{}: the dtype must be a string, found {other} (field \"dtype\")",
                    label()
                )))
            }
        };
        // Value facts (docs/graph-format.md): rules test them with has_fact(), so a malformed list is an error,
        // not a fact that silently never holds.
        if let Some(facts) = self.extra.get("facts") {
            let ok = matches!(facts, Value::Array(items) if items.iter().all(Value::is_string));
            if !ok {
                return Err(format_error(format!(
                    "{}: the facts must be a list of strings, found {facts} (field \"facts\")",
                    label()
                )));
            }
        }
        Ok(Node {
            id,
            op,
            name,
            inputs,
            attrs: Fields::from_pairs(attrs),
            shape,
            dtype,
            extra: Fields::from_map(self.extra, interner),
        })
    }
}
