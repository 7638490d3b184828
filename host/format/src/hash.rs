//! sha256 digests, as lowercase hex, of bytes and of files (streamed, so a
//! file of many GB is hashed in constant memory), and a cache that
//! remembers a large file's digest while the file is unchanged.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The sha256 of a file's contents and its length in bytes.
pub fn sha256_file(path: &Path) -> io::Result<(String, u64)> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), len))
}

/// Where vauban keeps what it can compute again: `$XDG_CACHE_HOME/vauban`,
/// else `~/.cache/vauban`; `None` with neither set.
pub fn cache_root() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|base| base.join("vauban"))
}

/// sha256 digests of files (and digests computed from a file, such as its
/// tokenizer's vocabulary), remembered across runs by each file's identity,
/// so a model of several GB traced on every run is hashed once, not once a
/// run (98 MB took ~65 ms of a 0.44 s trace; a 4 GB file takes seconds).
///
/// An entry is kept per file (device and inode) with the size and the
/// modification and change times the file had when it was hashed; any
/// difference hashes it again. Writing a file always moves its change time,
/// which no program can set back, so an edited file is never mistaken for
/// the one hashed. A file changed within [`DigestCache::SETTLE`] of its
/// hashing is not remembered (its timestamps' granularity could hide a
/// second write: git's "racy" files), nor is a file under
/// [`DigestCache::MIN_LEN`], which hashes in about the time a lookup takes.
#[derive(Debug, Clone)]
pub struct DigestCache {
    dir: PathBuf,
    min_len: u64,
    settle: std::time::Duration,
}

/// What identifies a file's contents without reading them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FileStamp {
    len: u64,
    modified_ns: i128,
    changed_ns: i128,
}

/// One remembered digest, as stored.
#[derive(Debug, Serialize, Deserialize)]
struct DigestEntry {
    path: String,
    stamp: FileStamp,
    producer: String,
    sha256: String,
}

impl DigestCache {
    /// Files smaller than this are always hashed (16 MiB: ~10 ms).
    pub const MIN_LEN: u64 = 16 << 20;
    /// How long after its last change a file must have been hashed to be
    /// remembered.
    pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

    /// The cache in `dir`, for files of at least [`DigestCache::MIN_LEN`]
    /// settled for [`DigestCache::SETTLE`].
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DigestCache {
            dir: dir.into(),
            min_len: Self::MIN_LEN,
            settle: Self::SETTLE,
        }
    }

    /// Remembers files of at least `min_len` bytes.
    pub fn min_len(mut self, min_len: u64) -> Self {
        self.min_len = min_len;
        self
    }

    /// Remembers files last changed at least `settle` before their hashing.
    pub fn settle(mut self, settle: std::time::Duration) -> Self {
        self.settle = settle;
        self
    }

    /// The cache under [`cache_root`] (`sha256/`); `None` where no cache
    /// folder is known.
    pub fn default_location() -> Option<Self> {
        cache_root().map(|root| Self::new(root.join("sha256")))
    }

    /// The sha256 of `path`'s contents and its length: remembered when the
    /// file is unchanged since it was hashed, else computed (and
    /// remembered). A cache that cannot be read or written only costs the
    /// hashing; the digest is never taken from an entry that does not match.
    pub fn sha256_file(&self, path: &Path) -> io::Result<(String, u64)> {
        let len = std::fs::metadata(path)?.len();
        if len < self.min_len {
            return sha256_file(path);
        }
        let mut hashed_len = len;
        // sha256 is sha256 whichever build computes it.
        let sha256 = self.derived(path, "sha256", "sha256", || {
            let (sha256, len) = sha256_file(path)?;
            hashed_len = len;
            Ok(sha256)
        })?;
        Ok((sha256, hashed_len))
    }

    /// A sha256 digest computed from `path`'s contents alone (`what` names
    /// it: the vocabulary a model file's tokenizer holds, say) by
    /// `producer` (the code that computes it: [`this_build`] for vauban's
    /// own), remembered as [`DigestCache::sha256_file`] remembers a file's
    /// own: `compute` runs only when the file or the producer changed
    /// since. Costly digests of small files are worth remembering too, so
    /// the size does not matter here.
    pub fn derived(
        &self,
        path: &Path,
        what: &str,
        producer: &str,
        compute: impl FnOnce() -> io::Result<String>,
    ) -> io::Result<String> {
        let Some((key, stamp)) = identity(path)? else {
            return compute();
        };
        let entry_path = self.dir.join(format!("{key}-{what}.json"));
        if let Some(sha256) = read_entry(&entry_path, &stamp, producer) {
            tracing::debug!(path = %path.display(), what, "digest remembered");
            return Ok(sha256);
        }
        let sha256 = compute()?;
        // Stat again: a file written while it was read is not remembered.
        let after = identity(path)?.map(|(_, s)| s);
        if after.as_ref() == Some(&stamp) && settled(&stamp, self.settle) {
            let entry = DigestEntry {
                path: path.display().to_string(),
                stamp,
                producer: producer.to_owned(),
                sha256: sha256.clone(),
            };
            if let Err(e) = write_entry(&self.dir, &entry_path, &entry) {
                tracing::debug!(cache = %self.dir.display(), what, "digest not remembered: {e}");
            }
        }
        Ok(sha256)
    }
}

