//! Applies one match's rewrite: refuses unsafe deletions, builds the new nodes, rewires consumers.
//!
//! Safety is the engine's job. A node that the match absorbs must have no consumer outside the
//! nodes removed with it, must not be a graph output and must not be a graph Input; otherwise the
//! rewrite is refused and the graph is untouched. Every expression is evaluated before anything
//! changes, so a failed rewrite leaves no trace. A match is a list of members (one slot vector
//! each): one for an ordinary rule, several for a group rule, whose members are all replaced.

use serde_json::Map;

use crate::expr::{Env, Val};
use crate::graph::{Dim, Node, Shape, Sym};
use crate::program::{NewInput, NewNode, Rule};
use crate::workgraph::WorkGraph;

/// Why a matched rewrite was not applied.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// Applying it would delete a node still needed outside the match, or create a cycle.
    Unsafe(String),
    /// An attribute, shape or dtype expression could not be evaluated.
    Eval(String),
}

/// An input of a planned node: a live arena node, or an earlier planned node.
#[derive(Clone, Copy)]
enum Source {
    Arena(usize),
    Planned(usize),
}

struct Planned {
    node: Node,
    inputs: Vec<Source>,
    /// The member whose root this node replaces, if any.
    replaces: Option<usize>,
    /// The member whose position orders this node.
    position_of: usize,
}

/// Apply `rule`'s rewrite to the match `members`. Returns the arena indices of the replacing nodes.
pub fn apply_rewrite(graph: &mut WorkGraph<'_>, rule: &Rule, members: &[Vec<usize>], params: &[Val]) -> Result<Vec<usize>, Refusal> {
    let roots: Vec<usize> = members.iter().map(|m| m[0]).collect();
    let mut removed: Vec<usize> = roots.clone();
    for m in members {
        for &a in &rule.absorb {
            // Bindings may alias: a node that another, kept binding also denotes stays (and is removed once).
            let kept = (1..m.len()).any(|s| m[s] == m[a] && !rule.absorb.contains(&s));
            if !kept && !removed.contains(&m[a]) {
                removed.push(m[a]);
            }
        }
    }
    for m in members {
        for &a in &rule.absorb {
            if removed.contains(&m[a]) {
                check_absorbable(graph, rule, m[a], a, &removed)?;
            }
        }
    }
    if !rule.forward.is_empty() {
        return forward(graph, rule, &members[0], params, removed);
    }

    let (planned, member_inputs) = plan(graph, rule, members, params)?;
    for p in &planned {
        for s in &p.inputs {
            if let Source::Arena(i) = *s {
                if removed.contains(&i) {
                    return Err(Refusal::Unsafe(format!(
                        "rewrite input {} would be removed by the same rewrite",
                        graph.node(i).label()
                    )));
                }
            }
        }
    }
    if members.len() > 1 {
        refuse_cycles(graph, &member_inputs, &roots)?;
    }

    // Everything is known: mutate.
    let mut made: Vec<usize> = Vec::with_capacity(planned.len());
    let mut replacing = vec![usize::MAX; roots.len()];
    for p in planned {
        let inputs: Vec<usize> = p
            .inputs
            .iter()
            .map(|s| match *s {
                Source::Arena(i) => i,
                Source::Planned(j) => made[j],
            })
            .collect();
        if p.replaces.is_none() {
            if let Some(existing) = identical_node(graph, &p.node, &inputs, &removed) {
                made.push(existing);
                continue;
            }
        }
        let mut node = p.node;
        node.id = match p.replaces {
            Some(k) => graph.node(roots[k]).id,
            None => graph.fresh_id(),
        };
        node.inputs = inputs.iter().map(|&i| graph.node(i).id).collect();
        let position = graph.order_key(roots[p.position_of]).0;
        let i = graph.add(node, &inputs, position);
        if let Some(k) = p.replaces {
            replacing[k] = i;
        }
        made.push(i);
    }
    // What the removed nodes read may be left without a consumer (a kept mask or scale whose only user
    // was absorbed): collected now, removed below once nothing reads it.
    let mut orphans: Vec<usize> = removed.iter().flat_map(|&r| graph.inputs(r).iter().map(|&j| j as usize)).collect();
    for &r in &removed {
        graph.remove(r);
    }
    for (k, &root) in roots.iter().enumerate() {
        graph.redirect(root, replacing[k]);
    }
    remove_orphans(graph, &mut orphans);
    Ok(replacing)
}

