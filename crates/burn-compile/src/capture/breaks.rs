//! Why a graph ended, and where in the user's code.

use serde::{Deserialize, Serialize};

/// Why the op stream was cut. A closed list: every cut has exactly one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BreakReason {
    /// A tensor was read to the host (`into_data`, `into_scalar`, …).
    HostRead,
    /// The device was synchronized (`B::sync`).
    Sync,
    /// The random generator was seeded: ops before and after must not share a graph.
    Seed,
    /// A tensor moved to another device.
    DeviceTransfer,
    /// The output shape of an op depends on tensor values (`argwhere`, `nonzero`, …).
    DataDependentShape,
    /// An op the compiler cannot capture; it ran eagerly on the inner backend.
    Unsupported,
    /// The graph reached `max_graph_ops`, or the detected period of the loop.
    SizeLimit,
    /// An explicit [`crate::mark_step`], or the edge of an `explain`/`fullgraph` region.
    MarkStep,
    /// Another thread used a tensor still pending in this thread's graph.
    CrossThread,
}

impl BreakReason {
    /// Short lowercase name, as used in logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            BreakReason::HostRead => "host_read",
            BreakReason::Sync => "sync",
            BreakReason::Seed => "seed",
            BreakReason::DeviceTransfer => "device_transfer",
            BreakReason::DataDependentShape => "data_dependent_shape",
            BreakReason::Unsupported => "unsupported",
            BreakReason::SizeLimit => "size_limit",
            BreakReason::MarkStep => "mark_step",
            BreakReason::CrossThread => "cross_thread",
        }
    }

    /// Every reason, in declaration order.
    pub const ALL: [BreakReason; 9] = [
        BreakReason::HostRead,
        BreakReason::Sync,
        BreakReason::Seed,
        BreakReason::DeviceTransfer,
        BreakReason::DataDependentShape,
        BreakReason::Unsupported,
        BreakReason::SizeLimit,
        BreakReason::MarkStep,
        BreakReason::CrossThread,
    ];
}

impl std::fmt::Display for BreakReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One cut of the op stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphBreak {
    /// Why.
    pub reason: BreakReason,
    /// What exactly, when more can be said (the unsupported op, the period found, …).
    pub detail: Option<String>,
    /// Where in the user's code (`function at file:line`), when diagnostics are on.
    pub location: Option<String>,
}

impl std::fmt::Display for GraphBreak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.reason)?;
        if let Some(detail) = &self.detail {
            write!(f, " ({detail})")?;
        }
        if let Some(location) = &self.location {
            write!(f, " at {location}")?;
        }
        Ok(())
    }
}

/// Source files of this crate that can be on the stack when a break is recorded. Frames are
/// recognized by path: backtraces name functions without their crate.
const OWN_FILES: &[&str] = &[
    "src/backend/bool_tensor.rs",
    "src/backend/float_tensor.rs",
    "src/backend/int_tensor.rs",
    "src/backend/mod.rs",
    "src/backend/module.rs",
    "src/backend/qtensor.rs",
    "src/capture/breaks.rs",
    "src/capture/client.rs",
    "src/explain.rs",
    "src/registry.rs",
    "src/plan_cache.rs",
];

/// The first frame of the current backtrace outside Burn, CubeCL, the standard library and this
/// crate, as `function at file:line`. Needs debug line tables in the user's crate (the default
/// for `dev` and `test` builds; `debug = "line-tables-only"` in release).
pub fn user_location() -> Option<String> {
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    let mut frames = Vec::new();
    let mut lines = trace.lines().peekable();
    while let Some(line) = lines.next() {
        let Some((index, symbol)) = line.trim().split_once(": ") else {
            continue;
        };
        if index.parse::<usize>().is_err() {
            continue;
        }
        let at = match lines.peek() {
            Some(next) if next.trim_start().starts_with("at ") => {
                lines.next().map(|l| l.trim_start()[3..].to_string())
            }
            _ => None,
        };
        frames.push((symbol.to_string(), at));
    }
    let own = |at: &Option<String>| {
        at.as_deref()
            .map(|p| p.rsplitn(3, ':').last().unwrap_or(p))
            .is_some_and(|p| OWN_FILES.iter().any(|f| p.ends_with(f)))
    };
    let library = |at: &Option<String>| match at.as_deref() {
        None => true,
        Some(p) => {
            p.contains("/.cargo/registry/") || p.contains("/rustc/") || p.contains("/.cargo/git/")
        }
    };
    frames
        .into_iter()
        .skip_while(|(_, at)| own(at))
        .find(|(_, at)| !library(at) && !own(at))
        .map(|(symbol, at)| format!("{symbol} at {}", at.unwrap_or_default()))
}
