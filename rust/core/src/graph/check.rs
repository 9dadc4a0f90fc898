//! Validation of a graph: unique ids, existing inputs, a stable topological order (or the cycle that prevents
//! one), outputs that are nodes, and the registry's arity and attribute types.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use serde_json::Value;

use super::{quote, Dim, Graph, GraphError, GraphErrorKind, IdIndex, Node, Sym, Warning};
use crate::registry::{OpSpec, Registry};

impl Graph {
    /// All checks of [`Graph::validate`]; also returns a topological order when the current one
    /// is not (`None`: already ordered).
    pub(super) fn check(&self, registry: &Registry) -> Result<(Vec<Warning>, Option<Vec<usize>>), GraphError> {
        let index = self.id_index()?;
        for node in &self.nodes {
            check_node_fields(node)?;
        }
        let ordered = self.inputs_ordered(&index)?;
        let order = self.topo_order(&index, ordered)?;
        self.check_outputs(&index)?;
        let warnings = check_registry(self.nodes.iter(), registry)?;
        Ok((warnings, order))
    }

    /// Whether every input comes before its consumer. A `DanglingInput` error for the first input that is not a node.
    pub(crate) fn inputs_ordered(&self, index: &IdIndex) -> Result<bool, GraphError> {
        let mut ordered = true;
        for (i, node) in self.nodes.iter().enumerate() {
            for (k, input) in node.inputs.iter().enumerate() {
                match index.get(*input) {
                    Some(p) => ordered &= p < i,
                    None => {
                        return Err(GraphError::new(
                            GraphErrorKind::DanglingInput,
                            format!(
                                "{}: input {input} does not exist (field \"inputs\"[{k}])",
                                node.label()
                            ),
                        ))
                    }
                }
            }
        }
        Ok(ordered)
    }

    fn check_outputs(&self, index: &IdIndex) -> Result<(), GraphError> {
        for (k, out) in self.outputs.iter().enumerate() {
            if index.get(*out).is_none() {
                return Err(GraphError::new(
                    GraphErrorKind::BadOutput,
                    format!("output {out} is not a node (field \"outputs\"[{k}])"),
                ));
            }
        }
        Ok(())
    }

    /// A stable topological order (positions in `nodes`), or `None` if the nodes are already
    /// ordered; `ordered` comes from [`Graph::inputs_ordered`], which found every input in `index`.
    pub(crate) fn topo_order(
        &self,
        index: &IdIndex,
        ordered: bool,
    ) -> Result<Option<Vec<usize>>, GraphError> {
        if ordered {
            return Ok(None);
        }
        // The position of every input, node after node, in one flat list.
        let positions: Vec<usize> = self.nodes.iter().flat_map(|n| n.inputs.iter().map(|id| index.get(*id).unwrap_or(0))).collect();
        let positions = positions.as_slice();
        let n = self.nodes.len();
        // Where each node's inputs start in `positions`.
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0usize);
        for node in &self.nodes {
            offsets.push(offsets[offsets.len() - 1] + node.inputs.len());
        }
        // Consumers of each node, as a compressed adjacency list.
        let mut start = vec![0usize; n + 1];
        for &p in positions {
            start[p + 1] += 1;
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut consumers = vec![0usize; positions.len()];
        let mut pending = vec![0usize; n];
        for i in 0..n {
            for &p in &positions[offsets[i]..offsets[i + 1]] {
                consumers[fill[p]] = i;
                fill[p] += 1;
            }
            pending[i] = offsets[i + 1] - offsets[i];
        }
        let mut ready: BinaryHeap<Reverse<usize>> =
            (0..n).filter(|&i| pending[i] == 0).map(Reverse).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(Reverse(i)) = ready.pop() {
            order.push(i);
            for &c in &consumers[start[i]..start[i + 1]] {
                pending[c] -= 1;
                if pending[c] == 0 {
                    ready.push(Reverse(c));
                }
            }
        }
        if order.len() == n {
            return Ok(Some(order));
        }
        Err(self.cycle_error(positions, &offsets, &pending))
    }

    /// Find a cycle among the nodes left with pending inputs and describe it.
    fn cycle_error(&self, positions: &[usize], offsets: &[usize], pending: &[usize]) -> GraphError {
        // Every node left has an input that is also left, so walking inputs must loop.
        let Some(first) = pending.iter().position(|&p| p > 0) else {
            return GraphError::new(GraphErrorKind::Cycle, "the graph has a cycle");
        };
        let mut seen_at: HashMap<usize, usize> = HashMap::new();
        let mut path: Vec<usize> = Vec::new();
        let mut cur = first;
        loop {
            if let Some(&at) = seen_at.get(&cur) {
                let cycle = &path[at..];
                let start = self.nodes[cycle[0]].label();
                let mut ids: Vec<String> = cycle
                    .iter()
                    .take(12)
                    .map(|&i| self.nodes[i].id.to_string())
                    .collect();
                if cycle.len() > 12 {
                    ids.push("...".to_string());
                }
                ids.push(self.nodes[cycle[0]].id.to_string());
                return GraphError::new(
                    GraphErrorKind::Cycle,
                    format!(
                        "{start} is on a cycle: {} (each node takes the next as an input; field \"inputs\")",
                        ids.join(" -> ")
                    ),
                );
            }
            seen_at.insert(cur, path.len());
            path.push(cur);
            match positions[offsets[cur]..offsets[cur + 1]]
                .iter()
                .copied()
                .find(|&p| pending[p] > 0)
            {
                Some(p) => cur = p,
                None => return GraphError::new(GraphErrorKind::Cycle, "the graph has a cycle"),
            }
        }
    }

