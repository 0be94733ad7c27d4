//! Reference workload W1: Burn's `TransformerEncoder` (d_model 512, 8 heads, 6 layers, d_ff 2048,
//! ReLU, batch 32 × seq 128), eager vs `Compiled<…>` on the same backend, for inference and for a
//! training step (forward + mean(out²) + backward + Adam).
//!
//! ```text
//! cargo run -p burn-compile-examples --example transformer_encoder             # CPU, small preset
//! cargo run -p burn-compile-examples --example transformer_encoder -- --full   # CPU, W1 sizes
//! cargo run -p burn-compile-examples --example transformer_encoder --features wgpu
//! cargo run -p burn-compile-examples --example transformer_encoder --features cuda
//! ```
//!
//! Size flags: `--small`, `--full`, `--d-model N --heads N --layers N --d-ff N --batch N --seq N
//! --iters N --warmup N --rounds N` (flags after a preset override it). Timed iterations run in
//! rounds that alternate eager and compiled; each figure is the median round. On CPU the default is `--small`
//! (quick on a 2-core machine); on a GPU backend it is `--full`. Each iteration ends with
//! `burn_compile::mark_step()` (a no-op for the eager backend); `--no-mark-step` leaves the loops
//! unmarked, so the compiled run relies on the size limit and loop-period detection instead.

use burn::module::Module;
use burn::nn::transformer::{TransformerEncoder, TransformerEncoderConfig};
use burn::optim::AdamConfig;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor, TensorData};
use burn_compile::{BreakReason, Compiled, Explanation, Metrics, explain, mark_step, metrics};
use burn_compile_examples::{
    CollectWeights, encoder_config, forward, input_data, model_with, train_step,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

// The backend pair: eager `E` and `Compiled<E>`. CUDA wins when both GPU features are on.
#[cfg(feature = "cuda")]
type Eager = burn_compile::Cuda;
#[cfg(feature = "cuda")]
const BACKEND: &str = "cuda (burn_compile::Cuda)";

#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
type Eager = burn_compile::Wgpu;
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
const BACKEND: &str = "wgpu (burn_compile::Wgpu)";

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
type Eager = burn_flex::Flex;
#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
const BACKEND: &str = "cpu (burn_flex::Flex)";

const ON_GPU: bool = cfg!(any(feature = "wgpu", feature = "cuda"));

type Comp = Compiled<Eager>;
type Ad<B> = burn::backend::Autodiff<B>;

/// Max abs difference allowed between compiled and eager inference outputs.
const TOLERANCE: f32 = 1e-3;

#[derive(Clone, Debug)]
struct Sizes {
    d_model: usize,
    heads: usize,
    layers: usize,
    d_ff: usize,
    batch: usize,
    seq: usize,
    iters: usize,
    warmup: usize,
    /// Timed iterations are split into this many rounds, alternating eager and compiled.
    rounds: usize,
    preset: &'static str,
    /// Call `mark_step()` after each iteration (a no-op on the eager backend).
    mark_steps: bool,
}

impl Sizes {
    fn small() -> Self {
        Self {
            d_model: 64,
            heads: 4,
            layers: 2,
            d_ff: 128,
            batch: 4,
            seq: 16,
            iters: 50,
            warmup: 10,
            rounds: 10,
            preset: "small",
            mark_steps: true,
        }
    }

    fn full() -> Self {
        Self {
            d_model: 512,
            heads: 8,
            layers: 6,
            d_ff: 2048,
            batch: 32,
            seq: 128,
            iters: if ON_GPU { 20 } else { 3 },
            warmup: if ON_GPU { 5 } else { 1 },
            rounds: if ON_GPU { 5 } else { 3 },
            preset: "full (W1)",
            mark_steps: true,
        }
    }

    fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let args: Vec<String> = args.into_iter().collect();
        let mut sizes = if ON_GPU { Self::full() } else { Self::small() };
        let mut customized = false;
        let mut mark_steps = true;
        let mut i = 0;
        while i < args.len() {
            let flag = args[i].as_str();
            match flag {
                "--small" => sizes = Self::small(),
                "--full" => sizes = Self::full(),
                "--no-mark-step" => mark_steps = false,
                "-h" | "--help" => return Err(String::new()),
                "--d-model" | "--heads" | "--layers" | "--d-ff" | "--batch" | "--seq"
                | "--iters" | "--warmup" | "--rounds" => {
                    let value = args
                        .get(i + 1)
                        .ok_or_else(|| format!("{flag} needs a value"))?;
                    let n: usize = value.parse().map_err(|_| {
                        format!("{flag} {value:?}: expected a non-negative integer")
                    })?;
                    let min = if flag == "--warmup" { 0 } else { 1 };
                    if n < min {
                        return Err(format!("{flag} must be at least {min}"));
                    }
                    match flag {
                        "--d-model" => sizes.d_model = n,
                        "--heads" => sizes.heads = n,
                        "--layers" => sizes.layers = n,
                        "--d-ff" => sizes.d_ff = n,
                        "--batch" => sizes.batch = n,
                        "--seq" => sizes.seq = n,
                        "--iters" => sizes.iters = n,
                        "--rounds" => sizes.rounds = n,
                        _ => sizes.warmup = n,
                    }
                    // Iteration counts keep the preset's name; sizes make it custom.
                    customized |= !matches!(flag, "--iters" | "--warmup" | "--rounds");
                    i += 1;
                }
                other => return Err(format!("unknown argument {other:?}")),
            }
            i += 1;
        }
        if sizes.d_model % sizes.heads != 0 {
            return Err(format!(
                "--d-model {} must be divisible by --heads {}",
                sizes.d_model, sizes.heads
            ));
        }
        if customized {
            sizes.preset = "custom";
        }
        sizes.mark_steps = mark_steps;
        Ok(sizes)
    }

    fn config(&self) -> TransformerEncoderConfig {
        encoder_config(self.d_model, self.d_ff, self.heads, self.layers)
    }
}

