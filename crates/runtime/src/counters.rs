//! What the runtime counts (read by `burn_compile::metrics`), and the kernel builds made at the
//! end of replays, kept until an `explain` region claims them.

use burn_compile_graph::GraphKey;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Process-wide counters of the runtime.
pub struct Counters {
    /// Generated kernels launched (fused groups), library matmuls, library convolutions and
    /// attention kernels.
    pub kernels_launched: AtomicU64,
    /// Generated kernels, library matmuls, library convolutions or attention kernels that
    /// failed (their ops ran).
    pub kernel_fallbacks: AtomicU64,
    /// 2-D convolution passes (forward, input or weight gradient) run as one library call
    /// (cuDNN); the others ran on the inner backend.
    pub library_convs: AtomicU64,
    /// Library matmul call shapes whose algorithms were timed (`RuntimeConfig::tune_matmuls`),
    /// and those of them whose fastest was not the library's first choice.
    pub tuned_matmuls: AtomicU64,
    pub tuned_matmuls_changed: AtomicU64,
    /// Attention steps run as one attention kernel.
    pub attention_kernels: AtomicU64,
    /// Column-sum steps run as one column-sum kernel.
    pub column_kernels: AtomicU64,
    /// Horizontal column groups run as one kernel (their sums counted in `column_kernels`).
    pub horizontal_column_kernels: AtomicU64,
    /// Generated kernel launches that loaded and stored vectors.
    pub vectorized_kernels: AtomicU64,
    /// Units of generated kernels built at the end of a replay, and the time they took.
    pub kernel_builds: AtomicU64,
    pub kernel_build_nanos: AtomicU64,
    /// Disk cache lookups and writes.
    pub disk_cache_hits: AtomicU64,
    pub disk_cache_misses: AtomicU64,
    pub disk_cache_invalid: AtomicU64,
    pub disk_cache_writes: AtomicU64,
    /// Reduce-overhead mode: graphs recorded, replays that launched one, and replays that ran
    /// launch by launch where a recording was wanted (a failed capture, a plan that cannot be
    /// recorded or is past its limit).
    pub recordings: AtomicU64,
    pub graph_launches: AtomicU64,
    pub recording_fallbacks: AtomicU64,
    /// Inputs a recording's launches copied into its own buffers, and inputs they found where
    /// the last launch had copied them from, held since (not copied again).
    pub recording_inputs_copied: AtomicU64,
    pub recording_inputs_kept: AtomicU64,
    /// Outputs a program still held, moved out of an alternating recording's buffer before a
    /// launch overwrote it.
    pub recording_outputs_moved: AtomicU64,
    /// Graphs whose submission waited for room in the execution thread's queue (the recording
    /// thread had run [`crate::executor::MAX_QUEUED`] graphs ahead), and the time it waited.
    pub queue_waits: AtomicU64,
    pub queue_wait_nanos: AtomicU64,
}

pub static COUNTERS: Counters = Counters {
    kernels_launched: AtomicU64::new(0),
    kernel_fallbacks: AtomicU64::new(0),
    library_convs: AtomicU64::new(0),
    tuned_matmuls: AtomicU64::new(0),
    tuned_matmuls_changed: AtomicU64::new(0),
    attention_kernels: AtomicU64::new(0),
    column_kernels: AtomicU64::new(0),
    horizontal_column_kernels: AtomicU64::new(0),
    vectorized_kernels: AtomicU64::new(0),
    kernel_builds: AtomicU64::new(0),
    kernel_build_nanos: AtomicU64::new(0),
    disk_cache_hits: AtomicU64::new(0),
    disk_cache_misses: AtomicU64::new(0),
    disk_cache_invalid: AtomicU64::new(0),
    disk_cache_writes: AtomicU64::new(0),
    recordings: AtomicU64::new(0),
    graph_launches: AtomicU64::new(0),
    recording_fallbacks: AtomicU64::new(0),
    recording_inputs_copied: AtomicU64::new(0),
    recording_inputs_kept: AtomicU64::new(0),
    recording_outputs_moved: AtomicU64::new(0),
    queue_waits: AtomicU64::new(0),
    queue_wait_nanos: AtomicU64::new(0),
};

/// Adds one to a counter.
pub(crate) fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A build of a graph's generated kernels at the end of its first replay (the CPU target: all
/// of its C kernels in one unit, built by the system compiler or found in the disk cache).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelBuild {
    /// Kernels in the unit.
    pub kernels: usize,
    /// Time to generate, compile (or find) and load them.
    pub time: Duration,
    /// Found in the disk cache, not compiled.
    pub cached: bool,
    /// Why the build failed (the kernels' ops run on the inner backend), if it did.
    pub error: Option<String>,
}

impl std::fmt::Display for KernelBuild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.error {
            Some(e) => write!(f, "{} C kernel(s) failed to build ({e})", self.kernels),
            None => write!(
                f,
                "{} C kernel(s) {} in {:?}",
                self.kernels,
                if self.cached {
                    "loaded from the disk cache"
                } else {
                    "compiled"
                },
                self.time
            ),
        }
    }
}

/// Kernel builds not yet claimed by an `explain` region, by graph (bounded: the oldest go).
static BUILDS: Mutex<Vec<(u64, GraphKey, KernelBuild)>> = Mutex::new(Vec::new());

/// Builds recorded so far: each build's number, so that a region claims only its own.
static BUILD_COUNT: AtomicU64 = AtomicU64::new(0);

/// The number the next build will have (an `explain` region claims builds from it on).
pub fn kernel_builds_mark() -> u64 {
    BUILD_COUNT.load(Ordering::Acquire)
}

/// A target built the kernels of graph `key` (on the thread that ran it).
pub(crate) fn kernels_built(key: GraphKey, build: KernelBuild) {
    let c = &COUNTERS;
    if build.error.is_none() {
        c.kernel_builds.fetch_add(1, Ordering::Relaxed);
        c.kernel_build_nanos
            .fetch_add(build.time.as_nanos() as u64, Ordering::Relaxed);
    }
    tracing::info!(target: "burn_compile::output_code", "graph {key}: {build}");
    let mut builds = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
    if builds.len() >= 1024 {
        builds.remove(0);
    }
    let number = BUILD_COUNT.fetch_add(1, Ordering::AcqRel);
    builds.push((number, key, build));
}

/// The build of graph `key`'s kernels numbered `since` or later, if one happened and is not
/// yet claimed.
pub fn take_kernel_build(key: GraphKey, since: u64) -> Option<KernelBuild> {
    let mut builds = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
    let i = builds
        .iter()
        .position(|(n, k, _)| *n >= since && *k == key)?;
    Some(builds.remove(i).2)
}
