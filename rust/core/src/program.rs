//! The matcher program compiled by Python: the resolved instruction set (its JSON form is in `raw`, its validation
//! in `resolve`).
//!
//! Format and semantics are documented in `docs/program.md`. A program is validated when it is
//! loaded, so that the matcher can index slots without checks: every slot an instruction reads
//! is bound by an earlier instruction, and every index is in range.
//!
//! The resolved form also derives serde's traits, so that a compiled-rule cache can keep a validated program
//! in a compact binary format (the binding uses postcard) and load it without parsing its JSON again; see
//! [`RESOLVED_LAYOUT`] for what such an entry must be keyed by.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod raw;
mod resolve;

pub const PROGRAM_FORMAT: &str = "rlx-program";
pub const PROGRAM_VERSION: u64 = 1;
/// Upper bound on slots per rule (patterns are small; this bounds matcher memory).
pub const MAX_SLOTS: usize = 256;
/// Upper bound on the nesting depth of a guard expression.
pub const MAX_EXPR_DEPTH: usize = 64;

/// The source text that defines the resolved form and its validation (this file, its `raw` and `resolve` parts,
/// and the builtin functions' table it checks calls against). A resolved program stored by one build may be
/// loaded only by a build with the same text: hash it into the key of anything that stores [`Program`] serialized.
pub const RESOLVED_LAYOUT: [&str; 5] = [
    include_str!("program.rs"),
    include_str!("program/raw.rs"),
    include_str!("program/resolve.rs"),
    include_str!("builtins.rs"),
    crate::builtins::BUILTINS_JSON,
];

/// What is wrong with a matcher program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgramErrorKind {
    /// Not JSON, or JSON of the wrong shape (a missing field, a wrong type, an unknown field).
    Json,
    /// The `format` is not [`PROGRAM_FORMAT`].
    Format,
    /// The `version` is not [`PROGRAM_VERSION`].
    Version,
    /// Well-formed, but inconsistent: an unbound slot, an unknown rule, function or gate, a bad arity.
    Invalid,
    /// The builtins table (builtins.json) is malformed.
    Builtins,
}

impl ProgramErrorKind {
    /// The stable name of the kind, what Python sees as `ProgramError.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProgramErrorKind::Json => "json",
            ProgramErrorKind::Format => "format",
            ProgramErrorKind::Version => "version",
            ProgramErrorKind::Invalid => "invalid",
            ProgramErrorKind::Builtins => "builtins",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ProgramError {
    pub kind: ProgramErrorKind,
    pub message: String,
}

impl ProgramError {
    /// An `Invalid` error.
    pub fn invalid(message: impl Into<String>) -> ProgramError {
        ProgramError { kind: ProgramErrorKind::Invalid, message: message.into() }
    }

    /// A `Builtins` error.
    pub fn builtins(message: impl Into<String>) -> ProgramError {
        ProgramError { kind: ProgramErrorKind::Builtins, message: message.into() }
    }

    /// The same error with `prefix: ` before its message.
    fn within(self, prefix: impl fmt::Display) -> ProgramError {
        ProgramError { message: format!("{prefix}: {}", self.message), ..self }
    }
}

impl fmt::Display for ProgramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid matcher program: {}", self.message)
    }
}

impl std::error::Error for ProgramError {}

pub(crate) fn err<T>(msg: impl Into<String>) -> Result<T, ProgramError> {
    Err(ProgramError::invalid(msg))
}


// ---- the resolved form the matcher runs ----

