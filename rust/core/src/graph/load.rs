//! Lenient serde reading of graph.json into raw records, then conversion with field-level errors: the entry points
//! and the top-level object (the nodes are read in `nodes.rs`, each field through the readers of `lenient.rs`).
//!
//! Every field is read into a shape that cannot fail on a wrong type ([`Atom`], [`List`]), so a
//! mistyped field is reported as "node 12: field \"inputs\"[1] ..." instead of a serde position.
//! Only malformed JSON (and nesting deeper than serde_json's recursion limit) fails in serde.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::registry::Registry;

use super::lenient::{Atom, AtomVisitor, List};
use super::nodes::{set, NodesSeed, RawNodes};
use super::split::Verdict;
use super::{quote, read, split, Graph, GraphError, GraphErrorKind, NodeId, GRAPH_FORMAT, GRAPH_VERSION};

/// Parse graph.json bytes into a [`Graph`] with its nodes in file order, and [`Graph::check`]'s verdict on it where the
/// reading could vouch for it (else it is not yet validated). More than `max_nodes` nodes is a `TooLarge` error; the
/// rest of the list is then skipped without being kept, so an oversized file costs time but no memory.
pub(super) fn parse(bytes: &[u8], max_nodes: usize, registry: &Registry) -> Result<(Graph, Option<Verdict>), GraphError> {
    let text = text_of(bytes)?;
    if let Some(read) = text.and_then(|text| split::parse(text, max_nodes, registry)) {
        return Ok(read);
    }
    Ok((parse_serde(bytes, text, max_nodes)?, None))
}

/// [`parse`] as it was before the quick reading of `split.rs`: the whole document by serde, in one piece (the reference
/// that the quick reading is tested against).
#[cfg(test)]
pub(super) fn parse_one_piece(bytes: &[u8], max_nodes: usize) -> Result<Graph, GraphError> {
    parse_serde(bytes, text_of(bytes)?, max_nodes)
}

/// `bytes` as text when they are valid UTF-8 (`None`: serde_json's error will say where they are not); an error for
/// a byte-order mark. Valid UTF-8 is checked once, in bulk, rather than string by string.
fn text_of(bytes: &[u8]) -> Result<Option<&str>, GraphError> {
    if bytes.starts_with(read::BOM) {
        return Err(read::bom_error());
    }
    Ok(std::str::from_utf8(bytes).ok())
}

/// The whole document read by serde, in one piece: from `text` where `bytes` are valid UTF-8.
fn parse_serde(bytes: &[u8], text: Option<&str>, max_nodes: usize) -> Result<Graph, GraphError> {
    match text {
        Some(text) => parse_raw(serde_json::Deserializer::from_str(text), max_nodes),
        None => parse_raw(serde_json::Deserializer::from_slice(bytes), max_nodes),
    }?
    .into_graph()
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

pub(super) fn format_error(message: String) -> GraphError {
    GraphError::new(GraphErrorKind::Format, message)
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
