//! `explain`, `fullgraph` and `mark_step`: the user's view of how their code was cut into graphs.

use crate::capture::{BreakReason, GraphBreak};
use crate::diagnostics::{self, GraphRecord};
use crate::registry;
use std::fmt;
use std::time::Duration;

/// Report of what the capture did while a closure ran. See [`explain`].
#[derive(Clone, Debug)]
pub struct Explanation {
    /// Every graph closed in the region, in order.
    pub graphs: Vec<GraphRecord>,
    /// `graphs.len()`.
    pub graph_count: usize,
    /// Graphs that ended because of a break (the last one usually ends with the region).
    pub graph_break_count: usize,
    /// Each break: reason, detail and location in the user's code.
    pub break_reasons: Vec<GraphBreak>,
    /// Ops recorded in each graph (drops of tensors included).
    pub ops_per_graph: Vec<usize>,
    /// Launches of each graph's plan: inner-backend ops plus generated kernels.
    pub launches_per_graph: Vec<usize>,
    /// Generated (fused) kernels over all graphs.
    pub fused_kernels: usize,
    /// Library matmuls (cuBLASLt) over all graphs.
    pub library_matmuls: usize,
    /// Attention kernels over all graphs (the attention pattern fired).
    pub attention_kernels: usize,
    /// Column-sum kernels over all graphs.
    pub column_kernels: usize,
    /// Time spent compiling each graph (zero for a cache hit): its plan.
    pub compile_times: Vec<Duration>,
    /// Time spent building generated kernels at the graphs' first replays (the CPU target's C
    /// units: compiled, or loaded from the disk cache), over all graphs; each graph's build is
    /// its record's `kernel_build`.
    pub kernel_build_time: Duration,
    /// Graphs whose plan came from the cache.
    pub cache_hits: usize,
    /// Graphs that had to be compiled.
    pub cache_misses: usize,
    /// Compiles of a graph family already compiled for other sizes (counted in
    /// `cache_misses`); each graph's record says what changed.
    pub recompiles: usize,
    /// Graphs that ran eagerly because their family is past `recompile_limit`.
    pub past_recompile_limit: usize,
    /// The ops the graphs' plans run on the inner backend's own kernels, by name with their
    /// counts over all graphs, most frequent first: where fusion stopped (each graph's are its
    /// record's `eager_ops`).
    pub eager_ops: Vec<(String, usize)>,
}

impl Explanation {
    fn from_records(graphs: Vec<GraphRecord>) -> Self {
        let break_reasons: Vec<GraphBreak> = graphs
            .iter()
            .filter(|g| !g.region_end)
            .map(|g| g.ended_by.clone())
            .collect();
        Self {
            graph_count: graphs.len(),
            graph_break_count: break_reasons.len(),
            break_reasons,
            ops_per_graph: graphs.iter().map(|g| g.ops).collect(),
            launches_per_graph: graphs.iter().map(|g| g.launches).collect(),
            fused_kernels: graphs.iter().map(|g| g.fused_kernels).sum(),
            library_matmuls: graphs.iter().map(|g| g.library_matmuls.0).sum(),
            attention_kernels: graphs.iter().map(|g| g.attention_kernels).sum(),
            column_kernels: graphs.iter().map(|g| g.column_kernels).sum(),
            compile_times: graphs.iter().map(|g| g.compile_time).collect(),
            kernel_build_time: graphs
                .iter()
                .filter_map(|g| g.kernel_build.as_ref())
                .map(|b| b.time)
                .sum(),
            cache_hits: graphs.iter().filter(|g| g.cache_hit).count(),
            cache_misses: graphs.iter().filter(|g| !g.cache_hit).count(),
            recompiles: graphs.iter().filter(|g| g.recompile.is_some()).count(),
            past_recompile_limit: graphs.iter().filter(|g| g.past_recompile_limit).count(),
            eager_ops: burn_compile_runtime::executable::tally(
                graphs
                    .iter()
                    .flat_map(|g| &g.eager_ops)
                    .map(|(name, n)| (name.as_str(), *n)),
            ),
            graphs,
        }
    }
}

