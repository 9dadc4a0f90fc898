//! Printing graph.json (compact, or one node per line) and writing it atomically.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::ser::{CompactFormatter, Formatter};

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
            m.serialize_entry("inputs", &self.inputs)?;
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
    let index = g.id_index().ok()?;
    let (positions, ordered) = g.input_positions(&index).ok()?;
    g.topo_order(&positions, ordered).ok().flatten()
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

/// Write the graph as graph.json to `out`, node by node (compact, or one node per line).
pub(super) fn write_to<W: Write + ?Sized>(g: &Graph, pretty: bool, out: &mut W) -> io::Result<()> {
    if !pretty {
        return put(out, g, false);
    }
    out.write_all(b"{\n  \"format\": ")?;
    put(out, GRAPH_FORMAT, true)?;
    out.write_all(format!(",\n  \"version\": {GRAPH_VERSION}").as_bytes())?;
    if let Some(name) = &g.name {
        out.write_all(b",\n  \"name\": ")?;
        put(out, name, true)?;
    }
    out.write_all(b",\n  \"nodes\": [")?;
    let order = write_order(g);
    let nodes: Box<dyn Iterator<Item = &Node>> = match &order {
        Some(order) => Box::new(order.iter().map(|&i| &g.nodes[i])),
        None => Box::new(g.nodes.iter()),
    };
    for (k, node) in nodes.enumerate() {
        out.write_all(if k == 0 { b"\n    " } else { b",\n    " })?;
        put(out, node, true)?;
    }
    out.write_all(if g.nodes.is_empty() { b"]" } else { b"\n  ]" })?;
    out.write_all(b",\n  \"outputs\": ")?;
    put(out, &g.outputs, true)?;
    for (k, v) in &g.extra {
        if !GRAPH_FIELDS.contains(&k.as_str()) {
            out.write_all(b",\n  ")?;
            put(out, k, true)?;
            out.write_all(b": ")?;
            put(out, v, true)?;
        }
    }
    out.write_all(b"\n}\n")
}

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
        let mut buffered = io::BufWriter::with_capacity(1 << 16, file);
        write(&mut buffered)?;
        let file = buffered.into_inner().map_err(io::IntoInnerError::into_error)?;
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
