//! Reading a well-formed graph.json quickly: each node by the byte scanner of `fast.rs` where it can (else by the same
//! serde node reader as the one-piece parse), and a large one on two cores, its nodes list cut at a node boundary near
//! its middle, each part read by its own thread.
//!
//! The parts' threads also check what they read while it is in cache: the ids (see [`IdRun`]) and the registry's
//! arity and attribute types. When the ids are vouched for, that is the whole of [`Graph::check`]'s verdict.
//!
//! Only the well-formed case is taken this way. Anything else (any error, a cut that turns out not to be a node
//! boundary, more nodes than the limit, deeply nested values) gives `None`, and the caller parses the document in one
//! piece, whose result and messages are the reference. The cut is proven, not guessed: the first thread reads the
//! document from its start value by value, and the second part is used only if the first thread stops exactly at the
//! comma before the cut, between two nodes of the top-level `nodes` list.

use std::marker::PhantomData;

use serde::de::{DeserializeSeed, IgnoredAny};
use serde_json::Value;

use super::check::{check_node_fields, check_registry};
use super::fast::{self, Scan, Scratch};
use super::ids::IdRun;
use super::lenient::List;
use super::load::RawGraph;
use super::nodes::{set, Buffers, NodeSeed, RawNodes};
use super::{Graph, GraphError, Interner, Node, NodeId, Warning};
use crate::registry::Registry;

/// What [`Graph::check`] would answer for a graph read here (its warnings, or its first error), where the reading
/// could vouch for it.
pub(super) type Verdict = Result<Vec<Warning>, GraphError>;

/// A part of the nodes list as read: its nodes, what they showed of their ids (and whether their own fields are
/// valid), and the registry's verdict on them when the ids were vouched for.
struct Part {
    nodes: Vec<Node>,
    ids: IdRun,
    fields_ok: bool,
    registry: Option<Verdict>,
}

impl Part {
    /// Check the part against `registry`, if its ids count up (else the whole graph is checked after reading).
    fn check(&mut self, registry: &Registry) {
        if self.ids.counting() && self.fields_ok {
            self.registry = Some(check_registry(self.nodes.iter(), registry));
        }
    }

    /// This part followed by `next`.
    fn then(mut self, next: Part, registry: &Registry) -> Part {
        let registry_verdict = match (self.registry.take(), next.registry) {
            (Some(Err(e)), _) | (Some(Ok(_)), Some(Err(e))) => Some(Err(e)),
            (Some(Ok(warnings)), Some(Ok(none))) if none.is_empty() => Some(Ok(warnings)),
            (Some(Ok(_)), Some(Ok(_))) => None, // the second part's warnings may repeat the first's: all checked again
            _ => None,
        };
        self.nodes.reserve_exact(next.nodes.len()); // not the doubling that `extend` would ask for
        self.nodes.extend(next.nodes);
        let mut joined = Part { nodes: self.nodes, ids: self.ids.then(next.ids), fields_ok: self.fields_ok && next.fields_ok, registry: registry_verdict };
        if joined.registry.is_none() {
            joined.check(registry);
        }
        joined
    }
}

/// Below this many bytes, one thread reads the document (without a cut).
const MIN_BYTES: usize = 4 << 20;
/// How far past the middle a cut is looked for.
const SEARCH_BYTES: usize = 1 << 20;
/// After this many nodes, room for the rest of a list is made at once.
const SAMPLE_NODES: usize = 1024;
/// Values nested deeper than this are left to the one-piece parse: serde_json counts its nesting limit (128) from the
/// document's root, and a part is read from the node level, so only shallower values are read alike.
const MAX_DEPTH: usize = 100;

/// The graph in `text`, read on two threads when large, with [`Graph::check`]'s verdict on it where the reading could
/// vouch for it (see the module doc); `None` where the one-piece parse must decide.
pub(super) fn parse(text: &str, max_nodes: usize, registry: &Registry) -> Option<(Graph, Option<Verdict>)> {
    let cut = if text.len() < MIN_BYTES || crate::cores() < 2 {
        None
    } else {
        find_cut(text.as_bytes())
    };
    let (raw, part) = match cut {
        None => read_graph(text, usize::MAX, max_nodes, registry, || None)?,
        Some((comma, start)) => std::thread::scope(|scope| {
            let second = scope.spawn(move || {
                let mut c = Scan { text, pos: start };
                let (mut part, at_cut) = read_nodes(&mut c, None, &mut Interner::default())?;
                part.check(registry);
                (!at_cut).then_some((part, c.pos))
            });
            read_graph(text, comma, max_nodes, registry, move || second.join().ok().flatten())
        })?,
    };
    let graph = raw.into_graph().ok()?;
    let vouched = part.ids.vouched() && graph.outputs.iter().all(|&id| part.ids.has(id));
    let verdict = part.registry.filter(|_| vouched);
    Some((graph, verdict))
}

impl<'t> Scan<'t> {
    /// The value here, read by serde through `seed`, and the place after it.
    fn by_serde<T, S: DeserializeSeed<'t, Value = T>>(&mut self, seed: S) -> Option<T> {
        self.skip_space();
        let mut de = serde_json::Deserializer::from_str(&self.text[self.pos..]);
        let value = seed.deserialize(&mut de).ok()?;
        self.pos += de.into_iter::<IgnoredAny>().byte_offset();
        Some(value)
    }
}

