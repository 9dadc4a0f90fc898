//! Node ids: a fast keyed hasher for them, maps keyed by them, and a position index over a graph's nodes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::NodeId;

/// A fast hasher for node ids: a per-process random key mixed with splitmix64. SipHash dominated
/// the cost of indexing large graphs. The random key keeps hostile ids from being chosen to collide.
#[derive(Clone, Copy)]
pub struct IdHasher(u64);

impl Default for IdHasher {
    fn default() -> Self {
        static KEY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        IdHasher(*KEY.get_or_init(|| {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
        }))
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_add(0x9e37_79b9_7f4a_7c15).rotate_left(23);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A map keyed by node id (or index), with [`IdHasher`].
pub type IdMap<V> = HashMap<NodeId, V, BuildHasherDefault<IdHasher>>;

/// Position by node id: a flat table when the ids are dense (as writers number them, 0..n), else a hash map.
pub enum IdIndex {
    Dense(Vec<u32>),
    Sparse(IdMap<u32>),
}

impl IdIndex {
    /// The index of `ids` (the id at position i maps to i), or the positions (first, second) of the first
    /// id given twice, in the order of the second.
    pub fn new(ids: impl Iterator<Item = NodeId> + Clone, n: usize) -> Result<IdIndex, (usize, usize)> {
        let max = ids.clone().max().unwrap_or(0);
        if max < (2 * n as u64).max(1024) && n < u32::MAX as usize {
            let mut table = vec![u32::MAX; max as usize + 1];
            for (i, id) in ids.enumerate() {
                let slot = &mut table[id as usize];
                if *slot != u32::MAX {
                    return Err((*slot as usize, i));
                }
                *slot = i as u32;
            }
            Ok(IdIndex::Dense(table))
        } else {
            let mut map = IdMap::with_capacity_and_hasher(n, Default::default());
            for (i, id) in ids.enumerate() {
                if let Some(first) = map.insert(id, i as u32) {
                    return Err((first as usize, i));
                }
            }
            Ok(IdIndex::Sparse(map))
        }
    }

    /// The position of the node with id `id`.
    pub fn get(&self, id: NodeId) -> Option<usize> {
        let p = match self {
            IdIndex::Dense(table) => *table.get(usize::try_from(id).ok()?)?,
            IdIndex::Sparse(map) => *map.get(&id)?,
        };
        (p != u32::MAX).then_some(p as usize)
    }
}

/// What a reader learns of the ids of a run of nodes as it reads them, enough to vouch for the common case without an
/// index: ids that count up by one, each node's inputs earlier ids of the run. Such nodes have unique ids and existing
/// inputs, and are in topological order.
#[derive(Clone, Copy, Debug)]
pub(super) struct IdRun {
    /// The first and the last id, if any node was seen.
    range: Option<(NodeId, NodeId)>,
    /// Every id one more than the one before it, every input smaller than its node's id.
    counting: bool,
    /// The smallest input.
    min_input: NodeId,
}

impl Default for IdRun {
    fn default() -> IdRun {
        IdRun { range: None, counting: true, min_input: NodeId::MAX }
    }
}

impl IdRun {
    /// The node with id `id` and these inputs comes next.
    #[inline]
    pub(super) fn add(&mut self, id: NodeId, inputs: &[NodeId]) {
        self.range = match self.range {
            None => Some((id, id)),
            Some((first, last)) => {
                self.counting &= last.checked_add(1) == Some(id);
                Some((first, id))
            }
        };
        for &input in inputs {
            self.counting &= input < id;
            self.min_input = self.min_input.min(input);
        }
    }

    /// This run followed by `next`.
    pub(super) fn then(self, next: IdRun) -> IdRun {
        match (self.range, next.range) {
            (Some((first, last)), Some((next_first, next_last))) => IdRun {
                range: Some((first, next_last)),
                counting: self.counting && next.counting && last.checked_add(1) == Some(next_first),
                min_input: self.min_input.min(next.min_input),
            },
            (None, _) => next,
            (_, None) => self,
        }
    }

    /// Whether every id is one more than the one before it and every input smaller than its node's id.
    pub(super) fn counting(&self) -> bool {
        self.counting
    }

    /// Whether the run is vouched for: ids unique and counting up, every input the id of an earlier node.
    pub(super) fn vouched(&self) -> bool {
        self.counting && self.range.is_none_or(|(first, _)| self.min_input >= first)
    }

    /// Whether `id` is the id of a node of a vouched-for run.
    pub(super) fn has(&self, id: NodeId) -> bool {
        self.range.is_some_and(|(first, last)| (first..=last).contains(&id))
    }
}
