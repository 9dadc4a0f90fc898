//! Evaluation of guard and attribute expressions against bound nodes; a failure is a value, never a panic.
//!
//! An expression that cannot be evaluated (a missing shape, arithmetic on a symbolic dim, an index
//! out of range, an inexact division, an overflow) fails, and the guard that holds it fails with
//! it: the rule does not fire. That is the safe direction for a rewrite engine.

use serde_json::Value;

use crate::graph::Dim;
use crate::program::{BinOp, Builtin, Expr};
use crate::workgraph::WorkGraph;

/// A runtime value.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// A symbolic dim: equal only to the same name.
    Sym(String),
    List(Vec<Val>),
    /// A node, by arena index.
    Node(usize),
}

/// Why an expression could not be evaluated.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalError(pub String);

pub type EvalResult = Result<Val, EvalError>;

fn fail<T>(msg: impl Into<String>) -> Result<T, EvalError> {
    Err(EvalError(msg.into()))
}

impl Val {
    pub fn from_json(v: &Value) -> EvalResult {
        Ok(match v {
            Value::Null => Val::Null,
            Value::Bool(b) => Val::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Val::Int(i),
                None => Val::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => Val::Str(s.clone()),
            Value::Array(items) => Val::List(items.iter().map(Val::from_json).collect::<Result<_, _>>()?),
            Value::Object(_) => return fail("an object attribute cannot be used in an expression"),
        })
    }

    /// The JSON form, for attributes of new nodes. Nodes have none.
    pub fn to_json(&self) -> Result<Value, EvalError> {
        Ok(match self {
            Val::Null => Value::Null,
            Val::Bool(b) => Value::Bool(*b),
            Val::Int(i) => Value::from(*i),
            Val::Float(f) => serde_json::Number::from_f64(*f).map(Value::Number).ok_or_else(|| EvalError(format!("{f} is not a finite number")))?,
            Val::Str(s) | Val::Sym(s) => Value::String(s.clone()),
            Val::List(items) => Value::Array(items.iter().map(Val::to_json).collect::<Result<_, _>>()?),
            Val::Node(_) => return fail("a node cannot be an attribute value"),
        })
    }

    fn from_dim(d: &Dim) -> Val {
        match d {
            Dim::Static(n) => Val::Int(*n),
            Dim::Symbolic(s) => Val::Sym(s.clone()),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Val::Null => "null",
            Val::Bool(_) => "bool",
            Val::Int(_) => "int",
            Val::Float(_) => "float",
            Val::Str(_) => "str",
            Val::Sym(_) => "symbolic dim",
            Val::List(_) => "list",
            Val::Node(_) => "node",
        }
    }
}

impl std::fmt::Display for Val {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Val::Null => write!(f, "null"),
            Val::Bool(b) => write!(f, "{b}"),
            Val::Int(i) => write!(f, "{i}"),
            Val::Float(x) => write!(f, "{x}"),
            Val::Str(s) => write!(f, "{s}"),
            Val::Sym(s) => write!(f, "{s}"),
            Val::List(items) => {
                write!(f, "[")?;
                for (k, v) in items.iter().enumerate() {
                    if k > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{v}")?;
                }
                write!(f, "]")
            }
            Val::Node(i) => write!(f, "%{i}"),
        }
    }
}

/// What an expression can see: the graph, the bound slots, the parameter values, and in a group
/// rule the members (each a full slot vector) and which member, if any, is selected.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    pub graph: &'a WorkGraph<'a>,
    pub slots: &'a [usize],
    pub params: &'a [Val],
    pub group: Option<&'a [Vec<usize>]>,
    pub per_member: &'a [bool],
    pub member: Option<usize>,
}

