//! Applies one match's rewrite: refuses unsafe deletions, builds the new nodes, rewires consumers.
//!
//! Safety is the engine's job. A node that the match absorbs must have no consumer outside the
//! nodes removed with it, must not be a graph output and must not be a graph Input; otherwise the
//! rewrite is refused and the graph is untouched. Every expression is evaluated before anything
//! changes, so a failed rewrite leaves no trace.

use serde_json::Map;

use crate::expr::{Env, Val};
use crate::graph::{Dim, Node};
use crate::program::{NewInput, Rule};
use crate::workgraph::WorkGraph;

/// Why a matched rewrite was not applied.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// Applying it would delete a node still needed outside the match.
    Unsafe(String),
    /// An attribute, shape or dtype expression could not be evaluated.
    Eval(String),
}

struct Planned {
    node: Node,
    inputs: Vec<NewInput>,
}

/// Apply `rule`'s rewrite to the match in `slots`. Returns the arena index of the replacing node.
pub fn apply_rewrite(graph: &mut WorkGraph, rule: &Rule, slots: &[usize], params: &[Val]) -> Result<usize, Refusal> {
    let root = slots[0];
    let mut removed: Vec<usize> = Vec::with_capacity(rule.absorb.len() + 1);
    removed.push(root);
    for &a in &rule.absorb {
        if !removed.contains(&slots[a]) {
            removed.push(slots[a]);
        }
    }
    for &a in &rule.absorb {
        let i = slots[a];
        let label = || format!("{} ({})", graph.nodes[i].label(), rule.slot_names[a]);
        if graph.is_output(i) {
            return Err(Refusal::Unsafe(format!("{} is a graph output", label())));
        }
        if graph.nodes[i].op == "Input" {
            return Err(Refusal::Unsafe(format!("{} is a graph Input", label())));
        }
        if let Some(&c) = graph.consumers[i].iter().find(|c| !removed.contains(c)) {
            return Err(Refusal::Unsafe(format!(
                "{} is still used by {} outside the match",
                label(),
                graph.nodes[c].label()
            )));
        }
    }

    let env = Env { graph, slots, params };
    let root_node = &graph.nodes[root];
    let mut planned = Vec::with_capacity(rule.rewrite.len());
    for new in &rule.rewrite {
        for input in &new.inputs {
            if let NewInput::Slot(s) = input {
                if removed.contains(&slots[*s]) {
                    return Err(Refusal::Unsafe(format!(
                        "rewrite input {} is {}, which the rewrite removes",
                        rule.slot_names[*s],
                        graph.nodes[slots[*s]].label()
                    )));
                }
            }
        }
        let mut attrs = Map::new();
        for (name, e) in &new.attrs {
            let v = env.eval(e).and_then(|v| v.to_json()).map_err(|err| Refusal::Eval(format!("{}.{name}: {}", new.name, err.0)))?;
            attrs.insert(name.clone(), v);
        }
        let shape = match &new.shape {
            Some(e) => Some(to_shape(env.eval(e).map_err(|err| Refusal::Eval(format!("{} shape: {}", new.name, err.0)))?)
                .map_err(|m| Refusal::Eval(format!("{} shape: {m}", new.name)))?),
            None => root_node.shape.clone(),
        };
        let dtype = match &new.dtype {
            Some(e) => match env.eval(e) {
                Ok(Val::Str(s)) => Some(s),
                Ok(Val::Null) => None,
                Ok(other) => return Err(Refusal::Eval(format!("{} dtype is a {}", new.name, other.kind()))),
                Err(err) => return Err(Refusal::Eval(format!("{} dtype: {}", new.name, err.0))),
            },
            None => root_node.dtype.clone(),
        };
        let mut node = Node::new(0, new.op.clone());
        node.attrs = attrs;
        node.shape = shape;
        node.dtype = dtype;
        if new.replaces.is_some() {
            node.id = root_node.id;
            node.name = root_node.name.clone();
        }
        planned.push(Planned { node, inputs: new.inputs.clone() });
    }

    // Everything is known: mutate.
    let position = graph.order_key[root].0;
    let mut made: Vec<usize> = Vec::with_capacity(planned.len());
    let mut replacing = usize::MAX;
    for (k, mut p) in planned.into_iter().enumerate() {
        let inputs: Vec<usize> = p
            .inputs
            .iter()
            .map(|i| match i {
                NewInput::Slot(s) => slots[*s],
                NewInput::New(j) => made[*j],
            })
            .collect();
        if rule.rewrite[k].replaces.is_none() {
            p.node.id = graph.fresh_id();
        }
        p.node.inputs = inputs.iter().map(|&i| graph.nodes[i].id).collect();
        let i = graph.add(p.node, inputs, position);
        if rule.rewrite[k].replaces.is_some() {
            replacing = i;
        }
        made.push(i);
    }
    for &r in &removed {
        graph.remove(r);
    }
    graph.redirect(root, replacing);
    Ok(replacing)
}

fn to_shape(v: Val) -> Result<Vec<Dim>, String> {
    let Val::List(items) = v else { return Err(format!("is a {}, not a list", v.kind())) };
    items
        .into_iter()
        .map(|d| match d {
            Val::Int(n) if n >= 0 => Ok(Dim::Static(n)),
            Val::Sym(s) | Val::Str(s) if !s.is_empty() => Ok(Dim::Symbolic(s)),
            other => Err(format!("{other} is not a dim")),
        })
        .collect()
}