/// This build of vauban, as a producer of remembered digests: the running
/// program's size and modification time, so a rebuilt vauban computes what
/// it derives again (its code for it may have changed). `None` when the
/// program cannot be found.
pub fn this_build() -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    let (_, stamp) = identity(&exe).ok()??;
    Some(format!(
        "vauban {} {}:{}",
        env!("CARGO_PKG_VERSION"),
        stamp.len,
        stamp.modified_ns
    ))
}

#[cfg(unix)]
fn identity(path: &Path) -> io::Result<Option<(String, FileStamp)>> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    Ok(Some((
        format!("{:x}-{:x}", m.dev(), m.ino()),
        FileStamp {
            len: m.len(),
            modified_ns: ns(m.mtime(), m.mtime_nsec()),
            changed_ns: ns(m.ctime(), m.ctime_nsec()),
        },
    )))
}

/// Elsewhere no change time guards an entry: every file is hashed.
#[cfg(not(unix))]
fn identity(_path: &Path) -> io::Result<Option<(String, FileStamp)>> {
    Ok(None)
}

/// Whether the file's last change is at least `settle` before now.
fn settled(stamp: &FileStamp, settle: std::time::Duration) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    stamp.modified_ns.max(stamp.changed_ns) + settle.as_nanos() as i128 <= now
}

fn read_entry(entry_path: &Path, stamp: &FileStamp, producer: &str) -> Option<String> {
    let text = std::fs::read(entry_path).ok()?;
    let entry: DigestEntry = serde_json::from_slice(&text).ok()?;
    let hex_ok = entry.sha256.len() == 64 && entry.sha256.bytes().all(|b| b.is_ascii_hexdigit());
    (entry.stamp == *stamp && entry.producer == producer && hex_ok).then_some(entry.sha256)
}

