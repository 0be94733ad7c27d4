//! A progress bar for compile work that takes long: a spinner on the terminal once the work
//! has run for a second (quicker work draws nothing), cleared when it ends with one line that
//! says how long it took. Not drawn where stderr is not a terminal (indicatif hides it).

use indicatif::{ProgressBar, ProgressStyle};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long work runs before its spinner shows.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// Runs `f`, drawing a spinner labelled `what` if it takes longer than [`SHOW_AFTER`].
pub(crate) fn long_work<R>(what: &str, f: impl FnOnce() -> R) -> R {
    let _span = tracing::info_span!(target: "burn_compile", "compile_work", what).entered();
    let (done, wait) = mpsc::channel::<()>();
    let label = what.to_string();
    let start = Instant::now();
    // The spinner lives on a thread of its own: `f` blocks (a C compiler, NVRTC).
    let spinner = std::thread::Builder::new()
        .name("burn-compile-progress".into())
        .spawn(move || {
            if wait.recv_timeout(SHOW_AFTER) != Err(mpsc::RecvTimeoutError::Timeout) {
                return;
            }
            let bar = ProgressBar::new_spinner().with_message(format!("burn-compile: {label}"));
            if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(100));
            let _ = wait.recv();
            bar.finish_and_clear();
            if !bar.is_hidden() {
                eprintln!("burn-compile: {label}: {:.1?}", start.elapsed());
            }
        })
        .ok();
    let result = f();
    drop(done);
    if let Some(spinner) = spinner {
        let _ = spinner.join();
    }
    result
}
