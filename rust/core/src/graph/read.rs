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
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes).map_err(io_error)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(&format!("more than {max_bytes}"), max_bytes)); // it grew while being read
    }
    Graph::from_json_slice_max(&bytes, registry, max_nodes)
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
    let mut scan = IntegerScan::default();
    scan.feed(bytes);
    scan.result()
}

/// Finds integer literals outside strings beyond u64 (or below i64::MIN), which serde_json would read as
/// floats; it can be fed in pieces. Its position is counted in lines and columns (of bytes), from 1.
#[derive(Default)]
struct IntegerScan {
    in_string: bool,
    escaped: bool,
    number: Option<Number>,
    line: u64,
    column: u64,
    error: Option<GraphError>,
}

struct Number {
    text: String,
    integer: bool,
    line: u64,
    column: u64,
}

impl IntegerScan {
    fn feed(&mut self, bytes: &[u8]) {
        if self.error.is_some() {
            return;
        }
        for &b in bytes {
            if self.line == 0 {
                self.line = 1;
            }
            self.column += 1;
            if self.in_string {
                match b {
                    _ if self.escaped => self.escaped = false,
                    b'\\' => self.escaped = true,
                    b'"' => self.in_string = false,
                    b'\n' => self.newline(),
                    _ => {}
                }
                continue;
            }
            if let Some(number) = &mut self.number {
                match b {
                    b'0'..=b'9' => {
                        if number.text.len() < 64 {
                            number.text.push(b as char);
                        }
                        continue;
                    }
                    b'.' | b'e' | b'E' | b'+' | b'-' => {
                        number.integer = false;
                        continue;
                    }
                    _ => self.end(),
                }
            }
            match b {
                b'"' => self.in_string = true,
                b'\n' => self.newline(),
                b'-' | b'0'..=b'9' => {
                    self.number = Some(Number { text: (b as char).to_string(), integer: true, line: self.line, column: self.column });
                }
                _ => {}
            }
        }
    }

    fn result(&mut self) -> Result<(), GraphError> {
        self.end();
        self.error.take().map_or(Ok(()), Err)
    }

    fn newline(&mut self) {
        self.line += 1;
        self.column = 0;
    }

    /// The number being read ends here.
    fn end(&mut self) {
        let Some(number) = self.number.take() else { return };
        if !number.integer || self.error.is_some() {
            return;
        }
        let fits = if number.text.starts_with('-') {
            number.text.parse::<i64>().is_ok()
        } else {
            number.text.parse::<u64>().is_ok()
        };
        if !fits && number.text.len() > 1 {
            let shown = if number.text.len() >= 64 { format!("{}...", &number.text[..40]) } else { number.text };
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
