//! Reading the `nodes` list: each node object read field by field through the lenient readers, then converted into
//! a [`Node`] with an error that names the node and the field.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::fmt;

use super::lenient::{Atom, AtomVisitor, Attrs, AttrsSeed, List, ListSeed, Named, NamedSeed};
use super::load::format_error;
use super::{node_label, quote, Dim, Fields, GraphError, GraphErrorKind, Inputs, Interner, Name, Node, NodeId, Sym};

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

/// One element of `nodes`, as read (into [`Buffers::raw`], reused from node to node rather than moved around).
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
    raw: RawNode,
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
            type Value = ();
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a node object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
                let b = self.1;
                let n = &mut b.raw;
                let mut dup = None;
                while let Some(key) = map.next_key::<NodeKey>()? {
                    match key {
                        NodeKey::Id => set(&mut n.id, map.next_value()?, "id", &mut dup),
                        NodeKey::Op => set(&mut n.op, map.next_value_seed(NamedSeed(&mut *self.0))?, "op", &mut dup),
                        NodeKey::Inputs => {
                            set(&mut n.inputs, map.next_value_seed(ListSeed(&mut b.inputs))?, "inputs", &mut dup)
                        }
                        NodeKey::Name => set(&mut n.name, map.next_value()?, "name", &mut dup),
                        NodeKey::Attrs => {
                            set(&mut n.attrs, map.next_value_seed(AttrsSeed(&mut *self.0, &mut b.attrs))?, "attrs", &mut dup)
                        }
                        NodeKey::Shape => set(&mut n.shape, map.next_value_seed(ListSeed(&mut b.dims))?, "shape", &mut dup),
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
                Ok(())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
                self.1.raw.not_object = Some(AtomVisitor.visit_seq(seq)?);
                Ok(())
            }
            fn visit_u64<E>(self, v: u64) -> Result<(), E> {
                self.1.raw.not_object = Some(Atom::U64(v));
                Ok(())
            }
            fn visit_i64<E>(self, v: i64) -> Result<(), E> {
                self.1.raw.not_object = Some(Atom::I64(v));
                Ok(())
            }
            fn visit_f64<E>(self, v: f64) -> Result<(), E> {
                self.1.raw.not_object = Some(Atom::F64(v));
                Ok(())
            }
            fn visit_str<E>(self, v: &str) -> Result<(), E> {
                self.1.raw.not_object = Some(Atom::Str(v.to_owned()));
                Ok(())
            }
            fn visit_bool<E>(self, v: bool) -> Result<(), E> {
                self.1.raw.not_object = Some(Atom::Bool(v));
                Ok(())
            }
            fn visit_unit<E>(self) -> Result<(), E> {
                self.1.raw.not_object = Some(Atom::Null);
                Ok(())
            }
        }
        self.buffers.raw = RawNode::default();
        d.deserialize_any(V(&mut *self.interner, &mut *self.buffers))?;
        Ok(self.convert.then(|| self.buffers.take_node(self.index, self.interner)))
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
pub(super) struct NodesSeed(pub(super) usize);

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

impl Buffers {
    /// The node just read, its op, dtype and shape shared through `interner`; [`Buffers::raw`] is left emptied.
    #[allow(clippy::drain_collect)] // the attributes are copied out at their size; the buffer keeps its room for the next node
    fn take_node(&mut self, index: usize, interner: &mut Interner) -> Result<Node, GraphError> {
        let Buffers { raw, inputs: input_ids, dims, attrs: pairs } = self;
        let at = || format!("the node at index {index} of \"nodes\"");
        if let Some(found) = raw.not_object.take() {
            return Err(format_error(format!(
                "{} must be an object, found {found}",
                at()
            )));
        }
        let id: NodeId = match raw.id.take() {
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
        let name = match raw.name.take() {
            None | Some(Atom::Null) => None,
            Some(Atom::Str(s)) => Some(Name::from(s)),
            Some(other) => {
                return Err(format_error(format!(
                    "{}: the name must be a string, found {other} (field \"name\")",
                    node_label(id, None)
                )))
            }
        };
        let label = || node_label(id, name.as_deref());
        if let Some(key) = raw.duplicate.take() {
            return Err(format_error(format!(
                "{}: field {} is given twice",
                label(),
                quote(&key)
            )));
        }
        let op = match raw.op.take() {
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
        let inputs = match raw.inputs.take() {
            None => Inputs::new(),
            Some(List::Items(())) => input_ids.as_slice().into(),
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
        let attrs = match raw.attrs.take() {
            None => Fields::new(),
            Some(Attrs::Pairs(None)) => Fields::from_pairs(pairs.drain(..)),
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
        let shape = match raw.shape.take() {
            None | Some(List::Not(Atom::Null)) => None,
            Some(List::Items(())) => Some(interner.shape(dims)),
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
        let dtype = match raw.dtype.take() {
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
        if let Some(facts) = raw.extra.get("facts") {
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
            attrs,
            shape,
            dtype,
            extra: Fields::from_map(std::mem::take(&mut raw.extra), interner),
        })
    }
}