impl<'a> Env<'a> {
    /// An environment for a rule without a group.
    pub fn new(graph: &'a WorkGraph<'a>, slots: &'a [usize], params: &'a [Val]) -> Env<'a> {
        Env { graph, slots, params, group: None, per_member: &[], member: None }
    }

    /// An environment for a group rule, with no member selected.
    pub fn for_group(graph: &'a WorkGraph<'a>, members: &'a [Vec<usize>], per_member: &'a [bool], params: &'a [Val]) -> Env<'a> {
        Env { graph, slots: &members[0], params, group: Some(members), per_member, member: None }
    }

    /// The same environment with member `k` selected.
    pub fn at(&self, k: usize) -> Env<'a> {
        let members = self.group.unwrap_or(&[]);
        Env { slots: members.get(k).map_or(self.slots, Vec::as_slice), member: Some(k), ..*self }
    }

    fn members(&self) -> Result<&'a [Vec<usize>], EvalError> {
        self.group.ok_or_else(|| EvalError("an aggregate needs a group".into()))
    }

    pub fn eval(&self, e: &Expr) -> EvalResult {
        match e {
            Expr::Lit(v) => Val::from_json(v),
            Expr::Slot(s) => {
                if self.per_member.get(*s) == Some(&true) && self.member.is_none() {
                    return fail("a per-member value is used where no member is selected");
                }
                Ok(Val::Node(self.slots[*s]))
            }
            Expr::Param(p) => Ok(self.params.get(*p).cloned().unwrap_or(Val::Null)),
            Expr::Attr(name, of) => {
                let i = self.node(of)?;
                match self.graph.node(i).attrs.get(name) {
                    Some(v) => Val::from_json(v),
                    None => Ok(Val::Null),
                }
            }
            Expr::Call(b, args) => self.call(*b, args),
            Expr::Unimplemented(name, _) => fail(format!("{name}() is declared in builtins.json but this engine does not implement it")),
            Expr::Bin(op @ (BinOp::Eq | BinOp::Ne), l, r) if self.is_json_leaf(l) && self.is_json_leaf(r) => {
                // attribute-against-literal checks, the most common guards: compare in place, no copies
                let eq = json_equal(self.json_leaf(l)?, self.json_leaf(r)?)?;
                Ok(Val::Bool(eq == (*op == BinOp::Eq)))
            }
            Expr::Bin(BinOp::And, l, r) => Ok(Val::Bool(self.truth(l)? && self.truth(r)?)),
            Expr::Bin(BinOp::Or, l, r) => Ok(Val::Bool(self.truth(l)? || self.truth(r)?)),
            Expr::Bin(op, l, r) => binary(*op, self.eval(l)?, self.eval(r)?),
            Expr::Not(x) => Ok(Val::Bool(!self.truth(x)?)),
            Expr::Neg(x) => match self.eval(x)? {
                Val::Int(i) => i.checked_neg().map(Val::Int).ok_or_else(|| EvalError("integer overflow".into())),
                Val::Float(f) => Ok(Val::Float(-f)),
                other => fail(format!("cannot negate a {}", other.kind())),
            },
            Expr::In { value, set, negated } => {
                let v = self.eval(value)?;
                let mut found = false;
                for item in set {
                    if equal(&v, &self.eval(item)?)? {
                        found = true;
                        break;
                    }
                }
                Ok(Val::Bool(found != *negated))
            }
            Expr::IsNull { value, negated } => Ok(Val::Bool((self.eval(value)? == Val::Null) != *negated)),
            Expr::List(items) => Ok(Val::List(items.iter().map(|x| self.eval(x)).collect::<Result<_, _>>()?)),
        }
    }

    fn is_json_leaf(&self, e: &Expr) -> bool {
        match e {
            Expr::Lit(_) => true,
            Expr::Attr(_, of) => matches!(of.as_ref(), Expr::Slot(s) if self.per_member.get(*s) != Some(&true)),
            _ => false,
        }
    }

    fn json_leaf(&self, e: &'a Expr) -> Result<&'a Value, EvalError> {
        static NULL: Value = Value::Null;
        match e {
            Expr::Lit(v) => Ok(v),
            Expr::Attr(name, of) => match of.as_ref() {
                Expr::Slot(s) => Ok(self.graph.node(self.slots[*s]).attrs.get(name).unwrap_or(&NULL)),
                _ => fail("not an attribute of a slot"),
            },
            _ => fail("not a literal or attribute"),
        }
    }

    /// Evaluate a condition; anything but a bool is an error.
    pub fn truth(&self, e: &Expr) -> Result<bool, EvalError> {
        match self.eval(e)? {
            Val::Bool(b) => Ok(b),
            other => fail(format!("condition is a {}, not a bool", other.kind())),
        }
    }

    fn node(&self, e: &Expr) -> Result<usize, EvalError> {
        // A bound slot, the usual argument, without going through a value.
        if let Expr::Slot(s) = e {
            if self.member.is_some() || self.per_member.get(*s) != Some(&true) {
                return Ok(self.slots[*s]);
            }
        }
        match self.eval(e)? {
            Val::Node(i) => Ok(i),
            other => fail(format!("expected a node, got a {}", other.kind())),
        }
    }

    fn shape(&self, i: usize) -> Result<&[Dim], EvalError> {
        let node = self.graph.node(i);
        node.shape.as_deref().ok_or_else(|| EvalError(format!("{} has no shape", node.label())))
    }

    fn call(&self, b: Builtin, args: &[Expr]) -> EvalResult {
        let g = self.graph;
        match b {
            Builtin::Uses => Ok(Val::Int(g.uses(self.node(&args[0])?) as i64)),
            Builtin::IsOutput => {
                for a in args {
                    if g.is_output(self.node(a)?) {
                        return Ok(Val::Bool(true));
                    }
                }
                Ok(Val::Bool(false))
            }
            Builtin::Rank => Ok(Val::Int(self.shape(self.node(&args[0])?)?.len() as i64)),
            Builtin::Dim => {
                let i = self.node(&args[0])?;
                let shape = self.shape(i)?;
                let Val::Int(k) = self.eval(&args[1])? else { return fail("dim() index must be an int") };
                let rank = shape.len() as i64;
                let at = if k < 0 { k + rank } else { k };
                if at < 0 || at >= rank {
                    return fail(format!("dim index {k} is out of range for rank {rank}"));
                }
                Ok(Val::from_dim(&shape[at as usize]))
            }
            Builtin::Shape => Ok(Val::List(self.shape(self.node(&args[0])?)?.iter().map(Val::from_dim).collect())),
            Builtin::Numel => {
                let mut n: i64 = 1;
                for d in self.shape(self.node(&args[0])?)? {
                    let Dim::Static(s) = d else { return fail(format!("numel of a shape with symbolic dim {d}")) };
                    n = n.checked_mul(*s).ok_or_else(|| EvalError("integer overflow".into()))?;
                }
                Ok(Val::Int(n))
            }
            Builtin::IsStatic => {
                fn is_static(v: &Val) -> bool {
                    match v {
                        Val::Int(_) => true,
                        Val::List(items) => items.iter().all(is_static),
                        _ => false,
                    }
                }
                for a in args {
                    if !is_static(&self.eval(a)?) {
                        return Ok(Val::Bool(false));
                    }
                }
                Ok(Val::Bool(true))
            }
            Builtin::Op => Ok(Val::Str(g.node(self.node(&args[0])?).op.to_string())),
            Builtin::Dtype => Ok(g.node(self.node(&args[0])?).dtype.as_ref().map_or(Val::Null, |d| Val::Str(d.to_string()))),
            Builtin::HasFact => {
                let i = self.node(&args[0])?;
                let Val::Str(fact) = self.eval(&args[1])? else { return fail("has_fact() needs a fact name") };
                let known = match g.node(i).extra.get("facts") {
                    Some(Value::Array(facts)) => facts.iter().any(|f| f.as_str() == Some(fact.as_str())),
                    _ => false,
                };
                Ok(Val::Bool(known))
            }
            Builtin::InputCount => Ok(Val::Int(g.node(self.node(&args[0])?).inputs.len() as i64)),
            Builtin::Len => match self.eval(&args[0])? {
                Val::List(items) => Ok(Val::Int(items.len() as i64)),
                other => fail(format!("len() of a {}", other.kind())),
            },
            Builtin::ReplaceDim => {
                let Val::List(mut items) = self.eval(&args[0])? else { return fail("replace_dim() needs a list") };
                let Val::Int(k) = self.eval(&args[1])? else { return fail("replace_dim() index must be an int") };
                let rank = items.len() as i64;
                let at = if k < 0 { k + rank } else { k };
                if at < 0 || at >= rank {
                    return fail(format!("replace_dim index {k} is out of range for rank {rank}"));
                }
                items[at as usize] = self.eval(&args[2])?;
                Ok(Val::List(items))
            }
            Builtin::Count => Ok(Val::Int(self.members()?.len() as i64)),
            Builtin::All | Builtin::Any => {
                let want = b == Builtin::Any;
                for k in 0..self.members()?.len() {
                    if self.at(k).truth(&args[0])? == want {
                        return Ok(Val::Bool(want));
                    }
                }
                Ok(Val::Bool(!want))
            }
            Builtin::Sum | Builtin::PrefixSum => {
                let upto = if b == Builtin::Sum {
                    self.members()?.len()
                } else {
                    self.member.ok_or_else(|| EvalError("prefix_sum() needs a selected member".into()))?
                };
                let mut acc = Val::Int(0);
                for k in 0..upto {
                    acc = binary(BinOp::Add, acc, self.at(k).eval(&args[0])?)?;
                }
                Ok(acc)
            }
            Builtin::First => {
                if self.members()?.is_empty() {
                    return fail("first() of an empty group");
                }
                self.at(0).eval(&args[0])
            }
            Builtin::Min | Builtin::Max => {
                let (a, c) = (self.eval(&args[0])?, self.eval(&args[1])?);
                let a_less = matches!(binary(BinOp::Lt, a.clone(), c.clone())?, Val::Bool(true));
                Ok(if a_less == (b == Builtin::Min) { a } else { c })
            }
            Builtin::Sqrt => match self.eval(&args[0])? {
                Val::Int(i) if i >= 0 => Ok(Val::Float((i as f64).sqrt())),
                Val::Float(f) if f >= 0.0 => Ok(Val::Float(f.sqrt())),
                other => fail(format!("sqrt() of {other}")),
            },
            Builtin::Abs => match self.eval(&args[0])? {
                Val::Int(i) => i.checked_abs().map(Val::Int).ok_or_else(|| EvalError("integer overflow".into())),
                Val::Float(f) => Ok(Val::Float(f.abs())),
                other => fail(format!("abs() of a {}", other.kind())),
            },
            Builtin::Index => {
                let items = self.list(&args[0], "an index")?;
                let Val::Int(k) = self.eval(&args[1])? else { return fail("a list index must be an int") };
                let at = if k < 0 { k.checked_add(items.len() as i64) } else { Some(k) };
                match at.filter(|&a| a >= 0 && (a as usize) < items.len()) {
                    Some(a) => Ok(items[a as usize].clone()),
                    None => fail(format!("index {k} is out of range for a list of {}", items.len())),
                }
            }
            Builtin::Slice => {
                let items = self.list(&args[0], "a slice")?;
                let len = items.len() as i64;
                let bound = |e: &Expr, default: i64| -> Result<usize, EvalError> {
                    let k = match self.eval(e)? {
                        Val::Null => default,
                        Val::Int(k) if k < 0 => k.saturating_add(len),
                        Val::Int(k) => k,
                        other => return fail(format!("a slice bound must be an int or null, not a {}", other.kind())),
                    };
                    Ok(k.clamp(0, len) as usize)
                };
                let (a, b) = (bound(&args[1], 0)?, bound(&args[2], len)?);
                Ok(Val::List(if a < b { items[a..b].to_vec() } else { Vec::new() }))
            }
            Builtin::Reverse => Ok(Val::List(self.list(&args[0], "reverse()")?.into_iter().rev().collect())),
            Builtin::Compose => {
                let p = perm(self.list(&args[0], "compose()")?)?;
                let q = perm(self.list(&args[1], "compose()")?)?;
                if p.len() != q.len() {
                    return fail(format!("compose() of permutations of {} and {} items", p.len(), q.len()));
                }
                Ok(Val::List(q.iter().map(|&i| Val::Int(p[i] as i64)).collect()))
            }
            Builtin::IsIdentity => {
                let items = self.list(&args[0], "is_identity()")?;
                Ok(Val::Bool(items.iter().enumerate().all(|(i, v)| *v == Val::Int(i as i64))))
            }
            Builtin::IsPerm => Ok(Val::Bool(perm(self.list(&args[0], "is_perm()")?).is_ok())),
            Builtin::Item => {
                let mut v = self.eval(&args[0])?;
                while let Val::List(mut items) = v {
                    if items.len() != 1 {
                        return fail(format!("item() of a list of {} items", items.len()));
                    }
                    v = items.remove(0);
                }
                match v {
                    Val::Int(_) | Val::Float(_) => Ok(v),
                    other => fail(format!("item() of a {}", other.kind())),
                }
            }
            Builtin::Distinct => {
                let mut nodes = Vec::with_capacity(args.len());
                for a in args {
                    let i = self.node(a)?;
                    if nodes.contains(&i) {
                        return Ok(Val::Bool(false));
                    }
                    nodes.push(i);
                }
                Ok(Val::Bool(true))
            }
        }
    }

    /// The list that `e` evaluates to (`what` names the use, for the error).
    fn list(&self, e: &Expr, what: &str) -> Result<Vec<Val>, EvalError> {
        match self.eval(e)? {
            Val::List(items) => Ok(items),
            other => fail(format!("{what} needs a list, not a {}", other.kind())),
        }
    }
}

