//! Hostile graph.json input (issue 19): byte limits on files and streams, a BOM, integers past 64 bits, and a
//! seeded random-bytes fuzz loop over the graph and program loaders (cargo-fuzz needs a nightly toolchain, which
//! cannot be installed here; this runs on stable). RLX_FUZZ_ROUNDS and RLX_FUZZ_SEED make a longer run
//! (benchmarks/fuzz_long.py).

use std::io::Write;

use rlx_rules_core::graph::{Graph, GraphErrorKind, DEFAULT_MAX_BYTES, DEFAULT_MAX_NODES};
use rlx_rules_core::program::Program;
use rlx_rules_core::registry::Registry;

const SMALL: &str = r#"{"format": "rlx-graph", "version": 1, "nodes": [{"id": 0, "op": "Input", "shape": [2], "dtype": "f32"}, {"id": 1, "op": "Relu", "inputs": [0], "shape": [2], "dtype": "f32"}], "outputs": [1]}"#;

fn temp_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rlx-graph-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::File::create(&path).unwrap().write_all(bytes).unwrap();
    path
}

#[test]
fn a_file_over_the_byte_limit_is_refused_before_reading_and_one_at_it_loads() {
    let reg = Registry::builtin();
    assert_eq!(DEFAULT_MAX_BYTES, 1 << 30);
    let path = temp_file("small.json", SMALL.as_bytes());
    let n = SMALL.len() as u64;
    assert!(Graph::from_path_limits(&path, reg, DEFAULT_MAX_NODES, n).is_ok());
    let e = Graph::from_path_limits(&path, reg, DEFAULT_MAX_NODES, n - 1).unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::TooLarge);
    assert!(e.message.contains(&format!("the file is {n} bytes, more than the loader's limit of {} bytes", n - 1)), "{}", e.message);
    assert!(e.message.starts_with(&path.display().to_string()), "{}", e.message);
}

#[cfg(unix)]
#[test]
fn dev_zero_streams_and_fails_at_once_instead_of_being_read_whole() {
    let reg = Registry::builtin();
    let e = Graph::from_path(std::path::Path::new("/dev/zero"), reg).unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::Json, "{}", e.message);
}

#[test]
fn a_stream_stops_at_the_byte_limit() {
    // a FIFO is a stream like /dev/zero; here an endless valid prefix (a string that never ends) from a reader
    let reg = Registry::builtin();
    let spaces = vec![b' '; 4096];
    let path = temp_file("spaces.json", &spaces);
    // a regular file of spaces over the limit: refused by its size
    let e = Graph::from_path_limits(&path, reg, DEFAULT_MAX_NODES, 100).unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::TooLarge);
    #[cfg(unix)]
    {
        // /dev/zero read by a stream that stops at 0 bytes: the limit, not the content, is reported
        let e = Graph::from_path_limits(std::path::Path::new("/dev/zero"), reg, DEFAULT_MAX_NODES, 0).unwrap_err();
        assert_eq!(e.kind, GraphErrorKind::TooLarge, "{}", e.message);
    }
}

#[test]
fn a_byte_order_mark_is_named() {
    let reg = Registry::builtin();
    let text = format!("\u{feff}{SMALL}");
    let e = Graph::from_json_slice(text.as_bytes(), reg).unwrap_err();
    assert_eq!(e.kind, GraphErrorKind::Json);
    assert!(e.message.contains("byte-order mark"), "{}", e.message);
    let path = temp_file("bom.json", text.as_bytes());
    let e = Graph::from_path(&path, reg).unwrap_err();
    assert!(e.message.contains("byte-order mark"), "{}", e.message);
}

#[test]
fn integers_past_64_bits_are_refused_with_their_place_not_turned_into_floats() {
    let reg = Registry::builtin();
    for (big, shown) in [("18446744073709551616", "18446744073709551616"), ("-9223372036854775809", "-9223372036854775809")] {
        let text = SMALL.replace(r#""outputs": [1]"#, &format!("\"outputs\": [1],\n \"custom\": {{\"n\": {big}}}"));
        let e = Graph::from_json_slice(text.as_bytes(), reg).unwrap_err();
        assert_eq!(e.kind, GraphErrorKind::Json);
        assert!(e.message.contains(&format!("the integer {shown} at line 2 column 18 does not fit in 64 bits")), "{}", e.message);
    }
    // in an attribute too; the largest u64, floats and big numbers inside strings stay as they are
    let text = SMALL.replace(r#""op": "Relu","#, r#""op": "Relu", "attrs": {"k": 123456789012345678901234567890},"#);
    assert!(Graph::from_json_slice(text.as_bytes(), reg).unwrap_err().message.contains("does not fit in 64 bits"));
    let text = SMALL.replace(r#""outputs": [1]"#, r#""outputs": [1], "a": 18446744073709551615, "b": 1e300, "c": -3.4e38, "d": "x\"99999999999999999999999""#);
    let (g, _) = Graph::from_json_slice(text.as_bytes(), reg).expect("fits");
    assert_eq!(g.extra["a"].as_u64(), Some(u64::MAX));
}

/// A reader that hands out one byte per call, so that every token is cut across reads.
struct ByteByByte<'a>(&'a [u8]);

impl std::io::Read for ByteByByte<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let Some((&b, rest)) = self.0.split_first() else { return Ok(0) };
        if buf.is_empty() {
            return Ok(0);
        }
        buf[0] = b;
        self.0 = rest;
        Ok(1)
    }
}

