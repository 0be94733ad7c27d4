//! What the runtime reads of a device's compile config: how failed kernels are handled, where
//! replays run, and the CPU target's compiler and disk cache.

use std::path::PathBuf;

/// The runtime's part of a device's config (`burn_compile::CompileConfig` makes it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// A kernel or library call that cannot run is an error, not a fallback to the ops.
    pub strict: bool,
    /// Test-only fault: every generated kernel, library matmul and attention kernel fails.
    pub inject_kernel_failure: bool,
    /// Attention steps are timed against their parts before the faster one is kept.
    pub attention_autotune: bool,
    /// Replays run on the inner backend's device thread where it has one.
    pub replay_on_device_thread: bool,
    /// Generated kernels load and store vectors where the buffers allow.
    pub vectorize: bool,
    /// Reduce-overhead mode: after warm-up replays a plan's replay is recorded as one device
    /// graph and launched as one (CUDA only; elsewhere the executable replays as before).
    pub reduce_overhead: bool,
    /// A recorded graph's launch copies only the inputs that moved since the last launch, in
    /// one batched call per direction (else every input and output, a call each).
    pub batched_recording_copies: bool,
    /// Two recordings of a plan alternate: each reads the other's outputs where they are and
    /// hands its own out without a copy; only inputs found elsewhere are copied in
    /// ([`crate::recording`]).
    pub alternate_recordings: bool,
    /// 2-D convolutions (the forward pass and the gradients of its input and weight) run as
    /// cuDNN calls where the target has cuDNN (CUDA, with the library loadable); else, and for
    /// what cuDNN does not take, the inner backend's own convolutions.
    pub cudnn: bool,
    /// A library matmul with a dimension that is not a multiple of the vector runs on
    /// zero-padded copies of its operands (`Gemm::padded`), where the target has one (CUDA).
    pub pad_matmul_dims: bool,
    /// A library matmul's algorithm is the fastest of those its library offers, timed once per
    /// call shape outside recordings (else the library's first choice), where the target has
    /// one (CUDA).
    pub tune_matmuls: bool,
    /// The CPU target's C compiler (else the first of `cc`, `gcc`, `clang` found).
    pub c_compiler: Option<String>,
    /// Flags for that compiler (else the target's own).
    pub c_flags: Option<String>,
    /// The directory of the disk cache.
    pub cache_dir: PathBuf,
    /// Built kernels are kept in, and looked up in, the disk cache.
    pub disk_cache: bool,
    /// The disk cache's cap in bytes.
    pub cache_max_bytes: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            strict: false,
            inject_kernel_failure: false,
            attention_autotune: true,
            replay_on_device_thread: false,
            vectorize: true,
            reduce_overhead: false,
            batched_recording_copies: false,
            alternate_recordings: false,
            cudnn: true,
            pad_matmul_dims: true,
            tune_matmuls: false,
            c_compiler: None,
            c_flags: None,
            cache_dir: default_cache_dir(),
            disk_cache: true,
            cache_max_bytes: 1 << 30,
        }
    }
}

/// `$XDG_CACHE_HOME/burn-compile`, else `~/.cache/burn-compile`, else in the temp directory.
pub fn default_cache_dir() -> PathBuf {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    env("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("burn-compile")
}
