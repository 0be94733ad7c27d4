//! The disk cache as users handle it: export, import, size (`burn-compile-cache`). The runtime
//! reads and writes its entries (`burn_compile_runtime::disk`).

use crate::config::CompileConfig;
use burn_compile_runtime::disk::cache_at;
use std::path::PathBuf;

/// Writes every valid entry of `config`'s disk cache into one bundle file; how many.
pub fn export_cache(config: &CompileConfig, bundle: &std::path::Path) -> std::io::Result<usize> {
    cache_at(config.kernel_cache_dir(), config.cache_max_bytes).export(bundle)
}

/// Adds the entries of a bundle ([`export_cache`]) to `config`'s disk cache, each verified
/// (checksum, versions) first; the report says what was skipped and why.
pub fn import_cache(
    config: &CompileConfig,
    bundle: &std::path::Path,
) -> std::io::Result<burn_compile_disk_cache::ImportReport> {
    cache_at(config.kernel_cache_dir(), config.cache_max_bytes).import(bundle)
}

/// The bytes `config`'s disk cache holds, its cap, and its directory.
pub fn cache_usage(config: &CompileConfig) -> (u64, u64, PathBuf) {
    let dir = config.kernel_cache_dir();
    let cache = cache_at(dir.clone(), config.cache_max_bytes);
    (cache.size(), config.cache_max_bytes, dir)
}
