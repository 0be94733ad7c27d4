//! The integration tests of burn-compile, one module per file, built as one binary: one compile
//! and one link of the Burn code they instantiate instead of one per file (most of what CI's
//! build spent).
//!
//! Each module still runs in a process of its own, as when each file was a binary: many modules
//! change process-wide state (the one Flex device's configuration, the stance, the plan cache
//! whose families and recompiles decide which kernels run). The first line of every test,
//! `own_process!`, runs the test's whole module in a child process of this binary (once per
//! module, its tests in parallel threads there) and reports the test's own outcome from it.
//! A filtered run still runs the whole module of each selected test; to run tests in the
//! harness's own process, name the module: `BURN_COMPILE_TEST_MODULE=shapes cargo test -p
//! burn-compile --test integration shapes::`.

#[path = "../support/mod.rs"]
mod support;

mod accuracy;
mod autodiff;
mod back_pressure;
mod backend_gaps;
mod capture;
mod column_sums;
mod compile_fallback;
mod cpu_build_failures;
mod cpu_kernels;
mod data_parallel;
mod differential;
mod disk_cache;
mod eager_closes_all;
mod eager_region;
mod execution;
mod horizontal;
mod inner_panic;
mod jit;
mod loop_settles;
mod plan_offline;
mod recompile_limit;
mod relu_masks;
mod shapes;
mod soak;
mod stance;
mod sync_execution;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

/// The environment variable naming the module a child process runs.
const CHILD: &str = "BURN_COMPILE_TEST_MODULE";

/// The first line of each test: in the harness's process, runs the test's module in a child
/// process and returns if the test passed there (panics with its output otherwise); in the
/// module's child process, lets the test's body run.
macro_rules! own_process {
    ($test:ident) => {
        if !$crate::in_own_process(module_path!(), stringify!($test)) {
            return;
        }
    };
}
pub(crate) use own_process;

/// What a module's child process printed, and how it ended.
struct ModuleRun {
    stdout: String,
    stderr: String,
    status: std::process::ExitStatus,
}

/// Whether this is the test's module's own process; if not, runs the module there (once) and
/// checks the test's outcome.
pub fn in_own_process(module_path: &str, test: &str) -> bool {
    // `module_path!()` is `integration::module[::inner…]`; the harness names tests without
    // the crate.
    let path = module_path.split_once("::").map_or("", |(_, rest)| rest);
    let module = path.split("::").next().unwrap_or(path);
    if let Ok(child) = std::env::var(CHILD) {
        // A module's process runs only that module (its filter is the module's prefix).
        assert_eq!(
            child, module,
            "{path}::{test} ran in the process of another module"
        );
        return true;
    }
    let name = format!("{path}::{test}");
    let run = module_run(module);
    let passed = format!("test {name} ... ok");
    if run.stdout.lines().any(|line| line == passed) {
        return false;
    }
    // Everything the module printed: its other tests' output helps when a module-wide state
    // is the cause.
    panic!(
        "{name} did not pass in its module's process ({}):\n{}\n{}",
        run.status, run.stdout, run.stderr
    );
}

/// Runs `module`'s tests in a child process, once per harness process.
fn module_run(module: &str) -> Arc<ModuleRun> {
    type Slot = Arc<OnceLock<Arc<ModuleRun>>>;
    static RUNS: Mutex<BTreeMap<String, Slot>> = Mutex::new(BTreeMap::new());
    let cell = RUNS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(module.to_string())
        .or_default()
        .clone();
    cell.get_or_init(|| {
        let out = Command::new(std::env::current_exe().expect("the test binary"))
            // Every test of the module (names start with `module::`), none other.
            .arg(format!("{module}::"))
            .env(CHILD, module)
            .output()
            .expect("spawning the module's process");
        Arc::new(ModuleRun {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            status: out.status,
        })
    })
    .clone()
}
