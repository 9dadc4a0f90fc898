//! A reader for the common, well-formed node object, without serde: a byte scanner that takes strings without
//! escapes as slices and gives up (`None`) on anything it does not fully understand, leaving it to the serde reader.
//!
//! It reads `{"id": int, "op": "...", "name": "...", "inputs": [ints], "attrs": {...}, "shape": [...], "dtype": "..."}`
//! in any key order, each field optional but the id and the op. It gives up on an escape or a control character in
//! a string, an unknown or repeated key, a wrong type, an empty op, an id, input or dim that is not a plain integer of
//! at most 18 digits, an attribute value nested deeper than [`MAX_DEPTH`], any malformed JSON, and a number it cannot
//! read exactly as serde_json does (those go to serde_json whole). The node it gives is the one the serde reader gives.

use serde_json::{Map, Value};

use super::write::ESCAPED;
use super::{Dim, Fields, Inputs, Interner, Name, Node, NodeId, Sym};

/// How deeply an attribute value may nest lists and objects here; deeper ones are left to serde.
pub(super) const MAX_DEPTH: usize = 32;
/// The most attributes a node may have here (a repeated name is found by scanning).
const MAX_ATTRS: usize = 64;

/// Buffers reused from node to node: a node's inputs, dims and attributes are copied out at their size.
#[derive(Default)]
pub(super) struct Scratch {
    inputs: Vec<NodeId>,
    dims: Vec<Dim>,
    attrs: Vec<(Sym, Value)>,
}

/// A place in the text, read byte by byte (here within a node, and in `split.rs` between the nodes).
pub(super) struct Scan<'t> {
    pub(super) text: &'t str,
    pub(super) pos: usize,
}

