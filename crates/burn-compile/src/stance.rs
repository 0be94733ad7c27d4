//! Process-wide stance: how the capture treats the ops it receives.

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
