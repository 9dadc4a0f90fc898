//! The op registry (ops.json, shared with the Python checker): arity, attribute types, commutativity.
//!
//! The registry is data: `python/rlx_rules/data/ops.json` is embedded at build time and parsed once
//! by [`Registry::builtin`]. The format is documented in `docs/graph-format.md`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

use serde_json::{Map, Value};

/// The ops.json shipped with the package, embedded in the crate.
pub const BUILTIN_OPS_JSON: &str = include_str!("../../../python/rlx_rules/data/ops.json");

/// The `format` string an ops.json must carry.
pub const OPS_FORMAT: &str = "rlx-ops";
/// The ops.json `version` this crate reads.
pub const OPS_VERSION: u64 = 1;

/// How many inputs an op takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arity {
    /// Exactly this many inputs.
    Fixed(usize),
    /// Between `min` and `max` inputs, both inclusive.
    Range { min: usize, max: usize },
    /// At least `min` inputs.
    Variadic { min: usize },
}

impl Arity {
    /// Whether `n` inputs fit.
    pub fn accepts(&self, n: usize) -> bool {
        match *self {
            Arity::Fixed(k) => n == k,
            Arity::Range { min, max } => n >= min && n <= max,
            Arity::Variadic { min } => n >= min,
        }
    }

    /// The fewest inputs allowed.
    pub fn min(&self) -> usize {
        match *self {
            Arity::Fixed(k) => k,
            Arity::Range { min, .. } | Arity::Variadic { min } => min,
        }
    }

    /// The most inputs allowed (`None`: no limit).
    pub fn max(&self) -> Option<usize> {
        match *self {
            Arity::Fixed(k) => Some(k),
            Arity::Range { max, .. } => Some(max),
            Arity::Variadic { .. } => None,
        }
    }
}

impl fmt::Display for Arity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Arity::Fixed(1) => write!(f, "exactly 1 input"),
            Arity::Fixed(k) => write!(f, "exactly {k} inputs"),
            Arity::Range { min, max } => write!(f, "{min} to {max} inputs"),
            Arity::Variadic { min: 1 } => write!(f, "at least 1 input"),
            Arity::Variadic { min } => write!(f, "at least {min} inputs"),
        }
    }
}

/// The type of an attribute value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttrType {
    /// A JSON integer in the i64 range.
    Int,
    /// A JSON number (an integer literal is accepted).
    Float,
    Bool,
    String,
    /// A string from a fixed set.
    Enum(Vec<String>),
    /// A list of integers.
    IntList,
    /// A list of dims: integers and symbols (non-empty strings, bound at run time), as in a node's shape.
    DimList,
    /// Any JSON value (for example a `Constant`'s `value`).
    Any,
}

impl AttrType {
    /// The name used in ops.json (`"int"`, `"enum"`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            AttrType::Int => "int",
            AttrType::Float => "float",
            AttrType::Bool => "bool",
            AttrType::String => "string",
            AttrType::Enum(_) => "enum",
            AttrType::IntList => "int_list",
            AttrType::DimList => "dim_list",
            AttrType::Any => "any",
        }
    }

    /// Whether a non-null `value` has this type.
    pub fn accepts(&self, value: &Value) -> bool {
        match self {
            AttrType::Int => value.as_i64().is_some(),
            AttrType::Float => value.is_number(),
            AttrType::Bool => value.is_boolean(),
            AttrType::String => value.is_string(),
            AttrType::Enum(values) => value
                .as_str()
                .is_some_and(|s| values.iter().any(|v| v == s)),
            AttrType::IntList => value
                .as_array()
                .is_some_and(|items| items.iter().all(|x| x.as_i64().is_some())),
            AttrType::DimList => value.as_array().is_some_and(|items| {
                items
                    .iter()
                    .all(|x| x.as_i64().is_some() || x.as_str().is_some_and(|s| !s.is_empty()))
            }),
            AttrType::Any => true,
        }
    }
}

impl fmt::Display for AttrType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrType::Int => write!(f, "an integer"),
            AttrType::Float => write!(f, "a number"),
            AttrType::Bool => write!(f, "a boolean"),
            AttrType::String => write!(f, "a string"),
            AttrType::Enum(values) => {
                write!(f, "one of ")?;
                for (i, v) in values.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "\"{v}\"")?;
                }
                Ok(())
            }
            AttrType::IntList => write!(f, "a list of integers"),
            AttrType::DimList => write!(f, "a list of dims (integers and symbols)"),
            AttrType::Any => write!(f, "any value"),
        }
    }
}

/// One attribute of an op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttrSpec {
    pub ty: AttrType,
    /// `null` is allowed (Rust's `Option`, `None` written as `null`).
    pub nullable: bool,
    /// The attribute may be absent.
    pub optional: bool,
}

