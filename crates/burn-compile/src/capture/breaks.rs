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
    /// The thread entered an [`crate::eager`] region: its ops run eagerly until it ends.
    EagerRegion,
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
            BreakReason::EagerRegion => "eager_region",
        }
    }

    /// Every reason, in declaration order.
    pub const ALL: [BreakReason; 10] = [
        BreakReason::HostRead,
        BreakReason::Sync,
        BreakReason::Seed,
        BreakReason::DeviceTransfer,
        BreakReason::DataDependentShape,
        BreakReason::Unsupported,
        BreakReason::SizeLimit,
        BreakReason::MarkStep,
        BreakReason::CrossThread,
        BreakReason::EagerRegion,
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
    "src/stance.rs",
    "src/plan_cache.rs",
];

/// The first frame of the current backtrace outside Burn, CubeCL, the standard library, the C
/// library and this crate: `function at file:line` where the user's crate has line tables (the
/// default for `dev` and `test` builds), else the function alone and how to get its line (a
/// release build without debug info: `debug = "line-tables-only"` in the release profile).
pub fn user_location() -> Option<String> {
    user_frame(&std::backtrace::Backtrace::force_capture().to_string())
}

/// What a release build without line tables says in place of `file:line`.
const NO_LINE: &str =
    "(no line: add `debug = \"line-tables-only\"` to the release profile for file:line)";

/// Crates whose frames are never the user's code, by name (`burn` also covers `burn_tensor`,
/// `burn_compile`…; `cubecl` covers `cubecl_cuda`…).
const LIBRARY_CRATES: &[&str] = &[
    "std", "core", "alloc", "burn", "cubecl", "cubek", "serde", "rayon", "tracing",
];

/// C runtime and Rust start-up symbols: whole names, then name prefixes.
const C_RUNTIME: &[&str] = &["main", "clone", "start_thread", "_start"];
const C_RUNTIME_PREFIXES: &[&str] = &["__libc", "__GI_", "__rust", "rust_"];

/// Whether a frame known only by its symbol (no line tables) is library code: a crate above, the
/// C runtime, or a frame with no usable name. `<T as Trait>::f` is `T`'s crate.
fn library_symbol(symbol: &str) -> bool {
    let name = symbol.trim_start_matches('<');
    let krate = name.split("::").next().unwrap_or(name);
    name.is_empty()
        || name.starts_with("{closure")
        || name.starts_with("unknown>")
        || C_RUNTIME.contains(&name)
        || C_RUNTIME_PREFIXES.iter().any(|p| name.starts_with(p))
        || (name.contains("::")
            && LIBRARY_CRATES
                .iter()
                .any(|c| krate == *c || krate.strip_prefix(c).is_some_and(|r| r.starts_with('_'))))
}

/// [`user_location`] of a backtrace's text (as `std::backtrace::Backtrace` prints it).
fn user_frame(trace: &str) -> Option<String> {
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
    // Without line tables this crate's frames are `burn_compile::…`: library by name.
    let own = |at: &Option<String>| {
        at.as_deref().is_some_and(|p| {
            let path = p.rsplitn(3, ':').last().unwrap_or(p);
            OWN_FILES.iter().any(|f| path.ends_with(f))
        })
    };
    let library = |symbol: &str, at: &Option<String>| match at.as_deref() {
        Some(p) => {
            p.contains("/.cargo/registry/")
                || p.contains("/rustc/")
                || p.contains("/.cargo/git/")
                // glibc's own sources (`./csu/…`, `sysdeps/…`, `nptl/…`).
                || p.starts_with("./csu/")
                || p.contains("/sysdeps/")
                || p.contains("/nptl/")
        }
        None => library_symbol(symbol),
    };
    frames
        .into_iter()
        .find(|(symbol, at)| !library(symbol, at) && !own(at))
        .map(|(symbol, at)| match at {
            Some(at) => format!("{symbol} at {at}"),
            None => format!("{symbol} {NO_LINE}"),
        })
}

#[cfg(test)]
mod tests {
    use super::{NO_LINE, user_frame};

    /// A release build without line tables (Cargo's default release profile): the first user
    /// function by its symbol, and how to get its line; never glibc's frame (a regression: the
    /// break was located at `__libc_start_call_main at ./csu/…`).
    #[test]
    fn without_line_tables_the_user_function_is_named_by_symbol() {
        let trace = "   0: std::backtrace::Backtrace::create
   1: burn_compile::capture::breaks::user_location
   2: burn_compile::capture::client::CompileClient<B>::close_current
   3: <burn_router::tensor::RouterTensor<C> as burn_backend::tensor::TensorMetadata>::shape
   4: burn_tensor::tensor::api::base::Tensor<B,_,K>::into_data
   5: <alloc::boxed::Box<F,A> as core::ops::function::FnOnce<Args>>::call_once
   6: main_loop::train_step
   7: main_loop::main
   8: std::rt::lang_start::{{closure}}
   9: main
  10: __libc_start_call_main
             at ./csu/../sysdeps/nptl/libc_start_call_main.h:58:16
  11: __libc_start_main_impl
             at ./csu/../csu/libc-start.c:360:3
  12: _start
";
        assert_eq!(
            user_frame(trace),
            Some(format!("main_loop::train_step {NO_LINE}"))
        );
    }

    /// With line tables (dev and test builds): `function at file:line`, this crate's frames
    /// skipped by path.
    #[test]
    fn with_line_tables_the_user_frame_has_its_file_and_line() {
        let trace = "   0: std::backtrace::Backtrace::create
             at /rustc/0123/library/std/src/backtrace.rs:331:13
   1: user_location
             at ./src/capture/breaks.rs:108:5
   2: close_current<burn_flex::backend::Flex>
             at ./src/capture/client.rs:349:21
   3: into_data<burn_flex::backend::Flex, 2, burn_tensor::tensor::kind::Float>
             at /root/.cargo/registry/src/index.crates.io-0123/burn-tensor-0.21.0/src/tensor/api/base.rs:1200:9
   4: {closure#0}
             at ./tests/integration/capture.rs:58:41
   5: main
             at ./src/main.rs:3:5
";
        assert_eq!(
            user_frame(trace).as_deref(),
            Some("{closure#0} at ./tests/integration/capture.rs:58:41")
        );
    }

    /// A backtrace of library and C runtime frames only names nothing.
    #[test]
    fn library_and_c_runtime_frames_are_never_named() {
        let trace = "   0: std::backtrace::Backtrace::create
   1: burn_tensor::tensor::api::base::Tensor<B,_,K>::into_data
   2: cubecl_runtime::client::ComputeClient<R>::read
   3: {closure#0}
   4: main
   5: __libc_start_call_main
             at ./csu/../sysdeps/nptl/libc_start_call_main.h:58:16
   6: _start
";
        assert_eq!(user_frame(trace), None);
    }
}