/// The items of a permutation of 0..n-1, or an error if the list is not one.
fn perm(items: Vec<Val>) -> Result<Vec<usize>, EvalError> {
    let n = items.len();
    let mut seen = vec![false; n];
    let mut out = Vec::with_capacity(n);
    for v in items {
        match v {
            Val::Int(i) if i >= 0 && (i as usize) < n && !seen[i as usize] => {
                seen[i as usize] = true;
                out.push(i as usize);
            }
            other => return fail(format!("{other} makes the list not a permutation of 0..{n}")),
        }
    }
    Ok(out)
}

/// `equal` on JSON values without converting them; falls back to `equal` for anything but scalars.
pub(crate) fn json_equal(a: &Value, b: &Value) -> Result<bool, EvalError> {
    match (a, b) {
        (Value::Null, Value::Null) => Ok(true),
        (Value::Null, _) | (_, Value::Null) => Ok(false),
        (Value::String(x), Value::String(y)) => Ok(x == y),
        (Value::Bool(x), Value::Bool(y)) => Ok(x == y),
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(p), Some(q)) => Ok(p == q),
            _ => Ok(x.as_f64() == y.as_f64()),
        },
        _ => equal(&Val::from_json(a)?, &Val::from_json(b)?),
    }
}

/// Equality: numbers by value, symbolic dims by name; comparing a symbolic dim with a number fails,
/// since the answer is unknown. Null equals only null.
pub fn equal(a: &Val, b: &Val) -> Result<bool, EvalError> {
    Ok(match (a, b) {
        (Val::Null, Val::Null) => true,
        (Val::Null, _) | (_, Val::Null) => false,
        (Val::Int(x), Val::Int(y)) => x == y,
        (Val::Int(x), Val::Float(y)) | (Val::Float(y), Val::Int(x)) => (*x as f64) == *y,
        (Val::Float(x), Val::Float(y)) => x == y,
        (Val::Sym(x), Val::Sym(y)) => x == y,
        (Val::Sym(s), Val::Int(_) | Val::Float(_)) | (Val::Int(_) | Val::Float(_), Val::Sym(s)) => {
            return fail(format!("symbolic dim {s} compared with a number"))
        }
        (Val::Str(x), Val::Str(y)) => x == y,
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Node(x), Val::Node(y)) => x == y,
        (Val::List(x), Val::List(y)) => {
            if x.len() != y.len() {
                return Ok(false);
            }
            for (p, q) in x.iter().zip(y) {
                if !equal(p, q)? {
                    return Ok(false);
                }
            }
            true
        }
        (x, y) => return fail(format!("cannot compare a {} with a {}", x.kind(), y.kind())),
    })
}