/// `name ×n, …`: counts by name, as `explain` and the `graphs` log print them.
pub(crate) fn counted(counts: &[(String, usize)]) -> String {
    counts
        .iter()
        .map(|(name, n)| format!("{name} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "burn-compile explain: {} graph(s), {} break(s), cache {} hit(s) / {} miss(es), compile {:?}{}",
            self.graph_count,
            self.graph_break_count,
            self.cache_hits,
            self.cache_misses,
            self.compile_times.iter().sum::<Duration>(),
            if self.kernel_build_time.is_zero() {
                String::new()
            } else {
                format!(" + kernel builds {:?}", self.kernel_build_time)
            }
        )?;
        if !self.break_reasons.is_empty() {
            writeln!(f, "breaks:")?;
            for (i, b) in self.break_reasons.iter().enumerate() {
                writeln!(f, "  {}. {b}", i + 1)?;
            }
        }
        for (i, g) in self.graphs.iter().enumerate() {
            let ended = if g.region_end {
                "end of region".to_string()
            } else {
                g.ended_by.reason.to_string()
            };
            writeln!(
                f,
                "graph {i}: key {}, {} ops, {} launches ({} fused kernel(s) for {} ops{}{}{}{}{}), {} dead, {} merged, {}, ended by {ended}",
                g.key,
                g.ops,
                g.launches,
                g.fused_kernels,
                g.fused_ops,
                match g.horizontal_kernels {
                    (0, _) => String::new(),
                    (n, members) =>
                        format!(", {members} of them launched as {n} horizontal kernel(s)"),
                },
                match g.library_matmuls {
                    (0, _) => String::new(),
                    (n, fused) => format!(", {n} library matmul(s), {fused} with a fused epilogue"),
                },
                match g.attention_kernels {
                    0 => String::new(),
                    n => format!(", {n} attention kernel(s)"),
                },
                match (g.column_kernels, g.horizontal_column_kernels) {
                    (0, _) => String::new(),
                    (n, (0, _)) => format!(", {n} column sum(s)"),
                    (n, (k, members)) => format!(
                        ", {n} column sum(s), {members} of them launched as {k} horizontal kernel(s)"
                    ),
                },
                match g.memory.values {
                    0 => String::new(),
                    n => format!(
                        ", {n} intermediate(s) in {} slot(s) of one buffer ({} of {} bytes)",
                        g.memory.slots, g.memory.bytes, g.memory.unplanned_bytes
                    ),
                },
                g.dead,
                g.merged,
                if g.past_recompile_limit {
                    "eager (its family is past recompile_limit)".to_string()
                } else if g.cache_hit {
                    "cache hit".to_string()
                } else {
                    format!("compiled in {:?}", g.compile_time)
                },
            )?;
            if !g.eager_ops.is_empty() {
                writeln!(f, "  on the inner backend: {}", counted(&g.eager_ops))?;
            }
            if let Some(copies) = &g.copies_outside {
                writeln!(
                    f,
                    "  copies outside the plan (from its layouts): {} library matmul(s) copy an \
                     operand first, {} reshape(s) copy their input",
                    copies.matmuls, copies.reshapes
                )?;
            }
            if let Some(changes) = &g.recompile {
                writeln!(f, "  recompiled: {changes}")?;
            }
            if !g.symbolic_sizes.is_empty() {
                writeln!(
                    f,
                    "  symbolic: sizes {:?} are runtime values of its kernels (one plan for \
                     every value of them)",
                    g.symbolic_sizes
                )?;
            }
            if let Some(build) = &g.kernel_build {
                writeln!(f, "  {build}")?;
            }
            for (k, kernel) in g.kernels.iter().enumerate() {
                writeln!(f, "  kernel {k}: {kernel}")?;
            }
            if let Some(listing) = &g.listing {
                for line in listing.lines() {
                    writeln!(f, "    {line}")?;
                }
            }
            if let Some(executable) = &g.executable {
                writeln!(f, "  executable:")?;
                for line in executable.lines() {
                    writeln!(f, "    {line}")?;
                }
            }
        }
        Ok(())
    }
}

