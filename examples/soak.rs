//! A long training run must not grow: the small W1 preset trained for many steps on
//! `Compiled<Flex>`, with the process's resident memory and the plan caches' size sampled every
//! `--every` steps. After warm-up both must stay flat; the run fails (exit code 1) when the plans
//! grow after the second sample, or resident memory by more than 10 % plus 16 MiB from the
//! second sample to the last. (The step after the first sample's read records one graph of its
//! own — the loss it read is dropped at another point of the op stream — compiled once.)
//!
//! ```text
//! cargo run --release -p burn-compile-examples --example soak [-- --steps 10000 --every 1000]
//! ```

use burn::optim::AdamConfig;
use burn::tensor::{ElementConversion, Tensor};
use burn_compile::{Compiled, cached_plans, mark_step, metrics};
use burn_compile_examples::{CollectWeights, encoder_config, input_data, model_with, train_step};
use burn_flex::Flex;
use std::process::ExitCode;
use std::time::Instant;

type B = burn::backend::Autodiff<Compiled<Flex>>;

/// Resident memory of this process, in bytes (Linux: `VmRSS` of `/proc/self/status`).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn flag(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, not {v}"))
        })
        .unwrap_or(default)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let steps = flag(&args, "--steps", 10_000);
    let every = flag(&args, "--every", 1_000).max(1);
    let device = Default::default();
    // The small preset of `transformer_encoder`: d_model 64, d_ff 128, 4 heads, 2 layers,
    // batch 4 × 16 tokens; weights from a fresh model, Adam.
    let config = encoder_config(64, 128, 4, 2);
    let weights = {
        use burn::module::Module;
        let mut collect = CollectWeights(Vec::new());
        config.init::<Flex>(&device).visit(&mut collect);
        collect.0
    };
    let mut model = model_with::<B>(&config, &weights, &device);
    let mut optim = AdamConfig::new().init();
    let x = Tensor::<B, 3>::from_data(input_data([4, 16, 64], 7), &device);

    println!("soak: {steps} training steps of the small W1 preset on Compiled<Flex>");
    println!(
        "{:>7} {:>12} {:>7} {:>10} {:>10} {:>10}",
        "step", "resident MiB", "plans", "compiles", "ms/step", "loss"
    );
    let mut samples: Vec<(usize, u64, usize)> = Vec::new();
    let mut last = Instant::now();
    for step in 1..=steps {
        let (next, loss) = train_step(model, &mut optim, &x);
        model = next;
        mark_step();
        if step % every == 0 || step == steps {
            // The read waits for the step's graphs: memory is sampled with them done.
            let loss: f32 = loss.into_scalar().elem();
            let rss = resident_bytes().unwrap_or(0);
            let plans = cached_plans();
            let ms = last.elapsed().as_secs_f64() * 1e3 / every as f64;
            last = Instant::now();
            println!(
                "{step:>7} {:>12.1} {plans:>7} {:>10} {ms:>10.2} {loss:>10.5}",
                rss as f64 / (1 << 20) as f64,
                metrics().cache_misses,
            );
            samples.push((step, rss, plans));
        }
    }
    let (Some(first), Some(end)) = (samples.get(1), samples.last()) else {
        println!("fewer than two samples: nothing to compare (raise --steps)");
        return ExitCode::SUCCESS;
    };
    let allowed = first.1 + first.1 / 10 + (16 << 20);
    let plans_flat = samples[1..].iter().all(|s| s.2 == first.2);
    let memory_flat = end.1 <= allowed;
    println!(
        "from step {} to {}: resident {:.1} -> {:.1} MiB (allowed up to {:.1}), plans {} -> {}: {}",
        first.0,
        end.0,
        first.1 as f64 / (1 << 20) as f64,
        end.1 as f64 / (1 << 20) as f64,
        allowed as f64 / (1 << 20) as f64,
        first.2,
        end.2,
        if plans_flat && memory_flat {
            "flat"
        } else {
            "GREW"
        }
    );
    if plans_flat && memory_flat {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
