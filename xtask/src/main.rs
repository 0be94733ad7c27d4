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
        }
        _ => {
            eprintln!("usage: cargo xtask <test|bench>");
            eprintln!(
                "  test   all tests: workspace + inner-Fusion build (wgpu tests need Vulkan)"
            );
            eprintln!(
                "  bench  CPU benchmarks: capture overhead, W1 (small), C kernels (cpu_bench), \
                 W1-cpu; compiled vs eager"
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
