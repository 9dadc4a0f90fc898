//! The work graph's flat building blocks: per-node lists in one buffer, and the op table of a build.

use std::collections::HashMap;

use crate::graph::Sym;

/// Where one node's list lies in [`Lists::data`]: kept with the node's other flat fields, so that a match reads a
/// node's consumer count from the cache line that holds its op and inputs.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Head {
    pub(super) start: u32,
    pub(super) len: u32,
    pub(super) cap: u32,
}

/// Growable lists, one per node, in one flat buffer: a full list moves to the end with twice the room.
#[derive(Default)]
pub(super) struct Lists {
    pub(super) data: Vec<(u32, u32)>,
}

impl Lists {
    /// Empty lists: each head's `cap` holds the list's expected length on entry, and gets room for one more (a
    /// rewrite adds a node that reads what the nodes it removes read, before removing them); `data` gets room
    /// for `items` items.
    pub(super) fn with_lengths<'h>(heads: impl Iterator<Item = &'h mut Head>, items: usize) -> Lists {
        let mut at = 0u32;
        for head in heads {
            let cap = head.cap + 1;
            *head = Head { start: at, len: 0, cap };
            at += cap;
        }
        let mut data = super::huge_vec(items.max(at as usize));
        data.resize(at as usize, (0, 0));
        Lists { data }
    }

    pub(super) fn get(&self, head: &Head) -> &[(u32, u32)] {
        let s = head.start as usize;
        &self.data[s..s + head.len as usize]
    }

    /// A new empty list (it takes room when first pushed to).
    pub(super) fn add_list(&self) -> Head {
        Head { start: self.data.len() as u32, len: 0, cap: 0 }
    }

    /// Append to the list of `head`; returns the item's position in it.
    pub(super) fn push(&mut self, head: &mut Head, item: (u32, u32)) -> u32 {
        let (len, cap) = (head.len, head.cap);
        if len == cap {
            let new_cap = (cap * 2).max(2);
            let old = head.start as usize;
            let new = self.data.len();
            self.data.extend_from_within(old..old + len as usize);
            self.data.resize(new + new_cap as usize, (0, 0));
            head.start = new as u32;
            head.cap = new_cap;
        }
        self.data[(head.start + len) as usize] = item;
        head.len = len + 1;
        len
    }

    /// Remove the item at `pos` of the list of `head` by moving the last one there; returns the moved item, if any.
    pub(super) fn swap_remove(&mut self, head: &mut Head, pos: u32) -> Option<(u32, u32)> {
        let s = head.start as usize;
        let last = head.len - 1;
        head.len = last;
        if pos == last {
            return None;
        }
        let moved = self.data[s + last as usize];
        self.data[s + pos as usize] = moved;
        Some(moved)
    }

    /// Empty the list of `head`; returns where its items still lie in `data` (valid until that list grows again).
    pub(super) fn take(head: &mut Head) -> std::ops::Range<usize> {
        let s = head.start as usize;
        let len = std::mem::take(&mut head.len) as usize;
        s..s + len
    }
}

/// Op names interned while building: index by name, names by index, nodes by op.
#[derive(Default)]
pub(super) struct OpTable {
    pub(super) names: Vec<Sym>,
    pub(super) index: HashMap<Sym, u32>,
    pub(super) by_op: Vec<Vec<u32>>,
    /// Ops seen by the address of their text: a loaded graph shares one copy of each op name, so a lookup is
    /// usually one comparison of addresses. (address, length, op index); length 0 means empty.
    seen: Vec<(usize, usize, u32)>,
}

/// Entries of [`OpTable::seen`] (a power of two).
const SEEN_SLOTS: usize = 64;

impl OpTable {
    pub(super) fn intern(&mut self, op: &Sym) -> u32 {
        // Only while the nodes that hold these texts are alive (the build), an address names one text.
        let key = (op.as_ptr() as usize, op.len());
        let slot = (key.0 >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (usize::BITS - SEEN_SLOTS.trailing_zeros());
        if self.seen.is_empty() {
            self.seen = vec![(0, 0, 0); SEEN_SLOTS];
        }
        let (addr, len, k) = self.seen[slot];
        if addr == key.0 && len == key.1 && len > 0 {
            return k;
        }
        let k = self.lookup(op);
        self.seen[slot] = (key.0, key.1, k);
        k
    }

    pub(super) fn lookup(&mut self, op: &Sym) -> u32 {
        match self.index.get(op) {
            Some(&k) => k,
            None => {
                let k = self.names.len() as u32;
                self.index.insert(op.clone(), k);
                self.names.push(op.clone());
                self.by_op.push(Vec::new());
                k
            }
        }
    }
}