#[test]
fn an_integer_past_64_bits_has_the_same_place_read_whole_or_one_byte_at_a_time() {
    let reg = Registry::builtin();
    // strings with escaped quotes, backslashes and digits before it, and lines of several lengths
    let extra = "\"s\": \"a\\\"1\\\\\",\n  \"t\": [1, -2, 3.5e3],\n\n   \"u\": {\"v\": -92233720368547758090}";
    let text = SMALL.replace(r#""outputs": [1]"#, &format!("\"outputs\": [1], {extra}"));
    let whole = Graph::from_json_slice(text.as_bytes(), reg).unwrap_err();
    assert!(whole.message.contains("the integer -92233720368547758090 at line 4 column 15 does not fit"), "{}", whole.message);
    let streamed = Graph::from_reader_limits(ByteByByte(text.as_bytes()), reg, DEFAULT_MAX_NODES, DEFAULT_MAX_BYTES).unwrap_err();
    assert_eq!(streamed.message, whole.message);
    // a literal longer than 64 characters is shown cut
    let long = "1".repeat(100);
    let text = SMALL.replace(r#""outputs": [1]"#, &format!("\"outputs\": [1], \"w\": {long}"));
    let e = Graph::from_reader_limits(ByteByByte(text.as_bytes()), reg, DEFAULT_MAX_NODES, DEFAULT_MAX_BYTES).unwrap_err();
    assert!(e.message.contains(&format!("the integer {}... at line 1 column", &long[..40])), "{}", e.message);
}

/// `base` with a few random bytes or JSON pieces written, inserted or removed (seeded: a failure replays).
fn mutate(rng: &mut fastrand::Rng, base: &[u8]) -> Vec<u8> {
    const PIECES: [&[u8]; 14] = [b"{", b"}", b"[", b"]", b"\"", b",", b":", b"18446744073709551616", b"-1", b"1e999",
                                  b"null", b"\xef\xbb\xbf", b"\\u0000", b"\xff"];
    let mut bytes = base.to_vec();
    for _ in 0..1 + rng.usize(..4) {
        let at = rng.usize(..=bytes.len());
        match rng.usize(..4) {
            0 => bytes.truncate(at),
            1 if at < bytes.len() => bytes[at] = rng.u8(..),
            2 => {
                let piece = PIECES[rng.usize(..PIECES.len())];
                bytes.splice(at..at, piece.iter().copied());
            }
            _ => {
                let end = (at + rng.usize(..16)).min(bytes.len());
                bytes.drain(at..end);
            }
        }
    }
    bytes
}

fn fuzz_settings() -> (usize, u64) {
    let rounds = std::env::var("RLX_FUZZ_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3000);
    let seed = std::env::var("RLX_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    (rounds, seed)
}

/// Every input gives a graph or a GraphError, never a panic; the stream and slice loaders agree (the same verdict, and
/// the same graph where both load).
#[test]
fn seeded_random_bytes_and_mutations_never_panic() {
    let reg = Registry::builtin();
    let (rounds, seed) = fuzz_settings();
    let mut rng = fastrand::Rng::with_seed(seed | 1);
    let (mut loaded, mut refused) = (0usize, 0usize);
    for round in 0..rounds {
        let bytes = if round % 4 == 0 {
            (0..rng.usize(..200)).map(|_| rng.u8(..)).collect()
        } else {
            mutate(&mut rng, SMALL.as_bytes())
        };
        let slice = Graph::from_json_slice_max(&bytes, reg, 16);
        match &slice {
            Ok(_) => loaded += 1,
            Err(_) => refused += 1,
        }
        if round % 50 == 0 || slice.is_ok() {
            // the stream loader (as for a FIFO) on the same bytes: the same verdict
            let mut stream = std::io::Cursor::new(bytes.clone());
            let streamed = Graph::from_reader_limits(&mut stream, reg, 16, 1 << 20);
            assert_eq!(slice.is_ok(), streamed.is_ok(), "seed {seed} round {round}: {:?}", String::from_utf8_lossy(&bytes));
            // the slice loader reads nodes with the byte scanner, the stream loader with serde_json alone
            if let (Ok((a, _)), Ok((b, _))) = (&slice, &streamed) {
                assert_eq!(a.to_json_string(), b.to_json_string(), "seed {seed} round {round}");
            }
        }
    }
    eprintln!("graph loader fuzz: {rounds} inputs (seed {seed}): {loaded} loaded, {refused} refused, 0 panics");
    assert!(loaded > 0 && refused > 0);
}

/// Mutations of the bundled program (the compiled default rules) load or give a ProgramError, never a panic.
#[test]
fn seeded_mutations_of_a_program_never_panic() {
    let base = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/default_program.json")).unwrap();
    let (rounds, seed) = fuzz_settings();
    let rounds = rounds.div_ceil(10); // a program is ~100 times larger than the graph: fewer, costlier rounds
    let mut rng = fastrand::Rng::with_seed(seed.rotate_left(17) | 1);
    let (mut loaded, mut refused) = (0usize, 0usize);
    for _ in 0..rounds {
        let bytes = mutate(&mut rng, &base);
        match Program::from_json_str(&String::from_utf8_lossy(&bytes)) {
            Ok(_) => loaded += 1,
            Err(_) => refused += 1,
        }
    }
    eprintln!("program loader fuzz: {rounds} inputs (seed {seed}): {loaded} loaded, {refused} refused, 0 panics");
    assert!(refused > 0);
}
