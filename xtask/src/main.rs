//! Project tasks: `cargo xtask test` (the README's test command) and `cargo xtask bench`
//! (the CPU benchmarks, compiled vs eager in one run each).

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
        "test" => cargo(&["test", "--workspace", "--features", "burn-compile/wgpu"]),
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
            eprintln!("  test   the README's test command (wgpu tests need a Vulkan adapter)");
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
