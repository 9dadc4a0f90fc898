//! Applies one match's rewrite: refuses unsafe deletions, builds the new nodes, rewires consumers.
//!
//! Safety is the engine's job. A node that the match absorbs must have no consumer outside the
//! nodes removed with it, must not be a graph output and must not be a graph Input; otherwise the
//! rewrite is refused and the graph is untouched. Every expression is evaluated before anything
//! changes, so a failed rewrite leaves no trace. A match is a list of members (one slot vector
//! each): one for an ordinary rule, several for a group rule, whose members are all replaced.

use serde_json::Value;

use crate::expr::{Env, Val};
use crate::graph::{Dim, Fields, Node, Shape, Sym};
use crate::prepared::Prepared;
use crate::program::{NewInput, Rule};
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
    /// Its inputs: `Rewriter::sources[inputs.0..inputs.1]`.
    inputs: (usize, usize),
    /// The member whose root this node replaces, if any.
    replaces: Option<usize>,
    /// The member whose position orders this node.
    position_of: usize,
    /// Whether the shape and dtype were computed (else copied from the root, and already shared).
    computed: (bool, bool),
    /// The rule's rewrite node it comes from.
    new: usize,
}

/// Applies rewrites, keeping its work lists from one to the next, so that a rewrite allocates only the
/// nodes it creates.
#[derive(Default)]
pub struct Rewriter {
    roots: Vec<usize>,
    removed: Vec<usize>,
    planned: Vec<Planned>,
    sources: Vec<Source>,
    member_inputs: Vec<usize>,
    index_of_new: Vec<usize>,
    made: Vec<usize>,
    replacing: Vec<usize>,
    inputs: Vec<usize>,
    orphans: Vec<usize>,
}

impl Rewriter {
    pub fn new() -> Rewriter {
        Rewriter::default()
    }

    /// Apply the rewrite of `prep`'s rule to the match `members` (one slot vector each).
    pub fn apply(&mut self, graph: &mut WorkGraph<'_>, prep: &Prepared, members: &[Vec<usize>], params: &[Val]) -> Result<(), Refusal> {
        let rule = prep.rule;
        self.roots.clear();
        self.roots.extend(members.iter().map(|m| m[0]));
        self.removed.clear();
        self.removed.extend_from_slice(&self.roots);
        for m in members {
            for &a in &rule.absorb {
                // Bindings may alias: a node that another, kept binding also denotes stays (and is removed once).
                let kept = (1..m.len()).any(|s| m[s] == m[a] && !rule.absorb.contains(&s));
                if !kept && !self.removed.contains(&m[a]) {
                    self.removed.push(m[a]);
                }
            }
        }
        for m in members {
            for &a in &rule.absorb {
                if self.removed.contains(&m[a]) {
                    check_absorbable(graph, rule, m[a], a, &self.removed)?;
                }
            }
        }
        if !rule.forward.is_empty() {
            return self.forward(graph, rule, &members[0], params);
        }

        self.plan(graph, prep, members, params)?;
        for s in &self.sources {
            if let Source::Arena(i) = *s {
                if self.removed.contains(&i) {
                    self.planned.clear();
                    return Err(Refusal::Unsafe(format!(
                        "rewrite input {} would be removed by the same rewrite",
                        graph.node(i).label()
                    )));
                }
            }
        }
        if members.len() > 1 {
            if let Err(refusal) = refuse_cycles(graph, &self.member_inputs, &self.roots) {
                self.planned.clear();
                return Err(refusal);
            }
        }

        // Everything is known: mutate.
        self.made.clear();
        self.replacing.clear();
        self.replacing.resize(self.roots.len(), usize::MAX);
        let mut planned = std::mem::take(&mut self.planned);
        for p in planned.drain(..) {
            self.inputs.clear();
            for s in &self.sources[p.inputs.0..p.inputs.1] {
                self.inputs.push(match *s {
                    Source::Arena(i) => i,
                    Source::Planned(j) => self.made[j],
                });
            }
            if p.replaces.is_none() {
                if let Some(existing) = identical_node(graph, &p.node, &self.inputs, &self.removed) {
                    self.made.push(existing);
                    continue;
                }
            }
            let mut node = p.node;
            match p.replaces {
                Some(k) => {
                    // The root is removed below: the new node takes over its id and name.
                    node.id = graph.id(self.roots[k]);
                    node.name = graph.take_name(self.roots[k]);
                }
                None => node.id = graph.fresh_id(),
            }
            if p.computed.0 {
                node.shape = node.shape.map(|s| graph.intern_shape(&s));
            }
            if p.computed.1 {
                node.dtype = node.dtype.map(|d| graph.intern_sym(&d));
            }
            node.inputs = self.inputs.iter().map(|&i| graph.id(i)).collect();
            let position = graph.order_key(self.roots[p.position_of]).0;
            let i = graph.add_op(node, prep.new_ops[p.new], &self.inputs, position);
            if let Some(k) = p.replaces {
                self.replacing[k] = i;
            }
            self.made.push(i);
        }
        // What the removed nodes read may be left without a consumer (a kept mask or scale whose only user
        // was absorbed): collected now, removed below once nothing reads it.
        self.orphans.clear();
        for &r in &self.removed {
            self.orphans.extend(graph.inputs(r).iter().map(|&j| j as usize));
        }
        for &r in &self.removed {
            graph.remove(r);
        }
        for (k, &root) in self.roots.iter().enumerate() {
            graph.redirect(root, self.replacing[k]);
        }
        remove_orphans(graph, &mut self.orphans);
        self.planned = planned;
        Ok(())
    }

