//! Project tasks: `cargo xtask test` (the README's test command) and `cargo xtask bench` (the
//! CPU benchmarks, compiled vs eager in one run each).

use std::process::{Command, ExitCode};
use std::time::Instant;

fn cargo(args: &[&str]) -> bool {
    eprintln!("$ cargo {}", args.join(" "));
    Command::new(env!("CARGO"))
        .args(args)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The README's test command, in order: every crate's unit and integration tests, the doc tests,
/// then the inner-Fusion test in a build of its own (with burn-cubecl's `fusion` feature on, the
/// raw CubeBackend is not `BackendIr`: that test cannot share the first build). The examples are
/// not built here: they are not tests, and clippy (`--all-targets`) checks that they compile.
const TEST_STEPS: [&[&str]; 3] = [
    &[
        "test",
        "--workspace",
        "--features",
        "burn-compile/wgpu",
        "--lib",
        "--bins",
        "--tests",
    ],
    &[
        "test",
        "--workspace",
        "--features",
        "burn-compile/wgpu",
        "--doc",
    ],
    // `--workspace` and the first step's features too: cargo unifies features over the packages
    // it is asked for, so this build shares every dependency that `fusion` does not change.
    &[
        "test",
        "--workspace",
        "--features",
        "burn-compile/wgpu,burn-compile/wgpu-fusion",
        "--test",
        "wgpu_fusion",
    ],
];

/// Runs the test steps (`--no-run`: builds them only), each timed.
fn test(extra: &[String]) -> bool {
    let no_run = extra.iter().any(|a| a == "--no-run");
    for step in TEST_STEPS {
        if no_run && step.contains(&"--doc") {
            // Cargo cannot build doc tests without running them: they are built in `test`.
            continue;
        }
        let mut args: Vec<&str> = step.to_vec();
        args.extend(extra.iter().map(String::as_str));
        let started = Instant::now();
        let ok = cargo(&args);
        eprintln!(
            "xtask: `cargo {}` took {:.0?}",
            args.join(" "),
            started.elapsed()
        );
        if !ok {
            return false;
        }
    }
    true
}

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let ok = match task.as_str() {
        "test" => test(&std::env::args().skip(2).collect::<Vec<_>>()),
        "bench" => {
            let example = |name: &str, extra: &[&str]| {
                let mut args = vec!["run", "--release", "-p", "burn-compile-examples"];
                args.extend(["--example", name]);
                if !extra.is_empty() {
                    args.push("--");
                    args.extend(extra);
                }
                cargo(&args)
            };
            example("capture_overhead", &[])
                && example("transformer_encoder", &[])
                // The C kernels of Compiled<Flex> against Flex eager, cold and warm builds.
                && example("cpu_bench", &[])
                && example("w1_bench", &["--cpu"])
                // A Learner training run, compiled against eager, per epoch.
                && example("train_digits", &[])
                // A GPT trained on text, compiled against eager, per step.
                && example("train_gpt", &[])
        }
        _ => {
            eprintln!("usage: cargo xtask <test|bench>");
            eprintln!(
                "  test   all tests: workspace (lib, bins, tests; doc tests) + inner-Fusion build \
                 (wgpu tests need Vulkan); `test --no-run` builds them only"
            );
            eprintln!(
                "  bench  CPU benchmarks: capture overhead, W1 (small), C kernels (cpu_bench), \
                 W1-cpu, a Learner run on the UCI digits (train_digits); compiled vs eager"
            );
            return ExitCode::from(2);
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
