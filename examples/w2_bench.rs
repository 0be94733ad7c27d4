//! W2: one training step of GPT-2 small (`transformers`' `GPT2Config()`: 50,257 tokens, context
//! 1024, 12 layers of d 768, 12 heads, tied head; no dropout) on a batch of 8 × 1024 random
//! tokens — forward, cross-entropy of the next token, backward, AdamW — on Burn eager and on
//! `Compiled`, from the same weights and tokens; one JSON line per system
//! (`"workload":"W2"`). torch.compile's figures come from `benchmarks/h200/torch_workloads.py`.
//!
//! ```text
//! CUDARC_CUDA_VERSION=13000 cargo build --release -p burn-compile-examples --example w2_bench --features cuda
//! ./w2_bench --dtypes bf16 [--iters N] [--warmup N] [--out FILE] [--systems burn-compile]
//! # A smoke run of the same program on the CPU (a tiny GPT on Flex):
//! cargo run --release -p burn-compile-examples --example w2_bench -- --small
//! ```
//!
//! Timing as `w1_bench` (`burn_compile_examples::time_calls`): the first call alone (autotune,
//! kernel compilation, the first graphs), warm-up, then `iters` steps with their losses kept
//! alive and one sync. The first step's loss of each system is printed and compared with
//! eager's (the dtype's tolerance of `burn_compile::incident::tolerance`); a difference beyond
//! it fails the run. `BENCH_GPU` and `BENCH_DATE` fill the `gpu` and `date` fields.

use burn::module::Module;
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use burn_compile_examples::gpt::{Gpt, GptConfig};
use burn_compile_examples::{BenchOptions, CollectWeights, bench_mode, load_weights, time_calls};
use std::process::ExitCode;

type Ad<B> = burn::backend::Autodiff<B>;

use burn_compile_examples::bench_backend::{Elem, Inner};

const LEARNING_RATE: f64 = 1e-4;
const SYSTEMS: &[&str] = &["burn-eager", "burn-compile"];

/// What one system measured.
struct Figure {
    system: &'static str,
    first_loss: f64,
    /// Per call: wall, first call, issue and host times.
    timing: burn_compile_examples::Timing,
}

/// Reproducible tokens below `vocab`: `[batch, context + 1]` (inputs and next-token targets).
fn tokens(batch: usize, context: usize, vocab: usize) -> TensorData {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let values: Vec<i64> = (0..batch * (context + 1))
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % vocab as u64) as i64
        })
        .collect();
    TensorData::new(values, [batch, context + 1])
}

/// The training step of `system` on backend `B`, from `weights`: the first step's loss and the
/// timing of the later ones.
fn measure<B: AutodiffBackend>(
    system: &'static str,
    config: &GptConfig,
    weights: &[TensorData],
    tokens: &TensorData,
    o: &BenchOptions,
) -> Figure {
    let device = B::Device::default();
    let mut model = Some(load_weights(
        Gpt::<B>::new(config, &device),
        weights,
        &device,
    ));
    let all = Tensor::<B, 2, Int>::from_data(tokens.clone(), &device);
    let [batch, len] = all.dims();
    let inputs = all.clone().slice([0..batch, 0..len - 1]);
    let targets = all.slice([0..batch, 1..len]);
    let mut optim = AdamWConfig::new().init::<B, Gpt<B>>();
    let mut step = || {
        let m = model.take().expect("the model");
        let loss = m.loss(inputs.clone(), targets.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &m);
        model = Some(optim.step(LEARNING_RATE, m, grads));
        loss.inner()
    };
    // The first step's loss, read (its own step, before the timing).
    let first_loss = step().into_scalar().elem::<f64>();
    let timing = time_calls::<B, _>(&device, o.iters, o.warmup, &mut step);
    Figure {
        system,
        first_loss,
        timing,
    }
}

/// A GPT's parameters drawn (seeded) on `B`, once for both systems.
fn initial_weights<B: Backend>(config: &GptConfig) -> Vec<TensorData> {
    let device = B::Device::default();
    B::seed(&device, 7);
    let mut collect = CollectWeights(Vec::new());
    Gpt::<B>::new(config, &device).visit(&mut collect);
    collect.0
}

fn run<F: Elem>(o: &BenchOptions, config: &GptConfig, batch: usize) -> Result<Vec<Figure>, String>
where
    Inner<F>: Backend,
    burn_compile::Compiled<Inner<F>>: Backend,
{
    let weights = initial_weights::<Inner<F>>(config);
    let tokens = tokens(batch, config.context, config.vocab);
    let mut figures = Vec::new();
    for system in SYSTEMS.iter().filter(|s| o.systems.iter().any(|o| o == *s)) {
        let figure = match *system {
            "burn-compile" => measure::<Ad<burn_compile::Compiled<Inner<F>>>>(
                system, config, &weights, &tokens, o,
            ),
            _ => measure::<Ad<Inner<F>>>(system, config, &weights, &tokens, o),
        };
        eprintln!(
            "{system} {}: first loss {:.6}, {:.3} ms/step (issued in {:.3} ms), first call {:.2} s",
            o.dtype,
            figure.first_loss,
            figure.timing.ms,
            figure.timing.issue_ms,
            figure.timing.first_call_s
        );
        figures.push(figure);
    }
    Ok(figures)
}

fn main() -> ExitCode {
    // `BURN_COMPILE_LOGS=graphs`: each new plan's launches and the ops it leaves to the inner
    // backend.
    burn_compile::init_logs();
    let o = match BenchOptions::parse_or_usage(
        SYSTEMS,
        "w2_bench [--dtypes f32|bf16] [--iters N] [--warmup N] [--small] [--out FILE] \
         [--systems S,…]",
    ) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let (config, batch, workload) = if o.small {
        let small = GptConfig {
            vocab: 512,
            context: 64,
            d_model: 64,
            heads: 2,
            layers: 2,
            tied: true,
        };
        (small, 2, "W2-small")
    } else {
        (GptConfig::GPT2_SMALL, 8, "W2")
    };
    let figures = match o.dtype.as_str() {
        // Burn's CPU backend is instantiated for f32 only here.
        #[cfg(feature = "cuda")]
        "bf16" => run::<burn::tensor::bf16>(&o, &config, batch),
        "f32" => run::<f32>(&o, &config, batch),
        other => Err(format!("no {other} build of this program without CUDA")),
    };
    let figures = match figures {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let loss = |system: &str| {
        figures
            .iter()
            .find(|f| f.system == system)
            .map(|f| f.first_loss)
    };
    let agree = o.first_losses_agree(loss("burn-eager"), loss("burn-compile"));
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| "unknown".into());
    let lines: Vec<String> = figures
        .iter()
        .map(|f| {
            format!(
                "{{\"workload\":\"{workload}\",\"dtype\":\"{}\",\"phase\":\"train\",\"system\":\"{}\",\"mode\":\"{}\",\"ms\":{:.4},\"first_call_s\":{:.3},\"issue_ms\":{:.4},\"host_ms\":{:.4},\"first_loss\":{:.6},\"tokens_per_s\":{:.0},\"date\":\"{}\",\"gpu\":\"{}\"}}",
                o.dtype,
                f.system,
                bench_mode(f.system),
                f.timing.ms,
                f.timing.first_call_s,
                f.timing.issue_ms,
                f.timing.host_ms,
                f.first_loss,
                (batch * config.context) as f64 / (f.timing.ms / 1e3),
                env("BENCH_DATE"),
                env("BENCH_GPU"),
            )
        })
        .collect();
    o.finish(&lines, agree)
}
