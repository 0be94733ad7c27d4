//! What the capture reports about each graph it closes: to `explain`, to `fullgraph` regions, to
//! the metrics, and to the `tracing` log topics.
//!
//! Log topics (targets), like TORCH_LOGS: `burn_compile::graph_breaks`, `burn_compile::recompiles`,
//! `burn_compile::graphs`, `burn_compile::output_code`. [`crate::init_logs`] turns them on from
//! `BURN_COMPILE_LOGS`.

use crate::capture::{BreakReason, GraphBreak};
use burn_compile_graph::GraphKey;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::ThreadId;
use std::time::Duration;

/// One graph closed by the capture.
#[derive(Clone, Debug)]
pub struct GraphRecord {
    /// Cache key of the graph.
    pub key: GraphKey,
    /// Ops recorded (drops included).
    pub ops: usize,
    /// Steps of its plan that run work on the inner backend.
    pub launches: usize,
    /// Generated (fused) kernels among the launches.
    pub fused_kernels: usize,
    /// Ops that run inside those kernels.
    pub fused_ops: usize,
    /// Horizontal kernels among the launches, and the generated kernels they launch together
    /// (counted in `fused_kernels`).
    pub horizontal_kernels: (usize, usize),
    /// Library matmuls among the launches (cuBLASLt), and how many fused an epilogue.
    pub library_matmuls: (usize, usize),
    /// Attention kernels among the launches (each in place of `softmax(q @ kᵀ / √d) @ v`).
    pub attention_kernels: usize,
    /// Column-sum kernels among the launches (each in place of a chain of sums over leading
    /// dimensions: a bias gradient, a broadcast operand's gradient).
    pub column_kernels: usize,
    /// Horizontal column-sum kernels among the launches, and the column sums they launch
    /// together (counted in `column_kernels`).
    pub horizontal_column_kernels: (usize, usize),
    /// Intermediates placed in the slots of the replay's one buffer (memory planning), the
    /// slots, and their bytes against the bytes of those values allocated one by one.
    pub memory: PlannedMemory,
    /// One line per generated kernel (kind, shape, ops fused), when diagnostics are on.
    pub kernels: Vec<String>,
    /// Each generated kernel's program and iteration shape, when diagnostics are on: its
    /// source for a target is `burn_compile_codegen::cuda_source` / `wgsl_source` over a
    /// `LaunchLayout` of that shape (what a reviewer reads, as the snapshots do).
    pub generated: Vec<(burn_compile_schedule::FusedKernel, Vec<usize>)>,
    /// Ops removed as dead code.
    pub dead: usize,
    /// Ops that repeat an earlier one and share its result (common subexpressions).
    pub merged: usize,
    /// The plan came from the cache.
    pub cache_hit: bool,
    /// Time spent building the plan (zero on a hit).
    pub compile_time: Duration,
    /// A compile of a family already compiled for other sizes: which sizes changed (what the
    /// `burn_compile::recompiles` log says).
    pub recompile: Option<String>,
    /// The graph's family is past `recompile_limit`: it ran eagerly, with no compile.
    pub past_recompile_limit: bool,
    /// Its plan is symbolic: the sizes of this graph that its fused kernels take as runtime
    /// values (sorted; empty for a plan specialized on every size).
    pub symbolic_sizes: Vec<u64>,
    /// For a plan built without its device ([`crate::explain_plan`]): the copies its library
    /// matmuls and reshapes will make outside it, counted from the layouts its steps make.
    pub copies_outside: Option<burn_compile_schedule::OperandCopies>,
    /// What ended the graph.
    pub ended_by: GraphBreak,
    /// The graph ended because an `explain`/`fullgraph` region ended, not because of a break.
    pub region_end: bool,
    /// Readable listing, when diagnostics are on.
    pub listing: Option<String>,
    /// Its plan's executable, one line per launch, when diagnostics are on
    /// (`burn_compile_runtime::Executable`).
    pub executable: Option<String>,
    /// The ops its plan runs on the inner backend's own kernels, by name with their counts
    /// (most frequent first), when diagnostics are on or the `graphs` log shows a new plan:
    /// what no fuser or library call took.
    pub eager_ops: Vec<(String, usize)>,
    /// The generated kernels built for this graph when it first ran (the CPU target's C unit),
    /// filled in by `explain` once the region's graphs have run; `None` where nothing was built
    /// (GPU targets compile each kernel at its first launch, inside the runtime).
    pub kernel_build: Option<KernelBuild>,
}

