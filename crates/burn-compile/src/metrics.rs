//! Process-wide counters of the capture.

use crate::capture::BreakReason;
use crate::diagnostics::COUNTERS;
use serde::Serialize;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// A snapshot of the counters. Subtract two snapshots to measure a region.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Metrics {
    /// Ops received from Burn (drops included).
    pub ops_recorded: u64,
    /// Graphs closed.
    pub graphs: u64,
    /// Graphs whose plan came from the cache.
    pub cache_hits: u64,
    /// Graphs that had to be compiled.
    pub cache_misses: u64,
    /// Total compile time.
    pub compile_time: Duration,
    /// Compiles of a graph family already compiled for other sizes (each logged under
    /// `burn_compile::recompiles` with what changed); counted in `cache_misses` too.
    pub recompiles: u64,
    /// Graphs that ran eagerly because their family is past `recompile_limit` (counted in
    /// `cache_hits`: nothing was compiled).
    pub past_recompile_limit: u64,
    /// Graphs run by a symbolic plan (sizes taken at run time: [`crate::DynamicShapes`]),
    /// compiled or reused.
    pub symbolic_graphs: u64,
    /// Ops run on the inner backend through plans.
    pub ops_executed: u64,
    /// Ops skipped as dead code.
    pub ops_eliminated: u64,
    /// Ops run eagerly outside graphs (eager stance, unsupported ops).
    pub eager_ops: u64,
    /// Generated kernels that failed to compile or launch (their ops ran on the inner backend),
    /// and library calls run without a fused epilogue the library refused (a bias gradient).
    pub kernel_fallbacks: u64,
    /// 2-D convolution passes (forward, input or weight gradient) that ran as one cuDNN call
    /// ([`crate::CompileConfig::cudnn`]; the others ran on the inner backend).
    pub library_convs: u64,
    /// Library matmul call shapes (CUDA's cuBLASLt) whose candidate algorithms were timed
    /// ([`crate::CompileConfig::tune_matmuls`]), and those of them where the fastest was not
    /// the library's first choice.
    pub tuned_matmuls: u64,
    pub tuned_matmuls_changed: u64,
    /// Attention steps that ran as one attention kernel (the others ran their parts).
    pub attention_kernels: u64,
    /// Column-sum steps that ran as one column-sum kernel (the others ran their sums: an input
    /// that was not contiguous, or a target without the kernel).
    pub column_kernels: u64,
    /// Column sums of one shape that ran together as one kernel (`horizontal_fusion`): the
    /// launches (their sums are counted in `column_kernels`).
    pub horizontal_column_kernels: u64,
    /// Generated kernel launches that loaded and stored vectors (`CompileConfig::vectorize`;
    /// the others ran scalar code: a layout or alignment that allowed none, or vectorize off).
    pub vectorized_kernels: u64,
    /// Units of generated kernels built at a graph's first replay (the CPU target's C units,
    /// compiled or found in the disk cache), and the time they took.
    pub kernel_builds: u64,
    pub kernel_build_time: Duration,
    /// Generated kernels launched (fused groups run as one kernel), library matmuls, library
    /// convolutions and attention kernels included.
    pub kernels_launched: u64,
    /// Graphs whose compile failed: they ran eagerly (an error instead in strict mode).
    pub compile_fallbacks: u64,
    /// Entries found in the disk cache (C units, tuning choices), verified.
    pub disk_cache_hits: u64,
    /// Lookups of the disk cache that found nothing usable (compiled, then written).
    pub disk_cache_misses: u64,
    /// Entries of the disk cache ignored as corrupt, truncated or of other versions (each also a miss).
    pub disk_cache_invalid: u64,
    /// Entries written to the disk cache.
    pub disk_cache_writes: u64,
    /// Graphs compared compiled against eager (`CompileConfig::accuracy_check`).
    pub accuracy_checks: u64,
    /// Of those, graphs whose outputs diverged beyond the dtype's tolerance.
    pub accuracy_failures: u64,
    /// Calls of compiled steps ([`crate::jit`]) that ran the step function to record it, and
    /// calls replayed without running it.
    pub step_recordings: u64,
    pub step_replays: u64,
    /// Reduce-overhead mode (`CompileConfig::mode`): CUDA graphs recorded, replays that
    /// launched one, and replays that ran launch by launch where a recording was wanted (a
    /// failed capture, a plan that cannot be recorded or is past its recording limit; each
    /// logged under `burn_compile::recordings` with its reason).
    pub graph_recordings: u64,
    pub graph_launches: u64,
    pub recording_fallbacks: u64,
    /// Graph inputs the launches of recorded graphs copied in, and those found unchanged since
    /// the last launch and not copied (weights a caller keeps across calls).
    pub graph_inputs_copied: u64,
    pub graph_inputs_kept: u64,
    /// Alternating recordings: outputs of earlier calls the program still held, moved into new
    /// buffers (a copy) before a launch overwrote the recording's.
    pub graph_outputs_moved: u64,
    /// Closed graphs whose hand-off to the execution thread waited for room in its queue (the
    /// program had recorded 16 graphs ahead of the device: back-pressure), and the time the
    /// program waited there. A call's host work is its time on the program's thread less this
    /// wait.
    pub queue_waits: u64,
    pub queue_wait_time: Duration,
    /// Breaks per reason, in [`BreakReason::ALL`] order.
    pub breaks: Vec<(BreakReason, u64)>,
}