/// How a GPU target with `rules` would plan a graph of `ops` (e.g. a graph file's, captured on
/// a CPU), built here without that device: one graph, reported as [`explain`] reports one — its
/// generated kernels, library matmuls and column sums, and its executable, one line per launch.
/// What `burn-compile-plan` prints.
pub fn explain_plan(
    ops: &[burn_ir::OperationIr],
    config: &crate::CompileConfig,
    rules: burn_compile_runtime::targets::rules::GpuRules,
) -> Explanation {
    Explanation::from_records(vec![crate::plan_cache::plan_by_rules(ops, config, rules)])
}

pub(crate) fn close_all(reason: BreakReason, region_end: bool) {
    registry::for_each(|c| c.close_current(reason, None, region_end));
}

/// Runs `f` and reports how its ops were cut into graphs. Pending ops from before are closed
/// first (and not reported); the ops of `f` still pending at its end form the last graph, closed
/// while `f`'s result is alive. The calling thread's graphs are reported, those another thread
/// closed included (an op that runs eagerly closes every thread's pending graph); threads
/// spawned by `f` record their own streams, which are not.
///
/// The region's graphs have run when it returns (it waits for the devices' execution threads):
/// the kernels a target builds at a graph's first replay (the CPU target's C units) are part of
/// its compile time, reported in each graph's `kernel_build`.
pub fn explain<T>(f: impl FnOnce() -> T) -> (T, Explanation) {
    close_all(BreakReason::MarkStep, true);
    // Builds of graphs that ran before the region are not its graphs'.
    registry::for_each(|c| c.wait_idle());
    let builds_from = diagnostics::kernel_builds_mark();
    let previous = diagnostics::start_explain();
    let value = f();
    close_all(BreakReason::MarkStep, true);
    let mut records = diagnostics::finish_explain(previous);
    registry::for_each(|c| c.wait_idle());
    // A cache hit builds too where the target meets its kernels anew: a symbolic plan's
    // first replay at another layout, or after a `configure` changed the C compiler.
    for g in records.iter_mut() {
        g.kernel_build = diagnostics::take_kernel_build(g.key, builds_from);
    }
    (value, Explanation::from_records(records))
}

/// A break inside a [`fullgraph`] region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FullGraphError {
    /// Every break of the region, in order (the first one is what to fix first).
    pub breaks: Vec<GraphBreak>,
}

impl fmt::Display for FullGraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fullgraph region broke into {} graphs: {}",
            self.breaks.len() + 1,
            self.breaks[0]
        )?;
        for b in &self.breaks[1..] {
            write!(f, "; then {b}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FullGraphError {}

/// Runs `f` as one graph: any break of the calling thread's stream inside it (a host read, a
/// sync, the size limit, …) makes the result an error naming each break's reason and location.
/// The ops themselves still ran correctly.
pub fn fullgraph<T>(f: impl FnOnce() -> T) -> Result<T, FullGraphError> {
    close_all(BreakReason::MarkStep, true);
    let previous = diagnostics::start_strict();
    let value = f();
    close_all(BreakReason::MarkStep, true);
    let breaks = diagnostics::finish_strict(previous);
    if breaks.is_empty() {
        Ok(value)
    } else {
        Err(FullGraphError { breaks })
    }
}

/// Ends the calling thread's current graph on every `Compiled` device: the explicit step mark of
/// a loop that never reads to host.
pub fn mark_step() {
    close_all(BreakReason::MarkStep, false);
}

/// Error waiting for the calling thread (a recompile under [`crate::Stance::FailOnRecompile`]),
/// taken. Reads and syncs also return it.
pub fn take_error() -> Option<String> {
    let mut found = None;
    registry::for_each(|c| {
        if let Some(e) = c.take_pending_error() {
            found.get_or_insert(e);
        }
    });
    found
}
