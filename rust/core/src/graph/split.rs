//! Reading a well-formed graph.json quickly: each node by the byte scanner of `fast.rs` where it can (else by the same
//! serde node reader as the one-piece parse), and a large one on two cores, its nodes list cut at a node boundary near
//! its middle, each part read by its own thread straight into its own room in the graph's one array of nodes (see
//! [`Room`]).
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
use std::mem::MaybeUninit;

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

/// Where a part's nodes are written as they are read: first the room set aside for it in the graph's array of nodes
/// (each node written in place, never copied), then, past the room's end, a Vec of its own.
///
/// Two parts read at once have their rooms in one array: the first part's at its start, the second's after a gap
/// guessed from the text, which [`assemble`] closes. The nodes written in a room are dropped with it unless
/// [`assemble`] takes them.
struct Room<'a> {
    slots: &'a mut [MaybeUninit<Node>],
    /// The place of the first slot in the array.
    at: usize,
    /// How many of `slots`, from the first, hold a node.
    filled: usize,
    spill: Vec<Node>,
}

impl<'a> Room<'a> {
    fn new(slots: &'a mut [MaybeUninit<Node>], at: usize) -> Room<'a> {
        Room { slots, at, filled: 0, spill: Vec::new() }
    }

    fn push(&mut self, node: Node) {
        match self.slots.get_mut(self.filled) {
            Some(slot) => {
                slot.write(node);
                self.filled += 1;
            }
            None => self.spill.push(node),
        }
    }

    fn len(&self) -> usize {
        self.filled + self.spill.len()
    }

    fn iter(&self) -> impl Iterator<Item = &Node> {
        // SAFETY: the first `filled` slots hold nodes written by `push`.
        let written = self.slots[..self.filled].iter().map(|slot| unsafe { slot.assume_init_ref() });
        written.chain(&self.spill)
    }

    /// Where the room's nodes are: from now on they are the caller's (the room drops none of them).
    fn placed(mut self) -> Placed {
        Placed { at: self.at, filled: std::mem::take(&mut self.filled), spill: std::mem::take(&mut self.spill) }
    }
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        for slot in &mut self.slots[..self.filled] {
            // SAFETY: the first `filled` slots hold nodes written by `push` that nobody else owns (`placed` empties it).
            unsafe { slot.assume_init_drop() };
        }
    }
}

/// A part of the nodes list as read: its nodes (in one room, or two once joined), what they showed of their ids (and
/// whether their own fields are valid), and the registry's verdict on them when the ids were vouched for.
struct Part<'a> {
    rooms: Vec<Room<'a>>,
    ids: IdRun,
    fields_ok: bool,
    registry: Option<Verdict>,
}

impl<'a> Part<'a> {
    fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.rooms.iter().flat_map(Room::iter)
    }

    fn len(&self) -> usize {
        self.rooms.iter().map(Room::len).sum()
    }

    /// Check the part against `registry`, if its ids count up (else the whole graph is checked after reading).
    fn check(&mut self, registry: &Registry) {
        if self.ids.counting() && self.fields_ok {
            self.registry = Some(check_registry(self.nodes(), registry));
        }
    }

    /// Its rooms' nodes as placed (now the caller's), its ids and its registry verdict.
    fn placed(self) -> (Vec<Placed>, IdRun, Option<Verdict>) {
        (self.rooms.into_iter().map(Room::placed).collect(), self.ids, self.registry)
    }

    /// This part followed by `next`.
    fn then(mut self, next: Part<'a>, registry: &Registry) -> Part<'a> {
        let registry_verdict = match (self.registry.take(), next.registry) {
            (Some(Err(e)), _) | (Some(Ok(_)), Some(Err(e))) => Some(Err(e)),
            (Some(Ok(warnings)), Some(Ok(none))) if none.is_empty() => Some(Ok(warnings)),
            (Some(Ok(_)), Some(Ok(_))) => None, // the second part's warnings may repeat the first's: all checked again
            _ => None,
        };
        self.rooms.extend(next.rooms);
        let mut joined = Part { rooms: self.rooms, ids: self.ids.then(next.ids), fields_ok: self.fields_ok && next.fields_ok, registry: registry_verdict };
        if joined.registry.is_none() {
            joined.check(registry);
        }
        joined
    }
}