// Kernel builds happen in the runtime, at the end of a graph's first replay; it keeps them until
// the `explain` region of the graph claims them.
use burn_compile_runtime::KernelBuild;
pub(crate) use burn_compile_runtime::counters::{kernel_builds_mark, take_kernel_build};

/// What the memory plan of a graph placed (see `CompileConfig::memory_planning`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlannedMemory {
    /// Values written into slots instead of their own allocations.
    pub values: usize,
    /// Slots of the replay's buffer.
    pub slots: usize,
    /// Bytes of the buffer.
    pub bytes: u64,
    /// Bytes the same values take allocated one by one.
    pub unplanned_bytes: u64,
}

// `explain` and `fullgraph` regions are per thread: they report the graphs of the calling
// thread's stream, so concurrent regions (tests, workers) never see each other's graphs.
thread_local! {
    static EXPLAIN: RefCell<Option<Vec<GraphRecord>>> = const { RefCell::new(None) };
    static STRICT: RefCell<Option<Vec<GraphBreak>>> = const { RefCell::new(None) };
}

/// True when breaks should carry user locations and graphs their listings.
pub(crate) fn wanted(configured: bool) -> bool {
    // `try_with`: graphs are also closed from thread-exit hooks, after these are gone.
    configured
        || EXPLAIN.try_with(|s| s.borrow().is_some()).unwrap_or(false)
        || STRICT.try_with(|s| s.borrow().is_some()).unwrap_or(false)
}

/// Graphs of threads inside an `explain` region that another thread closed (an eager op closes
/// every thread's pending graph): delivered to their owner's region at its next report or at
/// its end. A thread has an entry while it has a region open.
static INBOX: Mutex<Option<FxHashMap<ThreadId, Vec<GraphRecord>>>> = Mutex::new(None);

fn inbox<T>(f: impl FnOnce(&mut FxHashMap<ThreadId, Vec<GraphRecord>>) -> T) -> T {
    let mut guard = INBOX.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(FxHashMap::default))
}

/// Moves the graphs other threads closed for this one into its open `explain` region.
fn collect_inbox(graphs: &mut Vec<GraphRecord>) {
    let me = std::thread::current().id();
    inbox(|m| {
        if let Some(waiting) = m.get_mut(&me) {
            graphs.append(waiting);
        }
    });
}

pub(crate) fn start_explain() -> Option<Vec<GraphRecord>> {
    let previous = EXPLAIN.with(|s| s.borrow_mut().replace(Vec::new()));
    if previous.is_none() {
        inbox(|m| m.insert(std::thread::current().id(), Vec::new()));
    } else {
        // The outer region's graphs so far stay the outer region's.
        EXPLAIN.with(|s| {
            let mut outer = Vec::new();
            collect_inbox(&mut outer);
            s.borrow_mut().as_mut().expect("a region").extend(outer);
        });
    }
    previous
}

pub(crate) fn finish_explain(previous: Option<Vec<GraphRecord>>) -> Vec<GraphRecord> {
    let outermost = previous.is_none();
    let mut graphs =
        EXPLAIN.with(|s| std::mem::replace(&mut *s.borrow_mut(), previous).unwrap_or_default());
    collect_inbox(&mut graphs);
    if outermost {
        inbox(|m| m.remove(&std::thread::current().id()));
    }
    graphs
}

pub(crate) fn start_strict() -> Option<Vec<GraphBreak>> {
    STRICT.with(|s| s.borrow_mut().replace(Vec::new()))
}

pub(crate) fn finish_strict(previous: Option<Vec<GraphBreak>>) -> Vec<GraphBreak> {
    STRICT.with(|s| std::mem::replace(&mut *s.borrow_mut(), previous).unwrap_or_default())
}

/// Process-wide counters (see [`crate::metrics`]).
pub(crate) struct Counters {
    pub ops_recorded: AtomicU64,
    pub graphs: AtomicU64,
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    pub compile_nanos: AtomicU64,
    pub ops_executed: AtomicU64,
    pub ops_eliminated: AtomicU64,
    pub eager_ops: AtomicU64,
    pub recompiles: AtomicU64,
    pub past_recompile_limit: AtomicU64,
    pub symbolic_graphs: AtomicU64,
    pub compile_fallbacks: AtomicU64,
    pub accuracy_checks: AtomicU64,
    pub accuracy_failures: AtomicU64,
    pub step_recordings: AtomicU64,
    pub step_replays: AtomicU64,
    pub breaks: [AtomicU64; BreakReason::ALL.len()],
}

