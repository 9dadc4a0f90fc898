//! The shipped ops.json: every op the issue requires, RLX's names, and sane specs.

use rlx_rules_core::registry::{Arity, AttrType, Registry};

#[test]
fn builtin_registry_has_the_required_ops() {
    let reg = Registry::builtin();
    for op in [
        "Input",
        "Param",
        "Constant",
        "MatMul",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Gelu",
        "GeluApprox",
        "Silu",
        "Relu",
        "Sigmoid",
        "Tanh",
        "Exp",
        "Softmax",
        "LayerNorm",
        "RmsNorm",
        "Reshape",
        "Transpose",
        "Narrow",
        "Concat",
        "Attention",
        "Rope",
        "FusedMatMulBiasAct",
        "FusedResidualLN",
        "FusedResidualRmsNorm",
        "FusedSwiGLU",
        "FusedAttentionBlock",
        "FusedTransformerLayer",
    ] {
        assert!(reg.get(op).is_some(), "missing {op}");
    }
    assert!(reg.len() >= 60);
    assert!(std::ptr::eq(reg, Registry::builtin()), "parsed once");
}

#[test]
fn commutativity() {
    let reg = Registry::builtin();
    for op in ["Add", "Mul", "Max", "Min"] {
        assert!(reg.is_commutative(op), "{op}");
    }
    for op in ["Sub", "Div", "Pow", "MatMul", "Concat", "NoSuchOp"] {
        assert!(!reg.is_commutative(op), "{op}");
    }
    for spec in reg.ops().filter(|s| s.commutative) {
        assert_eq!(spec.arity, Arity::Fixed(2), "{}", spec.name);
    }
}

#[test]
fn seed_pass_ops_have_rlx_fields() {
    let reg = Registry::builtin();
    let attn = reg.get("Attention").unwrap();
    assert_eq!(attn.arity, Arity::Range { min: 3, max: 4 });
    let mask = &attn.attrs["mask_kind"];
    assert_eq!(
        mask.ty,
        AttrType::Enum(vec![
            "None".into(),
            "Causal".into(),
            "SlidingWindow".into(),
            "Custom".into(),
            "Bias".into()
        ])
    );
    assert!(attn.attrs["score_scale"].nullable && !attn.attrs["score_scale"].optional);
    assert_eq!(attn.attrs["score_scale"].ty, AttrType::Float);
    let narrow = reg.get("Narrow").unwrap();
    let names: Vec<&str> = narrow.attrs.keys().map(String::as_str).collect();
    assert_eq!(names, ["axis", "len", "start"]);
    let fab = reg.get("FusedAttentionBlock").unwrap();
    assert_eq!(
        fab.inputs[..6],
        ["hidden", "qkv_w", "out_w", "mask", "qkv_b", "out_b"]
    );
    assert!(
        fab.arity.accepts(6)
            && fab.arity.accepts(4)
            && fab.arity.accepts(8)
            && !fab.arity.accepts(9)
    );
    for a in ["num_heads", "head_dim", "has_bias", "has_rope"] {
        assert!(fab.attrs.contains_key(a), "{a}");
    }
    let ftl = reg.get("FusedTransformerLayer").unwrap();
    assert_eq!(ftl.inputs.len(), 14);
    assert_eq!(ftl.input_name(13), Some("mask"));
    let mm = reg.get("FusedMatMulBiasAct").unwrap();
    let act = &mm.attrs["activation"];
    assert!(act.nullable);
    assert!(
        matches!(&act.ty, AttrType::Enum(v) if v.iter().any(|s| s == "Gelu") && v.iter().any(|s| s == "Silu"))
    );
    for op in ["Input", "Param", "Constant"] {
        assert_eq!(reg.get(op).unwrap().arity, Arity::Fixed(0));
    }
    assert_eq!(reg.get("Concat").unwrap().arity, Arity::Variadic { min: 1 });
}

#[test]
fn every_documented_input_list_fits_its_arity() {
    for spec in Registry::builtin().ops() {
        if let Some(max) = spec.arity.max() {
            assert!(spec.inputs.len() <= max, "{}", spec.name);
        }
    }
}

fn reg_err(text: &str) -> String {
    Registry::from_json_str(text).unwrap_err()
}

#[test]
fn malformed_registries_are_rejected() {
    let wrap = |ops: &str| format!(r#"{{"format": "rlx-ops", "version": 1, "ops": {{{ops}}}}}"#);
    assert!(Registry::from_json_str(&wrap("")).unwrap().is_empty());
    assert!(reg_err("nope").contains("not valid JSON"));
    assert!(reg_err(r#"{"format": "x", "version": 1, "ops": {}}"#)
        .contains("\"format\" must be \"rlx-ops\""));
    assert!(reg_err(r#"{"format": "rlx-ops", "version": 9, "ops": {}}"#)
        .contains("unsupported version 9"));
    let cases = [
        (r#""A": {}"#, "op \"A\": missing field \"arity\""),
        (
            r#""A": {"arity": -1}"#,
            "\"arity\" must be a non-negative integer",
        ),
        (
            r#""A": {"arity": "many"}"#,
            "\"arity\" must be an integer, \"variadic\"",
        ),
        (r#""A": {"arity": {"min": 3, "max": 2}}"#, "min 3 > max 2"),
        (
            r#""A": {"arity": 1, "min_inputs": 1}"#,
            "\"min_inputs\" is only allowed",
        ),
        (
            r#""A": {"arity": 1, "commutative": true}"#,
            "only an op with exactly 2 inputs can be commutative",
        ),
        (r#""A": {"arity": 1, "atrs": {}}"#, "unknown field \"atrs\""),
        (
            r#""A": {"arity": 1, "attrs": {"k": {"type": "tensor"}}}"#,
            "attribute \"k\": unknown attribute type \"tensor\"",
        ),
        (
            r#""A": {"arity": 1, "attrs": {"k": {"type": "enum"}}}"#,
            "an enum needs a \"values\" list",
        ),
        (
            r#""A": {"arity": 1, "attrs": {"k": {"type": "int", "values": ["a"]}}}"#,
            "\"values\" is only allowed",
        ),
        (
            r#""A": {"arity": 1, "attrs": {"k": {"type": "int", "nullable": "yes"}}}"#,
            "\"nullable\" must be a boolean",
        ),
        (
            r#""A": {"arity": 1, "inputs": ["x", "y"]}"#,
            "\"inputs\" names 2 inputs",
        ),
    ];
    for (ops, needle) in cases {
        let e = reg_err(&wrap(ops));
        assert!(e.contains(needle), "{e:?} lacks {needle:?}");
    }
    let ok = Registry::from_json_str(&wrap(
        r#""V": {"arity": "variadic"}, "R": {"arity": {"min": 1, "max": 2}, "doc": "r"}"#,
    ))
    .unwrap();
    assert_eq!(ok.get("V").unwrap().arity, Arity::Variadic { min: 0 });
    assert_eq!(ok.get("R").unwrap().doc.as_deref(), Some("r"));
}

#[test]
fn attribute_type_acceptance() {
    use serde_json::json;
    assert!(AttrType::Float.accepts(&json!(1)));
    assert!(AttrType::Float.accepts(&json!(1.5)));
    assert!(!AttrType::Int.accepts(&json!(1.5)));
    assert!(AttrType::Int.accepts(&json!(-3)));
    assert!(AttrType::IntList.accepts(&json!([])));
    assert!(!AttrType::IntList.accepts(&json!([1.0])));
    assert!(AttrType::Any.accepts(&json!({"a": [1]})));
    assert!(!AttrType::String.accepts(&json!(null)));
}