    pub(super) fn apply_order(&mut self, order: &[usize]) {
        let mut slots: Vec<Option<Node>> = std::mem::take(&mut self.nodes)
            .into_iter()
            .map(Some)
            .collect();
        self.nodes = order
            .iter()
            .filter_map(|&i| slots.get_mut(i).and_then(Option::take))
            .collect();
    }
}

/// Registry lookups by an op's shared string: a loaded graph's ops are a handful of [`Sym`]s, so a short list
/// compared by address answers most lookups without comparing strings (two live `Sym`s at one address and of one
/// length hold the same text).
struct SpecCache<'r> {
    registry: &'r Registry,
    seen: Vec<(*const u8, usize, Option<&'r OpSpec>)>,
}

impl<'r> SpecCache<'r> {
    /// How many ops the list remembers; lookups of others go to the registry.
    const SIZE: usize = 32;

    fn get(&mut self, op: &Sym) -> Option<&'r OpSpec> {
        let key = (op.as_ptr(), op.len());
        if let Some(&(_, _, spec)) = self.seen.iter().find(|(p, n, _)| (*p, *n) == key) {
            return spec;
        }
        let spec = self.registry.get(op);
        if self.seen.len() < Self::SIZE {
            self.seen.push((key.0, key.1, spec));
        }
        spec
    }
}

/// Registry checks (arity, attribute types) of `nodes`.
pub(crate) fn check_registry<'a>(nodes: impl Iterator<Item = &'a Node>, registry: &Registry) -> Result<Vec<Warning>, GraphError> {
    let mut warnings = Vec::new();
    // One warning per unknown op, and per unknown (op, attribute), at its first node.
    let mut unknown_ops: HashMap<&str, (usize, usize)> = HashMap::new(); // op -> (warning, count)
    let mut unknown_attrs: HashMap<(&str, &str), ()> = HashMap::new();
    let mut specs = SpecCache { registry, seen: Vec::new() };
    for node in nodes {
        let Some(spec) = specs.get(&node.op) else {
            match unknown_ops.get_mut(node.op.as_str()) {
                Some((_, count)) => *count += 1,
                None => {
                    unknown_ops.insert(&node.op, (warnings.len(), 1));
                    warnings.push(Warning {
                        node: Some(node.id),
                        message: format!(
                            "{}: op {} is not in the op registry; loaded unchecked and matched by name",
                            node.label(),
                            quote(&node.op)
                        ),
                    });
                }
            }
            continue;
        };
        let n = node.inputs.len();
        if !spec.arity.accepts(n) {
            return Err(GraphError::new(
                GraphErrorKind::Arity,
                format!(
                    "{}: op {} takes {}, found {n} (field \"inputs\")",
                    node.label(),
                    quote(&node.op),
                    spec.arity
                ),
            ));
        }
        for (attr, attr_spec) in &spec.attrs {
            match node.attrs.get(attr) {
                Some(value) if !attr_spec.accepts(value) => {
                    return Err(GraphError::new(
                        GraphErrorKind::AttrType,
                        format!(
                            "{}: attribute {} of op {} must be {}, found {} (field \"attrs\".{})",
                            node.label(),
                            quote(attr),
                            quote(&node.op),
                            attr_spec.expected(),
                            describe_value(value),
                            quote(attr)
                        ),
                    ));
                }
                Some(_) => {}
                None if !attr_spec.optional => {
                    return Err(GraphError::new(
                        GraphErrorKind::AttrType,
                        format!(
                            "{}: op {} needs attribute {} ({}) (field \"attrs\".{})",
                            node.label(),
                            quote(&node.op),
                            quote(attr),
                            attr_spec.expected(),
                            quote(attr)
                        ),
                    ));
                }
                None => {}
            }
        }
        if node.attrs.len() > spec.attrs.len()
            || node.attrs.keys().any(|k| !spec.attrs.contains_key(k.as_str()))
        {
            for key in node.attrs.keys() {
                if !spec.attrs.contains_key(key.as_str())
                    && unknown_attrs
                        .insert((node.op.as_str(), key.as_str()), ())
                        .is_none()
                {
                    warnings.push(Warning {
                        node: Some(node.id),
                        message: format!(
                            "{}: attribute {} is not in the op registry for op {}; kept (field \"attrs\".{})",
                            node.label(),
                            quote(key),
                            quote(&node.op),
                            quote(key)
                        ),
                    });
                }
            }
        }
    }
    // Say how many nodes carry each unknown op.
    for &(w, count) in unknown_ops.values() {
        if count > 1 {
            warnings[w]
                .message
                .push_str(&format!(" ({count} nodes use it)"));
        }
    }
    Ok(warnings)
}

/// Checks of one node that need no other node: a non-empty op, valid dims.
pub(crate) fn check_node_fields(node: &Node) -> Result<(), GraphError> {
    if node.op.is_empty() {
        return Err(GraphError::new(
            GraphErrorKind::Format,
            format!(
                "{}: the op must be a non-empty string (field \"op\")",
                node.label()
            ),
        ));
    }
    if let Some(shape) = &node.shape {
        for (k, dim) in shape.iter().enumerate() {
            let bad = match dim {
                Dim::Static(n) => *n < 0,
                Dim::Symbolic(s) => s.is_empty(),
            };
            if bad {
                let found = match dim {
                    Dim::Static(n) => n.to_string(),
                    Dim::Symbolic(s) => quote(s),
                };
                return Err(GraphError::new(
                    GraphErrorKind::Format,
                    format!(
                        "{}: a dim must be an integer >= 0 or a non-empty string, found {found} (field \"shape\"[{k}])",
                        node.label()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A short description of a JSON value for messages (long values are cut).
fn describe_value(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        let cut: String = text.chars().take(57).collect();
        format!("{cut}...")
    } else {
        text
    }
}
