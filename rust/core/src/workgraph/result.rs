//! The work graph's result: its live nodes checked and placed in written (and topological) order as a Graph.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::WorkGraph;
use crate::graph::{check_node_fields, check_registry, Graph, GraphError, GraphErrorKind, Inputs, Node, Sym};
use crate::registry::Registry;

impl WorkGraph<'_> {
    /// The live nodes in written order: the loaded ones in their order, each added node after the one whose
    /// position it took (by sequence).
    fn written_order(&self) -> Vec<u32> {
        let mut added: Vec<u32> = self.created.iter().copied().filter(|&i| self.hot[i as usize].alive).collect();
        added.sort_unstable_by_key(|&i| self.order_key(i as usize));
        let mut order = Vec::with_capacity(self.live);
        let mut next = added.iter().peekable();
        for i in 0..self.base.len() {
            while let Some(&&a) = next.peek().filter(|&&&a| self.order_key(a as usize).0 < i as u32) {
                order.push(a);
                next.next();
            }
            if self.hot[i].alive {
                order.push(i as u32);
            }
        }
        order.extend(next);
        order
    }

    /// The live nodes as a checked Graph in topological order: the written order where it is one, else the
    /// stable topological order closest to it. Only the nodes rewrites created are checked against the
    /// registry (the others were checked on loading); the structure is checked in arena terms (every input
    /// live, no cycle, every output a live node), with no id lookups.
    pub fn into_graph(self, registry: &Registry) -> Result<Graph, GraphError> {
        let mut order = self.written_order();
        let mut position = vec![u32::MAX; self.hot.len()];
        for (p, &i) in order.iter().enumerate() {
            position[i as usize] = p as u32;
        }
        let mut ordered = true;
        for &i in &order {
            for &j in self.inputs(i as usize) {
                let p = position[j as usize];
                if p == u32::MAX {
                    let node = self.node(i as usize);
                    return Err(GraphError::new(
                        GraphErrorKind::DanglingInput,
                        format!("{}: input {} was removed by a rewrite (field \"inputs\")", node.label(), self.node(j as usize).id),
                    ));
                }
                ordered &= p < position[i as usize];
            }
        }
        if !ordered {
            order = self.topological(&order, &position)?;
            for (p, &i) in order.iter().enumerate() {
                position[i as usize] = p as u32;
            }
        }
        let live_outputs: usize = order.iter().map(|&i| self.hot[i as usize].outputs as usize).sum();
        if live_outputs != self.outputs.len() {
            return Err(GraphError::new(GraphErrorKind::BadOutput, "a graph output was removed by a rewrite"));
        }
        let created = || self.created.iter().filter(|&&i| self.hot[i as usize].alive).map(|&i| self.node(i as usize));
        for node in created() {
            check_node_fields(node)?;
        }
        check_registry(created(), registry)?;
        // Nodes whose inputs a forwarding rewrite moved to another id: their id lists, by written position.
        let mut forwarded: Vec<(usize, Inputs)> = self
            .forwarded
            .iter()
            .filter(|&&i| self.hot[i as usize].alive)
            .map(|&i| (position[i as usize] as usize, self.inputs(i as usize).iter().map(|&j| self.id(j as usize)).collect()))
            .collect();
        forwarded.sort_unstable_by_key(|&(p, _)| p);
        forwarded.dedup_by_key(|&mut (p, _)| p);
        let WorkGraph { base, mut added, name, outputs, extra, .. } = self;
        let n_base = base.len();
        let nodes = match base {
            Cow::Borrowed(nodes) => {
                let empty = Sym::from("");
                order
                    .iter()
                    .map(|&i| match (i as usize).checked_sub(n_base) {
                        None => nodes[i as usize].clone(),
                        Some(k) => take(&mut added[k], &empty),
                    })
                    .collect()
            }
            Cow::Owned(nodes) => place_owned(nodes, added, &order),
        };
        let mut nodes: Vec<Node> = nodes;
        for (p, ids) in forwarded {
            nodes[p].inputs = ids;
        }
        Ok(Graph { name, nodes, outputs, extra })
    }

    /// Kahn's algorithm over the live nodes, always taking the ready node earliest in `order`.
    fn topological(&self, order: &[u32], position: &[u32]) -> Result<Vec<u32>, GraphError> {
        let mut pending: Vec<u32> = vec![0; self.hot.len()];
        let mut ready = BinaryHeap::new();
        for &i in order {
            pending[i as usize] = self.inputs(i as usize).len() as u32;
            if pending[i as usize] == 0 {
                ready.push(Reverse(position[i as usize]));
            }
        }
        let mut sorted = Vec::with_capacity(order.len());
        while let Some(Reverse(p)) = ready.pop() {
            let i = order[p as usize];
            sorted.push(i);
            for c in self.consumers(i as usize) {
                pending[c] -= 1;
                if pending[c] == 0 {
                    ready.push(Reverse(position[c]));
                }
            }
        }
        if sorted.len() != order.len() {
            let stuck = order.iter().find(|&&i| pending[i as usize] > 0).map_or(0, |&i| i as usize);
            return Err(GraphError::new(
                GraphErrorKind::Cycle,
                format!("{} is on a cycle made by a rewrite (field \"inputs\")", self.node(stuck).label()),
            ));
        }
        Ok(sorted)
    }
}

/// The nodes of `order` (arena indices: the loaded `nodes`, then `added`), moved out in that order. When every
/// loaded node comes no earlier than where it is written (each rewrite removed at least as many nodes before a
/// point as it added), they are moved within `nodes`' own buffer, so the result needs no second array of nodes.
fn place_owned(mut nodes: Vec<Node>, mut added: Vec<Node>, order: &[u32]) -> Vec<Node> {
    let n_base = nodes.len();
    let empty = Sym::from("");
    // (A graph that grew has positions past the loaded nodes: it needs the second array.)
    let in_place =
        order.len() <= n_base && order.iter().enumerate().all(|(p, &i)| i as usize >= n_base || p <= i as usize);
    if !in_place {
        return order
            .iter()
            .map(|&i| match (i as usize).checked_sub(n_base) {
                None => take(&mut nodes[i as usize], &empty),
                Some(k) => take(&mut added[k], &empty),
            })
            .collect();
    }
    for (p, &i) in order.iter().enumerate() {
        // Position p holds a dead node, or what an earlier swap left there (a dead node); a loaded node at i > p
        // is still where it was loaded, since every earlier swap touched only positions before p and their
        // own sources.
        match (i as usize).checked_sub(n_base) {
            None => nodes.swap(p, i as usize),
            Some(k) => nodes[p] = take(&mut added[k], &empty),
        }
    }
    nodes.truncate(order.len());
    nodes
}

/// Move a node out of `slot`, leaving an empty one (op `empty`) in its place: each node is moved once, in any
/// order, without a second array to hold them.
fn take(slot: &mut Node, empty: &Sym) -> Node {
    std::mem::replace(slot, Node::new(0, empty.clone()))
}