const USAGE: &str = "usage: transformer_encoder [--small | --full] [--d-model N] [--heads N] \
[--layers N] [--d-ff N] [--batch N] [--seq N] [--iters N] [--warmup N] [--rounds N] \
[--no-mark-step]";

// ---------------------------------------------------------------------------------------------
// Identical weights and inputs on every backend.

// ---------------------------------------------------------------------------------------------
// The workload.

fn ms_per_iter(elapsed: Duration, iters: usize) -> f64 {
    elapsed.as_secs_f64() * 1e3 / iters as f64
}

type Adam<B> = OptimizerAdaptor<burn::optim::Adam, TransformerEncoder<Ad<B>>, Ad<B>>;

/// The workload on one backend, kept alive across timing rounds so that eager and compiled
/// rounds can alternate (a shared machine's load then affects both alike).
struct Workload<B: Backend> {
    device: B::Device,
    x: Tensor<B, 3>,
    model: TransformerEncoder<B>,
    xa: Tensor<Ad<B>, 3>,
    train_model: Option<TransformerEncoder<Ad<B>>>,
    optim: Adam<B>,
    mark_steps: bool,
    /// Output of the first forward pass (before any training).
    output: TensorData,
    /// Loss of the last training step.
    last_loss: Option<Tensor<B, 1>>,
}

impl<B: Backend> Workload<B> {
    fn new(sizes: &Sizes, weights: &[TensorData], input: &TensorData) -> Self {
        let device = B::Device::default();
        let x = Tensor::<B, 3>::from_data(input.clone(), &device);
        let model = model_with::<B>(&sizes.config(), weights, &device);
        let output = forward(&model, &x).into_data();
        Self {
            xa: Tensor::from_data(input.clone(), &device),
            train_model: Some(model_with::<Ad<B>>(&sizes.config(), weights, &device)),
            optim: AdamConfig::new().init(),
            mark_steps: sizes.mark_steps,
            output,
            last_loss: None,
            device,
            x,
            model,
        }
    }

    fn step_end(&self) {
        if self.mark_steps {
            mark_step();
        }
    }

