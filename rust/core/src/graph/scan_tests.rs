//! Tests: the quick load (the byte scanner for common node objects, the checks made while reading, the split read)
//! gives what the one-piece serde load gives, on many generated documents: the same graph and warnings, or the same
//! error.

use super::{load, read, Graph, GraphError, Warning, DEFAULT_MAX_NODES};
use crate::registry::Registry;

/// A seeded generator, so that a failure can be replayed from its seed.
struct Rng(fastrand::Rng);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }

    fn below(&mut self, n: usize) -> usize {
        self.0.usize(..n)
    }

    /// One of `items`.
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    /// True once in `n` times.
    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
}

/// Strings as they may stand in a document: plain, empty, with escapes, raw unicode, escaped unicode, a control
/// character (invalid JSON).
const STRINGS: &[&str] = &[
    r#""x""#, r#""layer0.qkv""#, r#""""#, r#""a\"b""#, r#""tab\there""#, r#""\u00e9t\u00e9""#, r#""été 日本 🦀""#,
    r#""back\\slash""#, r#""\ud83e\udd80""#, "\"ctrl\u{1}\"", r#""}, {\"id\": 5""#, r#""/\/""#,
];

/// Attribute values: integers (small, negative, -0, long, past 64 bits), floats and exponents, literals, strings, lists
/// and objects (nested, empty, with a repeated key), and malformed ones.
const VALUES: &[&str] = &[
    "0", "2", "-1", "768", "-0", "01", "1.5", "-2.25", "1e-12", "1E+3", "0.1", "-0.0", "1e400", "12345678901234567890",
    "123456789012345678", "1234567890123456789", "-9223372036854775808", "-9223372036854775809", "18446744073709551616",
    "null", "true", "false", "nul", "tru", r#""Custom""#, r#""a\nb""#, "[]", "[1, 2.5, \"s\", null]", "{}",
    r#"{"k": [1, {"m": -3}]}"#, r#"{"k": 1, "k": 2}"#, "[[[[1]]]]", "1.", ".5", "-", "+1", "[1,]", "{\"a\" 1}",
];

/// Ops: known ones (each takes some number of inputs and attributes) and one the registry does not know.
const OPS: &[&str] = &["Input", "Param", "Relu", "Add", "MatMul", "Narrow", "LayerNorm", "Gelu", "Mystery", "Softmax"];

