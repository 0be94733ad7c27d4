//! Host time per replayed step, by kind (`BURN_COMPILE_PROFILE_REPLAY=1`).
//!
//! A replay is host-bound when the GPU waits for launches; this says which steps the host time
//! goes to. Each step is timed from the replay's side: with `replay_on_device_thread` on, that
//! includes the runtime's own work for the step (allocation, argument resolution, the driver
//! call), since it runs inline there; off, only the time to hand it over (which stretches to
//! the runtime's pace once its queue is full). Off by default: the clock reads cost ~50 ns a
//! step.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static ON: AtomicBool = AtomicBool::new(false);
static TABLE: Mutex<Vec<StepTime>> = Mutex::new(Vec::new());

/// Time spent replaying one kind of step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepTime {
    /// `kernel (row)`, `kernel (pointwise)`, `library matmul`, `attention`, or the operation an
    /// eager step runs (`BaseFloat.Reshape`, …).
    pub step: String,
    /// Steps of this kind replayed.
    pub count: u64,
    /// Their total host time.
    pub total: Duration,
    /// A part of another kind's steps (`"<step> / <part>"`): its time is also in that kind's.
    pub part: bool,
}

/// Whether steps are timed (read once from `BURN_COMPILE_PROFILE_REPLAY`, or set by
/// [`set_replay_profiling`]).
pub(crate) fn on() -> bool {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| {
        if std::env::var("BURN_COMPILE_PROFILE_REPLAY").is_ok_and(|v| v == "1" || v == "true") {
            ON.store(true, Ordering::Relaxed);
            server_timing(true);
        }
    });
    ON.load(Ordering::Relaxed)
}

/// Turns step timing on or off for the process.
pub fn set_replay_profiling(on: bool) {
    let _ = self::on();
    ON.store(on, Ordering::Relaxed);
    server_timing(on);
}

/// CUDA: the patched CubeCL server times its launch path too (vendor/README.md); its parts are
/// reported as `cubecl server / <part>`, on the device thread's clock (with
/// `replay_on_device_thread` off they overlap the replay's own time).
fn server_timing(on: bool) {
    #[cfg(feature = "cuda")]
    cubecl_cuda::external::profile::set_enabled(on);
    #[cfg(not(feature = "cuda"))]
    let _ = on;
}

pub(crate) fn record(step: &str, elapsed: Duration) {
    add(step, elapsed, false);
}

/// Times `f` as part `part` of the steps of kind `step`, when profiling.
// Its callers are the GPU targets' steps.
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
pub(crate) fn part<T>(step: &str, part: &str, f: impl FnOnce() -> T) -> T {
    if !on() {
        return f();
    }
    let start = std::time::Instant::now();
    let out = f();
    add(&format!("{step} / {part}"), start.elapsed(), true);
    out
}

/// As [`part`], for work that may not happen: counted only when `f` returns `Some`.
pub(crate) fn part_if<T>(step: &str, part: &str, f: impl FnOnce() -> Option<T>) -> Option<T> {
    if !on() {
        return f();
    }
    let start = std::time::Instant::now();
    let out = f();
    if out.is_some() {
        add(&format!("{step} / {part}"), start.elapsed(), true);
    }
    out
}

fn add(step: &str, elapsed: Duration, part: bool) {
    let mut table = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    match table.iter_mut().find(|s| s.step == step) {
        Some(s) => {
            s.count += 1;
            s.total += elapsed;
        }
        None => table.push(StepTime {
            step: step.to_string(),
            count: 1,
            total: elapsed,
            part,
        }),
    }
}

/// The step times so far, largest total first, and resets them.
pub fn take_replay_profile() -> Vec<StepTime> {
    let mut table = std::mem::take(&mut *TABLE.lock().unwrap_or_else(|e| e.into_inner()));
    #[cfg(feature = "cuda")]
    table.extend(
        cubecl_cuda::external::profile::take()
            .into_iter()
            .map(|(part, count, nanos)| StepTime {
                step: format!("cubecl server / {part}"),
                count,
                total: Duration::from_nanos(nanos),
                part: true,
            }),
    );
    table.sort_by_key(|s| std::cmp::Reverse(s.total));
    table
}