    /// Runs `n` forward passes; returns the time until the device finished them.
    fn infer(&mut self, n: usize) -> Duration {
        let mut outs = Vec::with_capacity(n);
        let start = Instant::now();
        for _ in 0..n {
            outs.push(forward(&self.model, &self.x));
            self.step_end();
        }
        B::sync(&self.device).expect("sync");
        start.elapsed()
    }

    fn train_once(&mut self) {
        let model = self
            .train_model
            .take()
            .expect("model present between steps");
        let (model, loss) = train_step(model, &mut self.optim, &self.xa);
        self.train_model = Some(model);
        self.last_loss = Some(loss);
    }

    /// Runs `n` training steps; returns the time until the device finished them.
    fn train(&mut self, n: usize) -> Duration {
        let start = Instant::now();
        for _ in 0..n {
            self.train_once();
            self.step_end();
        }
        B::sync(&self.device).expect("sync");
        start.elapsed()
    }

    /// Explains one warm training step (after one step that aligns the graph boundaries on
    /// the step: `explain` closes the pending graph on entry and exit).
    fn explain_step(&mut self) -> Explanation {
        let _ = explain(|| self.train_once());
        explain(|| self.train_once()).1
    }

    fn last_loss(&self) -> f64 {
        let loss = self.last_loss.clone().expect("trained");
        loss.into_scalar().elem()
    }
}

/// Median of per-round times, in ms per iteration.
fn median_ms(mut rounds: Vec<Duration>, iters: usize) -> f64 {
    rounds.sort();
    ms_per_iter(rounds[rounds.len() / 2], iters)
}

fn print_summary(report: &Explanation) {
    let ops: usize = report.ops_per_graph.iter().sum();
    let compile: Duration = report.compile_times.iter().sum();
    let launches: usize = report.graphs.iter().map(|g| g.launches).sum();
    let dead: usize = report.graphs.iter().map(|g| g.dead).sum();
    println!(
        "  {} graph(s), {} break(s), cache {} hit(s) / {} miss(es), compile {:?}",
        report.graph_count,
        report.graph_break_count,
        report.cache_hits,
        report.cache_misses,
        compile
    );
    println!(
        "  {ops} ops recorded (per graph: {:?}), {launches} launches, {dead} dead",
        report.ops_per_graph
    );
    // Distinct breaks, with how often each occurred.
    let mut distinct: Vec<(String, usize)> = Vec::new();
    for b in &report.break_reasons {
        let line = b.to_string();
        match distinct.iter_mut().find(|(l, _)| *l == line) {
            Some((_, n)) => *n += 1,
            None => distinct.push((line, 1)),
        }
    }
    const SHOWN: usize = 8;
    for (line, n) in distinct.iter().take(SHOWN) {
        println!("  break ×{n}: {line}");
    }
    if distinct.len() > SHOWN {
        println!("  … {} more distinct break(s)", distinct.len() - SHOWN);
    }
}

fn print_metrics(m: &Metrics) {
    println!(
        "burn-compile metrics (compiled run): {} graphs, cache {} hits / {} misses, compile {:?}",
        m.graphs, m.cache_hits, m.cache_misses, m.compile_time
    );
    println!(
        "  ops: {} recorded, {} executed through plans, {} eliminated as dead, {} eager",
        m.ops_recorded, m.ops_executed, m.ops_eliminated, m.eager_ops
    );
    let breaks: Vec<String> = m
        .breaks
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| format!("{}={n}", BreakReason::name(*r)))
        .collect();
    println!(
        "  breaks: {}",
        if breaks.is_empty() {
            "none".to_string()
        } else {
            breaks.join(", ")
        }
    );
}

fn max_abs_diff(a: &TensorData, b: &TensorData) -> f32 {
    assert_eq!(a.shape, b.shape, "output shapes differ");
    a.iter::<f32>()
        .zip(b.iter::<f32>())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, |m, d| if d.is_nan() { f32::NAN } else { m.max(d) })
}