const DTYPES: &[&str] = &[r#""f32""#, r#""f16""#, "null", r#""""#, "3"];

/// Dims: static, symbolic, and invalid ones.
const DIMS: &[&str] = &["1", "8", "768", r#""batch""#, r#""""#, "-1", "1.5", "null", "01", "123456789012345678901"];

/// One node's text, mostly well formed; `odd` asks for a mistake or a rarity somewhere in it.
fn node(rng: &mut Rng, id: u64, earlier: u64, odd: bool) -> String {
    let mut fields: Vec<String> = Vec::new();
    let id_text = if odd && rng.one_in(6) { rng.pick(&["\"3\"", "-1", "1.0", "null", "01", "99999999999999999999"]).to_string() } else { id.to_string() };
    fields.push(format!(r#""id": {id_text}"#));
    let op = if earlier == 0 { rng.pick(&["Input", "Param", "Mystery"]) } else { rng.pick(OPS) };
    let op_text = if odd && rng.one_in(6) { rng.pick(&["5", "\"\"", "null", "[\"Relu\"]", r#""Re\u006cu""#]).to_string() } else { format!("\"{op}\"") };
    fields.push(format!(r#""op": {op_text}"#));
    if rng.one_in(2) {
        let name = if odd { rng.pick(STRINGS).to_string() } else { format!("\"n{id}\"") };
        let name = if odd && rng.one_in(8) { rng.pick(&["null", "4", "[]"]).to_string() } else { name };
        fields.push(format!(r#""name": {name}"#));
    }
    let arity = match op {
        "Input" | "Param" => 0,
        "Add" | "MatMul" => 2,
        "LayerNorm" => 3,
        _ => 1,
    };
    if arity > 0 && earlier > 0 {
        let mut inputs: Vec<String> = (0..arity).map(|_| rng.0.u64(..earlier).to_string()).collect();
        if odd && rng.one_in(4) {
            let k = rng.below(inputs.len());
            inputs[k] = rng.pick(&["\"1\"", "-2", "1.5", "null", "900000", &id.to_string(), &(id + 1).to_string()]).to_string();
        }
        if odd && rng.one_in(6) {
            inputs.push("0".to_string()); // one input too many
        }
        let text = if odd && rng.one_in(10) { rng.pick(&["null", "3", "{}", "[1,]"]).to_string() } else { format!("[{}]", inputs.join(", ")) };
        fields.push(format!(r#""inputs": {text}"#));
    } else if rng.one_in(4) {
        fields.push(r#""inputs": []"#.to_string());
    }
    let attrs: Vec<String> = match op {
        "Narrow" => vec![format!(r#""axis": {}"#, rng.below(3)), r#""start": 0"#.to_string(), r#""len": 768"#.to_string()],
        "LayerNorm" => vec![r#""axis": -1"#.to_string(), format!(r#""eps": {}"#, rng.pick(&["1e-12", "1e-5", "0.001"]))],
        "Softmax" => vec![format!(r#""axis": {}"#, rng.pick(&["-1", "1"]))],
        _ => Vec::new(),
    };
    let mut attrs = attrs;
    if odd && rng.one_in(2) {
        attrs.push(format!(r#""{}": {}"#, rng.pick(&["extra", "axis", "w", "v"]), rng.pick(VALUES)));
    }
    if !attrs.is_empty() || rng.one_in(8) {
        let text = if odd && rng.one_in(12) { rng.pick(&["null", "[]", "3", "\"a\""]).to_string() } else { format!("{{{}}}", attrs.join(", ")) };
        fields.push(format!(r#""attrs": {text}"#));
    }
    if !rng.one_in(5) {
        let dims: Vec<&str> = (0..rng.below(4)).map(|_| if odd { rng.pick(DIMS) } else { rng.pick(&["1", "8", "768", "\"batch\""]) }).collect();
        let text = if odd && rng.one_in(10) { rng.pick(&["null", "3", "{}"]).to_string() } else { format!("[{}]", dims.join(", ")) };
        fields.push(format!(r#""shape": {text}"#));
    }
    if !rng.one_in(4) {
        let dtype = if odd { rng.pick(DTYPES) } else { r#""f32""# };
        fields.push(format!(r#""dtype": {dtype}"#));
    }
    if odd && rng.one_in(5) {
        let (key, value) = match rng.below(4) {
            0 => ("facts", rng.pick(&[r#"["positive"]"#, "[1]", "3"]).to_string()),
            1 => ("note", rng.pick(VALUES).to_string()),
            2 => (rng.pick(&["id", "op", "inputs", "attrs", "shape", "dtype", "name"]), "1".to_string()), // given twice
            _ => ("zzz", rng.pick(STRINGS).to_string()),
        };
        fields.push(format!(r#""{key}": {value}"#));
    }
    // any key order, and white space of every kind
    for i in (1..fields.len()).rev() {
        if rng.one_in(3) {
            let j = rng.below(i + 1);
            fields.swap(i, j);
        }
    }
    let sep = rng.pick(&[", ", ",", " ,\n\t", ",\r\n  "]);
    format!("{{{}}}", fields.join(sep))
}

/// A document of `n` nodes; about one node in `odd_every` carries a mistake or a rarity (0: none), and the ids may
/// count up, leave gaps, or be shuffled.
fn document(rng: &mut Rng, n: usize, odd_every: usize) -> String {
    let gaps = rng.one_in(3);
    let ids: Vec<u64> = (0..n as u64).map(|i| if gaps { i * 3 + 7 } else { i }).collect();
    let mut nodes: Vec<String> = Vec::with_capacity(n);
    for (i, &id) in ids.iter().enumerate() {
        let odd = odd_every > 0 && rng.one_in(odd_every);
        // inputs among the earlier ids: positions, mapped to ids
        let text = node(rng, i as u64, i as u64, odd);
        let text = if gaps {
            // rewrite the id and the inputs of a well-formed node onto the gapped ids (odd ones stay as they are)
            match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(serde_json::Value::Object(mut m)) if !odd => {
                    m.insert("id".into(), id.into());
                    if let Some(serde_json::Value::Array(items)) = m.get_mut("inputs") {
                        for item in items.iter_mut() {
                            *item = ids[item.as_u64().unwrap_or(0) as usize].into();
                        }
                    }
                    serde_json::Value::Object(m).to_string()
                }
                _ => text,
            }
        } else {
            text
        };
        nodes.push(text);
    }
    if rng.one_in(6) && n > 2 {
        let (a, b) = (rng.below(n), rng.below(n));
        nodes.swap(a, b); // out of order: sorted by the check, or a cycle
    }
    let outputs = match rng.below(6) {
        0 => "[]".to_string(),
        1 => "[900000]".to_string(),
        2 => format!("[{}, {}]", ids[0], ids[n - 1]),
        _ => format!("[{}]", ids[n - 1]),
    };
    let head = rng.pick(&[
        r#"{"format": "rlx-graph", "version": 1, "name": "g", "nodes": ["#,
        r#"{"format":"rlx-graph","version":1,"nodes":["#,
        "{\n  \"version\": 1,\n  \"format\": \"rlx-graph\",\n  \"nodes\": [\n    ",
    ]);
    let sep = rng.pick(&[", ", ",\n    ", ","]);
    format!(r#"{head}{}], "outputs": {outputs}, "meta": {{"k": [1, 2.5]}}}}"#, nodes.join(sep))
}

/// What loading gave before the quick load: the whole document parsed by serde in one piece, then checked.
fn one_piece(bytes: &[u8], reg: &Registry) -> Result<(Graph, Vec<Warning>), GraphError> {
    let checked = Graph::checked(load::parse_one_piece(bytes, DEFAULT_MAX_NODES)?, reg)?;
    read::check_integers(bytes)?;
    Ok(checked)
}

/// The quick load and the one-piece serde load agree on `text`: equal graphs (written alike) and warnings, or equal
/// errors. Returns whether it loaded.
fn agree(text: &str, what: &str) -> bool {
    let reg = Registry::builtin();
    let quick = Graph::from_json_slice(text.as_bytes(), reg);
    let serde = one_piece(text.as_bytes(), reg);
    let loaded = quick.is_ok();
    match (quick, serde) {
        (Ok((a, wa)), Ok((b, wb))) => {
            assert!(a == b, "{what}: the graphs differ\n{text}");
            assert_eq!(a.to_json_string(), b.to_json_string(), "{what}: written differently");
            assert_eq!(wa, wb, "{what}: the warnings differ");
        }
        (Err(a), Err(b)) => assert_eq!((a.kind, &a.message), (b.kind, &b.message), "{what}\n{text}"),
        (a, b) => panic!("{what}: {:?} vs {:?}\n{text}", a.map(|_| ()), b.map(|_| ())),
    }
    loaded
}

#[test]
fn generated_small_documents_load_as_serde_loads_them() {
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    for case in 0..3000 {
        let n = 1 + rng.below(12);
        let odd_every = [0, 1, 2, 4, 8][rng.below(5)];
        let text = document(&mut rng, n, odd_every);
        agree(&text, &format!("case {case}"));
        // the same document cut short somewhere
        if case % 4 == 0 {
            let mut cut = rng.below(text.len());
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            agree(&text[..cut], &format!("case {case} cut at {cut}"));
        }
    }
}

#[test]
fn well_formed_documents_of_every_shape_load_as_serde_loads_them() {
    let mut rng = Rng::new(42);
    let mut loaded = 0;
    for case in 0..300 {
        let n = 1 + rng.below(60);
        loaded += usize::from(agree(&document(&mut rng, n, 0), &format!("case {case}")));
    }
    assert!(loaded > 150, "only {loaded} of 300 well-formed documents loaded: the quick path is hardly tested");
}

#[test]
fn attribute_values_load_as_serde_loads_them() {
    for value in VALUES {
        let text = format!(
            r#"{{"format": "rlx-graph", "version": 1, "nodes": [{{"id": 0, "op": "Mystery", "attrs": {{"v": {value}, "w": [{value}], "x": {{"y": {value}}}}}}}], "outputs": [0]}}"#
        );
        agree(&text, value);
    }
    // nesting around the scanner's depth limit, and past serde_json's
    for depth in [30, 31, 32, 33, 60, 126, 127, 130] {
        let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let text = format!(r#"{{"format": "rlx-graph", "version": 1, "nodes": [{{"id": 0, "op": "Mystery", "attrs": {{"v": {deep}}}}}], "outputs": [0]}}"#);
        agree(&text, &format!("depth {depth}"));
    }
}

#[test]
fn large_documents_read_in_two_parts_load_as_serde_loads_them() {
    let mut rng = Rng::new(7);
    let mut loaded = 0;
    for (case, odd_every) in [0, 0, 0, 0, 50_000, 5_000].into_iter().enumerate() {
        let text = document(&mut rng, 60_000, odd_every);
        assert!(text.len() > 4 << 20, "{} bytes: too small to be read in two parts", text.len());
        loaded += usize::from(agree(&text, &format!("large case {case}")));
    }
    assert!(loaded >= 2, "only {loaded} large documents loaded");
}

#[test]
fn two_parts_whose_rooms_are_guessed_too_small_or_too_large_load_as_serde_loads_them() {
    // The parts' rooms are sized from the nodes just after the cut. Long nodes there and short ones elsewhere
    // overflow both rooms (their nodes spill into Vecs of their own); the other way round leaves both rooms mostly
    // unused. Either way the nodes must come out whole and in order.
    let short = |id: u64| format!(r#"{{"id": {id}, "op": "Relu", "inputs": [{}]}}"#, id - 1);
    let long = |id: u64| format!(r#"{{"id": {id}, "op": "Relu", "name": "{}{id}", "inputs": [{}]}}"#, "n".repeat(300), id - 1);
    for long_after_cut in [true, false] {
        let (outer, inner): (&dyn Fn(u64) -> String, &dyn Fn(u64) -> String) =
            if long_after_cut { (&short, &long) } else { (&long, &short) };
        let mut nodes = vec![r#"{"id": 0, "op": "Input", "shape": [1], "dtype": "f32"}"#.to_string()];
        let mut bytes = 0;
        for (kind, until) in [(outer, 3_000_000), (inner, 3_600_000), (outer, 6_000_000)] {
            while bytes < until {
                nodes.push(kind(nodes.len() as u64));
                bytes += nodes[nodes.len() - 1].len() + 2;
            }
        }
        let text = format!(r#"{{"format": "rlx-graph", "version": 1, "nodes": [{}], "outputs": [{}]}}"#, nodes.join(", "), nodes.len() - 1);
        assert!(text.len() > 4 << 20);
        assert!(agree(&text, &format!("long nodes after the cut: {long_after_cut}")), "did not load");
    }
    // Nodes so long that too few follow the cut to guess their size: no rooms, each part fills a Vec of its own.
    let huge = |id: u64| format!(r#"{{"id": {id}, "op": "Relu", "name": "{}", "inputs": [{}]}}"#, "h".repeat(20_000), id - 1);
    let nodes: Vec<String> = std::iter::once(r#"{"id": 0, "op": "Input", "shape": [1], "dtype": "f32"}"#.to_string())
        .chain((1..300).map(huge))
        .collect();
    let text = format!(r#"{{"format": "rlx-graph", "version": 1, "nodes": [{}], "outputs": [299]}}"#, nodes.join(", "));
    assert!(agree(&text, "huge nodes"), "did not load");
    // Node boundaries written inside strings all around the middle: a cut found there is not between two nodes, the
    // second thread's nodes (written into its room) are dropped, and the first thread reads on to the end.
    let quoted = |id: u64| format!(r#"{{"id": {id}, "op": "Relu", "name": "}}, {{ {id}", "inputs": [{}]}}"#, id - 1);
    let nodes: Vec<String> = std::iter::once(r#"{"id": 0, "op": "Input", "shape": [1], "dtype": "f32"}"#.to_string())
        .chain((1..120_000).map(quoted))
        .collect();
    let text = format!(r#"{{"format": "rlx-graph", "version": 1, "nodes": [{}], "outputs": [119999]}}"#, nodes.join(", "));
    assert!(text.len() > 4 << 20);
    assert!(agree(&text, "boundaries inside strings"), "did not load");
}
