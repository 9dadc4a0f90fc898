//! A rule resolved once against one work graph: op names as op indices, new nodes' attribute names as shared
//! symbols, and the most common guards as direct checks, so that matching compares integers and allocates nothing.
//!
//! A direct check holds exactly when the guard's expression evaluates to `true`; the matcher treats a guard
//! that is false and one that fails to evaluate alike, so a check need not tell those two apart.

use serde_json::Value;

use crate::expr::{binary, compare, json_equal, Env, Val};
use crate::graph::{Dim, Sym};
use crate::program::{BinOp, Builtin, Expr, Instr, Rule};
use crate::workgraph::WorkGraph;

/// The op index that no node has (an op name the graph did not know when the rule was prepared).
pub const NO_OP: u32 = u32::MAX;

/// A guard in a form that reads the graph directly.
#[derive(Clone, Debug)]
pub enum Check {
    /// `uses(slot) <cmp> n`.
    Uses { slot: usize, cmp: BinOp, n: i64 },
    /// `rank(slot) <cmp> n` (false when the node has no shape).
    Rank { slot: usize, cmp: BinOp, n: i64 },
    /// `not is_output(slots...)`.
    NotOutput(Vec<usize>),
    /// `slot.key == lit` (or `!=`), as the expression compares an attribute with a literal.
    AttrLit { slot: usize, key: String, lit: Value, equal: bool },
    /// `shape(a) == shape(b)`.
    ShapeEq { a: usize, b: usize },
    /// `slot.key == int` (or `!=`), where `int` is integer arithmetic over literals, attributes and ranks
    /// (`q.len == attn.num_heads * attn.head_dim`): computed in place while every value is an integer and no
    /// step overflows, else by evaluating `guard`, the whole expression.
    AttrInt { slot: usize, key: String, int: IntExpr, equal: bool, guard: Expr },
}

/// Integer arithmetic over literals, attributes and ranks, computed without the evaluator's values.
#[derive(Clone, Debug)]
pub enum IntExpr {
    Lit(i64),
    Attr(usize, String),
    Rank(usize),
    Bin(BinOp, Box<IntExpr>, Box<IntExpr>),
}

impl IntExpr {
    /// The integer form of `e`, if it is one (none holds a bare literal: that is [`Check::AttrLit`]'s).
    fn of(e: &Expr) -> Option<IntExpr> {
        Some(match e {
            Expr::Lit(v) => IntExpr::Lit(v.as_i64()?),
            Expr::Attr(key, of) => IntExpr::Attr(slot(of)?, key.clone()),
            Expr::Bin(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul), l, r) => {
                IntExpr::Bin(*op, Box::new(IntExpr::of(l)?), Box::new(IntExpr::of(r)?))
            }
            _ => IntExpr::Rank(call_on_slot(e, Builtin::Rank)?),
        })
    }

    /// The value, where the evaluator would give the same integer; None where it would not give an integer
    /// (a value that is not one, a missing attribute or shape, an overflow), which the caller evaluates.
    fn value(&self, graph: &WorkGraph, slots: &[usize]) -> Option<i64> {
        match self {
            IntExpr::Lit(n) => Some(*n),
            IntExpr::Attr(slot, key) => graph.node(slots[*slot]).attrs.get(key)?.as_i64(),
            IntExpr::Rank(slot) => graph.rank(slots[*slot]).and_then(|r| i64::try_from(r).ok()),
            IntExpr::Bin(op, l, r) => match binary(*op, Val::Int(l.value(graph, slots)?), Val::Int(r.value(graph, slots)?)) {
                Ok(Val::Int(n)) => Some(n),
                _ => None,
            },
        }
    }
}

