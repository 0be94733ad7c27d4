//! A GPT trained on real text: this repository's own Rust sources (`crates/**/*.rs`, present
//! wherever the project is built), byte by byte. Causal self-attention with pre-norm blocks
//! (Burn's `TransformerEncoder` with `norm_first` and an autoregressive mask), learned
//! positions, an untied head; Burn's `Dataset` and `DataLoader` (shuffled windows of the
//! training split), AdamW (weight decay 0.1) with gradient clipping by norm, a learning rate
//! warmed up over the first tenth of the steps then decayed on a cosine, periodic evaluation on
//! the held-out last tenth of the text, checkpoints through Burn's `CompactRecorder` (the last
//! one loaded back and evaluated again), a progress bar, and a text sample at the end.
//!
//! The same training runs twice from the same initial weights and batches: on
//! `Autodiff<Compiled<B>>` and on plain `Autodiff<B>`. The first five losses of both must be
//! equal within f32's tolerance (`burn_compile::incident::tolerance`); the summary compares
//! time per step, tokens per second and the final losses. It exits with 1 when a first loss
//! differs, the compiled run's validation loss did not decrease, or the reloaded checkpoint
//! does not evaluate as the model it was saved from.
//!
//! ```text
//! # CPU: Compiled<Flex> against Flex, a small GPT (2 layers, d 128, context 64), 200 steps:
//! cargo run --release -p burn-compile-examples --example train_gpt [-- --steps N] [--data DIR]
//! # CUDA: Compiled<Cuda> against Cuda, GPT-2 small (12 layers, d 768, 12 heads, context 1024),
//! # batch 8, 50 steps:
//! CUDARC_CUDA_VERSION=13000 cargo run --release -p burn-compile-examples --example train_gpt --features cuda
//! ```
//!
//! What runs inside the training step is captured; what reads to the host (the loss shown on
//! the progress bar, every `LOG_EVERY` steps; the evaluations; the sample) ends a graph, so it
//! is kept out of the step.

use burn::data::dataloader::{DataLoaderBuilder, batcher::Batcher};
use burn::data::dataset::Dataset;
use burn::grad_clipping::GradientClippingConfig;
use burn::module::{AutodiffModule, Module};
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::record::CompactRecorder;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, ElementConversion, Int, Tensor, TensorData};
use burn_compile::Compiled;
use burn_compile_examples::gpt::{Gpt, GptConfig};
use burn_compile_examples::{CollectWeights, load_weights};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

type Ad<B> = burn::backend::Autodiff<B>;

#[cfg(not(feature = "cuda"))]
mod target {
    pub type Inner = burn_flex::Flex;
    pub const NAME: &str = "Flex";
    pub const STEPS: usize = 200;
    /// A small GPT for a few CPU cores.
    pub const RUN: super::RunConfig = super::RunConfig {
        gpt: super::GptConfig {
            vocab: super::VOCAB,
            context: 64,
            d_model: 128,
            heads: 4,
            layers: 2,
            tied: false,
        },
        batch: 16,
    };
}

#[cfg(feature = "cuda")]
mod target {
    pub type Inner = burn_cuda::Cuda<f32, i32>;
    pub const NAME: &str = "Cuda";
    pub const STEPS: usize = 50;
    /// GPT-2 small's blocks, on bytes (untied head).
    pub const RUN: super::RunConfig = super::RunConfig {
        gpt: super::GptConfig {
            vocab: super::VOCAB,
            tied: false,
            ..super::GptConfig::GPT2_SMALL
        },
        batch: 8,
    };
}

use target::Inner;

/// Bytes: the vocabulary.
const VOCAB: usize = 256;
/// The loss is read (for the progress bar) every this many steps.
const LOG_EVERY: usize = 10;
/// Validation batches per evaluation.
const EVAL_BATCHES: usize = 8;
/// Steps whose losses must be equal on both backends.
const COMPARED: usize = 5;
const PEAK_LR: f64 = 3e-3;
const SHUFFLE_SEED: u64 = 17;

/// The model and the batch of a run.
#[derive(Clone, Copy, Debug)]
pub struct RunConfig {
    gpt: GptConfig,
    batch: usize,
}