impl Metrics {
    /// Breaks of one reason.
    pub fn breaks_of(&self, reason: BreakReason) -> u64 {
        self.breaks
            .iter()
            .find(|(r, _)| *r == reason)
            .map(|(_, n)| *n)
            .unwrap_or(0)
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Metrics) -> Metrics {
        Metrics {
            ops_recorded: self.ops_recorded - earlier.ops_recorded,
            graphs: self.graphs - earlier.graphs,
            cache_hits: self.cache_hits - earlier.cache_hits,
            cache_misses: self.cache_misses - earlier.cache_misses,
            compile_time: self.compile_time.saturating_sub(earlier.compile_time),
            recompiles: self.recompiles - earlier.recompiles,
            past_recompile_limit: self.past_recompile_limit - earlier.past_recompile_limit,
            symbolic_graphs: self.symbolic_graphs - earlier.symbolic_graphs,
            ops_executed: self.ops_executed - earlier.ops_executed,
            ops_eliminated: self.ops_eliminated - earlier.ops_eliminated,
            eager_ops: self.eager_ops - earlier.eager_ops,
            kernel_fallbacks: self.kernel_fallbacks - earlier.kernel_fallbacks,
            library_convs: self.library_convs - earlier.library_convs,
            tuned_matmuls: self.tuned_matmuls - earlier.tuned_matmuls,
            tuned_matmuls_changed: self.tuned_matmuls_changed - earlier.tuned_matmuls_changed,
            attention_kernels: self.attention_kernels - earlier.attention_kernels,
            column_kernels: self.column_kernels - earlier.column_kernels,
            horizontal_column_kernels: self.horizontal_column_kernels
                - earlier.horizontal_column_kernels,
            vectorized_kernels: self.vectorized_kernels - earlier.vectorized_kernels,
            kernel_builds: self.kernel_builds - earlier.kernel_builds,
            kernel_build_time: self
                .kernel_build_time
                .saturating_sub(earlier.kernel_build_time),
            kernels_launched: self.kernels_launched - earlier.kernels_launched,
            compile_fallbacks: self.compile_fallbacks - earlier.compile_fallbacks,
            disk_cache_hits: self.disk_cache_hits - earlier.disk_cache_hits,
            disk_cache_misses: self.disk_cache_misses - earlier.disk_cache_misses,
            disk_cache_invalid: self.disk_cache_invalid - earlier.disk_cache_invalid,
            disk_cache_writes: self.disk_cache_writes - earlier.disk_cache_writes,
            accuracy_checks: self.accuracy_checks - earlier.accuracy_checks,
            accuracy_failures: self.accuracy_failures - earlier.accuracy_failures,
            step_recordings: self.step_recordings - earlier.step_recordings,
            step_replays: self.step_replays - earlier.step_replays,
            graph_recordings: self.graph_recordings - earlier.graph_recordings,
            graph_launches: self.graph_launches - earlier.graph_launches,
            recording_fallbacks: self.recording_fallbacks - earlier.recording_fallbacks,
            graph_inputs_copied: self.graph_inputs_copied - earlier.graph_inputs_copied,
            graph_inputs_kept: self.graph_inputs_kept - earlier.graph_inputs_kept,
            graph_outputs_moved: self.graph_outputs_moved - earlier.graph_outputs_moved,
            queue_waits: self.queue_waits - earlier.queue_waits,
            queue_wait_time: self.queue_wait_time.saturating_sub(earlier.queue_wait_time),
            breaks: self
                .breaks
                .iter()
                .map(|(r, n)| (*r, n - earlier.breaks_of(*r)))
                .collect(),
        }
    }
}

