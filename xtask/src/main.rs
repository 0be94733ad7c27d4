//! Project tasks: `cargo xtask test` (the README's test command: the workspace tests, then the
//! inner-Fusion test in its own build) and `cargo xtask bench` (the CPU benchmarks, compiled vs
//! eager in one run each).

use std::process::{Command, ExitCode};

fn cargo(args: &[&str]) -> bool {
    eprintln!("$ cargo {}", args.join(" "));
    Command::new(env!("CARGO"))
        .args(args)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let ok = match task.as_str() {
        "test" => {
            cargo(&["test", "--workspace", "--features", "burn-compile/wgpu"])
                // With burn-cubecl's `fusion` feature on, the raw CubeBackend is not
                // `BackendIr`: the Fusion-inner test cannot share the build above.
                && cargo(&[
                    "test",
                    "-p",
                    "burn-compile",
                    "--features",
                    "wgpu-fusion",
                    "--test",
                    "wgpu_fusion",
                ])
        }
        "bench" => {
            cargo(&[
                "run",
                "-p",
                "burn-compile-examples",
                "--example",
                "capture_overhead",
            ]) && cargo(&[
                "run",
                "-p",
                "burn-compile-examples",
                "--example",
                "transformer_encoder",
            ])
        }
        _ => {
            eprintln!("usage: cargo xtask <test|bench>");
            eprintln!(
                "  test   all tests: workspace + inner-Fusion build (wgpu tests need Vulkan)"
            );
            eprintln!("  bench  CPU benchmarks: capture overhead, W1 (small) compiled vs eager");
            return ExitCode::from(2);
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
