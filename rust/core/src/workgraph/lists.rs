//! The work graph's flat building blocks: per-node lists in one buffer, and the op table of a build.

use std::collections::HashMap;

use crate::graph::Sym;

/// Growable lists, one per node, in one flat buffer: a full list moves to the end with twice the room.
#[derive(Default)]
pub(super) struct Lists {
    pub(super) data: Vec<(u32, u32)>,
    pub(super) start: Vec<u32>,
    pub(super) len: Vec<u32>,
    pub(super) cap: Vec<u32>,
}

impl Lists {
    /// Empty lists with room for the given lengths and one more each (a rewrite adds a node that reads what the
    /// nodes it removes read, before removing them); the vectors have room for `lists` lists and `items` items.
    pub(super) fn with_lengths(lengths: &[u32], lists: usize, items: usize) -> Lists {
        let mut start = Vec::with_capacity(lists);
        let mut cap = Vec::with_capacity(lists);
        let mut at = 0u32;
        for &l in lengths {
            start.push(at);
            cap.push(l + 1);
            at += l + 1;
        }
        let mut data = Vec::with_capacity(items.max(at as usize));
        data.resize(at as usize, (0, 0));
        let mut len = Vec::with_capacity(lists);
        len.resize(lengths.len(), 0);
        Lists { data, start, len, cap }
    }

    /// Give list `from` (emptied) to `to`, whose own list must be empty.
    pub(super) fn give(&mut self, from: usize, to: usize) {
        self.start.swap(from, to);
        self.len.swap(from, to);
        self.cap.swap(from, to);
    }

    pub(super) fn get(&self, i: usize) -> &[(u32, u32)] {
        let s = self.start[i] as usize;
        &self.data[s..s + self.len[i] as usize]
    }

    pub(super) fn add_list(&mut self) {
        self.start.push(self.data.len() as u32);
        self.len.push(0);
        self.cap.push(0);
    }

    /// Append to list `i`; returns the item's position in it.
    pub(super) fn push(&mut self, i: usize, item: (u32, u32)) -> u32 {
        let (len, cap) = (self.len[i], self.cap[i]);
        if len == cap {
            let new_cap = (cap * 2).max(2);
            let old = self.start[i] as usize;
            let new = self.data.len();
            self.data.extend_from_within(old..old + len as usize);
            self.data.resize(new + new_cap as usize, (0, 0));
            self.start[i] = new as u32;
            self.cap[i] = new_cap;
        }
        self.data[(self.start[i] + len) as usize] = item;
        self.len[i] = len + 1;
        len
    }

    /// Remove the item at `pos` of list `i` by moving the last one there; returns the moved item, if any.
    pub(super) fn swap_remove(&mut self, i: usize, pos: u32) -> Option<(u32, u32)> {
        let s = self.start[i] as usize;
        let last = self.len[i] - 1;
        self.len[i] = last;
        if pos == last {
            return None;
        }
        let moved = self.data[s + last as usize];
        self.data[s + pos as usize] = moved;
        Some(moved)
    }

    /// Empty list `i`; returns where its items still lie in `data` (valid until list `i` grows again).
    pub(super) fn take(&mut self, i: usize) -> std::ops::Range<usize> {
        let s = self.start[i] as usize;
        let len = std::mem::take(&mut self.len[i]) as usize;
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
