//! Lenient readers of JSON values: each reads whatever stands in a field into a shape that cannot fail on a wrong
//! type ([`Atom`], [`List`], [`Named`], [`Attrs`]), so that a mistyped field is reported by the node reader with the
//! node and the field named, instead of as a serde position.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::{quote, Dim, Interner, NodeId, Sym};

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

pub(super) struct AtomVisitor;

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
pub(super) trait Item: Sized {
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
pub(super) struct ListSeed<'a, T>(pub(super) &'a mut Vec<T>);

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
pub(super) enum Named {
    Sym(Sym),
    Not(Atom),
}

/// Reads a [`Named`] through the interner `.0`, without a String of its own.
pub(super) struct NamedSeed<'a>(pub(super) &'a mut Interner);

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
pub(super) enum Attrs {
    Pairs(Option<String>), // the attributes are in the seed's buffer, in the order read; a key given twice
    Not(Atom),
}

/// Reads [`Attrs`], their names shared through the interner `.0`, the pairs into the buffer `.1` (cleared first).
pub(super) struct AttrsSeed<'a>(pub(super) &'a mut Interner, pub(super) &'a mut Vec<(Sym, Value)>);

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

impl Named {
    /// What was read, as an [`Atom`] (for a message).
    pub(super) fn into_atom(self) -> Atom {
        match self {
            Named::Sym(s) => Atom::Str(s.to_string()),
            Named::Not(atom) => atom,
        }
    }
}