/// A room's nodes once its reading is over: where the written ones start in the graph's array, how many there are,
/// and those that did not fit. They belong to whoever holds this (dropped by nobody: [`assemble`] moves them).
struct Placed {
    at: usize,
    filled: usize,
    spill: Vec<Node>,
}

/// The graph's array of nodes: `all`, whose spare room held the rooms `placed` (in order, the first at its start),
/// with each room's nodes moved next to the previous ones, and the nodes that did not fit after them in order.
fn assemble(mut all: Vec<Node>, placed: Vec<Placed>) -> Vec<Node> {
    let base = all.as_mut_ptr();
    let mut len = 0;
    let mut rest: Vec<Node> = Vec::new(); // from the first room that overflowed on
    for Placed { at, filled, spill } in placed {
        if rest.is_empty() {
            // SAFETY: slots at..at + filled of `all`'s buffer hold written nodes, and at >= len (the rooms are in
            // order, and each earlier one kept to its own slots); `copy` allows the overlap, and the nodes are moved:
            // their old slots count as empty from here on.
            unsafe { std::ptr::copy(base.add(at), base.add(len), filled) };
            len += filled;
        } else {
            // SAFETY: as above; each of the `filled` nodes from slot `at` is read out once.
            rest.extend((0..filled).map(|k| unsafe { std::ptr::read(base.add(at + k)) }));
        }
        if rest.is_empty() {
            rest = spill;
        } else {
            rest.extend(spill);
        }
    }
    if len == 0 {
        return rest; // one room with no slots (a graph read by one thread): its Vec is the array
    }
    // SAFETY: the first `len` slots hold the nodes moved there above, and nothing else owns them.
    unsafe { all.set_len(len) };
    all.extend(rest);
    all
}

/// Below this many bytes, one thread reads the document (without a cut).
const MIN_BYTES: usize = 4 << 20;
/// How far past the middle a cut is looked for.
const SEARCH_BYTES: usize = 1 << 20;
/// After this many nodes, room for the rest of a list is made at once.
const SAMPLE_NODES: usize = 1024;
/// How much text after the cut is sampled to guess the bytes a node takes (for the parts' rooms).
const SAMPLE_BYTES: usize = 256 << 10;
/// The shortest node object there can be, `{"id":0,"op":"X"}`.
const MIN_NODE_BYTES: usize = 16;
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
    let mut all: Vec<Node> = Vec::new();
    let (mut raw, part) = match cut {
        None => read_graph(text, usize::MAX, max_nodes, registry, Room::new(&mut [], 0), || None)?,
        Some((comma, start)) => {
            // Rooms for the two parts in one array, a sixteenth and some to spare each (untouched room costs no
            // memory): the first part takes at most the text before the cut, the second the text after it. (No
            // rooms where the node size cannot be guessed: each part then fills a Vec, and one is appended.)
            let per_node = node_bytes(text.as_bytes(), start);
            let room = |bytes: usize| {
                per_node.map_or(0, |per_node| (bytes / per_node + bytes / per_node / 16 + 64).min(max_nodes.saturating_add(1)))
            };
            let first_room = room(comma);
            all.reserve_exact(first_room + room(text.len() - start));
            let (front, back) = all.spare_capacity_mut().split_at_mut(first_room);
            std::thread::scope(|scope| {
                let second = scope.spawn(move || {
                    let mut c = Scan { text, pos: start };
                    let (mut part, at_cut) = read_nodes(&mut c, None, &mut Interner::default(), Room::new(back, first_room))?;
                    part.check(registry);
                    (!at_cut).then_some((part, c.pos))
                });
                read_graph(text, comma, max_nodes, registry, Room::new(front, 0), move || second.join().ok().flatten())
            })?
        }
    };
    let (placed, ids, registry_verdict) = part.placed();
    raw.nodes = Some(RawNodes::Items(assemble(all, placed), None));
    let graph = raw.into_graph().ok()?;
    let vouched = ids.vouched() && graph.outputs.iter().all(|&id| ids.has(id));
    let verdict = registry_verdict.filter(|_| vouched);
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
    (from..to).filter(|&i| bytes[i] == b'{').find_map(|start| Some((boundary_at(bytes, start)?, start)))
}