fn main() -> ExitCode {
    // BURN_COMPILE_LOGS=graph_breaks,recompiles,graphs,output_code (docs/guide.md, "Metrics and
    // tracing").
    burn_compile::init_logs();
    let sizes = match Sizes::parse(std::env::args().skip(1)) {
        Ok(s) => s,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("{USAGE}");
            return if e.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    println!("backend: {BACKEND}: eager vs Compiled<…>");
    println!(
        "sizes ({}): d_model {}, heads {}, layers {}, d_ff {}, batch {}, seq {}, ReLU, dropout 0; \
         {} warmup + {} timed iterations, {}",
        sizes.preset,
        sizes.d_model,
        sizes.heads,
        sizes.layers,
        sizes.d_ff,
        sizes.batch,
        sizes.seq,
        sizes.warmup,
        sizes.iters,
        if sizes.mark_steps {
            "mark_step() after each iteration"
        } else {
            "no step marks (--no-mark-step)"
        }
    );
    if !ON_GPU && sizes.preset == "small" {
        println!("(CPU default is the small preset; pass --full for the W1 sizes)");
    }

    // Weights from one initialization, inputs from a fixed seed: the same on both backends.
    let weights = {
        let mut collect = CollectWeights(Vec::new());
        sizes
            .config()
            .init::<Eager>(&Default::default())
            .visit(&mut collect);
        collect.0
    };
    let input = input_data([sizes.batch, sizes.seq, sizes.d_model], 42);

    let mut eager = Workload::<Eager>::new(&sizes, &weights, &input);
    let before = metrics();
    let mut compiled = Workload::<Comp>::new(&sizes, &weights, &input);

    // Warm-up (autotune, kernel compilation, first graphs and plans), then one explained
    // training step of each (only the compiled one has graphs to report).
    let warmup = sizes.warmup.max(1);
    eager.infer(warmup);
    compiled.infer(warmup);
    eager.train(warmup);
    compiled.train(warmup);
    // Eager takes the same two steps, so both sides' losses stay comparable.
    let _ = eager.explain_step();
    let report = compiled.explain_step();
    println!("[compiled] explain of one warm training step:");
    print_summary(&report);

    // Timed rounds, alternating eager and compiled; each figure is the median over rounds.
    let rounds = sizes.rounds.min(sizes.iters);
    let per_round = sizes.iters.div_ceil(rounds);
    let (mut ei, mut ci, mut et, mut ct) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        ei.push(eager.infer(per_round));
        ci.push(compiled.infer(per_round));
        et.push(eager.train(per_round));
        ct.push(compiled.train(per_round));
    }
    let delta = metrics().since(&before);
    let eager_result = (median_ms(ei, per_round), median_ms(et, per_round));
    let compiled_result = (median_ms(ci, per_round), median_ms(ct, per_round));

    let diff = max_abs_diff(&eager.output, &compiled.output);
    let ok = diff <= TOLERANCE;
    println!(
        "correctness: inference output max |compiled - eager| = {diff:.3e} (tolerance {TOLERANCE:e}): {}",
        if ok { "OK" } else { "FAILED" }
    );
    let (eager_loss, compiled_loss) = (eager.last_loss(), compiled.last_loss());
    let loss_diff = (eager_loss - compiled_loss).abs();
    println!(
        "training: last loss eager {eager_loss:.6}, compiled {compiled_loss:.6} (|diff| {loss_diff:.3e}, same number of steps)"
    );

    println!();
    println!(
        "median of {rounds} alternating rounds of {per_round} iteration(s) each, ms per iteration:"
    );
    println!(
        "{:<22} {:>12} {:>14} {:>20}",
        "phase", "eager ms", "compiled ms", "ratio eager/compiled"
    );
    for (phase, e, c) in [
        ("inference (forward)", eager_result.0, compiled_result.0),
        ("train step", eager_result.1, compiled_result.1),
    ] {
        println!("{phase:<22} {e:>12.3} {c:>14.3} {:>20.3}", e / c);
    }
    println!();
    print_metrics(&delta);

    if ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("error: compiled and eager inference outputs differ by {diff:e} > {TOLERANCE:e}");
        ExitCode::FAILURE
    }
}
