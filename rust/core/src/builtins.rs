//! The builtin functions of the rule language as data (builtins.json, shared with the Python checker).
//!
//! `python/rlx_rules/data/builtins.json` is embedded at build time and parsed once; it gives each
//! function's argument kinds, whether its last argument repeats, and its result type. The program
//! loader takes a function's arity from here; what a function computes lives in `expr.rs`. The
//! format is documented in `docs/program.md`, "Builtin functions".

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::program::ProgramError;

/// The builtins.json shipped with the package, embedded in the crate.
pub const BUILTINS_JSON: &str = include_str!("../../../python/rlx_rules/data/builtins.json");
/// The `format` string a builtins.json must carry.
pub const BUILTINS_FORMAT: &str = "rlx-builtins";
/// The builtins.json `version` this crate reads.
pub const BUILTINS_VERSION: u64 = 1;

/// The argument kinds a function may declare.
pub const ARG_KINDS: [&str; 8] = ["node", "int", "num", "bool", "list", "value", "group", "fact"];
/// The result types a function may declare.
pub const RESULT_TYPES: [&str; 7] = ["int", "float", "bool", "str", "dim", "list", "any"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    format: String,
    version: u64,
    #[serde(default)]
    #[allow(dead_code)]
    doc: String,
    functions: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    facts: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFunction {
    args: Vec<String>,
    #[serde(default)]
    variadic: bool,
    result: String,
    #[serde(default)]
    nullable: bool,
    #[serde(default)]
    aggregate: bool,
    #[serde(default)]
    doc: String,
}

/// One builtin function as the data declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    /// Argument kinds, one of [`ARG_KINDS`] each.
    pub args: Vec<String>,
    /// Whether the last argument may repeat (one or more times).
    pub variadic: bool,
    /// One of [`RESULT_TYPES`].
    pub result: String,
    /// Whether the result may be null.
    pub nullable: bool,
    /// Whether it runs over a group's members.
    pub aggregate: bool,
    pub doc: String,
}

impl Function {
    /// Whether a call with `n` arguments has the right number.
    pub fn accepts(&self, n: usize) -> bool {
        if self.variadic {
            n >= self.args.len()
        } else {
            n == self.args.len()
        }
    }
}

/// The table of builtin functions, by name.
#[derive(Clone, Debug)]
pub struct Builtins {
    functions: Vec<Function>,
    index: HashMap<String, usize>,
    facts: Vec<String>,
}

impl Builtins {
    /// Parse and check a builtins.json document.
    pub fn from_json_str(text: &str) -> Result<Builtins, ProgramError> {
        let invalid = |m: String| ProgramError::builtins(format!("invalid builtins table: {m}"));
        let raw: RawTable = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if raw.format != BUILTINS_FORMAT || raw.version != BUILTINS_VERSION {
            return Err(invalid(format!(
                "format {:?} version {}, expected {BUILTINS_FORMAT:?} version {BUILTINS_VERSION}",
                raw.format, raw.version
            )));
        }
        let mut functions = Vec::with_capacity(raw.functions.len());
        let mut index = HashMap::with_capacity(raw.functions.len());
        for (name, value) in raw.functions {
            let f: RawFunction = serde_json::from_value(value).map_err(|e| invalid(format!("function {name:?}: {e}")))?;
            if let Some(bad) = f.args.iter().find(|a| !ARG_KINDS.contains(&a.as_str())) {
                return Err(invalid(format!("function {name:?}: unknown argument kind {bad:?}")));
            }
            if !RESULT_TYPES.contains(&f.result.as_str()) {
                return Err(invalid(format!("function {name:?}: unknown result type {:?}", f.result)));
            }
            if f.variadic && f.args.is_empty() {
                return Err(invalid(format!("function {name:?}: variadic with no argument")));
            }
            index.insert(name.clone(), functions.len());
            functions.push(Function {
                name,
                args: f.args,
                variadic: f.variadic,
                result: f.result,
                nullable: f.nullable,
                aggregate: f.aggregate,
                doc: f.doc,
            });
        }
        Ok(Builtins { functions, index, facts: raw.facts })
    }

    /// The table embedded from the package's builtins.json, parsed once.
    pub fn shipped() -> &'static Builtins {
        static TABLE: OnceLock<Builtins> = OnceLock::new();
        TABLE.get_or_init(|| {
            // The embedded file is checked by this crate's tests; it cannot be wrong at run time.
            Builtins::from_json_str(BUILTINS_JSON).unwrap_or_else(|e| panic!("the embedded builtins.json is invalid: {e}"))
        })
    }

    pub fn get(&self, name: &str) -> Option<&Function> {
        self.index.get(name).map(|&i| &self.functions[i])
    }

    /// Every function, in the data's order.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// The fact names `has_fact()` accepts.
    pub fn facts(&self) -> &[String] {
        &self.facts
    }
}
