//! The disk cache as the runtime uses it: one [`DiskCache`] per directory, the versions its
//! entries are keyed by, and the counters of its lookups.

use crate::counters::{COUNTERS, count};
pub use burn_compile_disk_cache::DiskCache;
use burn_compile_disk_cache::Lookup;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Burn and CubeCL as pinned by the workspace (`=0.21.0`, `=0.10.0`; a test checks them
/// against `Cargo.toml`).
pub const BURN_VERSION: &str = "0.21.0";
pub const CUBECL_VERSION: &str = "0.10.0";

/// What every entry depends on besides its own key material: the versions of this crate,
/// Burn and CubeCL, and the target architecture. (A C unit's key adds the compiler's
/// identity and flags.)
pub fn versions() -> String {
    format!(
        "burn-compile {}; burn {BURN_VERSION}; cubecl {CUBECL_VERSION}; {}-{}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS,
    )
}

static CACHES: Mutex<Vec<(PathBuf, u64, Arc<DiskCache>)>> = Mutex::new(Vec::new());

/// The disk cache in `dir`, capped at `max_bytes`, shared by every device of the process that uses it.
pub fn cache_at(dir: PathBuf, max_bytes: u64) -> Arc<DiskCache> {
    let mut caches = CACHES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, _, cache)) = caches
        .iter()
        .find(|(d, cap, _)| *d == dir && *cap == max_bytes)
    {
        return cache.clone();
    }
    // CubeCL's caches live in `cubecl/` (`root_cubecl_caches`): bundles carry them.
    let cache =
        Arc::new(DiskCache::new(dir.clone(), versions(), max_bytes).with_foreign_dir("cubecl"));
    caches.push((dir, max_bytes, cache.clone()));
    cache
}

/// The verified payload of an entry, counted as a hit, or `None`, counted as a miss (an
/// invalid entry is also counted as such; the cache warned about it).
#[cfg_attr(not(feature = "cpu"), allow(dead_code))]
pub(crate) fn get(cache: &DiskCache, kind: &str, key: &str) -> Option<Vec<u8>> {
    match cache.get(kind, key) {
        Lookup::Hit(bytes) => {
            count(&COUNTERS.disk_cache_hits);
            Some(bytes)
        }
        Lookup::Miss => {
            count(&COUNTERS.disk_cache_misses);
            None
        }
        Lookup::Invalid(_) => {
            count(&COUNTERS.disk_cache_invalid);
            count(&COUNTERS.disk_cache_misses);
            None
        }
    }
}

/// Writes an entry; a failure (a read-only or full disk) is a warning: the process goes on
/// with what it compiled.
#[cfg_attr(not(feature = "cpu"), allow(dead_code))]
pub(crate) fn put(cache: &DiskCache, kind: &str, key: &str, payload: &[u8]) {
    match cache.put(kind, key, payload) {
        Ok(()) => count(&COUNTERS.disk_cache_writes),
        Err(e) => tracing::warn!(
            target: "burn_compile::cache",
            "could not write the disk cache entry {kind}/{key} in {}: {e}",
            cache.root().display()
        ),
    }
}

/// Roots CubeCL's own persistent caches — compiled kernels (CUDA's PTX) and Burn's autotune
/// results — in `cubecl/` of the disk cache's directory, so that a warm start of a GPU backend
/// skips NVRTC and autotuning too, and export/import carry them. Only where the process has not
/// set up CubeCL yet (its config is set once; an earlier eager use of the inner backend keeps
/// CubeCL's own locations, said at debug level), and only what the user's `cubecl.toml` or
/// environment left at its default. Those files are CubeCL's: its formats, its checks.
#[cfg(feature = "gpu")]
pub fn root_cubecl_caches(config: &crate::RuntimeConfig) {
    use burn_cubecl::cubecl::config::cache::CacheConfig;
    use burn_cubecl::cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
    if !config.disk_cache {
        return;
    }
    let mut state = CubeClRuntimeConfig::storage().lock();
    if state.is_some() {
        tracing::debug!(
            target: "burn_compile::cache",
            "CubeCL is already configured: its kernel and autotune caches stay where it keeps them"
        );
        return;
    }
    let root = config.cache_dir.join("cubecl");
    let mut cubecl = CubeClRuntimeConfig::from_current_dir().override_from_env();
    if cubecl.compilation.cache.is_none() {
        cubecl.compilation.cache = Some(CacheConfig::File(root.clone()));
    }
    if matches!(cubecl.autotune.cache, CacheConfig::Target) {
        cubecl.autotune.cache = CacheConfig::File(root.clone());
    }
    tracing::debug!(
        target: "burn_compile::cache",
        "CubeCL's kernel and autotune caches: {}",
        root.display()
    );
    *state = Some(Arc::new(cubecl));
}

#[cfg(test)]
mod tests {
    /// The versions entries are keyed by are those the workspace pins.
    #[test]
    fn keyed_versions_are_the_pinned_ones() {
        let manifest = include_str!("../../../Cargo.toml");
        assert!(
            manifest.contains(&format!("burn = {{ version = \"={}\"", super::BURN_VERSION)),
            "update BURN_VERSION"
        );
        assert!(
            manifest.contains(&format!(
                "cubecl = {{ version = \"={}\"",
                super::CUBECL_VERSION
            )),
            "update CUBECL_VERSION"
        );
    }
}