/// The Rust sources under `root` (this repository's `crates/`), in path order, concatenated.
fn corpus(root: &Path) -> Result<Vec<u8>, String> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), String> {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
            if path.is_dir() {
                walk(&path, files)?;
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(root, &mut files)?;
    files.sort();
    let mut text = Vec::new();
    for f in &files {
        text.extend(std::fs::read(f).map_err(|e| format!("{}: {e}", f.display()))?);
    }
    Ok(text)
}

/// Windows of `context + 1` bytes (input and next-byte targets) of a text, one every
/// `context` bytes.
struct Windows {
    text: Arc<Vec<u8>>,
    context: usize,
}

impl Dataset<Vec<u8>> for Windows {
    fn get(&self, index: usize) -> Option<Vec<u8>> {
        let start = index * self.context;
        self.text
            .get(start..start + self.context + 1)
            .map(|w| w.to_vec())
    }

    fn len(&self) -> usize {
        self.text.len().saturating_sub(1) / self.context
    }
}

#[derive(Clone, Debug)]
struct TextBatch<B: Backend> {
    inputs: Tensor<B, 2, Int>,
    targets: Tensor<B, 2, Int>,
}

#[derive(Clone, Default)]
struct TextBatcher;

impl<B: Backend> Batcher<B, Vec<u8>, TextBatch<B>> for TextBatcher {
    fn batch(&self, items: Vec<Vec<u8>>, device: &B::Device) -> TextBatch<B> {
        let (n, len) = (items.len(), items[0].len() - 1);
        let column = |range: std::ops::Range<usize>| -> Vec<i64> {
            items
                .iter()
                .flat_map(|w| w[range.clone()].iter().map(|b| *b as i64))
                .collect()
        };
        TextBatch {
            inputs: Tensor::from_data(TensorData::new(column(0..len), [n, len]), device),
            targets: Tensor::from_data(TensorData::new(column(1..len + 1), [n, len]), device),
        }
    }
}

/// The learning rate of step `step` of `steps`: linear warm-up over the first tenth, then a
/// cosine down to a tenth of the peak.
fn learning_rate(step: usize, steps: usize) -> f64 {
    let warmup = (steps / 10).max(1);
    if step < warmup {
        return PEAK_LR * (step + 1) as f64 / warmup as f64;
    }
    let progress = (step - warmup) as f64 / (steps - warmup).max(1) as f64;
    let floor = PEAK_LR / 10.0;
    floor + (PEAK_LR - floor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
}

fn scalar<B: Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_scalar().elem::<f64>()
}

/// Mean validation loss over the first `EVAL_BATCHES` batches of the held-out text.
fn evaluate<B: Backend>(model: &Gpt<B>, valid: &Windows, batch: usize, device: &B::Device) -> f64 {
    let mut total = 0.0;
    let mut count = 0;
    for b in 0..EVAL_BATCHES {
        let items: Vec<Vec<u8>> = (b * batch..(b + 1) * batch)
            .filter_map(|i| valid.get(i))
            .collect();
        if items.len() < batch {
            break;
        }
        total += scalar({
            let batch: TextBatch<B> = TextBatcher.batch(items, device);
            model.loss(batch.inputs, batch.targets)
        });
        count += 1;
    }
    total / count.max(1) as f64
}

/// `length` bytes sampled from `model` after `prompt` (its last `context` bytes are the
/// window; the window keeps its size, so every step is the same graph), at temperature 0.8
/// with a fixed seed.
fn sample<B: Backend>(model: &Gpt<B>, prompt: &[u8], length: usize, device: &B::Device) -> String {
    let context = prompt.len();
    let mut window: Vec<u8> = prompt.to_vec();
    let mut out = Vec::with_capacity(length);
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..length {
        let tokens: Vec<i64> = window.iter().map(|b| *b as i64).collect();
        let input = Tensor::<B, 2, Int>::from_data(TensorData::new(tokens, [1, context]), device);
        let logits = model
            .forward(input)
            .slice([0..1, context - 1..context, 0..VOCAB])
            .reshape([VOCAB]);
        let logits: Vec<f32> = logits
            .into_data()
            .convert::<f32>()
            .to_vec()
            .expect("floats");
        let max = logits.iter().copied().fold(f32::MIN, f32::max);
        let weights: Vec<f64> = logits
            .iter()
            .map(|l| (((l - max) / 0.8) as f64).exp())
            .collect();
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut pick = (state >> 11) as f64 / (1u64 << 53) as f64 * weights.iter().sum::<f64>();
        let mut byte = VOCAB - 1;
        for (i, w) in weights.iter().enumerate() {
            if pick < *w {
                byte = i;
                break;
            }
            pick -= w;
        }
        out.push(byte as u8);
        window.remove(0);
        window.push(byte as u8);
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Run {
    /// The first `COMPARED` training losses.
    first_losses: Vec<f64>,
    /// The training loss of the last logged step.
    final_loss: f64,
    /// Validation loss before training, and at each evaluation (step, loss).
    valid_before: f64,
    evaluations: Vec<(usize, f64)>,
    /// Seconds per step over the steps after the first tenth (compiles and warm-up excluded).
    step_s: f64,
    /// Seconds for the first step (graphs captured and compiled, kernels built).
    first_step_s: f64,
    /// The validation loss of the last checkpoint, loaded back into a fresh model.
    reloaded: f64,
    sample: String,
}

struct Data {
    train: Arc<Vec<u8>>,
    valid: Windows,
    config: RunConfig,
    steps: usize,
}

fn train<B: AutodiffBackend>(name: &str, weights: &[TensorData], data: &Data) -> Run {
    let device = B::Device::default();
    let c = &data.config;
    let mut model = load_weights(Gpt::<B>::new(&c.gpt, &device), weights, &device);
    let valid_before = evaluate(&model.valid(), &data.valid, c.batch, &device);
    let mut optim = AdamWConfig::new()
        .with_weight_decay(0.1)
        .with_grad_clipping(Some(GradientClippingConfig::Norm(1.0)))
        .init::<B, Gpt<B>>();
    let loader = DataLoaderBuilder::new(TextBatcher)
        .batch_size(c.batch)
        .shuffle(SHUFFLE_SEED)
        .set_device(device.clone())
        .build(Windows {
            text: data.train.clone(),
            context: c.gpt.context,
        });
    let slug: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let directory = std::env::temp_dir().join(format!("burn-compile-train-gpt-{slug}"));
    let recorder = CompactRecorder::new();
    let bar = ProgressBar::new(data.steps as u64).with_style(
        ProgressStyle::with_template("{prefix:>22} {bar:30} {pos}/{len} steps {msg} [{elapsed}]")
            .expect("a valid template"),
    );
    bar.set_prefix(name.to_string());
    let mut first_losses = Vec::new();
    let mut final_loss = f64::NAN;
    let mut evaluations = Vec::new();
    let mut checkpoint = None;
    let timed_from = (data.steps / 10).max(1);
    let (mut first_step_s, mut timed_start) = (0.0, None);
    let started = Instant::now();
    let mut batches = loader.iter();
    for step in 0..data.steps {
        if step == timed_from {
            B::sync(&device).expect("sync");
            timed_start = Some(Instant::now());
        }
        let batch = match batches.next() {
            Some(b) => b,
            None => {
                batches = loader.iter();
                batches.next().expect("a batch")
            }
        };
        let loss = model.loss(batch.inputs, batch.targets);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(learning_rate(step, data.steps), model, grads);
        if step < COMPARED || (step + 1) % LOG_EVERY == 0 || step + 1 == data.steps {
            let value = scalar(loss);
            if step < COMPARED {
                first_losses.push(value);
            }
            final_loss = value;
            bar.set_message(format!("loss {value:.3}"));
        }
        if step == 0 {
            B::sync(&device).expect("sync");
            first_step_s = started.elapsed().as_secs_f64();
        }
        let eval_every = (data.steps / 4).max(1);
        if (step + 1) % eval_every == 0 || step + 1 == data.steps {
            // The training steps queued so far are training time: run them before the clock
            // of the evaluation starts (a compiled run executes its graphs asynchronously).
            B::sync(&device).expect("sync");
            let timing = Instant::now();
            let valid = evaluate(&model.valid(), &data.valid, c.batch, &device);
            evaluations.push((step + 1, valid));
            let path = directory.join(format!("step-{}", step + 1));
            model
                .clone()
                .save_file(&path, &recorder)
                .expect("the checkpoint is written");
            checkpoint = Some(path);
            let line = format!(
                "{name}: step {}: validation loss {valid:.4}, checkpoint in {}",
                step + 1,
                directory.display()
            );
            // A hidden bar (no terminal) prints nothing of its own.
            if bar.is_hidden() {
                println!("{line}");
            } else {
                bar.println(line);
            }
            // Evaluation and checkpoints are not training time.
            if let Some(start) = timed_start.as_mut() {
                *start += timing.elapsed();
            }
        }
        bar.inc(1);
    }
    B::sync(&device).expect("sync");
    let timed_steps = data.steps.saturating_sub(timed_from).max(1);
    let step_s = timed_start.map_or(0.0, |s| s.elapsed().as_secs_f64() / timed_steps as f64);
    bar.finish();

    // The last checkpoint, loaded into a fresh model, evaluates as the trained model did.
    let path = checkpoint.expect("at least one checkpoint");
    let reloaded_model = Gpt::<B::InnerBackend>::new(&c.gpt, &device)
        .load_file(&path, &recorder, &device)
        .expect("the checkpoint loads");
    let reloaded = evaluate(&reloaded_model, &data.valid, c.batch, &device);
    let prompt = &data.valid.text[..c.gpt.context];
    let sample = sample(&reloaded_model, prompt, 160, &device);
    Run {
        first_losses,
        final_loss,
        valid_before,
        evaluations,
        step_s,
        first_step_s,
        reloaded,
        sample,
    }
}

/// A freshly initialized GPT's parameters (seeded), drawn once for both runs.
fn initial_weights<B: Backend>(config: &GptConfig) -> Vec<TensorData> {
    let device = B::Device::default();
    B::seed(&device, 42);
    let mut collect = CollectWeights(Vec::new());
    Gpt::<B>::new(config, &device).visit(&mut collect);
    collect.0
}

/// What the command line asks: the number of steps and where the training text is.
struct Args {
    steps: usize,
    data: PathBuf,
}

/// The `crates/` folder of the checkout this program was built from, else of the working
/// directory (a binary copied to another machine and run from a checkout's root).
fn default_data() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates");
    if built.is_dir() {
        built
    } else {
        PathBuf::from("crates")
    }
}

fn parse_args() -> Result<Args, String> {
    let mut parsed = Args {
        steps: target::STEPS,
        data: default_data(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--steps" => {
                parsed.steps = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|s: &usize| *s >= COMPARED)
                    .ok_or(format!("--steps takes a number of at least {COMPARED}"))?;
            }
            "--data" => {
                parsed.data = args
                    .next()
                    .map(PathBuf::from)
                    .ok_or("--data takes a folder of Rust sources")?;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    // `BURN_COMPILE_LOGS=graph_breaks,recompiles,…` shows what the compiler did.
    burn_compile::init_logs();
    let Args { steps, data } = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\nusage: train_gpt [--steps N] [--data DIR]");
            return ExitCode::from(2);
        }
    };
    let text = match corpus(&data) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read the training text: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = target::RUN;
    let split = text.len() * 9 / 10;
    let data = Data {
        train: Arc::new(text[..split].to_vec()),
        valid: Windows {
            text: Arc::new(text[split..].to_vec()),
            context: config.gpt.context,
        },
        config,
        steps,
    };
    let windows = Windows {
        text: data.train.clone(),
        context: config.gpt.context,
    }
    .len();
    println!(
        "train_gpt: {} bytes of this repository's Rust sources ({} training windows of {}, {} \
         validation bytes); GPT of {} layers, d {}, {} heads, context {}; batch {}, {steps} \
         steps of AdamW, peak learning rate {PEAK_LR}",
        text.len(),
        windows,
        config.gpt.context,
        data.valid.text.len(),
        config.gpt.layers,
        config.gpt.d_model,
        config.gpt.heads,
        config.gpt.context,
        config.batch,
    );
    let weights = initial_weights::<Inner>(&config.gpt);
    let compiled_name = format!("Compiled<{}>", target::NAME);
    let compiled = train::<Ad<Compiled<Inner>>>(&compiled_name, &weights, &data);
    let eager = train::<Ad<Inner>>(target::NAME, &weights, &data);

    let mut failed = false;
    let (atol, rtol) = burn_compile::incident::tolerance(DType::F32);
    for (i, (c, e)) in compiled
        .first_losses
        .iter()
        .zip(&eager.first_losses)
        .enumerate()
    {
        let ok = (c - e).abs() <= atol + rtol * e.abs();
        println!(
            "step {i}: loss {c:.6} compiled, {e:.6} eager{}",
            if ok { "" } else { "  DIFFERS" }
        );
        failed |= !ok;
    }
    let tokens = (config.batch * config.gpt.context) as f64;
    println!(
        "\n{:<22} {:>10} {:>12} {:>12} {:>10} {:>10} {:>10}",
        "", "ms/step", "tokens/s", "first step", "loss", "valid", "reloaded"
    );
    for (name, run) in [
        (&compiled_name, &compiled),
        (&target::NAME.to_string(), &eager),
    ] {
        let valid = run.evaluations.last().map_or(f64::NAN, |(_, v)| *v);
        println!(
            "{name:<22} {:>10.2} {:>12.0} {:>11.2}s {:>10.4} {:>10.4} {:>10.4}",
            run.step_s * 1e3,
            tokens / run.step_s,
            run.first_step_s,
            run.final_loss,
            valid,
            run.reloaded,
        );
    }
    println!(
        "speedup of {compiled_name} per step: {:.2}×",
        eager.step_s / compiled.step_s
    );
    let last_valid = compiled.evaluations.last().map_or(f64::NAN, |(_, v)| *v);
    let decreased = last_valid < compiled.valid_before;
    if !decreased {
        eprintln!(
            "error: the compiled run's validation loss did not decrease ({:.4} → {last_valid:.4})",
            compiled.valid_before
        );
        failed = true;
    }
    if (compiled.reloaded - last_valid).abs() > atol + rtol * last_valid.abs() {
        eprintln!(
            "error: the reloaded checkpoint evaluates to {:.6}, the trained model to {last_valid:.6}",
            compiled.reloaded
        );
        failed = true;
    }
    println!(
        "\nsample of the compiled model after {steps} steps:\n---\n{}\n---",
        compiled.sample
    );
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