/// A forwarding rewrite: every use of the root (consumers and graph outputs) reads the chosen binding
/// instead, and the removed nodes go. The binding feeds the root, so no cycle can form; it must have the
/// root's shape and dtype, so that no reader sees a different value type, and must not be removed itself.
fn forward(graph: &mut WorkGraph<'_>, rule: &Rule, slots: &[usize], params: &[Val], removed: Vec<usize>) -> Result<Vec<usize>, Refusal> {
    let env = Env::new(graph, slots, params);
    let mut target = None;
    for (when, slot) in &rule.forward {
        let holds = match when {
            None => true,
            Some(e) => env.truth(e).map_err(|err| Refusal::Eval(format!("forward condition: {}", err.0)))?,
        };
        if holds {
            target = Some(slots[*slot]);
            break;
        }
    }
    let Some(target) = target else { return Err(Refusal::Eval("no forwarding case holds".into())) };
    let root = slots[0];
    let (r, t) = (graph.node(root), graph.node(target));
    if removed.contains(&target) {
        return Err(Refusal::Unsafe(format!("forward target {} would be removed by the same rewrite", t.label())));
    }
    if r.shape != t.shape || r.dtype != t.dtype {
        let describe = |n: &Node| {
            let shape = n.shape.as_ref().map_or("none".to_string(), |s| {
                format!("[{}]", s.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
            });
            format!("{} (shape {shape}, dtype {})", n.label(), n.dtype.as_deref().unwrap_or("none"))
        };
        return Err(Refusal::Unsafe(format!("forwarding {} to {} would change the shape or dtype", describe(r), describe(t))));
    }
    let mut orphans: Vec<usize> = removed.iter().flat_map(|&r| graph.inputs(r).iter().map(|&j| j as usize)).collect();
    for &r in &removed {
        graph.remove(r);
    }
    graph.forward(root, target);
    remove_orphans(graph, &mut orphans);
    Ok(vec![target])
}

/// Ops whose every evaluation differs: a helper node of these is never shared.
const NONDETERMINISTIC: [&str; 7] =
    ["RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"];

/// At most this many consumers are looked through for a node to share (so a hub, such as a scalar
/// constant read all over the graph, costs nothing per rewrite).
const SHARE_SCAN_MAX: usize = 256;

/// A live node that computes what the helper `node` (not yet added) with arena `inputs` would: same op,
/// inputs, attributes, shape and dtype. Rewrites that fire on several roots then share their helpers (one
/// Reshape of a rotary table, not one per layer). Such a node reads every input, so only the consumers of
/// the input with the fewest are looked at.
fn identical_node(graph: &WorkGraph, node: &Node, inputs: &[usize], removed: &[usize]) -> Option<usize> {
    if NONDETERMINISTIC.contains(&node.op.as_str()) {
        return None;
    }
    let fewest = inputs.iter().copied().min_by_key(|&i| graph.consumer_count(i))?;
    if graph.consumer_count(fewest) > SHARE_SCAN_MAX {
        return None;
    }
    graph.consumers(fewest).find(|&c| {
        let n = graph.node(c);
        !removed.contains(&c)
            && graph.inputs(c).len() == inputs.len()
            && graph.inputs(c).iter().zip(inputs).all(|(&a, &b)| a as usize == b)
            && n.op == node.op
            && n.attrs == node.attrs
            && n.shape == node.shape
            && n.dtype == node.dtype
    })
}

/// Removes the nodes of `orphans` that nothing reads any more (no consumer, not a graph output, not an
/// `Input`), and then what only they read. A rewrite thus leaves no dead computation behind; nodes that
/// were unused before the rewrite are not touched.
fn remove_orphans(graph: &mut WorkGraph, orphans: &mut Vec<usize>) {
    while let Some(i) = orphans.pop() {
        if graph.is_alive(i) && graph.consumer_count(i) == 0 && !graph.is_output(i) && graph.op(i) != "Input" {
            orphans.extend(graph.inputs(i).iter().map(|&j| j as usize));
            graph.remove(i);
        }
    }
}

fn check_absorbable(graph: &WorkGraph, rule: &Rule, i: usize, slot: usize, removed: &[usize]) -> Result<(), Refusal> {
    let label = || format!("{} ({})", graph.node(i).label(), rule.slot_names[slot]);
    if graph.is_output(i) {
        return Err(Refusal::Unsafe(format!("{} is a graph output", label())));
    }
    if graph.op(i) == "Input" {
        return Err(Refusal::Unsafe(format!("{} is a graph Input", label())));
    }
    if let Some(c) = graph.consumers(i).find(|c| !removed.contains(c)) {
        return Err(Refusal::Unsafe(format!("{} is still used by {} outside the match", label(), graph.node(c).label())));
    }
    Ok(())
}

/// Evaluate every new node (attributes, shape, dtype, inputs) before anything changes. Also returns
/// the inputs taken from per-member slots, the only ones that could depend on another member.
fn plan(graph: &WorkGraph, rule: &Rule, members: &[Vec<usize>], params: &[Val]) -> Result<(Vec<Planned>, Vec<usize>), Refusal> {
    let per_member: &[bool] = rule.group.as_ref().map_or(&[], |g| g.per_member.as_slice());
    let base = match rule.group {
        Some(_) => Env::for_group(graph, members, per_member, params),
        None => Env::new(graph, &members[0], params),
    };
    let mut planned: Vec<Planned> = Vec::new();
    let mut member_inputs: Vec<usize> = Vec::new();
    // Where each rewrite node landed in `planned` (each-nodes are never referenced by later nodes).
    let mut index_of_new: Vec<usize> = Vec::with_capacity(rule.rewrite.len());
    for new in &rule.rewrite {
        index_of_new.push(planned.len());
        let selected: Vec<Option<usize>> = if new.each { (0..members.len()).map(Some).collect() } else { vec![None] };
        for member in selected {
            let env = match member {
                Some(k) => base.at(k),
                None => base,
            };
            let root = members[member.unwrap_or(0)][0];
            let mut inputs = Vec::with_capacity(new.inputs.len());
            for input in &new.inputs {
                match *input {
                    NewInput::Slot(s) => {
                        if per_member.get(s) == Some(&true) {
                            member_inputs.push(env.slots[s]);
                        }
                        inputs.push(Source::Arena(env.slots[s]));
                    }
                    NewInput::New(j) => inputs.push(Source::Planned(index_of_new[j])),
                    NewInput::Spread(s) => {
                        member_inputs.extend(members.iter().map(|m| m[s]));
                        inputs.extend(members.iter().map(|m| Source::Arena(m[s])));
                    }
                }
            }
            let node = build_node(graph, new, &env, root)?;
            planned.push(Planned { node, inputs, replaces: new.replaces.map(|_| member.unwrap_or(0)), position_of: member.unwrap_or(0) });
        }
    }
    Ok((planned, member_inputs))
}

fn build_node(graph: &WorkGraph, new: &NewNode, env: &Env<'_>, root: usize) -> Result<Node, Refusal> {
    let root_node = &graph.node(root);
    let mut attrs = Map::new();
    for (name, e) in &new.attrs {
        let v = env.eval(e).and_then(|v| v.to_json()).map_err(|err| Refusal::Eval(format!("{}.{name}: {}", new.name, err.0)))?;
        attrs.insert(name.clone(), v);
    }
    let shape = match &new.shape {
        Some(e) => Some(
            env.eval(e)
                .map_err(|err| err.0)
                .and_then(to_shape)
                .map(Shape::from)
                .map_err(|m| Refusal::Eval(format!("{} shape: {m}", new.name)))?,
        ),
        None => root_node.shape.clone(),
    };
    let dtype = match &new.dtype {
        Some(e) => match env.eval(e) {
            Ok(Val::Str(s)) => Some(Sym::from(s)),
            Ok(Val::Null) => None,
            Ok(other) => return Err(Refusal::Eval(format!("{} dtype is a {}", new.name, other.kind()))),
            Err(err) => return Err(Refusal::Eval(format!("{} dtype: {}", new.name, err.0))),
        },
        None => root_node.dtype.clone(),
    };
    let mut node = Node::new(0, new.op.clone());
    node.attrs = attrs.into();
    node.shape = shape;
    node.dtype = dtype;
    if new.replaces.is_some() {
        node.name = root_node.name.clone();
    }
    Ok(node)
}

/// With several roots replaced, a new node could read a value computed from another member's root.
/// Shared inputs feed every member, so no member precedes them; per-member inputs are checked:
/// the rewrite is refused if any replaced root is among their ancestors.
fn refuse_cycles(graph: &WorkGraph, member_inputs: &[usize], roots: &[usize]) -> Result<(), Refusal> {
    let mut seen = std::collections::HashSet::new();
    let mut stack: Vec<usize> = member_inputs.to_vec();
    while let Some(i) = stack.pop() {
        if !seen.insert(i) {
            continue;
        }
        if roots.contains(&i) {
            return Err(Refusal::Unsafe(format!("the rewrite would read {} through its own result (a cycle)", graph.node(i).label())));
        }
        stack.extend(graph.inputs(i).iter().map(|&j| j as usize));
    }
    Ok(())
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
