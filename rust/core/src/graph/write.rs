//! Printing graph.json (compact, or one node per line) and writing it atomically.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::ser::{CompactFormatter, Formatter};
use serde_json::Value;

use super::{Dim, Graph, GraphError, GraphErrorKind, Node, GRAPH_FORMAT, GRAPH_VERSION};

/// Node fields written by name; extra fields with these names are not written again.
const NODE_FIELDS: [&str; 7] = ["id", "op", "name", "inputs", "attrs", "shape", "dtype"];
/// Top-level fields written by name; extra fields with these names are not written again.
const GRAPH_FIELDS: [&str; 5] = ["format", "version", "name", "nodes", "outputs"];

impl Serialize for Dim {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Dim::Static(n) => s.serialize_i64(*n),
            Dim::Symbolic(name) => s.serialize_str(name),
        }
    }
}

/// A node as graph.json writes it: id, op, name?, inputs (if any), attrs (if any), shape?, dtype?,
/// then the extra fields.
impl Serialize for Node {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("op", &self.op)?;
        if let Some(name) = &self.name {
            m.serialize_entry("name", name)?;
        }
        if !self.inputs.is_empty() {
            m.serialize_entry("inputs", self.inputs.as_slice())?;
        }
        if !self.attrs.is_empty() {
            m.serialize_entry("attrs", &self.attrs)?;
        }
        if let Some(shape) = &self.shape {
            m.serialize_entry("shape", &**shape)?;
        }
        if let Some(dtype) = &self.dtype {
            m.serialize_entry("dtype", dtype)?;
        }
        for (k, v) in &self.extra {
            if !NODE_FIELDS.contains(&k.as_str()) {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// A graph as graph.json writes it (the nodes in topological order, as [`Graph::to_json_string`]).
impl Serialize for Graph {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Nodes<'a>(&'a Graph, Option<Vec<usize>>);
        impl Serialize for Nodes<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match &self.1 {
                    Some(order) => s.collect_seq(order.iter().map(|&i| &self.0.nodes[i])),
                    None => s.collect_seq(&self.0.nodes),
                }
            }
        }
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("format", GRAPH_FORMAT)?;
        m.serialize_entry("version", &GRAPH_VERSION)?;
        if let Some(name) = &self.name {
            m.serialize_entry("name", name)?;
        }
        m.serialize_entry("nodes", &Nodes(self, write_order(self)))?;
        m.serialize_entry("outputs", &self.outputs)?;
        for (k, v) in &self.extra {
            if !GRAPH_FIELDS.contains(&k.as_str()) {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// The order to write nodes in: topological when the graph allows one, else as stored.
fn write_order(g: &Graph) -> Option<Vec<usize>> {
    if increasing(&g.nodes) {
        return None;
    }
    let index = g.id_index().ok()?;
    let ordered = g.inputs_ordered(&index).ok()?;
    g.topo_order(&index, ordered).ok().flatten()
}

/// Below this many nodes, one thread tells whether they are [`increasing`].
const SPLIT_CHECK_NODES: usize = 1 << 16;

/// Whether every node's id is larger than the one before it and than each of its inputs. Such nodes are written as
/// stored without an index: they are in topological order (an input, a smaller id, stands before its consumer), unless
/// an input does not exist, and then they are written as stored too. Large graphs are looked at on two threads.
fn increasing(nodes: &[Node]) -> bool {
    let run = |nodes: &[Node]| {
        nodes.windows(2).all(|w| w[0].id < w[1].id) && nodes.iter().all(|n| n.inputs.iter().all(|&i| i < n.id))
    };
    if nodes.len() < SPLIT_CHECK_NODES || crate::cores() < 2 {
        return run(nodes);
    }
    let (first, second) = nodes.split_at(nodes.len() / 2);
    std::thread::scope(|scope| {
        let later = scope.spawn(|| run(second));
        let earlier = first.last().map(|n| n.id) < second.first().map(|n| n.id) && run(first);
        later.join().unwrap_or(false) && earlier
    })
}

/// JSON on one line with a space after `,` and `:` (`{"id": 0, "shape": [1, 8]}`).
struct Spaced;

impl Formatter for Spaced {
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
}

fn put<W: Write + ?Sized, T: Serialize + ?Sized>(out: &mut W, value: &T, spaced: bool) -> io::Result<()> {
    let result = if spaced {
        value.serialize(&mut serde_json::Serializer::with_formatter(&mut *out, Spaced))
    } else {
        value.serialize(&mut serde_json::Serializer::with_formatter(&mut *out, CompactFormatter))
    };
    // Keys are strings and numbers finite, so only the writer can fail.
    result.map_err(io::Error::from)
}

/// The graph as graph.json text.
pub(super) fn to_string(g: &Graph, pretty: bool) -> String {
    let mut out = Vec::with_capacity(64 + g.nodes.len() * 160);
    // Writing into memory cannot fail.
    let _ = write_to(g, pretty, &mut out);
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Write the graph as graph.json to `out`, node by node (compact, or one node per line). The bytes are those of the
/// [`Serialize`] impls above (compact) or of [`Spaced`] node lines; [`Emit`] prints them faster.
pub(super) fn write_to<W: Write + ?Sized>(g: &Graph, pretty: bool, out: &mut W) -> io::Result<()> {
    let e = Emit { spaced: pretty };
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(if pretty { b"{\n  \"format\": " } else { b"{\"format\":" });
    e.str(&mut head, GRAPH_FORMAT);
    e.key(&mut head, if pretty { ",\n  " } else { "," }, "version");
    e.u64(&mut head, GRAPH_VERSION);
    if let Some(name) = &g.name {
        e.key(&mut head, if pretty { ",\n  " } else { "," }, "name");
        e.str(&mut head, name);
    }
    e.key(&mut head, if pretty { ",\n  " } else { "," }, "nodes");
    head.push(b'[');
    out.write_all(&head)?;
    let order = write_order(g);
    let node_at = |k: usize| match &order {
        Some(order) => &g.nodes[order[k]],
        None => &g.nodes[k],
    };
    write_nodes(&e, g.nodes.len(), node_at, out)?;
    let mut tail = Vec::with_capacity(64 + 8 * g.outputs.len());
    if pretty {
        tail.extend_from_slice(if g.nodes.is_empty() { b"]" } else { b"\n  ]" });
    } else {
        tail.push(b']');
    }
    e.key(&mut tail, if pretty { ",\n  " } else { "," }, "outputs");
    e.ids(&mut tail, &g.outputs);
    for (k, v) in &g.extra {
        if !GRAPH_FIELDS.contains(&k.as_str()) {
            e.key(&mut tail, if pretty { ",\n  " } else { "," }, k);
            e.value(&mut tail, v);
        }
    }
    tail.extend_from_slice(if pretty { b"\n}\n" } else { b"}" });
    out.write_all(&tail)
}

/// Nodes printed into one buffer before it is written: about a megabyte of text.
const BLOCK_NODES: usize = 8192;
/// The most threads that print nodes at once (the calling one included).
const MAX_PRINTERS: usize = 4;

/// Write `n` nodes (`node_at(k)` for k in 0..n), separated as graph.json separates them, printed in blocks of
/// [`BLOCK_NODES`]. With more than one block and more than one core, helper threads print every other block (or
/// one in each `printers`) while this one prints the rest and writes all of them in order: the same bytes, in the
/// same order, as printing them one by one; at most two blocks per helper wait in memory.
fn write_nodes<'a, W: Write + ?Sized>(e: &Emit, n: usize, node_at: impl Fn(usize) -> &'a Node + Sync, out: &mut W) -> io::Result<()> {
    let blocks = n.div_ceil(BLOCK_NODES);
    let cores = crate::cores();
    let printers = cores.min(MAX_PRINTERS).min(blocks).max(1);
    let print = |b: usize, buf: &mut Vec<u8>| {
        buf.clear();
        for k in b * BLOCK_NODES..((b + 1) * BLOCK_NODES).min(n) {
            if e.spaced {
                buf.extend_from_slice(if k == 0 { b"\n    " } else { b",\n    " });
            } else if k > 0 {
                buf.push(b',');
            }
            e.node(buf, node_at(k));
        }
    };
    let mut buf = Vec::new();
    if printers == 1 {
        for b in 0..blocks {
            print(b, &mut buf);
            out.write_all(&buf)?;
        }
        return Ok(());
    }
    std::thread::scope(|scope| {
        let mut helpers = Vec::with_capacity(printers - 1);
        for h in 1..printers {
            let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(1);
            let (empty_tx, empty_rx) = std::sync::mpsc::channel::<Vec<u8>>();
            let print = &print;
            scope.spawn(move || {
                for b in (h..blocks).step_by(printers) {
                    let mut buf = empty_rx.try_recv().unwrap_or_default();
                    print(b, &mut buf);
                    if full_tx.send(buf).is_err() {
                        return; // the writer stopped on an error
                    }
                }
            });
            helpers.push((full_rx, empty_tx));
        }
        for b in 0..blocks {
            let h = b % printers;
            if h == 0 {
                print(b, &mut buf);
                out.write_all(&buf)?;
            } else {
                let (full_rx, empty_tx) = &helpers[h - 1];
                let done = full_rx.recv().map_err(|_| io::Error::other("a node printer stopped"))?;
                out.write_all(&done)?;
                let _ = empty_tx.send(done);
            }
        }
        Ok(())
    })
}

/// The bytes serde_json escapes in a string: control characters, `"` and `\\` (also where the reader's quick path stops).
pub(super) static ESCAPED: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Prints graph.json pieces by hand into a byte buffer: integers through `itoa`, strings copied as they are when
/// nothing in them needs escaping, and everything else (an escaped string, a float, a list or object value)
/// through serde_json with the same formatter, so the bytes are the same as [`put`]'s.
struct Emit {
    spaced: bool,
}

impl Emit {
    fn str(&self, buf: &mut Vec<u8>, s: &str) {
        // Every byte tested, without an early exit, so that the test runs many bytes at a time.
        if !s.bytes().fold(false, |escaped, b| escaped | ESCAPED[usize::from(b)]) {
            buf.reserve(s.len() + 2);
            buf.push(b'"');
            buf.extend_from_slice(s.as_bytes());
            buf.push(b'"');
        } else {
            let _ = put(buf, s, self.spaced); // into memory: cannot fail
        }
    }

    fn u64(&self, buf: &mut Vec<u8>, n: u64) {
        buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    }

    /// `sep` then `"key":` (`"key": ` when spaced).
    fn key(&self, buf: &mut Vec<u8>, sep: &str, key: &str) {
        buf.extend_from_slice(sep.as_bytes());
        self.str(buf, key);
        buf.extend_from_slice(if self.spaced { b": " } else { b":" });
    }

    /// `sep` then `"name":` (`"name": ` when spaced) for a field name of the format, which needs no escaping.
    fn field(&self, buf: &mut Vec<u8>, sep: &str, name: &str) {
        debug_assert!(!name.bytes().any(|b| ESCAPED[usize::from(b)]));
        buf.extend_from_slice(sep.as_bytes());
        buf.push(b'"');
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(if self.spaced { b"\": " } else { b"\":" });
    }

    /// The separator between list items or object entries.
    fn comma(&self) -> &'static [u8] {
        if self.spaced { b", " } else { b"," }
    }

    fn ids(&self, buf: &mut Vec<u8>, ids: &[u64]) {
        buf.push(b'[');
        for (k, id) in ids.iter().enumerate() {
            if k > 0 {
                buf.extend_from_slice(self.comma());
            }
            self.u64(buf, *id);
        }
        buf.push(b']');
    }

    fn value(&self, buf: &mut Vec<u8>, v: &Value) {
        match v {
            Value::Null => buf.extend_from_slice(b"null"),
            Value::Bool(b) => buf.extend_from_slice(if *b { b"true" } else { b"false" }),
            Value::String(s) => self.str(buf, s),
            Value::Number(n) if n.is_u64() || n.is_i64() => match n.as_u64() {
                Some(u) => self.u64(buf, u),
                None => buf.extend_from_slice(itoa::Buffer::new().format(n.as_i64().unwrap_or_default()).as_bytes()),
            },
            _ => {
                let _ = put(buf, v, self.spaced); // into memory: cannot fail
            }
        }
    }

    /// A node, as [`Node`]'s `Serialize` impl writes it.
    fn node(&self, buf: &mut Vec<u8>, node: &Node) {
        let sep = if self.spaced { ", " } else { "," };
        buf.push(b'{');
        self.field(buf, "", "id");
        self.u64(buf, node.id);
        self.field(buf, sep, "op");
        self.str(buf, &node.op);
        if let Some(name) = &node.name {
            self.field(buf, sep, "name");
            self.str(buf, name);
        }
        if !node.inputs.is_empty() {
            self.field(buf, sep, "inputs");
            self.ids(buf, &node.inputs);
        }
        if !node.attrs.is_empty() {
            self.field(buf, sep, "attrs");
            buf.push(b'{');
            for (k, (key, v)) in node.attrs.iter().enumerate() {
                self.key(buf, if k == 0 { "" } else { sep }, key);
                self.value(buf, v);
            }
            buf.push(b'}');
        }
        if let Some(shape) = &node.shape {
            self.field(buf, sep, "shape");
            buf.push(b'[');
            for (k, dim) in shape.iter().enumerate() {
                if k > 0 {
                    buf.extend_from_slice(self.comma());
                }
                match dim {
                    Dim::Static(n) => buf.extend_from_slice(itoa::Buffer::new().format(*n).as_bytes()),
                    Dim::Symbolic(s) => self.str(buf, s),
                }
            }
            buf.push(b']');
        }
        if let Some(dtype) = &node.dtype {
            self.field(buf, sep, "dtype");
            self.str(buf, dtype);
        }
        for (k, v) in &node.extra {
            if !NODE_FIELDS.contains(&k.as_str()) {
                self.key(buf, sep, k);
                self.value(buf, v);
            }
        }
        buf.push(b'}');
    }
}

/// How many bytes are written to a file before the system is asked to start writing them to disk.
const WRITEBACK_BYTES: u64 = 4 << 20;

/// A file being written that asks the system to start writing every [`WRITEBACK_BYTES`] to disk as it goes, so that
/// the sync at the end waits for the last few megabytes only, not for the whole file. Errors pass through unchanged.
pub struct Writeback {
    file: std::fs::File,
    written: u64,
    started: u64,
}

impl Writeback {
    /// Writes to `file` from its current position on.
    pub fn new(file: std::fs::File) -> Writeback {
        Writeback { file, written: 0, started: 0 }
    }

    /// The file.
    pub fn into_inner(self) -> std::fs::File {
        self.file
    }
}

impl Write for Writeback {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.started >= WRITEBACK_BYTES {
            start_writeback(&self.file, self.started, self.written - self.started);
            self.started = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Start writing `len` bytes of `file` from `from` to disk, without waiting. Only a hint: whatever it does not write,
/// the final sync does.
#[cfg(target_os = "linux")]
fn start_writeback(file: &std::fs::File, from: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(from), Ok(len)) = (i64::try_from(from), i64::try_from(len)) else { return };
    // SAFETY: the descriptor is open while `file` is borrowed; the call reads no memory of ours, and its failure is
    // harmless (the final sync writes everything).
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), from, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &std::fs::File, _from: u64, _len: u64) {}

fn io_error(message: String) -> GraphError {
    GraphError::new(GraphErrorKind::Io, message)
}

/// Write to `path` what `write` writes, through a synced temporary file in the same folder, renamed over
/// `path`; the text streams to the file (buffered), it is never held whole in memory.
pub(super) fn write_atomic(path: &Path, write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<(), GraphError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let file_name = path
        .file_name()
        .ok_or_else(|| io_error(format!("cannot write {}: not a file path", path.display())))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = dir.join(tmp_name);

    let written = (|| -> io::Result<()> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        let mut buffered = io::BufWriter::with_capacity(1 << 16, Writeback::new(file));
        write(&mut buffered)?;
        let file = buffered.into_inner().map_err(io::IntoInnerError::into_error)?.into_inner();
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_error(format!(
            "cannot write {}: cannot write a temporary file in {}: {e}",
            path.display(),
            dir.display()
        )));
    }
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_error(format!("cannot write {}: {e}", path.display())));
    }
    // Make the rename durable; not every platform lets a folder be opened and synced.
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