/// Where the `{` at `start` follows a `}` and a `,` (white space between): the place of that comma.
fn boundary_at(bytes: &[u8], start: usize) -> Option<usize> {
    let space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let comma = start.checked_sub(1 + bytes[..start].iter().rev().take_while(|b| space(b)).count())?;
    let before = bytes[..comma].iter().rev().find(|b| !space(b));
    (bytes[comma] == b',' && before == Some(&b'}')).then_some(comma)
}

/// The bytes a node takes, guessed from the node boundaries (as [`find_cut`] finds them) in the text after `start`,
/// and never under the shortest node there can be (`{"id":0,"op":"X"}`): whatever the text, its rooms hold at most
/// one node for every 16 of its bytes. `None` when too few boundaries are found to tell.
fn node_bytes(bytes: &[u8], start: usize) -> Option<usize> {
    let window = &bytes[start..(start + SAMPLE_BYTES).min(bytes.len())];
    let boundaries = window.iter().enumerate().filter(|&(i, &b)| b == b'{' && boundary_at(window, i).is_some()).count();
    (boundaries >= 16).then(|| (window.len() / boundaries).max(MIN_NODE_BYTES))
}

/// How deeply `v` nests lists and objects.
fn depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Node objects from `c` (just after the list's `[` or a `,`), written into `room`, until the list ends (`false`) or
/// the cursor stands at `stop` between two nodes (`true`, the comma not taken).
fn read_nodes<'a>(c: &mut Scan, stop: Option<usize>, interner: &mut Interner, mut room: Room<'a>) -> Option<(Part<'a>, bool)> {
    let mut ids = IdRun::default();
    let mut fields_ok = true;
    let part = |room, ids, fields_ok| Part { rooms: vec![room], ids, fields_ok, registry: None };
    if c.eat(b']') {
        return Some((part(room, ids, fields_ok), false));
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
        ids.add(node.id, &node.inputs);
        fields_ok &= check_node_fields(&node).is_ok();
        room.push(node);
        if room.slots.is_empty() && room.spill.len() == SAMPLE_NODES {
            // with no room given (one thread reads the list), room for the nodes still to come, guessed from the text
            // they take so far, without growing by doubling and copying
            let per_node = (c.pos - start) / SAMPLE_NODES + 1;
            room.spill.reserve_exact((c.text.len() - c.pos) / per_node * 11 / 10);
        }
        c.skip_space();
        if Some(c.pos) == stop {
            return Some((part(room, ids, fields_ok), true));
        }
        if c.eat(b']') {
            return Some((part(room, ids, fields_ok), false));
        }
        if !c.eat(b',') {
            return None;
        }
    }
}

/// The top-level object of `text` (but its nodes), its nodes list read into `room` up to the comma at `cut` by this
/// thread and from there by `second` (the nodes after the cut, and the place after the list's `]`); or, if the cut is
/// not met between two nodes, all by this thread. With it, the nodes list as read. A second nodes list is left to the
/// one-piece parse.
fn read_graph<'a>(
    text: &str,
    cut: usize,
    max_nodes: usize,
    registry: &Registry,
    room: Room<'a>,
    second: impl FnOnce() -> Option<(Part<'a>, usize)>,
) -> Option<(RawGraph, Part<'a>)> {
    let mut c = Scan { text, pos: 0 };
    let mut second = Some(second);
    let mut room = Some(room);
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
                let (mut part, at_cut) = read_nodes(&mut c, Some(cut), &mut Interner::default(), room.take()?)?;
                part.check(registry);
                if at_cut {
                    let (rest, end) = (second.take()?)()?;
                    part = part.then(rest, registry);
                    c.pos = end;
                }
                if part.len() > max_nodes {
                    return None;
                }
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
