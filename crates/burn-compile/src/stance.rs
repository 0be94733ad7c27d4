//! How the capture treats the ops it receives: the process-wide stance, and scoped eager regions
//! of one thread.

use crate::capture::BreakReason;
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

/// How the capture behaves, for debugging and for guarding deployments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stance {
    /// Capture, compile and replay cached plans.
    Default,
    /// Capture off: every op runs eagerly on the inner backend as it arrives.
    Eager,
    /// Capture and replay, but a graph that is not in the cache is an error (reported at the
    /// next read or sync of the thread; the graph itself still runs, eagerly, correctly).
    FailOnRecompile,
}

static STANCE: AtomicU8 = AtomicU8::new(0);

/// Sets the stance of the process.
pub fn set_stance(stance: Stance) {
    let value = match stance {
        Stance::Default => 0,
        Stance::Eager => 1,
        Stance::FailOnRecompile => 2,
    };
    STANCE.store(value, Ordering::SeqCst);
}

/// The stance in force.
pub fn stance() -> Stance {
    match STANCE.load(Ordering::Relaxed) {
        1 => Stance::Eager,
        2 => Stance::FailOnRecompile,
        _ => Stance::Default,
    }
}

thread_local! {
    /// How deep the calling thread is in [`eager`] regions.
    static EAGER_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Whether the calling thread is inside an [`eager`] region.
pub(crate) fn in_eager_region() -> bool {
    // `try_with`: ops also arrive from thread-exit hooks, after thread-locals are gone.
    EAGER_DEPTH.try_with(|d| d.get() > 0).unwrap_or(false)
}

/// Runs `f` with capture off on the calling thread only (what `torch.compiler.disable` scopes):
/// its ops run eagerly on the inner backend as they arrive, while other threads keep compiling.
/// Entering closes the thread's pending graph (a break `eager_region`, located at the call in
/// `explain`); capture resumes when `f` returns (or panics). Regions nest: only the outermost
/// one breaks.
pub fn eager<T>(f: impl FnOnce() -> T) -> T {
    let outermost = EAGER_DEPTH.with(|d| {
        let depth = d.get();
        d.set(depth + 1);
        depth == 0
    });
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            let _ = EAGER_DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
        }
    }
    let _leave = Leave;
    if outermost {
        crate::explain::close_all(BreakReason::EagerRegion, false);
    }
    f()
}