/// Plans held by the plan caches of every `Compiled<B>` device of the process: what a long run
/// keeps (flat once its graphs have all been seen).
pub fn cached_plans() -> usize {
    let mut plans = 0;
    crate::registry::for_each(|client| plans += client.cached_plans());
    plans
}

/// Reads the counters.
pub fn metrics() -> Metrics {
    let c = &COUNTERS;
    let r = &burn_compile_runtime::counters::COUNTERS;
    Metrics {
        ops_recorded: c.ops_recorded.load(Relaxed),
        graphs: c.graphs.load(Relaxed),
        cache_hits: c.cache_hits.load(Relaxed),
        cache_misses: c.cache_misses.load(Relaxed),
        compile_time: Duration::from_nanos(c.compile_nanos.load(Relaxed)),
        recompiles: c.recompiles.load(Relaxed),
        past_recompile_limit: c.past_recompile_limit.load(Relaxed),
        symbolic_graphs: c.symbolic_graphs.load(Relaxed),
        ops_executed: c.ops_executed.load(Relaxed),
        ops_eliminated: c.ops_eliminated.load(Relaxed),
        eager_ops: c.eager_ops.load(Relaxed),
        kernel_fallbacks: r.kernel_fallbacks.load(Relaxed),
        library_convs: r.library_convs.load(Relaxed),
        tuned_matmuls: r.tuned_matmuls.load(Relaxed),
        tuned_matmuls_changed: r.tuned_matmuls_changed.load(Relaxed),
        attention_kernels: r.attention_kernels.load(Relaxed),
        column_kernels: r.column_kernels.load(Relaxed),
        horizontal_column_kernels: r.horizontal_column_kernels.load(Relaxed),
        vectorized_kernels: r.vectorized_kernels.load(Relaxed),
        kernel_builds: r.kernel_builds.load(Relaxed),
        kernel_build_time: Duration::from_nanos(r.kernel_build_nanos.load(Relaxed)),
        kernels_launched: r.kernels_launched.load(Relaxed),
        compile_fallbacks: c.compile_fallbacks.load(Relaxed),
        disk_cache_hits: r.disk_cache_hits.load(Relaxed),
        disk_cache_misses: r.disk_cache_misses.load(Relaxed),
        disk_cache_invalid: r.disk_cache_invalid.load(Relaxed),
        disk_cache_writes: r.disk_cache_writes.load(Relaxed),
        accuracy_checks: c.accuracy_checks.load(Relaxed),
        accuracy_failures: c.accuracy_failures.load(Relaxed),
        step_recordings: c.step_recordings.load(Relaxed),
        step_replays: c.step_replays.load(Relaxed),
        graph_recordings: r.recordings.load(Relaxed),
        graph_launches: r.graph_launches.load(Relaxed),
        recording_fallbacks: r.recording_fallbacks.load(Relaxed),
        graph_inputs_copied: r.recording_inputs_copied.load(Relaxed),
        graph_inputs_kept: r.recording_inputs_kept.load(Relaxed),
        graph_outputs_moved: r.recording_outputs_moved.load(Relaxed),
        queue_waits: r.queue_waits.load(Relaxed),
        queue_wait_time: Duration::from_nanos(r.queue_wait_nanos.load(Relaxed)),
        breaks: BreakReason::ALL
            .iter()
            .zip(c.breaks.iter())
            .map(|(r, n)| (*r, n.load(Relaxed)))
            .collect(),
    }
}