/// One rule, resolved against a work graph.
#[derive(Clone, Debug)]
pub struct Prepared<'r> {
    pub rule: &'r Rule,
    /// The root ops, as op indices.
    pub root_ops: Vec<u32>,
    /// Per instruction of the rule's code: the op indices an `op` or `commute` instruction accepts.
    pub ops: Vec<Vec<u32>>,
    /// Per instruction: the direct form of a guard, where it has one.
    pub checks: Vec<Option<Check>>,
    /// The pcs in the order a strict match runs them: between two choice points (`commute`), the structural
    /// checks first, then the guards that read flat arrays (uses, outputs, ranks), then the rest. Checks are pure, so a branch matches
    /// in this order exactly when it does in the written one; most candidates then fail before any guard
    /// reads a node's attributes or shape (which, in a large graph, are far apart in memory).
    pub strict_order: Vec<u32>,
    /// Per new node of the rewrite: its op index and its attribute names (one copy per rule, shared by the nodes
    /// it creates).
    pub new_ops: Vec<u32>,
    pub new_keys: Vec<Vec<Sym>>,
}

impl<'r> Prepared<'r> {
    /// Resolve `rule` against `graph` as it is (ops it does not know resolve to [`NO_OP`]). An apply interns every
    /// op of the program first ([`intern_ops`]), so that nodes created later keep the indices valid.
    pub fn new(rule: &'r Rule, graph: &WorkGraph) -> Prepared<'r> {
        let op = |name: &String| graph.op_index(name).unwrap_or(NO_OP);
        let ops = rule
            .code
            .iter()
            .map(|instr| match instr {
                Instr::Op { ops, .. } | Instr::Commute { ops, .. } => ops.iter().map(op).collect(),
                _ => Vec::new(),
            })
            .collect();
        let checks: Vec<Option<Check>> = rule
            .code
            .iter()
            .map(|instr| match instr {
                Instr::Guard { expr, .. } => Check::of(expr),
                _ => None,
            })
            .collect();
        let strict_order = strict_order(&rule.code, &checks);
        Prepared {
            rule,
            strict_order,
            root_ops: rule.root_ops.iter().map(op).collect(),
            ops,
            checks,
            new_ops: rule.rewrite.iter().map(|new| op(&new.op)).collect(),
            new_keys: rule.rewrite.iter().map(|new| new.attrs.iter().map(|(k, _)| Sym::from(k.as_str())).collect()).collect(),
        }
    }

    /// Whether the node's op is one of the rule's roots.
    pub fn is_root_op(&self, op: u32) -> bool {
        self.root_ops.contains(&op)
    }
}

/// Intern every op name the rules mention (roots, patterns, new nodes) into `graph`.
pub fn intern_ops<'a>(graph: &mut WorkGraph<'_>, rules: impl Iterator<Item = &'a Rule>) {
    for rule in rules {
        for name in &rule.root_ops {
            graph.intern_op(name);
        }
        for instr in &rule.code {
            if let Instr::Op { ops, .. } | Instr::Commute { ops, .. } = instr {
                ops.iter().for_each(|name| {
                    graph.intern_op(name);
                });
            }
        }
        for new in &rule.rewrite {
            graph.intern_op(&new.op);
        }
    }
}

/// See [`Prepared::strict_order`].
fn strict_order(code: &[Instr], checks: &[Option<Check>]) -> Vec<u32> {
    let mut order = Vec::with_capacity(code.len());
    let (mut flat, mut rest) = (Vec::new(), Vec::new());
    let flush = |order: &mut Vec<u32>, flat: &mut Vec<u32>, rest: &mut Vec<u32>| {
        order.append(flat);
        order.append(rest);
    };
    for (pc, instr) in code.iter().enumerate() {
        match instr {
            Instr::Guard { .. } => match &checks[pc] {
                Some(Check::Uses { .. } | Check::NotOutput(_) | Check::Rank { .. }) => flat.push(pc as u32),
                _ => rest.push(pc as u32),
            },
            Instr::Commute { .. } => {
                flush(&mut order, &mut flat, &mut rest);
                order.push(pc as u32);
            }
            _ => order.push(pc as u32),
        }
    }
    flush(&mut order, &mut flat, &mut rest);
    order
}

/// An integer literal.
fn int_lit(e: &Expr) -> Option<i64> {
    match e {
        Expr::Lit(v) => v.as_i64(),
        _ => None,
    }
}

fn slot(e: &Expr) -> Option<usize> {
    match e {
        Expr::Slot(s) => Some(*s),
        _ => None,
    }
}

