//! The compact parts of a node: shared (interned) strings and shapes, and field maps that cost one pointer when empty.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use thin_vec::ThinVec;
use triomphe::ThinArc;

use super::Dim;

/// A string shared by every node that carries it (an op name, a dtype): one pointer inline (to a count, the length
/// and the bytes, in one allocation), no allocation per node when it comes from an [`Interner`]. Compares, hashes,
/// orders and prints as the string.
#[derive(Clone)]
pub struct Sym(ThinArc<(), u8>);

impl Sym {
    pub fn as_str(&self) -> &str {
        // SAFETY: the bytes were copied from a `str` (see `From<&str>`), the only way a Sym is made.
        unsafe { std::str::from_utf8_unchecked(&self.0.slice) }
    }
}

impl Deref for Sym {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Sym {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Sym {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Sym {
    fn from(s: &str) -> Sym {
        Sym(ThinArc::from_header_and_slice((), s.as_bytes()))
    }
}

impl From<String> for Sym {
    fn from(s: String) -> Sym {
        Sym::from(s.as_str())
    }
}

impl From<&String> for Sym {
    fn from(s: &String) -> Sym {
        Sym::from(s.as_str())
    }
}

impl From<Sym> for String {
    fn from(s: Sym) -> String {
        s.as_str().to_string()
    }
}

impl PartialEq for Sym {
    fn eq(&self, other: &Sym) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Sym {}

impl std::hash::Hash for Sym {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state) // as the str, so that a set of Syms can be looked up by &str (Borrow)
    }
}

impl PartialOrd for Sym {
    fn partial_cmp(&self, other: &Sym) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Sym {
    fn cmp(&self, other: &Sym) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialEq<str> for Sym {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Sym {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Sym {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<Sym> for str {
    fn eq(&self, other: &Sym) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Sym> for &str {
    fn eq(&self, other: &Sym) -> bool {
        *self == other.as_str()
    }
}

impl fmt::Debug for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Sym {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// How many recent strings an [`Interner`] compares with before it hashes.
const RECENT_SYMS: usize = 16;

/// A node's shape, shared by every node of the same shape that one load or apply produced: one pointer to a count, the
/// rank and the dims, in one allocation. Reads as a `[Dim]` slice, and compares and hashes as one.
#[derive(Clone)]
pub struct Shape(ThinArc<(), Dim>);

impl Shape {
    /// Whether no other node (or interner) holds this shape.
    pub fn is_unique(&self) -> bool {
        ThinArc::strong_count(&self.0) == 1
    }
}

impl Deref for Shape {
    type Target = [Dim];
    fn deref(&self) -> &[Dim] {
        &self.0.slice
    }
}

impl Borrow<[Dim]> for Shape {
    fn borrow(&self) -> &[Dim] {
        self
    }
}

impl From<&[Dim]> for Shape {
    fn from(dims: &[Dim]) -> Shape {
        Shape(ThinArc::from_header_and_iter((), dims.iter().cloned()))
    }
}

impl From<Vec<Dim>> for Shape {
    fn from(dims: Vec<Dim>) -> Shape {
        Shape(ThinArc::from_header_and_iter((), dims.into_iter()))
    }
}

impl PartialEq for Shape {
    fn eq(&self, other: &Shape) -> bool {
        **self == **other
    }
}

impl Eq for Shape {}

impl std::hash::Hash for Shape {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state) // as the slice, so that a set of shapes can be looked up by &[Dim] (Borrow)
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// One copy of each op name, dtype and shape seen (by a load, or by the nodes an apply creates). Hashed with
/// foldhash (a per-process random seed, so hostile names cannot be chosen to collide), which costs a fraction of
/// SipHash on these short keys.
#[derive(Default)]
pub struct Interner {
    syms: HashSet<Sym, foldhash::fast::RandomState>,
    /// Strings returned lately, by a slot chosen from their length and first byte: a node's op, dtype and attribute
    /// names mostly repeat ones seen a few nodes before, and comparing with one costs less than hashing.
    recent: [Option<Sym>; RECENT_SYMS],
    shapes: HashSet<Shape, foldhash::fast::RandomState>,
    /// The shape returned last: nodes in file order often repeat their predecessor's shape (about 40% of a
    /// BERT graph's), and comparing with it costs less than hashing.
    last_shape: Option<Shape>,
}

impl Interner {
    /// The shared copy of `s`.
    pub fn sym(&mut self, s: &str) -> Sym {
        let slot = (s.len() + usize::from(s.as_bytes().first().copied().unwrap_or(0))) % RECENT_SYMS;
        if let Some(sym) = &self.recent[slot] {
            if sym.as_str() == s {
                return sym.clone();
            }
        }
        let sym = match self.syms.get(s) {
            Some(sym) => sym.clone(),
            None => {
                let sym = Sym::from(s);
                self.syms.insert(sym.clone());
                sym
            }
        };
        self.recent[slot] = Some(sym.clone());
        sym
    }

    /// The shared copy of `dims`.
    pub fn shape(&mut self, dims: &[Dim]) -> Shape {
        if let Some(last) = &self.last_shape {
            if **last == *dims {
                return last.clone();
            }
        }
        let shape = match self.shapes.get(dims) {
            Some(shape) => shape.clone(),
            None => {
                let shape = Shape::from(dims);
                self.shapes.insert(shape.clone());
                shape
            }
        };
        self.last_shape = Some(shape.clone());
        shape
    }
}

/// A JSON object of node fields (attributes, unknown fields), in the order read: one pointer, to a shared empty header
/// while empty, as most are, else to one allocation of its length and (key, value) pairs whose keys are shared [`Sym`]s. A node has a handful of them, so
/// lookups scan; equality ignores the order, as [`Map`]'s does.
#[derive(Clone, Default)]
pub struct Fields(ThinVec<(Sym, Value)>);

impl Fields {
    /// No fields.
    pub fn new() -> Fields {
        Fields(ThinVec::new())
    }

    /// The fields of `map`, in its order, their keys shared through `interner`.
    pub fn from_map(map: Map<String, Value>, interner: &mut Interner) -> Fields {
        Fields(map.into_iter().map(|(k, v)| (interner.sym(&k), v)).collect())
    }

    /// These fields, in this order (their keys are expected to differ), collected into one allocation.
    pub(crate) fn from_pairs(pairs: impl IntoIterator<Item = (Sym, Value)>) -> Fields {
        Fields(pairs.into_iter().collect())
    }

    fn pairs(&self) -> &[(Sym, Value)] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.pairs().len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of field `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.pairs().iter().find(|(k, _)| *k == *key).map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &Sym> {
        self.pairs().iter().map(|(k, _)| k)
    }

    /// The fields, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&Sym, &Value)> {
        self.pairs().iter().map(|(k, v)| (k, v))
    }

    /// Set field `key` (in place if present, else last); the previous value, if any.
    pub fn insert(&mut self, key: &str, value: Value) -> Option<Value> {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => Some(std::mem::replace(v, value)),
            None => {
                self.0.push((Sym::from(key), value));
                None
            }
        }
    }

    /// Share the keys through `interner` (for fields built one by one).
    pub(crate) fn intern_keys(&mut self, interner: &mut Interner) {
        for (k, _) in self.0.iter_mut() {
            *k = interner.sym(k);
        }
    }

    /// The fields as a map.
    pub fn to_map(&self) -> Map<String, Value> {
        self.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }
}

impl From<Map<String, Value>> for Fields {
    fn from(map: Map<String, Value>) -> Fields {
        Fields::from_map(map, &mut Interner::default())
    }
}

impl PartialEq for Fields {
    fn eq(&self, other: &Fields) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl fmt::Debug for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a Fields {
    type Item = (&'a Sym, &'a Value);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (Sym, Value)>, fn(&'a (Sym, Value)) -> (&'a Sym, &'a Value)>;
    fn into_iter(self) -> Self::IntoIter {
        self.pairs().iter().map(|(k, v)| (k, v))
    }
}

impl Serialize for Fields {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

/// `fields["key"]`: the value; panics if absent, as [`Map`]'s index does.
impl std::ops::Index<&str> for Fields {
    type Output = Value;
    fn index(&self, key: &str) -> &Value {
        self.get(key).unwrap_or_else(|| panic!("no field {key:?}"))
    }
}
