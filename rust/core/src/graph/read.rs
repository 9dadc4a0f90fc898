//! Reading graph.json from a file within a byte limit, and what serde_json would let pass silently: a
//! UTF-8 byte-order mark (named instead of "expected value") and integers beyond 64 bits (refused instead
//! of turned into floats).
//!
//! A regular file larger than the limit is refused before it is read; any other file (a FIFO, a device
//! such as /dev/zero) is parsed as it streams in and stops at the limit, so memory never follows the input.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use super::{load, Graph, GraphError, GraphErrorKind, Warning};
use crate::registry::Registry;

/// How many bytes a graph.json file may hold by default (the `*_limits` loaders take another limit).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// The UTF-8 byte-order mark.
pub(super) const BOM: &[u8] = b"\xef\xbb\xbf";

pub(super) fn bom_error() -> GraphError {
    GraphError::new(
        GraphErrorKind::Json,
        "invalid JSON: the text starts with a UTF-8 byte-order mark (BOM, bytes EF BB BF), which JSON does not allow; save the file without it".to_string(),
    )
}

fn too_large(size: &str, max_bytes: u64) -> GraphError {
    GraphError::new(
        GraphErrorKind::TooLarge,
        format!("the file is {size} bytes, more than the loader's limit of {max_bytes} bytes (max_bytes; raise it to load a larger graph)"),
    )
}

impl Graph {
    /// [`Graph::from_path_max`] with a limit on the file's size too (a `TooLarge` error above it): a larger
    /// regular file is refused before it is read; a FIFO or device is parsed as it streams in, up to the limit.
    pub fn from_path_limits(
        path: &Path,
        registry: &Registry,
        max_nodes: usize,
        max_bytes: u64,
    ) -> Result<(Graph, Vec<Warning>), GraphError> {
        parse_path(path, registry, max_nodes, max_bytes)
            .map_err(|e| GraphError { kind: e.kind, message: format!("{}: {}", path.display(), e.message) })
    }

    /// Parse and validate graph.json as it streams from `reader`, reading at most `max_bytes` bytes.
    pub fn from_reader_limits<R: Read>(
        reader: R,
        registry: &Registry,
        max_nodes: usize,
        max_bytes: u64,
    ) -> Result<(Graph, Vec<Warning>), GraphError> {
        let mut reader = Bounded::new(reader, max_bytes);
        let checked = Graph::checked(load::parse_stream(&mut reader, max_nodes)?, registry)?;
        reader.scan.result()?;
        Ok(checked)
    }
}

/// Read, parse and validate the graph.json at `path`, reading at most `max_bytes` bytes. Errors do not
/// carry the path; the caller adds it.
fn parse_path(path: &Path, registry: &Registry, max_nodes: usize, max_bytes: u64) -> Result<(Graph, Vec<Warning>), GraphError> {
    let io_error = |e: io::Error| GraphError::new(GraphErrorKind::Io, format!("cannot read it: {e}"));
    let file = File::open(path).map_err(io_error)?;
    let meta = file.metadata().map_err(io_error)?;
    if meta.is_dir() {
        return Err(GraphError::new(GraphErrorKind::Io, "cannot read it: it is a directory".to_string()));
    }
    if !meta.is_file() {
        return Graph::from_reader_limits(BufReader::new(file), registry, max_nodes, max_bytes);
    }
    if meta.len() > max_bytes {
        return Err(too_large(&meta.len().to_string(), max_bytes));
    }
    let bytes = read_file(file, meta.len(), max_bytes).map_err(io_error)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(&format!("more than {max_bytes}"), max_bytes)); // it grew while being read
    }
    Graph::from_json_slice_max(&bytes, registry, max_nodes)
}

/// Below this many bytes, a file is read by one thread.
const SPLIT_READ_BYTES: u64 = 4 << 20;