pub(crate) static COUNTERS: Counters = Counters {
    ops_recorded: AtomicU64::new(0),
    graphs: AtomicU64::new(0),
    cache_hits: AtomicU64::new(0),
    cache_misses: AtomicU64::new(0),
    compile_nanos: AtomicU64::new(0),
    ops_executed: AtomicU64::new(0),
    ops_eliminated: AtomicU64::new(0),
    eager_ops: AtomicU64::new(0),
    recompiles: AtomicU64::new(0),
    past_recompile_limit: AtomicU64::new(0),
    symbolic_graphs: AtomicU64::new(0),
    compile_fallbacks: AtomicU64::new(0),
    accuracy_checks: AtomicU64::new(0),
    accuracy_failures: AtomicU64::new(0),
    step_recordings: AtomicU64::new(0),
    step_replays: AtomicU64::new(0),
    breaks: [const { AtomicU64::new(0) }; BreakReason::ALL.len()],
};

/// Reports a closed graph to everyone listening. `owner`: the thread whose stream the graph
/// belongs to; `own_thread`: that is the calling thread (only those count for the thread's
/// `fullgraph` region: a break another thread caused is not the region's code).
pub(crate) fn report(record: GraphRecord, owner: ThreadId, own_thread: bool) {
    let c = &COUNTERS;
    c.graphs.fetch_add(1, Ordering::Relaxed);
    if record.recompile.is_some() {
        c.recompiles.fetch_add(1, Ordering::Relaxed);
    }
    if record.past_recompile_limit {
        c.past_recompile_limit.fetch_add(1, Ordering::Relaxed);
    }
    if !record.symbolic_sizes.is_empty() {
        c.symbolic_graphs.fetch_add(1, Ordering::Relaxed);
    }
    if record.cache_hit {
        c.cache_hits.fetch_add(1, Ordering::Relaxed);
    } else {
        c.cache_misses.fetch_add(1, Ordering::Relaxed);
        c.compile_nanos
            .fetch_add(record.compile_time.as_nanos() as u64, Ordering::Relaxed);
    }
    c.ops_executed
        .fetch_add(record.launches as u64, Ordering::Relaxed);
    c.ops_eliminated
        .fetch_add(record.dead as u64, Ordering::Relaxed);
    if !record.region_end {
        let index = crate::BreakReason::ALL
            .iter()
            .position(|r| *r == record.ended_by.reason)
            .expect("every reason is listed");
        c.breaks[index].fetch_add(1, Ordering::Relaxed);
        tracing::debug!(target: "burn_compile::graph_breaks", "graph {} ended: {}", record.key, record.ended_by);
    }
    if record.cache_hit {
        tracing::trace!(target: "burn_compile::graphs", "graph {} ({} ops) from cache", record.key, record.ops);
    } else {
        tracing::debug!(
            target: "burn_compile::recompiles",
            "compiled graph {} ({} ops, {} dead) in {:?}",
            record.key, record.ops, record.dead, record.compile_time
        );
        if !record.eager_ops.is_empty() {
            tracing::debug!(
                target: "burn_compile::graphs",
                "graph {}: {} launches, {} on the inner backend: {}",
                record.key,
                record.launches,
                record.eager_ops.iter().map(|(_, n)| n).sum::<usize>(),
                crate::explain::counted(&record.eager_ops)
            );
        }
        if let Some(listing) = &record.listing {
            tracing::debug!(target: "burn_compile::graphs", "graph {}:\n{listing}", record.key);
        }
        if !record.kernels.is_empty() {
            // What each launch of the plan is (kernel kind, its ops, epilogues), as `explain`
            // shows it: which of a graph's ops share a kernel.
            tracing::debug!(
                target: "burn_compile::graphs",
                "graph {}: {} kernels:\n  {}",
                record.key,
                record.kernels.len(),
                record.kernels.join("\n  ")
            );
        }
    }

    if !own_thread {
        // The owner's `explain` region, if it has one open, gets the graph.
        inbox(|m| {
            if let Some(waiting) = m.get_mut(&owner) {
                waiting.push(record);
            }
        });
        return;
    }
    if !record.region_end {
        STRICT.with(|s| {
            if let Some(breaks) = s.borrow_mut().as_mut() {
                breaks.push(record.ended_by.clone());
            }
        });
    }
    EXPLAIN.with(|s| {
        if let Some(graphs) = s.borrow_mut().as_mut() {
            // Graphs another thread closed for this one came before this one.
            collect_inbox(graphs);
            graphs.push(record);
        }
    });
}

/// Adds one to a counter.
pub(crate) fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}
