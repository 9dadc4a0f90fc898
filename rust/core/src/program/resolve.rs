//! Validation of a program's JSON form into the resolved form the matcher runs: slots bound before use,
//! indices in range, calls to known builtins, phases and gates that exist.

use std::collections::HashMap;

use serde_json::Value;

use super::raw::*;
use super::*;
use crate::builtins::Builtins;

impl Program {
    /// Deserialize and validate a program, with the shipped builtin functions.
    pub fn from_json_str(text: &str) -> Result<Program, ProgramError> {
        Program::from_json_str_with(text, Builtins::shipped())
    }

    /// Deserialize and validate a program whose calls may name the functions of `builtins`.
    pub fn from_json_str_with(text: &str, builtins: &Builtins) -> Result<Program, ProgramError> {
        let raw: RawProgram =
            serde_json::from_str(text).map_err(|e| ProgramError { kind: ProgramErrorKind::Json, message: e.to_string() })?;
        if raw.format != PROGRAM_FORMAT {
            return Err(ProgramError {
                kind: ProgramErrorKind::Format,
                message: format!("format is {:?}, expected {PROGRAM_FORMAT:?}", raw.format),
            });
        }
        if raw.version != PROGRAM_VERSION {
            return Err(ProgramError {
                kind: ProgramErrorKind::Version,
                message: format!("version {} is not supported (this build runs version {PROGRAM_VERSION})", raw.version),
            });
        }
        let params: Vec<ParamDecl> = raw
            .params
            .into_iter()
            .map(|p| ParamDecl { name: p.name, ty: p.ty, default: p.default, env: p.env })
            .collect();
        let param_index: HashMap<&str, usize> =
            params.iter().enumerate().map(|(i, p)| (p.name.as_str(), i)).collect();
        let ctx = ExprCtx { params: &param_index, builtins };

        let mut gates = Vec::new();
        for g in raw.gates {
            let scan = match (g.quantifier.as_deref(), g.op) {
                (None, _) => None,
                (Some("any"), Some(op)) => Some((Quantifier::Any, op)),
                (Some("all"), Some(op)) => Some((Quantifier::All, op)),
                (q, _) => return err(format!("gate {:?}: bad quantifier {q:?} or missing op", g.name)),
            };
            let slots = usize::from(scan.is_some());
            let expr = ctx.expr(&g.expr, slots, 0).map_err(|e| e.within(format_args!("gate {:?}", g.name)))?;
            gates.push(Gate { name: g.name, scan, expr, loc: g.loc, text: g.text });
        }
        let gate_index: HashMap<&str, usize> =
            gates.iter().enumerate().map(|(i, g)| (g.name.as_str(), i)).collect();

        let mut rules = Vec::new();
        for r in raw.rules {
            let name = r.name.clone();
            let rule = ctx.rule(r, &gate_index).map_err(|e| e.within(format_args!("rule {name:?}")))?;
            rules.push(rule);
        }
        let rule_index: HashMap<&str, usize> =
            rules.iter().enumerate().map(|(i, r)| (r.name.as_str(), i)).collect();
        if rule_index.len() != rules.len() {
            return err("two rules share a name");
        }
        let mut phases = Vec::new();
        let mut placed = vec![false; rules.len()];
        for p in raw.phases {
            if p.max_iterations == 0 {
                return err(format!("phase {:?}: max_iterations must be at least 1", p.name));
            }
            let mut members = Vec::new();
            for r in &p.rules {
                let Some(&i) = rule_index.get(r.as_str()) else {
                    return err(format!("phase {:?} lists unknown rule {r:?}", p.name));
                };
                if placed[i] || rules[i].phase != p.name {
                    return err(format!("rule {r:?} is listed in phase {:?} wrongly or twice", p.name));
                }
                placed[i] = true;
                members.push(i);
            }
            phases.push(Phase { name: p.name, max_iterations: p.max_iterations, rules: members });
        }
        if let Some(i) = placed.iter().position(|p| !p) {
            return err(format!("rule {:?} is in no phase", rules[i].name));
        }
        Ok(Program { params, gates, phases, rules })
    }

    pub fn rule(&self, name: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.name == name)
    }
}

