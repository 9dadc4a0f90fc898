//! The load and write fast paths give what the exact paths give: the skipped integer scan, the node writer.

use rlx_rules_core::graph::{Graph, GraphErrorKind};
use rlx_rules_core::registry::Registry;

const SMALL: &str = r#"{"format": "rlx-graph", "version": 1, "nodes": [{"id": 0, "op": "Input", "shape": [2], "dtype": "f32"}, {"id": 1, "op": "Relu", "inputs": [0], "shape": [2], "dtype": "f32"}], "outputs": [1]}"#;

#[test]
fn an_integer_past_64_bits_is_found_at_every_offset_and_a_long_fitting_one_passes() {
    let reg = Registry::builtin();
    // The quick test probes every 18th byte; move the literal across all the phases of that stride.
    for pad in 0..40 {
        let name = "x".repeat(pad);
        for (big, fits) in [("18446744073709551616", false), ("-9223372036854775809", false), ("9999999999999999999", true),
                            ("18446744073709551615", true), ("-9223372036854775808", true), ("1234567890123456789012", false)] {
            let text = SMALL.replace(r#""outputs": [1]"#, &format!("\"outputs\": [1], \"{name}\": {big}"));
            let result = Graph::from_json_slice(text.as_bytes(), reg);
            if fits {
                assert!(result.is_ok(), "{big} at pad {pad}: {:?}", result.err());
            } else {
                let e = result.unwrap_err();
                assert_eq!(e.kind, GraphErrorKind::Json, "{big} at pad {pad}");
                assert!(e.message.contains(&format!("the integer {big} at line 1 column")), "{}", e.message);
            }
        }
    }
}

#[test]
fn long_digit_runs_inside_strings_are_not_numbers() {
    let reg = Registry::builtin();
    let text = SMALL.replace(r#""outputs": [1]"#, r#""outputs": [1], "s": "123456789012345678901234567890", "t": "a\"99999999999999999999999""#);
    assert!(Graph::from_json_slice(text.as_bytes(), reg).is_ok());
}