/// The bytes of the regular file `file` of `len` bytes, and whatever it grew by while being read, up to `max_bytes + 1`
/// bytes. A large file is read in two halves at once, which halves the time spent copying it out of the page cache
/// (one core copies about 1.3 GB/s); a file that shrank meanwhile is read again in one piece.
fn read_file(mut file: File, len: u64, max_bytes: u64) -> io::Result<Vec<u8>> {
    #[cfg(unix)]
    if len >= SPLIT_READ_BYTES && len <= max_bytes && crate::cores() >= 2 {
        use std::io::{Seek, SeekFrom};
        use std::os::unix::fs::FileExt;

        let mut bytes = vec![0u8; len as usize];
        let (first, second) = bytes.split_at_mut(len as usize / 2);
        // whether the part was read whole (false: the file ended before it)
        let whole = |part: &mut [u8], at: u64| match file.read_exact_at(part, at) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(e),
        };
        let at = first.len() as u64;
        let (a, b) = std::thread::scope(|scope| {
            let second_half = scope.spawn(|| whole(second, at));
            let a = whole(first, 0);
            (a, second_half.join().unwrap_or_else(|_| Err(io::Error::other("a reading thread failed"))))
        });
        if a? && b? {
            file.seek(SeekFrom::Start(len))?;
            file.take(max_bytes.saturating_add(1) - len).read_to_end(&mut bytes)?;
            return Ok(bytes);
        }
        file.seek(SeekFrom::Start(0))?;
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A reader that fails past `max_bytes` and scans what passes through it for integers beyond 64 bits.
pub(super) struct Bounded<R> {
    inner: R,
    max_bytes: u64,
    read: u64,
    head: Vec<u8>,
    scan: IntegerScan,
}

impl<R: Read> Bounded<R> {
    pub(super) fn new(inner: R, max_bytes: u64) -> Bounded<R> {
        Bounded { inner, max_bytes, read: 0, head: Vec::new(), scan: IntegerScan::default() }
    }

    /// The error to report after parsing: the byte limit, a BOM, or the parser's own error.
    pub(super) fn finish<T>(&mut self, parsed: Result<T, GraphError>) -> Result<T, GraphError> {
        if self.read > self.max_bytes {
            return Err(too_large(&format!("more than {}", self.max_bytes), self.max_bytes));
        }
        if parsed.is_err() && self.head.starts_with(BOM) {
            return Err(bom_error());
        }
        parsed
    }
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.read > self.max_bytes {
            return Err(io::Error::other("the byte limit was reached"));
        }
        let room = (self.max_bytes - self.read).saturating_add(1).min(buf.len() as u64) as usize;
        let n = self.inner.read(&mut buf[..room])?;
        self.read += n as u64;
        if self.head.len() < BOM.len() {
            let take = (BOM.len() - self.head.len()).min(n);
            self.head.extend_from_slice(&buf[..take]);
        }
        self.scan.feed(&buf[..n]);
        if self.read > self.max_bytes {
            return Err(io::Error::other("the byte limit was reached"));
        }
        Ok(n)
    }
}

/// A refusal of the first integer literal of `bytes` (well-formed JSON) that does not fit in 64 bits, which
/// serde_json would have read as a float. Checked after the graph is validated, so that a known field (an id,
/// an integer attribute) reports its own located error first.
pub(super) fn check_integers(bytes: &[u8]) -> Result<(), GraphError> {
    if !has_long_digit_run(bytes) {
        return Ok(());
    }
    let mut scan = IntegerScan::default();
    scan.feed(bytes);
    scan.result()
}

/// The fewest digits an integer literal that does not fit in 64 bits can have (u64::MAX has 20, i64::MIN 19).
const LONG_RUN: usize = 19;

/// Whether `bytes` hold a run of [`LONG_RUN`] or more ASCII digits anywhere (inside strings too): without one, no
/// integer literal can be out of range, and the exact scan is skipped. Every such run covers a byte whose offset is a
/// multiple of `LONG_RUN - 1`, so only those bytes are tested, and the run around a digit found there is measured.
fn has_long_digit_run(bytes: &[u8]) -> bool {
    (0..bytes.len()).step_by(LONG_RUN - 1).any(|p| {
        bytes[p].is_ascii_digit() && {
            let after = bytes[p..].iter().take(LONG_RUN).take_while(|b| b.is_ascii_digit()).count();
            let before = bytes[..p].iter().rev().take(LONG_RUN).take_while(|b| b.is_ascii_digit()).count();
            before + after >= LONG_RUN
        }
    })
}