fn write_entry(dir: &Path, entry_path: &Path, entry: &DigestEntry) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    serde_json::to_writer(&mut tmp, entry)?;
    tmp.persist(entry_path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest() {
        // sha256("abc"), FIPS 180-2 appendix B.1
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(sha256_file(&path).unwrap(), (sha256_hex(b"abc"), 3));
    }

    /// A cache in a fresh folder that remembers any file, however new.
    fn eager_cache(dir: &Path) -> DigestCache {
        DigestCache::new(dir.join("sha256"))
            .min_len(0)
            .settle(std::time::Duration::ZERO)
    }

    fn entries(cache_dir: &Path) -> Vec<PathBuf> {
        match std::fs::read_dir(cache_dir.join("sha256")) {
            Ok(d) => d.map(|e| e.unwrap().path()).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Writes `bytes` over `file` until its stamp has moved: timestamps are
    /// coarse (a clock tick on Linux, seconds on some file systems), and
    /// what is tested is a write the stamp shows, not the clock's grain.
    fn rewrite(file: &Path, bytes: &[u8]) {
        let before = identity(file).unwrap();
        for _ in 0..300 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            std::fs::write(file, bytes).unwrap();
            if identity(file).unwrap() != before {
                return;
            }
        }
        panic!(
            "{}: its timestamps did not move in 3 s of writes",
            file.display()
        );
    }

    #[test]
    fn a_remembered_digest_is_used_until_the_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let cache = eager_cache(dir.path());
        let file = dir.path().join("model.bin");
        std::fs::write(&file, b"weights v1").unwrap();
        let first = cache.sha256_file(&file).unwrap();
        assert_eq!(first, (sha256_hex(b"weights v1"), 10));
        let stored = entries(dir.path());
        assert_eq!(stored.len(), 1, "one entry per file: {stored:?}");

        // The entry is what answers now: one with a planted digest is
        // believed while the file's identity matches it...
        assert!(stored[0].to_string_lossy().ends_with("-sha256.json"));
        let planted = "ab".repeat(32);
        let text = std::fs::read_to_string(&stored[0]).unwrap();
        std::fs::write(&stored[0], text.replace(&first.0, &planted)).unwrap();
        assert_eq!(cache.sha256_file(&file).unwrap().0, planted);

        // ...and never once the file is written, even to the same length:
        // its change time moves.
        rewrite(&file, b"weights v2");
        assert_eq!(
            cache.sha256_file(&file).unwrap(),
            (sha256_hex(b"weights v2"), 10)
        );
        assert_eq!(
            cache.sha256_file(&file).unwrap().0,
            sha256_hex(b"weights v2")
        );
    }

    #[test]
    fn a_derived_digest_is_computed_once_per_version_of_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = eager_cache(dir.path());
        let file = dir.path().join("tokenizer.json");
        std::fs::write(&file, b"v1").unwrap();
        let runs = std::cell::Cell::new(0);
        let vocab = || {
            cache.derived(&file, "vocabulary", "test", || {
                runs.set(runs.get() + 1);
                Ok(sha256_hex(&std::fs::read(&file)?))
            })
        };
        assert_eq!(vocab().unwrap(), sha256_hex(b"v1"));
        assert_eq!(vocab().unwrap(), sha256_hex(b"v1"));
        assert_eq!(runs.get(), 1, "the second answer is remembered");
        // The file's own digest is another entry, not this one.
        assert_eq!(cache.sha256_file(&file).unwrap().0, sha256_hex(b"v1"));
        assert_eq!(entries(dir.path()).len(), 2);

        rewrite(&file, b"v2");
        assert_eq!(vocab().unwrap(), sha256_hex(b"v2"));
        assert_eq!(runs.get(), 2);
        // Another producer (a rebuilt vauban) computes it again.
        let other = cache.derived(&file, "vocabulary", "rebuilt", || Ok("cd".repeat(32)));
        assert_eq!(other.unwrap(), "cd".repeat(32));
        assert!(this_build().is_some_and(|b| b.starts_with("vauban ")));
        // A computation that fails is an error, and nothing is remembered.
        let failed = cache.derived(&file, "broken", "test", || Err(io::Error::other("no")));
        assert!(failed.is_err());
        assert_eq!(entries(dir.path()).len(), 2);
    }

    #[test]
    fn new_small_or_unreadable_entries_are_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("model.bin");
        std::fs::write(&file, b"fresh").unwrap();
        let want = (sha256_hex(b"fresh"), 5);

        // Just written: its timestamps could hide a second write.
        let racy = DigestCache::new(dir.path().join("sha256")).min_len(0);
        assert_eq!(racy.sha256_file(&file).unwrap(), want);
        assert!(entries(dir.path()).is_empty());

        // Under the size worth remembering.
        let small = DigestCache::new(dir.path().join("sha256")).settle(std::time::Duration::ZERO);
        assert_eq!(small.sha256_file(&file).unwrap(), want);
        assert!(entries(dir.path()).is_empty());

        // A damaged entry is ignored and replaced.
        let cache = eager_cache(dir.path());
        cache.sha256_file(&file).unwrap();
        let stored = entries(dir.path());
        std::fs::write(&stored[0], b"{ not json").unwrap();
        assert_eq!(cache.sha256_file(&file).unwrap(), want);
        let text = std::fs::read_to_string(&stored[0]).unwrap();
        assert!(text.contains(&want.0), "{text}");

        // A cache folder that cannot be made still gives the digest.
        let blocked = dir.path().join("a-file");
        std::fs::write(&blocked, b"").unwrap();
        let cache = DigestCache::new(blocked.join("sha256"))
            .min_len(0)
            .settle(std::time::Duration::ZERO);
        assert_eq!(cache.sha256_file(&file).unwrap(), want);
    }
}