impl AttrSpec {
    /// Whether `value` fits this spec (type, or `null` when nullable).
    pub fn accepts(&self, value: &Value) -> bool {
        if value.is_null() {
            self.nullable || self.ty == AttrType::Any
        } else {
            self.ty.accepts(value)
        }
    }

    /// What a value must be, for error messages ("an integer or null").
    pub fn expected(&self) -> String {
        if self.nullable && self.ty != AttrType::Any {
            format!("{} or null", self.ty)
        } else {
            self.ty.to_string()
        }
    }
}

/// One op of the registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpSpec {
    pub name: String,
    pub arity: Arity,
    /// Binary ops whose two operands may be swapped (`Add`, `Mul`, ...).
    pub commutative: bool,
    /// Attributes by name (sorted by name).
    pub attrs: BTreeMap<String, AttrSpec>,
    /// Input names, in order, for documentation and messages (may be empty).
    pub inputs: Vec<String>,
    pub doc: Option<String>,
}

impl OpSpec {
    /// The documented name of input `index` (`"hidden"`), when ops.json names it.
    pub fn input_name(&self, index: usize) -> Option<&str> {
        self.inputs.get(index).map(String::as_str)
    }
}

/// The op registry: every known op by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registry {
    ops: BTreeMap<String, OpSpec>,
}

impl Registry {
    /// The registry embedded from the package's ops.json, parsed once.
    pub fn builtin() -> &'static Registry {
        static BUILTIN: OnceLock<Registry> = OnceLock::new();
        BUILTIN.get_or_init(|| {
            Registry::from_json_str(BUILTIN_OPS_JSON)
                .unwrap_or_else(|e| panic!("the embedded ops.json is invalid: {e}"))
        })
    }

    /// A registry with no ops (every op then loads with a warning).
    pub fn empty() -> Registry {
        Registry {
            ops: BTreeMap::new(),
        }
    }

    /// Parse and check an ops.json document.
    pub fn from_json_str(text: &str) -> Result<Registry, String> {
        let root: Value =
            serde_json::from_str(text).map_err(|e| format!("ops.json is not valid JSON: {e}"))?;
        let root = root
            .as_object()
            .ok_or_else(|| "ops.json: the top level must be an object".to_string())?;
        for key in root.keys() {
            if !matches!(key.as_str(), "format" | "version" | "ops" | "doc") {
                return Err(format!("ops.json: unknown top-level field \"{key}\""));
            }
        }
        match root.get("format") {
            Some(Value::String(s)) if s == OPS_FORMAT => {}
            Some(other) => {
                return Err(format!(
                    "ops.json: field \"format\" must be \"{OPS_FORMAT}\", found {other}"
                ))
            }
            None => {
                return Err(format!(
                    "ops.json: missing field \"format\" (\"{OPS_FORMAT}\")"
                ))
            }
        }
        match root.get("version") {
            Some(v) if v.as_u64() == Some(OPS_VERSION) => {}
            Some(other) => {
                return Err(format!(
                    "ops.json: unsupported version {other} (this build reads version {OPS_VERSION})"
                ))
            }
            None => return Err("ops.json: missing field \"version\"".to_string()),
        }
        let ops = root
            .get("ops")
            .and_then(Value::as_object)
            .ok_or_else(|| "ops.json: field \"ops\" must be an object".to_string())?;
        let mut out = BTreeMap::new();
        for (name, spec) in ops {
            let spec = parse_op(name, spec).map_err(|e| format!("ops.json: op \"{name}\": {e}"))?;
            out.insert(name.clone(), spec);
        }
        Ok(Registry { ops: out })
    }

    /// The spec of `op`, if the registry knows it.
    pub fn get(&self, op: &str) -> Option<&OpSpec> {
        self.ops.get(op)
    }

    /// Whether `op` is known and flagged commutative.
    pub fn is_commutative(&self, op: &str) -> bool {
        self.ops.get(op).is_some_and(|s| s.commutative)
    }

    /// Whether `op` is known.
    pub fn contains(&self, op: &str) -> bool {
        self.ops.contains_key(op)
    }

    /// Every op, sorted by name.
    pub fn ops(&self) -> impl Iterator<Item = &OpSpec> {
        self.ops.values()
    }

    /// How many ops are known.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the registry knows no op.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