/// Finds integer literals outside strings beyond u64 (or below i64::MIN), which serde_json would read as
/// floats; it can be fed in pieces. Its position is counted in lines and columns (of bytes), from 1. It allocates
/// nothing per number, and skips the inside of strings in one search.
#[derive(Default)]
struct IntegerScan {
    in_string: bool,
    escaped: bool,
    number: Option<Number>,
    newlines: u64,   // newlines passed
    offset: u64,     // bytes fed so far
    line_start: u64, // the offset of the first byte of the current line
    error: Option<GraphError>,
}

/// The integer literal being read: its first 64 characters, and where it starts.
struct Number {
    text: [u8; 64],
    len: usize,
    integer: bool,
    line: u64,
    column: u64,
}

impl IntegerScan {
    fn feed(&mut self, bytes: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let base = self.offset;
        self.offset += bytes.len() as u64;
        let mut i = 0;
        while i < bytes.len() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                    i += 1;
                    continue;
                }
                let Some(k) = bytes[i..].iter().position(|&c| matches!(c, b'"' | b'\\' | b'\n')) else { break };
                i += k;
                match bytes[i] {
                    b'\\' => self.escaped = true,
                    b'"' => self.in_string = false,
                    _ => self.newline(base + i as u64),
                }
                i += 1;
                continue;
            }
            let b = bytes[i];
            if let Some(number) = &mut self.number {
                match b {
                    b'0'..=b'9' => {
                        // the whole run of digits in this piece
                        let run = bytes[i..].iter().position(|c| !c.is_ascii_digit()).unwrap_or(bytes.len() - i);
                        let keep = run.min(number.text.len() - number.len);
                        number.text[number.len..number.len + keep].copy_from_slice(&bytes[i..i + keep]);
                        number.len += keep;
                        i += run;
                        continue;
                    }
                    b'.' | b'e' | b'E' | b'+' | b'-' => {
                        number.integer = false;
                        i += 1;
                        continue;
                    }
                    _ => self.end(),
                }
            }
            match b {
                b'"' => self.in_string = true,
                b'\n' => self.newline(base + i as u64),
                b'-' | b'0'..=b'9' => {
                    let mut text = [0; 64];
                    text[0] = b;
                    let at = base + i as u64;
                    self.number = Some(Number { text, len: 1, integer: true, line: self.newlines + 1, column: at - self.line_start + 1 });
                }
                _ => {}
            }
            i += 1;
        }
    }

    fn result(&mut self) -> Result<(), GraphError> {
        self.end();
        self.error.take().map_or(Ok(()), Err)
    }

    /// A newline at offset `at`.
    fn newline(&mut self, at: u64) {
        self.newlines += 1;
        self.line_start = at + 1;
    }

    /// The number being read ends here.
    fn end(&mut self) {
        let Some(number) = self.number.take() else { return };
        if !number.integer || self.error.is_some() {
            return;
        }
        // Up to 18 characters (a sign and digits) always fit; longer ones are parsed.
        if number.len < 19 {
            return;
        }
        let text = std::str::from_utf8(&number.text[..number.len]).unwrap_or_default();
        let fits = if text.starts_with('-') { text.parse::<i64>().is_ok() } else { text.parse::<u64>().is_ok() };
        if !fits && text.len() > 1 {
            let shown = if text.len() >= 64 { format!("{}...", &text[..40]) } else { text.to_string() };
            self.error = Some(GraphError::new(
                GraphErrorKind::Json,
                format!(
                    "invalid JSON: the integer {shown} at line {} column {} does not fit in 64 bits (graph.json integers are 64-bit; write a float such as 1e20, or a string)",
                    number.line, number.column
                ),
            ));
        }
    }
}