/// A parameter as declared; Python resolves the value in force and passes it to `apply`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParamDecl {
    pub name: String,
    pub ty: String,
    #[serde(with = "json_text")]
    pub default: Value,
    pub env: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    fn parse(s: &str) -> Option<BinOp> {
        Some(match s {
            "+" => BinOp::Add,
            "-" => BinOp::Sub,
            "*" => BinOp::Mul,
            "/" => BinOp::Div,
            "%" => BinOp::Rem,
            "==" => BinOp::Eq,
            "!=" => BinOp::Ne,
            "<" => BinOp::Lt,
            "<=" => BinOp::Le,
            ">" => BinOp::Gt,
            ">=" => BinOp::Ge,
            "and" => BinOp::And,
            "or" => BinOp::Or,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Builtin {
    Uses,
    IsOutput,
    Rank,
    Dim,
    Shape,
    Numel,
    IsStatic,
    Op,
    Dtype,
    InputCount,
    Len,
    ReplaceDim,
    Count,
    All,
    Any,
    Sum,
    First,
    PrefixSum,
    Min,
    Max,
    Abs,
    Sqrt,
    HasFact,
    Index,
    Slice,
    Reverse,
    Compose,
    IsIdentity,
    IsPerm,
    Item,
    Distinct,
}

impl Builtin {
    /// The implementation of the builtin called `name` (its arity and types are data: [`Builtins`]).
    pub fn from_name(name: &str) -> Option<Builtin> {
        Some(match name {
            "uses" => Builtin::Uses,
            "is_output" => Builtin::IsOutput,
            "rank" => Builtin::Rank,
            "dim" => Builtin::Dim,
            "shape" => Builtin::Shape,
            "numel" => Builtin::Numel,
            "is_static" => Builtin::IsStatic,
            "op" => Builtin::Op,
            "dtype" => Builtin::Dtype,
            "input_count" => Builtin::InputCount,
            "len" => Builtin::Len,
            "replace_dim" => Builtin::ReplaceDim,
            "count" => Builtin::Count,
            "all" => Builtin::All,
            "any" => Builtin::Any,
            "sum" => Builtin::Sum,
            "first" => Builtin::First,
            "prefix_sum" => Builtin::PrefixSum,
            "min" => Builtin::Min,
            "max" => Builtin::Max,
            "abs" => Builtin::Abs,
            "sqrt" => Builtin::Sqrt,
            "has_fact" => Builtin::HasFact,
            "index" => Builtin::Index,
            "slice" => Builtin::Slice,
            "reverse" => Builtin::Reverse,
            "compose" => Builtin::Compose,
            "is_identity" => Builtin::IsIdentity,
            "is_perm" => Builtin::IsPerm,
            "item" => Builtin::Item,
            "distinct" => Builtin::Distinct,
            _ => return None,
        })
    }
}

/// A guard or attribute expression.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Expr {
    Lit(#[serde(with = "json_text")] Value),
    Slot(usize),
    Param(usize),
    Attr(String, Box<Expr>),
    Call(Builtin, Vec<Expr>),
    /// A call of a function that builtins.json declares but this engine does not implement: it fails
    /// when evaluated (so its guard fails and its rule does not fire), naming the function.
    Unimplemented(String, Vec<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Neg(Box<Expr>),
    In { value: Box<Expr>, set: Vec<Expr>, negated: bool },
    IsNull { value: Box<Expr>, negated: bool },
    List(Vec<Expr>),
}

/// One matcher instruction; see docs/program.md.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Instr {
    /// The node in `slot` must have one of `ops`.
    Op { slot: usize, ops: Vec<String> },
    /// The node in `slot` must have exactly `n` inputs.
    Arity { slot: usize, n: usize },
    /// Choice point: try the operands of `slot` in order, then swapped (if its op is in `ops`).
    Commute { slot: usize, ops: Vec<String> },
    /// Bind input `index` of `slot` (after any swap) to the fresh slot `to`.
    Input { slot: usize, index: usize, to: usize },
    /// Input `index` of `slot` must be the node already bound in `same_as`.
    Same { slot: usize, index: usize, same_as: usize },
    /// The op-pattern slots must hold pairwise distinct nodes.
    Distinct { slots: Vec<usize> },
    /// A guard: `expr` must evaluate to true.
    Guard { expr: Expr, loc: String, text: String },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum NewInput {
    Slot(usize),
    New(usize),
    /// A group's per-member slot, spread: one input per member, in member order.
    Spread(usize),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewNode {
    pub name: String,
    pub op: String,
    pub inputs: Vec<NewInput>,
    pub attrs: Vec<(String, Expr)>,
    pub shape: Option<Expr>,
    pub dtype: Option<Expr>,
    pub replaces: Option<usize>,
    /// One node per group member, each evaluated with that member selected, replacing it.
    pub each: bool,
}

/// A group: every node matching the rule's code with the same `shared` slots (see docs/program.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub min: usize,
    pub max: usize,
    /// Slots every member shares (bound by the first member, checked for the others).
    pub shared: Vec<usize>,
    /// Per slot: whether it holds a per-member value.
    pub per_member: Vec<bool>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub name: String,
    pub loc: String,
    pub phase: String,
    pub priority: i64,
    /// Indices into `Program::gates`.
    pub gates: Vec<usize>,
    pub root_ops: Vec<String>,
    pub slot_names: Vec<String>,
    pub slot_is_leaf: Vec<bool>,
    pub code: Vec<Instr>,
    pub absorb: Vec<usize>,
    pub rewrite: Vec<NewNode>,
    /// A forwarding rewrite (then `rewrite` is empty): the root's uses read the slot of the first case
    /// whose condition holds (None: always).
    pub forward: Vec<(Option<Expr>, usize)>,
    pub group: Option<Group>,
    /// Guards over the whole group, run once its members are collected.
    pub group_guards: Vec<Instr>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Quantifier {
    Any,
    All,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    pub name: String,
    /// `any`/`all` over the nodes with op `op` (bound to slot 0), or None for a plain expression.
    pub scan: Option<(Quantifier, String)>,
    pub expr: Expr,
    pub loc: String,
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub name: String,
    pub max_iterations: u32,
    /// Indices into `Program::rules`, in the order they are tried.
    pub rules: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Program {
    pub params: Vec<ParamDecl>,
    pub gates: Vec<Gate>,
    pub phases: Vec<Phase>,
    pub rules: Vec<Rule>,
}

/// A JSON value as its text, for binary formats that hold only what a type declares (serde_json's Value asks
/// the format what comes next, which postcard cannot say).
mod json_text {
    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serializer};
    use serde_json::Value;

    pub fn serialize<S: Serializer>(value: &Value, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&value.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        serde_json::from_str(&String::deserialize(d)?).map_err(D::Error::custom)
    }
}
