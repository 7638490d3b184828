//! Reading a file the user or a bundle names, bounded: only a regular file
//! (a FIFO or device would block or never end) of at most a given size
//! (a sparse or runaway file would exhaust memory), checked before a byte
//! is read. Every reader of configs, suites and bundles goes through here.

use std::io::Read;
use std::path::Path;

/// The bound for small files a command is handed (plugin configs, evidence
/// and observation files, golden files).
pub const MAX_SMALL_FILE_BYTES: u64 = 64 << 20;
/// The bound for direction files (a direction per layer of a large model
/// is tens of megabytes; a subspace more).
pub const MAX_DIRECTION_BYTES: u64 = 4 << 30;

/// An I/O error carrying the problem, for readers whose errors hold one.
pub fn io_error(e: ReadProblem) -> std::io::Error {
    match e {
        ReadProblem::Io(source) => source,
        other => std::io::Error::other(other.to_string()),
    }
}

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadProblem {
    /// The file could not be inspected, opened or read (or, from
    /// [`read_text`], is not UTF-8); holds the operating system's error.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The path is not a regular file (following symlinks).
    #[error("is not a regular file (a FIFO, device, socket or folder)")]
    NotRegular,
    /// The file is larger than the limit; nothing past the limit was read.
    #[error("is {bytes} bytes, over the limit of {limit}")]
    TooLarge {
        /// The file's size, in bytes (when it grew while read, the bytes
        /// read before the read stopped).
        bytes: u64,
        /// The limit the caller gave, in bytes.
        limit: u64,
    },
}

/// The bytes of the regular file at `path`, at most `limit` of them.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ReadProblem> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(ReadProblem::NotRegular);
    }
    if meta.len() > limit {
        return Err(ReadProblem::TooLarge {
            bytes: meta.len(),
            limit,
        });
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    // `take`: a file that grows while it is read is still bounded.
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(ReadProblem::TooLarge {
            bytes: out.len() as u64,
            limit,
        });
    }
    Ok(out)
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_text(path: &Path, limit: u64) -> Result<String, ReadProblem> {
    String::from_utf8(read_bounded(path, limit)?).map_err(|e| {
        ReadProblem::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text: {}", e.utf8_error()),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_within_the_limit_only() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.txt");
        std::fs::write(&f, "hello").unwrap();
        assert_eq!(read_text(&f, 5).unwrap(), "hello");
        assert!(matches!(
            read_bounded(&f, 4),
            Err(ReadProblem::TooLarge { bytes: 5, limit: 4 })
        ));
        assert!(matches!(
            read_bounded(dir.path(), 100),
            Err(ReadProblem::NotRegular)
        ));
        #[cfg(unix)]
        assert!(matches!(
            read_bounded(Path::new("/dev/zero"), 100),
            Err(ReadProblem::NotRegular)
        ));
    }
}
