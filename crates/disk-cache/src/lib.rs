//! The persistent compile cache: what a process compiled (C shared objects, tuning choices),
//! kept on disk so that the next process starts warm.
//!
//! An entry is one file, `<root>/<kind>/<key>.entry`: a magic line, a JSON header (the
//! versions that wrote it, its kind and key, the payload's length and SHA-256), then the
//! payload. The key is the SHA-256 of the versions, the kind and the caller's key material
//! (what determines the payload: a unit's source, compiler identity and flags), so entries
//! of other versions never collide with ours. Every read verifies the header and the checksum:
//! a corrupt, truncated or other-version entry is ignored with one warning (the caller
//! rebuilds it, and the rebuild replaces it), never loaded.
//!
//! Writes go to a temporary file of the same directory, renamed over the entry: a reader (of
//! this process or another sharing the directory) sees the old entry or the new one, whole.
//! No fsync: a file cut short by a crash fails its checksum and is rebuilt.
//!
//! The cache keeps under a size cap: after each write, the least recently used entries (by
//! modification time, which a hit refreshes) are removed until the rest fit. [`DiskCache::export`]
//! writes every valid entry into one tar bundle; [`DiskCache::import`] verifies and adds a
//! bundle's entries.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// The first bytes of every entry (format 1).
const MAGIC: &[u8; 16] = b"burn-compile c1\n";

/// A temporary file older than this was left by a process that died mid-write.
const STALE_TEMPORARY: Duration = Duration::from_secs(3600);

/// The header of an entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Header {
    versions: String,
    kind: String,
    key: String,
    len: u64,
    sha256: String,
}

/// Why an entry on disk was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// Not an entry of this format, or its header or payload do not match.
    Corrupt(String),
    /// Shorter than its header says (a write cut short).
    Truncated { expected: u64, found: u64 },
    /// Written by other versions (of this crate, Burn, CubeCL, the compiler).
    OtherVersion(String),
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::Corrupt(why) => write!(f, "corrupt ({why})"),
            Invalid::Truncated { expected, found } => {
                write!(f, "truncated ({found} of {expected} payload bytes)")
            }
            Invalid::OtherVersion(v) => write!(f, "written by other versions ({v})"),
        }
    }
}

/// The result of a lookup.
#[derive(Debug)]
pub enum Lookup {
    /// The verified payload.
    Hit(Vec<u8>),
    /// No entry.
    Miss,
    /// An entry that cannot be used (warned once per file in this process).
    Invalid(Invalid),
}

/// What an import did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Entries added (or replacing ones of the same key).
    pub imported: usize,
    /// Files of other caches' directories ([`DiskCache::with_foreign_dir`]) written back.
    pub foreign: usize,
    /// Entries of the bundle not added, and why.
    pub skipped: Vec<(String, String)>,
}

/// A cache directory, for one set of versions.
pub struct DiskCache {
    root: PathBuf,
    versions: String,
    max_bytes: u64,
    /// Directories under the root that other caches keep there (CubeCL's): carried whole by
    /// export and import, unverified (their formats are theirs), outside the size cap.
    foreign: Vec<String>,
    /// Files already warned about (one warning per bad file per process).
    warned: Mutex<BTreeSet<PathBuf>>,
}

impl fmt::Debug for DiskCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskCache")
            .field("root", &self.root)
            .field("versions", &self.versions)
            .field("max_bytes", &self.max_bytes)
            .finish()
    }
}