/// The builtin call `f(slot)`.
fn call_on_slot(e: &Expr, f: Builtin) -> Option<usize> {
    match e {
        Expr::Call(b, args) if *b == f && args.len() == 1 => slot(&args[0]),
        _ => None,
    }
}

impl Check {
    /// The direct form of `expr`, if it is one of the common shapes.
    pub fn of(expr: &Expr) -> Option<Check> {
        match expr {
            Expr::Bin(cmp @ (BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge), l, r) => {
                if let (Some(s), Some(n)) = (call_on_slot(l, Builtin::Uses), int_lit(r)) {
                    return Some(Check::Uses { slot: s, cmp: *cmp, n });
                }
                if let (Some(s), Some(n)) = (call_on_slot(l, Builtin::Rank), int_lit(r)) {
                    return Some(Check::Rank { slot: s, cmp: *cmp, n });
                }
                if let (Some(a), Some(b)) = (call_on_slot(l, Builtin::Shape), call_on_slot(r, Builtin::Shape)) {
                    if *cmp == BinOp::Eq {
                        return Some(Check::ShapeEq { a, b });
                    }
                }
                match (l.as_ref(), r.as_ref(), cmp) {
                    (Expr::Attr(key, of), Expr::Lit(lit), BinOp::Eq | BinOp::Ne) => Some(Check::AttrLit {
                        slot: slot(of)?,
                        key: key.clone(),
                        lit: lit.clone(),
                        equal: *cmp == BinOp::Eq,
                    }),
                    (Expr::Attr(key, of), Expr::Bin(..) | Expr::Call(..), BinOp::Eq | BinOp::Ne) => Some(Check::AttrInt {
                        slot: slot(of)?,
                        key: key.clone(),
                        int: IntExpr::of(r)?,
                        equal: *cmp == BinOp::Eq,
                        guard: expr.clone(),
                    }),
                    _ => None,
                }
            }
            Expr::Not(inner) => match inner.as_ref() {
                Expr::Call(Builtin::IsOutput, args) if !args.is_empty() => {
                    Some(Check::NotOutput(args.iter().map(slot).collect::<Option<_>>()?))
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether the guard holds with `slots` bound (`params`: the parameter values, for a guard evaluated whole).
    pub fn holds(&self, graph: &WorkGraph, slots: &[usize], params: &[Val]) -> bool {
        match self {
            Check::Uses { slot, cmp, n } => compare(*cmp, graph.uses(slots[*slot]) as i64, *n).unwrap_or(false),
            Check::Rank { slot, cmp, n } => graph.rank(slots[*slot]).is_some_and(|r| compare(*cmp, r as i64, *n).unwrap_or(false)),
            Check::NotOutput(of) => !of.iter().any(|&s| graph.is_output(slots[s])),
            Check::AttrLit { slot, key, lit, equal } => {
                let value = graph.node(slots[*slot]).attrs.get(key).unwrap_or(&Value::Null);
                json_equal(value, lit).is_ok_and(|eq| eq == *equal)
            }
            Check::ShapeEq { a, b } => {
                let (a, b) = (&graph.node(slots[*a]).shape, &graph.node(slots[*b]).shape);
                match (a, b) {
                    (Some(a), Some(b)) => {
                        // Equal dims pairwise; a static dim against a symbolic one is unknown, hence not true.
                        a.len() == b.len()
                            && a.iter().zip(b.iter()).all(|(x, y)| match (x, y) {
                                (Dim::Static(p), Dim::Static(q)) => p == q,
                                (Dim::Symbolic(p), Dim::Symbolic(q)) => p == q,
                                _ => false,
                            })
                    }
                    _ => false,
                }
            }
            Check::AttrInt { slot, key, int, equal, guard } => {
                let value = graph.node(slots[*slot]).attrs.get(key).and_then(Value::as_i64);
                match value.zip(int.value(graph, slots)) {
                    Some((a, b)) => (a == b) == *equal,
                    None => Env::new(graph, slots, params).truth(guard) == Ok(true),
                }
            }
        }
    }
}
