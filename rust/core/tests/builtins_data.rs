//! The builtin functions are data: the shipped table is valid and fully implemented, and a function added
//! to the data is accepted by the program loader without a code change.

use rlx_rules_core::builtins::{Builtins, BUILTINS_JSON};
use rlx_rules_core::program::{Builtin, Expr, Instr, Program, ProgramErrorKind};
use serde_json::{json, Value};

/// A one-rule program whose guard is `call(args)`.
fn program_calling(call: &str, args: Value) -> String {
    json!({"format": "rlx-program", "version": 1, "phases": [{"name": "p", "max_iterations": 1, "rules": ["r"]}],
        "rules": [{"name": "r", "phase": "p", "root_ops": ["Relu"], "slots": [{"name": "n", "leaf": false}],
            "code": [{"i": "op", "slot": 0, "ops": ["Relu"]}, {"i": "guard", "expr": {"call": call, "args": args}}],
            "absorb": [], "rewrite": [{"name": "n", "op": "Gelu", "inputs": [], "attrs": [], "shape": null, "dtype": null, "replaces": 0}]}]})
    .to_string()
}

#[test]
fn every_shipped_builtin_is_implemented() {
    let table = Builtins::shipped();
    assert!(table.functions().len() >= 20);
    for f in table.functions() {
        assert!(Builtin::from_name(&f.name).is_some(), "{} is in builtins.json but not implemented", f.name);
    }
    assert_eq!(table.facts(), ["halves_equal", "causal_keep", "causal_bias"]);
}

#[test]
fn arity_comes_from_the_data() {
    let one = json!([{"slot": 0}]);
    assert!(Program::from_json_str(&program_calling("is_output", one.clone())).is_ok());
    assert!(Program::from_json_str(&program_calling("is_output", json!([{"slot": 0}, {"slot": 0}]))).is_ok(), "variadic");
    let err = Program::from_json_str(&program_calling("dim", one)).unwrap_err();
    assert!(err.message.contains("dim() given 1 arguments"), "{err}");
    let err = Program::from_json_str(&program_calling("frobnicate", json!([]))).unwrap_err();
    assert!(err.message.contains("unknown function \"frobnicate\""), "{err}");
}

#[test]
fn a_builtin_added_to_the_data_is_accepted_by_the_loader() {
    let mut data: Value = serde_json::from_str(BUILTINS_JSON).unwrap();
    data["functions"]["frobnicate"] = json!({"args": ["node", "int"], "result": "bool", "doc": "new"});
    let table = Builtins::from_json_str(&data.to_string()).unwrap();
    let text = program_calling("frobnicate", json!([{"slot": 0}, {"lit": 2}]));
    let program = Program::from_json_str_with(&text, &table).expect("the loader accepts the new function");
    // Not implemented yet: it loads as such (and fails when evaluated, so its guard never holds).
    assert!(matches!(&program.rules[0].code[1], Instr::Guard { expr: Expr::Unimplemented(name, args), .. }
        if name == "frobnicate" && args.len() == 2));
    // Its arity is checked like any other.
    let err = Program::from_json_str_with(&program_calling("frobnicate", json!([{"slot": 0}])), &table).unwrap_err();
    assert!(err.message.contains("frobnicate() given 1 arguments"), "{err}");
}

#[test]
fn a_malformed_table_is_refused() {
    for (key, value) in [("args", json!(["widget"])), ("result", json!("tensor")), ("surprise", json!(1))] {
        let mut data: Value = serde_json::from_str(BUILTINS_JSON).unwrap();
        data["functions"]["uses"][key] = value;
        let err = Builtins::from_json_str(&data.to_string()).unwrap_err();
        assert_eq!(err.kind, ProgramErrorKind::Builtins, "{err}");
    }
}