/// A cut in `bytes` past the middle: the place of a `,` that follows a `}` and precedes a `{` (white space between),
/// and the place of that `{`. Whether it falls between two nodes is not known yet.
fn find_cut(bytes: &[u8]) -> Option<(usize, usize)> {
    let from = bytes.len() / 2;
    let to = (from + SEARCH_BYTES).min(bytes.len());
    let space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    (from..to).filter(|&i| bytes[i] == b'{').find_map(|start| {
        let comma = start - 1 - bytes[..start].iter().rev().take_while(|b| space(b)).count();
        let before = bytes[..comma].iter().rev().find(|b| !space(b));
        (bytes[comma] == b',' && before == Some(&b'}')).then_some((comma, start))
    })
}

/// How deeply `v` nests lists and objects.
fn depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Node objects from `c` (just after the list's `[` or a `,`) until the list ends (`false`) or the cursor stands at
/// `stop` between two nodes (`true`, the comma not taken).
fn read_nodes(c: &mut Scan, stop: Option<usize>, interner: &mut Interner) -> Option<(Part, bool)> {
    let mut part = Part { nodes: Vec::new(), ids: IdRun::default(), fields_ok: true, registry: None };
    if c.eat(b']') {
        return Some((part, false));
    }
    let (mut scratch, mut buffers) = (Scratch::default(), Buffers::default());
    let start = c.pos;
    loop {
        let node = match fast::node(c.text, c.pos, interner, &mut scratch) {
            Some((node, end)) => {
                c.pos = end;
                node
            }
            None => {
                let node = c.by_serde(NodeSeed { interner: &mut *interner, buffers: &mut buffers, index: 0, convert: true })??.ok()?;
                if node.attrs.iter().chain(node.extra.iter()).any(|(_, v)| depth(v) > MAX_DEPTH) {
                    return None;
                }
                node
            }
        };
        part.ids.add(node.id, &node.inputs);
        part.fields_ok &= check_node_fields(&node).is_ok();
        part.nodes.push(node);
        if part.nodes.len() == SAMPLE_NODES {
            // room for the nodes still to come, guessed from the text they take so far: to the end of the list (the
            // part after a cut is appended to this one), without growing by doubling and copying
            let per_node = (c.pos - start) / SAMPLE_NODES + 1;
            part.nodes.reserve_exact((c.text.len() - c.pos) / per_node * 11 / 10);
        }
        c.skip_space();
        if Some(c.pos) == stop {
            return Some((part, true));
        }
        if c.eat(b']') {
            return Some((part, false));
        }
        if !c.eat(b',') {
            return None;
        }
    }
}

/// The top-level object of `text`, its nodes list read up to the comma at `cut` by this thread and from there by
/// `second` (the nodes after the cut, and the place after the list's `]`); or, if the cut is not met between two nodes,
/// all by this thread. With it, the nodes list as read (the last one, if given twice).
fn read_graph(
    text: &str,
    cut: usize,
    max_nodes: usize,
    registry: &Registry,
    second: impl FnOnce() -> Option<(Part, usize)>,
) -> Option<(RawGraph, Part)> {
    let mut c = Scan { text, pos: 0 };
    let mut second = Some(second);
    let mut last_part = None;
    let mut g = RawGraph::default();
    let mut dup = None;
    if !c.eat(b'{') {
        return None;
    }
    loop {
        let key: String = c.by_serde(PhantomData)?;
        if !c.eat(b':') {
            return None;
        }
        match key.as_str() {
            "format" => set(&mut g.format, c.by_serde(PhantomData)?, "format", &mut dup),
            "version" => set(&mut g.version, c.by_serde(PhantomData)?, "version", &mut dup),
            "name" => set(&mut g.name, c.by_serde(PhantomData)?, "name", &mut dup),
            "outputs" => set(&mut g.outputs, c.by_serde(PhantomData::<List<Vec<NodeId>>>)?, "outputs", &mut dup),
            "nodes" => {
                if !c.eat(b'[') {
                    return None;
                }
                let (mut part, at_cut) = read_nodes(&mut c, Some(cut), &mut Interner::default())?;
                part.check(registry);
                if at_cut {
                    let (rest, end) = (second.take()?)()?;
                    part = part.then(rest, registry);
                    c.pos = end;
                }
                if part.nodes.len() > max_nodes {
                    return None;
                }
                set(&mut g.nodes, RawNodes::Items(std::mem::take(&mut part.nodes), None), "nodes", &mut dup);
                last_part = Some(part);
            }
            _ => {
                let v: Value = c.by_serde(PhantomData)?;
                if depth(&v) > MAX_DEPTH {
                    return None;
                }
                if g.extra.insert(key.clone(), v).is_some() && dup.is_none() {
                    dup = Some(key);
                }
            }
        }
        if c.eat(b'}') {
            break;
        }
        if !c.eat(b',') {
            return None;
        }
    }
    c.skip_space();
    g.duplicate = dup;
    (c.pos == text.len()).then_some((g, last_part?))
}