    /// A forwarding rewrite: every use of the root (consumers and graph outputs) reads the chosen binding
    /// instead, and the removed nodes go. The binding feeds the root, so no cycle can form; it must have the
    /// root's shape and dtype, so that no reader sees a different value type, and must not be removed itself.
    fn forward(&mut self, graph: &mut WorkGraph<'_>, rule: &Rule, slots: &[usize], params: &[Val]) -> Result<(), Refusal> {
        let removed = &self.removed;
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
        self.orphans.clear();
        for &r in removed {
            self.orphans.extend(graph.inputs(r).iter().map(|&j| j as usize));
        }
        for &r in removed {
            graph.remove(r);
        }
        graph.forward(root, target);
        remove_orphans(graph, &mut self.orphans);
        Ok(())
    }
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
        if graph.is_alive(i) && graph.consumer_count(i) == 0 && !graph.is_output(i) && !graph.is_input(i) {
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
    if graph.is_input(i) {
        return Err(Refusal::Unsafe(format!("{} is a graph Input", label())));
    }
    if let Some(c) = graph.consumers(i).find(|c| !removed.contains(c)) {
        return Err(Refusal::Unsafe(format!("{} is still used by {} outside the match", label(), graph.node(c).label())));
    }
    Ok(())
}

impl Rewriter {
    /// Evaluate every new node (attributes, shape, dtype, inputs) into `planned` before anything changes. Also
    /// collects the inputs taken from per-member slots, the only ones that could depend on another member.
    fn plan(&mut self, graph: &WorkGraph, prep: &Prepared, members: &[Vec<usize>], params: &[Val]) -> Result<(), Refusal> {
        let rule = prep.rule;
        let per_member: &[bool] = rule.group.as_ref().map_or(&[], |g| g.per_member.as_slice());
        let base = match rule.group {
            Some(_) => Env::for_group(graph, members, per_member, params),
            None => Env::new(graph, &members[0], params),
        };
        self.planned.clear();
        self.sources.clear();
        self.member_inputs.clear();
        // Where each rewrite node landed in `planned` (each-nodes are never referenced by later nodes).
        self.index_of_new.clear();
        for (n, new) in rule.rewrite.iter().enumerate() {
            self.index_of_new.push(self.planned.len());
            let selected = if new.each { 0..members.len() } else { 0..1 };
            for k in selected {
                let member = new.each.then_some(k);
                let env = match member {
                    Some(k) => base.at(k),
                    None => base,
                };
                let root = members[k][0];
                let first = self.sources.len();
                for input in &new.inputs {
                    match *input {
                        NewInput::Slot(s) => {
                            if per_member.get(s) == Some(&true) {
                                self.member_inputs.push(env.slots[s]);
                            }
                            self.sources.push(Source::Arena(env.slots[s]));
                        }
                        NewInput::New(j) => self.sources.push(Source::Planned(self.index_of_new[j])),
                        NewInput::Spread(s) => {
                            self.member_inputs.extend(members.iter().map(|m| m[s]));
                            self.sources.extend(members.iter().map(|m| Source::Arena(m[s])));
                        }
                    }
                }
                let node = match build_node(graph, prep, n, &env, root) {
                    Ok(node) => node,
                    Err(refusal) => {
                        self.planned.clear();
                        return Err(refusal);
                    }
                };
                self.planned.push(Planned {
                    node,
                    inputs: (first, self.sources.len()),
                    replaces: new.replaces.map(|_| k),
                    position_of: k,
                    computed: (new.shape.is_some(), new.dtype.is_some()),
                    new: n,
                });
            }
        }
        Ok(())
    }
}

/// New node `n` of `prep`'s rewrite, evaluated in `env` (its id, name and inputs are set when it is added).
fn build_node(graph: &WorkGraph, prep: &Prepared, n: usize, env: &Env<'_>, root: usize) -> Result<Node, Refusal> {
    let new = &prep.rule.rewrite[n];
    let root_node = &graph.node(root);
    let mut attrs: Vec<(Sym, Value)> = Vec::with_capacity(new.attrs.len());
    for ((name, e), key) in new.attrs.iter().zip(&prep.new_keys[n]) {
        let v = env.eval(e).and_then(|v| v.to_json()).map_err(|err| Refusal::Eval(format!("{}.{name}: {}", new.name, err.0)))?;
        // A name given twice keeps its first place and its last value, as a map insert does.
        match attrs.iter_mut().find(|(k, _)| k == key) {
            Some((_, old)) => *old = v,
            None => attrs.push((key.clone(), v)),
        }
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
    let mut node = Node::new(0, graph.op_name(prep.new_ops[n]).clone());
    node.attrs = Fields::from_pairs(attrs);
    node.shape = shape;
    node.dtype = dtype;
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