/// `a op b` for a comparison operator (`==`, `!=`, `<`, `<=`, `>`, `>=`); `None` for any other operator.
pub(crate) fn compare<T: PartialOrd>(op: BinOp, a: T, b: T) -> Option<bool> {
    Some(match op {
        BinOp::Eq => a == b,
        BinOp::Ne => a != b,
        BinOp::Lt => a < b,
        BinOp::Le => a <= b,
        BinOp::Gt => a > b,
        BinOp::Ge => a >= b,
        _ => return None,
    })
}

/// `a op b` as the evaluator computes it (integer arithmetic checked for overflow and exact division).
pub(crate) fn binary(op: BinOp, a: Val, b: Val) -> EvalResult {
    match op {
        BinOp::Eq => return Ok(Val::Bool(equal(&a, &b)?)),
        BinOp::Ne => return Ok(Val::Bool(!equal(&a, &b)?)),
        _ => {}
    }
    let overflow = || EvalError("integer overflow".into());
    match (&a, &b) {
        (Val::Int(x), Val::Int(y)) => {
            let (x, y) = (*x, *y);
            Ok(match op {
                BinOp::Add => Val::Int(x.checked_add(y).ok_or_else(overflow)?),
                BinOp::Sub => Val::Int(x.checked_sub(y).ok_or_else(overflow)?),
                BinOp::Mul => Val::Int(x.checked_mul(y).ok_or_else(overflow)?),
                BinOp::Div => {
                    if y == 0 || x.checked_rem(y).ok_or_else(overflow)? != 0 {
                        return fail(format!("{x} / {y} is not an exact integer division"));
                    }
                    Val::Int(x / y)
                }
                BinOp::Rem => {
                    if y == 0 {
                        return fail("remainder by zero");
                    }
                    Val::Int(x.checked_rem(y).ok_or_else(overflow)?)
                }
                _ => Val::Bool(compare(op, x, y).expect("the other operators are handled above")),
            })
        }
        (Val::Int(_) | Val::Float(_), Val::Int(_) | Val::Float(_)) => {
            let x = if let Val::Int(i) = a { i as f64 } else if let Val::Float(f) = a { f } else { 0.0 };
            let y = if let Val::Int(i) = b { i as f64 } else if let Val::Float(f) = b { f } else { 0.0 };
            Ok(match op {
                BinOp::Add => Val::Float(x + y),
                BinOp::Sub => Val::Float(x - y),
                BinOp::Mul => Val::Float(x * y),
                BinOp::Div => Val::Float(x / y),
                BinOp::Rem => Val::Float(x % y),
                _ => Val::Bool(compare(op, x, y).expect("the other operators are handled above")),
            })
        }
        (Val::Sym(s), _) | (_, Val::Sym(s)) => fail(format!("arithmetic or ordering on symbolic dim {s}")),
        _ => fail(format!("operator {op:?} on a {} and a {}", a.kind(), b.kind())),
    }
}