fn parse_op(name: &str, spec: &Value) -> Result<OpSpec, String> {
    if name.is_empty() {
        return Err("an op name must not be empty".to_string());
    }
    let obj = spec
        .as_object()
        .ok_or_else(|| "the spec must be an object".to_string())?;
    for key in obj.keys() {
        if !matches!(
            key.as_str(),
            "arity" | "min_inputs" | "commutative" | "attrs" | "inputs" | "doc" | "rlx"
        ) {
            return Err(format!("unknown field \"{key}\""));
        }
    }
    let arity = parse_arity(obj)?;
    let commutative = match obj.get("commutative") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(format!("\"commutative\" must be a boolean, found {other}")),
    };
    if commutative && arity != Arity::Fixed(2) {
        return Err("only an op with exactly 2 inputs can be commutative".to_string());
    }
    let mut attrs = BTreeMap::new();
    match obj.get("attrs") {
        None => {}
        Some(Value::Object(map)) => {
            for (attr, a) in map {
                let spec = parse_attr(a).map_err(|e| format!("attribute \"{attr}\": {e}"))?;
                attrs.insert(attr.clone(), spec);
            }
        }
        Some(other) => return Err(format!("\"attrs\" must be an object, found {other}")),
    }
    let inputs = match obj.get("inputs") {
        None => Vec::new(),
        Some(Value::Array(items)) => {
            let mut names = Vec::with_capacity(items.len());
            for item in items {
                match item.as_str() {
                    Some(s) => names.push(s.to_string()),
                    None => return Err(format!("\"inputs\" must list strings, found {item}")),
                }
            }
            if let Some(max) = arity.max() {
                if names.len() > max {
                    return Err(format!(
                        "\"inputs\" names {} inputs, but the arity is {arity}",
                        names.len()
                    ));
                }
            }
            names
        }
        Some(other) => return Err(format!("\"inputs\" must be a list of names, found {other}")),
    };
    let doc = match obj.get("doc") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(format!("\"doc\" must be a string, found {other}")),
    };
    Ok(OpSpec {
        name: name.to_string(),
        arity,
        commutative,
        attrs,
        inputs,
        doc,
    })
}

fn parse_count(v: &Value, what: &str) -> Result<usize, String> {
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("{what} must be a non-negative integer, found {v}"))
}

fn parse_arity(obj: &Map<String, Value>) -> Result<Arity, String> {
    let arity = obj
        .get("arity")
        .ok_or_else(|| "missing field \"arity\"".to_string())?;
    let min_inputs = obj.get("min_inputs");
    let result = match arity {
        Value::Number(_) => Arity::Fixed(parse_count(arity, "\"arity\"")?),
        Value::String(s) if s == "variadic" => Arity::Variadic {
            min: match min_inputs {
                Some(v) => parse_count(v, "\"min_inputs\"")?,
                None => 0,
            },
        },
        Value::Object(range) => {
            for key in range.keys() {
                if key != "min" && key != "max" {
                    return Err(format!("unknown field \"{key}\" in \"arity\""));
                }
            }
            let min = parse_count(range.get("min").unwrap_or(&Value::Null), "\"arity\".min")?;
            let max = parse_count(range.get("max").unwrap_or(&Value::Null), "\"arity\".max")?;
            if min > max {
                return Err(format!("\"arity\" has min {min} > max {max}"));
            }
            Arity::Range { min, max }
        }
        other => {
            return Err(format!(
                "\"arity\" must be an integer, \"variadic\" or {{\"min\": N, \"max\": M}}, found {other}"
            ))
        }
    };
    if min_inputs.is_some() && !matches!(result, Arity::Variadic { .. }) {
        return Err("\"min_inputs\" is only allowed with \"arity\": \"variadic\"".to_string());
    }
    Ok(result)
}

fn parse_attr(a: &Value) -> Result<AttrSpec, String> {
    let obj = a
        .as_object()
        .ok_or_else(|| "the spec must be an object".to_string())?;
    for key in obj.keys() {
        if !matches!(
            key.as_str(),
            "type" | "values" | "nullable" | "optional" | "doc"
        ) {
            return Err(format!("unknown field \"{key}\""));
        }
    }
    let ty_name = obj
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| "missing string field \"type\"".to_string())?;
    let ty = match ty_name {
        "int" => AttrType::Int,
        "float" => AttrType::Float,
        "bool" => AttrType::Bool,
        "string" => AttrType::String,
        "int_list" => AttrType::IntList,
        "dim_list" => AttrType::DimList,
        "any" => AttrType::Any,
        "enum" => {
            let values = obj
                .get("values")
                .and_then(Value::as_array)
                .ok_or_else(|| "an enum needs a \"values\" list".to_string())?;
            let mut out = Vec::with_capacity(values.len());
            for v in values {
                match v.as_str() {
                    Some(s) => out.push(s.to_string()),
                    None => return Err(format!("enum values must be strings, found {v}")),
                }
            }
            if out.is_empty() {
                return Err("an enum needs at least one value".to_string());
            }
            AttrType::Enum(out)
        }
        other => return Err(format!("unknown attribute type \"{other}\"")),
    };
    if obj.contains_key("values") && !matches!(ty, AttrType::Enum(_)) {
        return Err("\"values\" is only allowed with \"type\": \"enum\"".to_string());
    }
    let flag = |key: &str| -> Result<bool, String> {
        match obj.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(format!("\"{key}\" must be a boolean, found {other}")),
        }
    };
    Ok(AttrSpec {
        ty,
        nullable: flag("nullable")?,
        optional: flag("optional")?,
    })
}
