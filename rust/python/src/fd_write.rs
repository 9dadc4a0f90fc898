//! Streaming a graph's JSON into a file descriptor that Python owns (safe_write's temporary file), buffered.

use std::io::{self, BufWriter, Write};

use rlx_rules_core::graph::{Graph, Writeback};

/// A writer that keeps the first I/O error it returned, so that its errno survives the core's GraphError.
struct Recording<W> {
    inner: W,
    error: Option<io::Error>,
}

impl<W: Write> Recording<W> {
    fn keep<T>(&mut self, result: io::Result<T>) -> io::Result<T> {
        result.inspect_err(|e| {
            let copy = match e.raw_os_error() {
                Some(code) => io::Error::from_raw_os_error(code),
                None => io::Error::new(e.kind(), e.to_string()),
            };
            self.error.get_or_insert(copy);
        })
    }
}

impl<W: Write> Write for Recording<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let result = self.inner.write(buf);
        self.keep(result)
    }

    fn flush(&mut self) -> io::Result<()> {
        let result = self.inner.flush();
        self.keep(result)
    }
}

/// Write `graph` as graph.json (compact or pretty) to the open descriptor `fd`, which stays open and owned by
/// the caller: it is duplicated, and the duplicate written through and closed. Neither synced nor rewound.
#[cfg(unix)]
pub fn write_to_fd(graph: &Graph, fd: i32, pretty: bool) -> io::Result<()> {
    use std::os::fd::BorrowedFd;

    if fd < 0 {
        return Err(io::Error::from_raw_os_error(9)); // EBADF, as the system answers for a closed descriptor
    }
    // SAFETY: fd is not -1; the duplicate is made at once and the borrow used for nothing else. A descriptor
    // that is not open fails the dup with EBADF.
    let owned = unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?;
    // Writeback: the disk writing starts as the text is written, so that the caller's fsync waits for the tail only.
    let mut out = BufWriter::with_capacity(1 << 16, Recording { inner: Writeback::new(std::fs::File::from(owned)), error: None });
    let written = graph.write_to(&mut out, pretty).map_err(io::Error::other).and_then(|()| out.flush());
    let (recording, _unwritten) = out.into_parts(); // on an error, what is still buffered is dropped, not retried
    match written {
        Ok(()) => Ok(()),
        Err(e) => Err(recording.error.unwrap_or(e)),
    }
}

/// Elsewhere the descriptor cannot be borrowed as a file: the caller writes `to_json`'s text itself.
#[cfg(not(unix))]
pub fn write_to_fd(_graph: &Graph, _fd: i32, _pretty: bool) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "writing to a file descriptor is only supported on unix"))
}