/// `kind` and `key` name files: letters, digits, `-` and `_` only.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl DiskCache {
    /// The cache in `root` for entries written by `versions` (every version the payloads
    /// depend on, in one string), kept under `max_bytes`. Nothing is created until a write.
    pub fn new(root: impl Into<PathBuf>, versions: impl Into<String>, max_bytes: u64) -> Self {
        DiskCache {
            root: root.into(),
            versions: versions.into(),
            max_bytes,
            foreign: Vec::new(),
            warned: Mutex::new(BTreeSet::new()),
        }
    }

    /// Also carries directory `name` of the root (another cache's files) in bundles.
    pub fn with_foreign_dir(mut self, name: &str) -> Self {
        assert!(valid_name(name), "bad directory name {name}");
        self.foreign.push(name.to_string());
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn versions(&self) -> &str {
        &self.versions
    }

    /// The key of `material` (what determines an entry's payload) for `kind`.
    pub fn key(&self, kind: &str, material: &[u8]) -> String {
        let mut h = Sha256::new();
        for part in [self.versions.as_bytes(), kind.as_bytes()] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.update(material);
        hex(&h.finalize())
    }

    fn entry_path(&self, kind: &str, key: &str) -> PathBuf {
        self.root.join(kind).join(format!("{key}.entry"))
    }

    /// The entry of `kind` and `key` ([`DiskCache::key`]), verified.
    pub fn get(&self, kind: &str, key: &str) -> Lookup {
        assert!(
            valid_name(kind) && valid_name(key),
            "bad entry name {kind}/{key}"
        );
        let path = self.entry_path(kind, key);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Lookup::Miss,
            Err(e) => {
                let invalid = Invalid::Corrupt(format!("unreadable: {e}"));
                self.warn(&path, &invalid);
                return Lookup::Invalid(invalid);
            }
        };
        match self.verify(&bytes, Some((kind, key))) {
            Ok(payload) => {
                // Most recently used: the last to be evicted. (Best effort: a read-only
                // cache still serves hits.)
                if let Ok(file) = std::fs::File::options().append(true).open(&path) {
                    let _ = file.set_modified(SystemTime::now());
                }
                Lookup::Hit(payload.to_vec())
            }
            Err(invalid) => {
                self.warn(&path, &invalid);
                Lookup::Invalid(invalid)
            }
        }
    }

    fn warn(&self, path: &Path, invalid: &Invalid) {
        let first = self
            .warned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.to_path_buf());
        if first {
            tracing::warn!(
                target: "burn_compile::cache",
                "ignoring the disk cache entry {}: {invalid}; it is rebuilt",
                path.display()
            );
        }
    }

    /// The payload of an entry's bytes, if they are a whole entry of our versions (and of
    /// `expected` kind and key).
    fn verify<'a>(
        &self,
        bytes: &'a [u8],
        expected: Option<(&str, &str)>,
    ) -> Result<&'a [u8], Invalid> {
        let (header, payload) = parse(bytes)?;
        if header.versions != self.versions {
            return Err(Invalid::OtherVersion(header.versions));
        }
        if let Some((kind, key)) = expected
            && (header.kind != kind || header.key != key)
        {
            return Err(Invalid::Corrupt(format!(
                "holds {}/{}, not {kind}/{key}",
                header.kind, header.key
            )));
        }
        let found = payload.len() as u64;
        if found < header.len {
            return Err(Invalid::Truncated {
                expected: header.len,
                found,
            });
        }
        if found > header.len {
            return Err(Invalid::Corrupt(format!(
                "{found} payload bytes, the header says {}",
                header.len
            )));
        }
        if hex(&Sha256::digest(payload)) != header.sha256 {
            return Err(Invalid::Corrupt("checksum mismatch".into()));
        }
        Ok(payload)
    }

    /// Writes `payload` as the entry of `kind` and `key` (atomically), then evicts down to
    /// the size cap.
    pub fn put(&self, kind: &str, key: &str, payload: &[u8]) -> io::Result<()> {
        assert!(
            valid_name(kind) && valid_name(key),
            "bad entry name {kind}/{key}"
        );
        let header = Header {
            versions: self.versions.clone(),
            kind: kind.to_string(),
            key: key.to_string(),
            len: payload.len() as u64,
            sha256: hex(&Sha256::digest(payload)),
        };
        let mut bytes = Vec::with_capacity(payload.len() + 256);
        bytes.extend_from_slice(MAGIC);
        let header = serde_json::to_vec(&header).map_err(io::Error::other)?;
        bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&header);
        bytes.extend_from_slice(payload);
        self.write_atomic(&self.entry_path(kind, key), &bytes)?;
        self.evict();
        Ok(())
    }

    /// Writes `bytes` to `path` through a temporary file of its directory and a rename.
    pub fn write_atomic(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let dir = path.parent().expect("entries live in a directory");
        std::fs::create_dir_all(dir)?;
        let mut file = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
        file.write_all(bytes)?;
        file.persist(path).map_err(|e| e.error)?;
        Ok(())
    }

    /// Every entry file under the root: path, size, modification time.
    fn files(&self) -> Vec<(PathBuf, u64, SystemTime)> {
        let mut files = Vec::new();
        let Ok(kinds) = std::fs::read_dir(&self.root) else {
            return files;
        };
        for kind in kinds.flatten() {
            let Ok(entries) = std::fs::read_dir(kind.path()) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Ok(meta) = entry.metadata() else { continue };
                let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with(".tmp-") {
                    // Left by a process that died while writing.
                    let age = SystemTime::now()
                        .duration_since(modified)
                        .unwrap_or_default();
                    if age > STALE_TEMPORARY {
                        let _ = std::fs::remove_file(&path);
                    }
                    continue;
                }
                if meta.is_file() && name.ends_with(".entry") {
                    files.push((path, meta.len(), modified));
                }
            }
        }
        files
    }

    /// Bytes the entries take.
    pub fn size(&self) -> u64 {
        self.files().iter().map(|f| f.1).sum()
    }

    /// Removes the least recently used entries until the rest fit the cap; how many went.
    pub fn evict(&self) -> usize {
        let mut files = self.files();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        if total <= self.max_bytes {
            return 0;
        }
        files.sort_by_key(|f| f.2);
        let mut removed = 0;
        for (path, len, _) in files {
            if total <= self.max_bytes {
                break;
            }
            // Another process may have removed it first: either way it is gone.
            let _ = std::fs::remove_file(&path);
            total -= len;
            removed += 1;
        }
        tracing::debug!(
            target: "burn_compile::cache",
            "evicted {removed} entries to keep {} under {} bytes",
            self.root.display(),
            self.max_bytes
        );
        removed
    }

    /// Writes every valid entry into one tar bundle at `bundle` (atomically), with the files
    /// of the foreign directories; how many entries.
    pub fn export(&self, bundle: &Path) -> io::Result<usize> {
        let mut builder = tar::Builder::new(Vec::new());
        let mut count = 0;
        let mut files = self.files();
        files.sort();
        for (path, _, _) in files {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            if self.verify(&bytes, None).is_err() {
                continue;
            }
            let kind = path.parent().and_then(Path::file_name).unwrap_or_default();
            let name = Path::new(kind).join(path.file_name().unwrap_or_default());
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, name, bytes.as_slice())?;
            count += 1;
        }
        for name in &self.foreign {
            let mut stack = vec![self.root.join(name)];
            while let Some(dir) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let path = entry.path();
                    let Ok(kind) = entry.file_type() else {
                        continue;
                    };
                    if kind.is_dir() {
                        stack.push(path);
                    } else if kind.is_file()
                        && let (Ok(bytes), Ok(rel)) =
                            (std::fs::read(&path), path.strip_prefix(&self.root))
                    {
                        let mut header = tar::Header::new_gnu();
                        header.set_size(bytes.len() as u64);
                        header.set_mode(0o644);
                        header.set_cksum();
                        builder.append_data(&mut header, rel, bytes.as_slice())?;
                    }
                }
            }
        }
        let bytes = builder.into_inner()?;
        self.write_atomic(bundle, &bytes)?;
        Ok(count)
    }

    /// Adds the entries of a bundle written by [`DiskCache::export`]: each verified (header,
    /// checksum, versions, a name that matches its header) before it is written.
    pub fn import(&self, bundle: &Path) -> io::Result<ImportReport> {
        let mut archive = tar::Archive::new(std::fs::File::open(bundle)?);
        let mut report = ImportReport::default();
        for file in archive.entries()? {
            let mut file = file?;
            let name = file.path()?.to_string_lossy().into_owned();
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            let parts: Vec<&str> = name.split('/').collect();
            if parts.len() >= 2 && self.foreign.iter().any(|f| f == parts[0]) {
                // Another cache's file: written back where it was, if its path is plain.
                let plain = parts
                    .iter()
                    .all(|p| !p.is_empty() && *p != "." && *p != ".." && !p.contains('\\'));
                if plain {
                    self.write_atomic(&self.root.join(&name), &bytes)?;
                    report.foreign += 1;
                } else {
                    report
                        .skipped
                        .push((name, "not a plain relative path".into()));
                }
                continue;
            }
            let [kind, file_name] = parts[..] else {
                report
                    .skipped
                    .push((name, "not a cache entry's path".into()));
                continue;
            };
            let Some(key) = file_name.strip_suffix(".entry") else {
                report
                    .skipped
                    .push((name, "not a cache entry's path".into()));
                continue;
            };
            if !valid_name(kind) || !valid_name(key) {
                report
                    .skipped
                    .push((name, "not a cache entry's path".into()));
                continue;
            }
            match self.verify(&bytes, Some((kind, key))) {
                Ok(_) => {
                    self.write_atomic(&self.entry_path(kind, key), &bytes)?;
                    report.imported += 1;
                }
                Err(invalid) => report.skipped.push((name, invalid.to_string())),
            }
        }
        self.evict();
        Ok(report)
    }
}

/// The header and payload of an entry's bytes.
fn parse(bytes: &[u8]) -> Result<(Header, &[u8]), Invalid> {
    let rest = bytes
        .strip_prefix(MAGIC.as_slice())
        .ok_or_else(|| Invalid::Corrupt("not a burn-compile cache entry".into()))?;
    if rest.len() < 4 {
        return Err(Invalid::Corrupt("no header".into()));
    }
    let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
    let rest = &rest[4..];
    if rest.len() < len {
        return Err(Invalid::Corrupt("header cut short".into()));
    }
    let header: Header = serde_json::from_slice(&rest[..len])
        .map_err(|e| Invalid::Corrupt(format!("bad header: {e}")))?;
    Ok((header, &rest[len..]))
}
