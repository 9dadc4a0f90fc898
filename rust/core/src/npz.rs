//! Writing a weights archive: an uncompressed .npz (a ZIP of .npy members), what `np.savez` writes.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

/// One member of the archive: `name` (without ".npy"), the .npy header bytes and the array's raw bytes.
pub struct NpyMember<'a> {
    pub name: &'a str,
    pub header: &'a [u8],
    pub data: &'a [u8],
}

/// Writes `members` to a new file at `path` as a stored (uncompressed) ZIP with ZIP64 records, as
/// `np.savez` does; `np.load` reads it back. The caller owns atomicity (write a temporary file, then rename).
pub fn write_npz(path: &Path, members: &[NpyMember<'_>]) -> io::Result<()> {
    let file = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut zip = ZipWriter::new(file);
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Stored).large_file(true);
    for m in members {
        zip.start_file(format!("{}.npy", m.name), options).map_err(io::Error::other)?;
        zip.write_all(m.header)?;
        zip.write_all(m.data)?;
    }
    let mut file = zip.finish().map_err(io::Error::other)?;
    file.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_come_back_from_the_archive() {
        let dir = std::env::temp_dir().join(format!("rlx_npz_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.npz");
        let members = [
            NpyMember { name: "a", header: b"HEAD-A", data: &[1, 2, 3] },
            NpyMember { name: "b.c", header: b"HEAD-B", data: &[] },
        ];
        write_npz(&path, &members).unwrap();
        let mut zip = zip::ZipArchive::new(File::open(&path).unwrap()).unwrap();
        let mut names: Vec<String> = zip.file_names().map(|n| n.unwrap().to_string()).collect();
        names.sort();
        assert_eq!(names, ["a.npy", "b.c.npy"]);
        let mut a = Vec::new();
        io::Read::read_to_end(&mut zip.by_name("a.npy").unwrap(), &mut a).unwrap();
        assert_eq!(a, b"HEAD-A\x01\x02\x03");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_path_is_an_error() {
        let members = [NpyMember { name: "a", header: b"", data: &[] }];
        assert!(write_npz(Path::new("/nonexistent-dir/w.npz"), &members).is_err());
    }
}