struct ExprCtx<'a> {
    params: &'a HashMap<&'a str, usize>,
    builtins: &'a Builtins,
}

fn field<'v>(obj: &'v serde_json::Map<String, Value>, key: &str) -> Result<&'v Value, ProgramError> {
    obj.get(key).ok_or_else(|| ProgramError::invalid(format!("missing field {key:?}")))
}

fn as_index(v: &Value, what: &str) -> Result<usize, ProgramError> {
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| ProgramError::invalid(format!("{what} must be a non-negative integer, got {v}")))
}

fn as_str<'v>(v: &'v Value, what: &str) -> Result<&'v str, ProgramError> {
    v.as_str().ok_or_else(|| ProgramError::invalid(format!("{what} must be a string, got {v}")))
}

impl ExprCtx<'_> {
    /// Resolve an expression; `bound` is the number of slots bound where it runs.
    fn expr_bound(&self, v: &Value, bound: &[bool], depth: usize) -> Result<Expr, ProgramError> {
        if depth > MAX_EXPR_DEPTH {
            return err(format!("expression nests deeper than {MAX_EXPR_DEPTH}"));
        }
        let obj = v.as_object().ok_or_else(|| ProgramError::invalid(format!("expression must be an object, got {v}")))?;
        let d = depth + 1;
        let sub = |key: &str| -> Result<Box<Expr>, ProgramError> { Ok(Box::new(self.expr_bound(field(obj, key)?, bound, d)?)) };
        let list = |key: &str| -> Result<Vec<Expr>, ProgramError> {
            field(obj, key)?
                .as_array()
                .ok_or_else(|| ProgramError::invalid(format!("{key:?} must be a list")))?
                .iter()
                .map(|e| self.expr_bound(e, bound, d))
                .collect()
        };
        if let Some(lit) = obj.get("lit") {
            return Ok(Expr::Lit(lit.clone()));
        }
        if let Some(s) = obj.get("slot") {
            let s = as_index(s, "slot")?;
            if !bound.get(s).copied().unwrap_or(false) {
                return err(format!("expression reads slot {s} before it is bound"));
            }
            return Ok(Expr::Slot(s));
        }
        if let Some(p) = obj.get("param") {
            let name = as_str(p, "param")?;
            let i = self.params.get(name).ok_or_else(|| ProgramError::invalid(format!("unknown param {name:?}")))?;
            return Ok(Expr::Param(*i));
        }
        if let Some(a) = obj.get("attr") {
            return Ok(Expr::Attr(as_str(a, "attr")?.to_string(), sub("of")?));
        }
        if let Some(c) = obj.get("call") {
            let name = as_str(c, "call")?;
            let f = self.builtins.get(name).ok_or_else(|| ProgramError::invalid(format!("unknown function {name:?}")))?;
            let args = list("args")?;
            if !f.accepts(args.len()) {
                return err(format!("{name}() given {} arguments", args.len()));
            }
            return Ok(match Builtin::from_name(name) {
                Some(b) => Expr::Call(b, args),
                None => Expr::Unimplemented(name.to_string(), args),
            });
        }
        if let Some(op) = obj.get("bin") {
            let s = as_str(op, "bin")?;
            let op = BinOp::parse(s).ok_or_else(|| ProgramError::invalid(format!("unknown operator {s:?}")))?;
            return Ok(Expr::Bin(op, sub("l")?, sub("r")?));
        }
        if let Some(op) = obj.get("un") {
            return match as_str(op, "un")? {
                "not" => Ok(Expr::Not(sub("e")?)),
                "-" => Ok(Expr::Neg(sub("e")?)),
                other => err(format!("unknown unary operator {other:?}")),
            };
        }
        let negated = || obj.get("negated").and_then(Value::as_bool).unwrap_or(false);
        if obj.contains_key("in") {
            return Ok(Expr::In { value: sub("in")?, set: list("set")?, negated: negated() });
        }
        if obj.contains_key("is_null") {
            return Ok(Expr::IsNull { value: sub("is_null")?, negated: negated() });
        }
        if obj.contains_key("list") {
            return Ok(Expr::List(list("list")?));
        }
        err(format!("unknown expression {v}"))
    }

    fn expr(&self, v: &Value, slots: usize, depth: usize) -> Result<Expr, ProgramError> {
        self.expr_bound(v, &vec![true; slots], depth)
    }

    fn rule(&self, r: RawRule, gates: &HashMap<&str, usize>) -> Result<Rule, ProgramError> {
        let n = r.slots.len();
        if n == 0 || n > MAX_SLOTS {
            return err(format!("has {n} slots (1 to {MAX_SLOTS} allowed)"));
        }
        if r.root_ops.is_empty() {
            return err("root_ops is empty");
        }
        let mut bound = vec![false; n];
        bound[0] = true;
        let check = |s: usize, bound: &[bool]| -> Result<(), ProgramError> {
            if s >= n {
                return err(format!("slot {s} out of range ({n} slots)"));
            }
            if !bound[s] {
                return err(format!("slot {s} is read before it is bound"));
            }
            Ok(())
        };
        let mut code = Vec::with_capacity(r.code.len());
        for ins in &r.code {
            let obj = ins.as_object().ok_or_else(|| ProgramError::invalid(format!("instruction must be an object: {ins}")))?;
            let kind = as_str(field(obj, "i")?, "i")?;
            let slot = || as_index(field(obj, "slot")?, "slot");
            let strings = |key: &str| -> Result<Vec<String>, ProgramError> {
                field(obj, key)?
                    .as_array()
                    .ok_or_else(|| ProgramError::invalid(format!("{key:?} must be a list")))?
                    .iter()
                    .map(|v| as_str(v, key).map(str::to_string))
                    .collect()
            };
            let instr = match kind {
                "op" => Instr::Op { slot: slot()?, ops: strings("ops")? },
                "arity" => Instr::Arity { slot: slot()?, n: as_index(field(obj, "n")?, "n")? },
                "commute" => Instr::Commute { slot: slot()?, ops: strings("ops")? },
                "input" => {
                    let to = as_index(field(obj, "to")?, "to")?;
                    if to >= n || bound[to] {
                        return err(format!("input binds slot {to}, which is out of range or already bound"));
                    }
                    let i = Instr::Input { slot: slot()?, index: as_index(field(obj, "index")?, "index")?, to };
                    check(slot()?, &bound)?;
                    bound[to] = true;
                    i
                }
                "same" => {
                    let same_as = as_index(field(obj, "as")?, "as")?;
                    check(same_as, &bound)?;
                    Instr::Same { slot: slot()?, index: as_index(field(obj, "index")?, "index")?, same_as }
                }
                "distinct" => {
                    let slots = field(obj, "slots")?
                        .as_array()
                        .ok_or_else(|| ProgramError::invalid("\"slots\" must be a list"))?
                        .iter()
                        .map(|v| as_index(v, "slot"))
                        .collect::<Result<Vec<_>, _>>()?;
                    for &s in &slots {
                        check(s, &bound)?;
                    }
                    Instr::Distinct { slots }
                }
                "guard" => Instr::Guard {
                    expr: self.expr_bound(field(obj, "expr")?, &bound, 0)?,
                    loc: obj.get("loc").and_then(Value::as_str).unwrap_or_default().to_string(),
                    text: obj.get("text").and_then(Value::as_str).unwrap_or_default().to_string(),
                },
                other => return err(format!("unknown instruction {other:?}")),
            };
            if let Instr::Op { slot, .. } | Instr::Arity { slot, .. } | Instr::Commute { slot, .. } | Instr::Same { slot, .. } = &instr {
                check(*slot, &bound)?;
            }
            code.push(instr);
        }
        if let Some(s) = bound.iter().position(|b| !b) {
            return err(format!("slot {s} is never bound"));
        }
        for &a in &r.absorb {
            if a == 0 || a >= n || r.slots[a].leaf {
                return err(format!("absorb lists slot {a}, which is not an op-pattern slot other than the root"));
            }
        }
        let group = match &r.group {
            None => None,
            Some(g) => {
                if g.min == 0 || g.min > g.max {
                    return err(format!("group size {}..{} needs 1 <= min <= max", g.min, g.max));
                }
                let mut per_member = vec![false; n];
                for &s in &g.members {
                    if s >= n {
                        return err(format!("group member slot {s} out of range"));
                    }
                    per_member[s] = true;
                }
                if !per_member[0] || g.shared.is_empty() || g.shared.iter().any(|&s| s >= n || per_member[s]) {
                    return err("a group needs the root per member and at least one shared slot, not per member");
                }
                Some(Group { min: g.min, max: g.max, shared: g.shared.clone(), per_member })
            }
        };
        let group_guards = r
            .group_guards
            .iter()
            .map(|v| {
                let obj = v.as_object().ok_or_else(|| ProgramError::invalid("group guard must be an object"))?;
                if obj.get("i").and_then(Value::as_str) != Some("guard") || group.is_none() {
                    return err("group_guards holds guards, and only in a rule with a group");
                }
                Ok(Instr::Guard {
                    expr: self.expr(field(obj, "expr")?, n, 0)?,
                    loc: obj.get("loc").and_then(Value::as_str).unwrap_or_default().to_string(),
                    text: obj.get("text").and_then(Value::as_str).unwrap_or_default().to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut rewrite = Vec::new();
        let mut replaced = false;
        for node in r.rewrite {
            if node.each != (group.is_some() && node.replaces.is_some()) {
                return err(format!("rewrite node {:?}: in a group rule the root is replaced with each, elsewhere never", node.name));
            }
            let inputs = node
                .inputs
                .iter()
                .map(|m| match (m.get("slot"), m.get("new"), m.get("spread"), m.len()) {
                    (Some(&s), None, None, 1) if s < n => Ok(NewInput::Slot(s)),
                    (None, Some(&j), None, 1) if rewrite.get(j).is_some_and(|p: &NewNode| p.replaces.is_none()) => Ok(NewInput::New(j)),
                    (None, None, Some(&s), 1) if group.as_ref().is_some_and(|g| s < n && g.per_member[s]) => Ok(NewInput::Spread(s)),
                    _ => err(format!("rewrite node {:?}: bad input {m:?}", node.name)),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let attrs = node
                .attrs
                .iter()
                .map(|(a, e)| Ok((a.clone(), self.expr(e, n, 0)?)))
                .collect::<Result<Vec<_>, ProgramError>>()?;
            let shape = node.shape.as_ref().map(|e| self.expr(e, n, 0)).transpose()?;
            let dtype = node.dtype.as_ref().map(|e| self.expr(e, n, 0)).transpose()?;
            match node.replaces {
                Some(0) => replaced = true,
                Some(s) => return err(format!("rewrite replaces slot {s}; only the root (slot 0) can be replaced")),
                None if shape.is_none() => {
                    return err(format!("rewrite node {:?} replaces nothing and has no shape", node.name))
                }
                None => {}
            }
            let each = node.each;
            rewrite.push(NewNode { name: node.name, op: node.op, inputs, attrs, shape, dtype, replaces: node.replaces, each });
        }
        let forward = r
            .forward
            .iter()
            .map(|f| {
                if f.slot == 0 || f.slot >= n {
                    return err(format!("forward to slot {}, which is not a slot other than the root", f.slot));
                }
                Ok((f.when.as_ref().map(|e| self.expr(e, n, 0)).transpose()?, f.slot))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !forward.is_empty() && (!rewrite.is_empty() || group.is_some()) {
            return err("a forwarding rewrite builds no node and has no group");
        }
        if forward.is_empty() && (!replaced || rewrite.iter().filter(|n| n.replaces.is_some()).count() != 1) {
            return err("the rewrite must replace the root exactly once");
        }
        if group.is_none() && rewrite.iter().flat_map(|n| &n.inputs).any(|i| matches!(i, NewInput::Spread(_))) {
            return err("a spread input needs a group");
        }
        let gate_ids = r
            .gates
            .iter()
            .map(|g| gates.get(g.as_str()).copied().ok_or_else(|| ProgramError::invalid(format!("unknown gate {g:?}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Rule {
            name: r.name,
            loc: r.loc,
            phase: r.phase,
            priority: r.priority,
            gates: gate_ids,
            root_ops: r.root_ops,
            slot_names: r.slots.iter().map(|s| s.name.clone()).collect(),
            slot_is_leaf: r.slots.iter().map(|s| s.leaf).collect(),
            code,
            absorb: r.absorb,
            rewrite,
            forward,
            group,
            group_guards,
        })
    }
}