impl<'t> Scan<'t> {
    fn bytes(&self) -> &'t [u8] {
        self.text.as_bytes()
    }

    /// The byte after white space, not taken.
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.bytes();
        match bytes.get(self.pos) {
            Some(&b) if b > b' ' => return Some(b), // most often: no white space
            _ => {}
        }
        while let Some(&b) = bytes.get(self.pos) {
            if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                return Some(b);
            }
            self.pos += 1;
        }
        None
    }

    /// White space, taken.
    pub(super) fn skip_space(&mut self) {
        self.peek();
    }

    /// After white space, the byte `b`, taken.
    #[inline]
    pub(super) fn eat(&mut self, b: u8) -> bool {
        let found = self.peek() == Some(b);
        self.pos += usize::from(found);
        found
    }

    /// The literal `word` (`null`, `true`, `false`), taken.
    #[inline]
    fn word(&mut self, word: &[u8]) -> bool {
        let found = self.peek() == word.first().copied() && self.bytes()[self.pos..].starts_with(word);
        self.pos += if found { word.len() } else { 0 };
        found
    }

    /// A string without escapes or control characters: its contents.
    #[inline]
    fn str(&mut self) -> Option<&'t str> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.pos + 1;
        let rest = &self.bytes()[start..];
        let len = rest.iter().position(|&c| ESCAPED[usize::from(c)])?; // `"`, a backslash or a control character
        if rest[len] != b'"' {
            return None;
        }
        self.pos = start + len + 1;
        // the text is a str and `"` is ASCII, so both ends are character boundaries
        self.text.get(start..start + len)
    }

    /// An integer >= 0 of 1 to 18 digits (no sign, fraction or exponent): what serde_json reads as that u64.
    #[inline]
    fn uint(&mut self) -> Option<u64> {
        self.peek()?;
        let bytes = self.bytes();
        let start = self.pos;
        let mut n = 0u64;
        let mut p = start;
        while p - start < 19 {
            let digit = bytes.get(p)?.wrapping_sub(b'0');
            if digit > 9 {
                break;
            }
            n = n * 10 + u64::from(digit); // at most 19 digits: below u64::MAX
            p += 1;
        }
        let len = p - start;
        if len == 0 || len > 18 || (len > 1 && bytes[start] == b'0') || matches!(bytes.get(p), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        self.pos = p;
        Some(n)
    }

    /// A number as a JSON value: a short integer read here, anything else (a float, a long integer, `-0`) by
    /// serde_json from its text alone, which reads a number the same wherever it stands.
    fn number(&mut self) -> Option<Value> {
        let start = self.pos;
        let rest = &self.bytes()[start..];
        let len = rest.iter().position(|c| !matches!(c, b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')).unwrap_or(rest.len());
        self.pos += len;
        let negative = rest[0] == b'-';
        let digits = &rest[usize::from(negative)..len];
        let plain = (1..=18).contains(&digits.len()) && digits.iter().all(u8::is_ascii_digit) && (digits.len() == 1 || digits[0] != b'0');
        if plain {
            let n = digits.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
            if !negative {
                return Some(Value::from(n));
            }
            if n != 0 {
                return Some(Value::from(-(n as i64)));
            }
        }
        serde_json::from_str(self.text.get(start..start + len)?).ok()
    }

    /// Items of a list, each read by `item`, up to and with the closing `]` (the `[` taken already).
    #[inline]
    fn items(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if self.eat(b']') {
            return Some(());
        }
        loop {
            item(self)?;
            if self.eat(b']') {
                return Some(());
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }

    /// Any JSON value nested at most `MAX_DEPTH - depth` deep, built as serde_json builds it.
    fn value(&mut self, depth: usize) -> Option<Value> {
        match self.peek()? {
            b'"' => self.str().map(|s| Value::String(s.to_owned())),
            b'-' | b'0'..=b'9' => self.number(),
            b'n' => self.word(b"null").then_some(Value::Null),
            b't' => self.word(b"true").then_some(Value::Bool(true)),
            b'f' => self.word(b"false").then_some(Value::Bool(false)),
            b'[' if depth < MAX_DEPTH => {
                self.pos += 1;
                let mut items = Vec::new();
                self.items(|c| {
                    items.push(c.value(depth + 1)?);
                    Some(())
                })?;
                Some(Value::Array(items))
            }
            b'{' if depth < MAX_DEPTH => {
                self.pos += 1;
                let mut map = Map::new();
                if self.eat(b'}') {
                    return Some(Value::Object(map));
                }
                loop {
                    let key = self.str()?;
                    if !self.eat(b':') || map.contains_key(key) {
                        return None;
                    }
                    let value = self.value(depth + 1)?;
                    map.insert(key.to_owned(), value);
                    if self.eat(b'}') {
                        return Some(Value::Object(map));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            _ => None,
        }
    }

    /// An object of attributes into `out`, their names shared through `interner` (the `{` not yet taken).
    fn attrs(&mut self, interner: &mut Interner, out: &mut Vec<(Sym, Value)>) -> Option<()> {
        out.clear();
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            let key = self.str()?;
            if !self.eat(b':') || out.len() == MAX_ATTRS || out.iter().any(|(k, _)| *k == *key) {
                return None;
            }
            let value = self.value(1)?;
            out.push((interner.sym(key), value));
            if self.eat(b'}') {
                return Some(());
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }
}

/// The node object at `pos` in `text` (white space before it allowed) and the place after it; `None` where the serde
/// reader must decide (see the module doc). Op names, dtypes, attribute names and shapes are shared through
/// `interner`.
pub(super) fn node(text: &str, pos: usize, interner: &mut Interner, scratch: &mut Scratch) -> Option<(Node, usize)> {
    let mut c = Scan { text, pos };
    if !c.eat(b'{') {
        return None;
    }
    let (mut id, mut op, mut name, mut shape, mut dtype) = (None, None, None, None, None);
    let (mut seen, mut inputs, mut attrs) = (0u8, false, false);
    if !c.eat(b'}') {
        loop {
            let key = c.str()?;
            if !c.eat(b':') {
                return None;
            }
            let bit = match (key.len(), key.as_bytes().first()) {
                (2, Some(b'i')) if key == "id" => 0,
                (2, Some(b'o')) if key == "op" => 1,
                (4, Some(b'n')) if key == "name" => 2,
                (6, Some(b'i')) if key == "inputs" => 3,
                (5, Some(b'a')) if key == "attrs" => 4,
                (5, Some(b's')) if key == "shape" => 5,
                (5, Some(b'd')) if key == "dtype" => 6,
                _ => return None,
            };
            if seen & (1 << bit) != 0 {
                return None;
            }
            seen |= 1 << bit;
            match bit {
                0 => id = Some(c.uint()?),
                1 => op = Some(interner.sym(c.str().filter(|s| !s.is_empty())?)),
                2 => name = if c.word(b"null") { None } else { Some(Name::from(c.str()?)) },
                3 => {
                    let ids = &mut scratch.inputs;
                    ids.clear();
                    if !c.eat(b'[') {
                        return None;
                    }
                    c.items(|c| {
                        ids.push(c.uint()?);
                        Some(())
                    })?;
                    inputs = true;
                }
                4 => {
                    c.attrs(interner, &mut scratch.attrs)?;
                    attrs = true;
                }
                5 => {
                    shape = if c.word(b"null") {
                        None
                    } else {
                        let dims = &mut scratch.dims;
                        dims.clear();
                        if !c.eat(b'[') {
                            return None;
                        }
                        c.items(|c| {
                            let dim = match c.peek()? {
                                b'"' => Dim::Symbolic(c.str().filter(|s| !s.is_empty())?.to_owned()),
                                _ => Dim::Static(c.uint()? as i64), // 18 digits at most: within i64
                            };
                            dims.push(dim);
                            Some(())
                        })?;
                        Some(interner.shape(dims))
                    }
                }
                _ => dtype = if c.word(b"null") { None } else { Some(interner.sym(c.str()?)) },
            }
            if c.eat(b'}') {
                break;
            }
            if !c.eat(b',') {
                return None;
            }
        }
    }
    let node = Node {
        id: id?,
        op: op?,
        name,
        inputs: if inputs { scratch.inputs.as_slice().into() } else { Inputs::new() },
        attrs: if attrs { Fields::from_pairs(scratch.attrs.drain(..)) } else { Fields::new() },
        shape,
        dtype,
        extra: Fields::new(),
    };
    Some((node, c.pos))
}
