//! Example programs live beside this crate: `cargo run -p burn-compile-examples --example …`.
//! This library holds the workloads they share: the W1 transformer encoder, its input and its
//! training step; the GPT of `train_gpt` and `w2_bench` ([`gpt`]); the benchmarks' timing.

pub mod gpt;

/// The inner backend of `w2_bench` and `w3_bench` for element type `F`: CUDA with
/// `--features cuda`, Flex otherwise (their `--small` smoke runs).
#[cfg(feature = "cuda")]
pub mod bench_backend {
    pub trait Elem: burn_cubecl::FloatElement {}
    impl<T: burn_cubecl::FloatElement> Elem for T {}
    pub type Inner<F> = burn_cuda::Cuda<F, i32>;
}

/// The inner backend of `w2_bench` and `w3_bench` for element type `F`: CUDA with
/// `--features cuda`, Flex otherwise (their `--small` smoke runs).
#[cfg(not(feature = "cuda"))]
pub mod bench_backend {
    pub trait Elem: burn::tensor::Element {}
    impl<T: burn::tensor::Element> Elem for T {}
    pub type Inner<F> = burn_flex::Flex<F>;
}

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::nn::activation::ActivationConfig;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};

/// Adam's learning rate in the training step.
pub const LEARNING_RATE: f64 = 1e-4;

/// A transformer encoder with ReLU and no dropout (deterministic, so compiled and eager runs
/// can be compared value for value). W1 is `encoder_config(512, 2048, 8, 6)`.
pub fn encoder_config(
    d_model: usize,
    d_ff: usize,
    heads: usize,
    layers: usize,
) -> TransformerEncoderConfig {
    TransformerEncoderConfig::new(d_model, d_ff, heads, layers)
        .with_dropout(0.0)
        .with_activation(ActivationConfig::Relu)
}

/// Collects the float parameters of a module, in visiting order.
pub struct CollectWeights(pub Vec<TensorData>);

impl<B: Backend> ModuleVisitor<B> for CollectWeights {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.push(param.val().into_data());
    }
}

/// Replaces the float parameters of a module (same structure) by the collected ones.
struct LoadWeights<B: Backend> {
    weights: std::vec::IntoIter<TensorData>,
    device: B::Device,
}

impl<B: Backend> ModuleMapper<B> for LoadWeights<B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let data = self.weights.next().expect("fewer weights than parameters");
        let tensor = Tensor::<B, D>::from_data(data, &self.device);
        assert_eq!(tensor.shape(), param.lazy_shape(), "weight shape mismatch");
        let id = param.id;
        param.transform_for_load(tensor, id)
    }
}

pub fn model_with<B: Backend>(
    config: &TransformerEncoderConfig,
    weights: &[TensorData],
    device: &B::Device,
) -> TransformerEncoder<B> {
    load_weights(config.init::<B>(device), weights, device)
}

/// `module` with its float parameters replaced by `weights` (as [`CollectWeights`] collected
/// them from a module of the same structure, on any backend).
pub fn load_weights<B: Backend, M: Module<B>>(
    module: M,
    weights: &[TensorData],
    device: &B::Device,
) -> M {
    let mut loader = LoadWeights::<B> {
        #[allow(clippy::unnecessary_to_owned)] // the mapper owns its iterator
        weights: weights.to_vec().into_iter(),
        device: device.clone(),
    };
    let module = module.map(&mut loader);
    assert!(
        loader.weights.next().is_none(),
        "more weights than parameters"
    );
    module
}

/// Reproducible values in [-1, 1).
pub fn input_data(shape: [usize; 3], seed: u64) -> TensorData {
    let mut state = seed.wrapping_mul(6364136223846793005) ^ 0x9E37_79B9_7F4A_7C15;
    let n = shape.iter().product();
    let values: Vec<f32> = (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
        })
        .collect();
    TensorData::new(values, shape)
}

/// Inference: one forward pass.
pub fn forward<B: Backend>(model: &TransformerEncoder<B>, x: &Tensor<B, 3>) -> Tensor<B, 3> {
    model.forward(TransformerEncoderInput::new(x.clone()))
}

/// One training step: forward, loss `mean(out²)`, backward, optimizer step. Returns the new
/// model and the loss.
pub fn train_step<B: AutodiffBackend, O: Optimizer<TransformerEncoder<B>, B>>(
    model: TransformerEncoder<B>,
    optim: &mut O,
    x: &Tensor<B, 3>,
) -> (TransformerEncoder<B>, Tensor<B::InnerBackend, 1>) {
    let (model, loss) = train_step_at(model, optim, LEARNING_RATE, x);
    (model, loss.inner())
}

/// [`train_step`] at learning rate `lr`, the loss left on the autodiff backend (a compiled
/// step's output).
pub fn train_step_at<B: AutodiffBackend, O: Optimizer<TransformerEncoder<B>, B>>(
    model: TransformerEncoder<B>,
    optim: &mut O,
    lr: f64,
    x: &Tensor<B, 3>,
) -> (TransformerEncoder<B>, Tensor<B, 1>) {
    let out = forward(&model, x);
    let loss = out.square().mean();
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    (optim.step(lr, model, grads), loss)
}

/// What [`time_calls`] measured.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The first call alone, synced: compiles, autotune, first graphs.
    pub first_call_s: f64,
    /// Mean ms per timed call, up to the final sync.
    pub ms: f64,
    /// Ms per call it took to issue the timed calls (the clock before the final sync).
    pub issue_ms: f64,
    /// `issue_ms` less the time the program waited for room in the execution thread's queue
    /// (`metrics().queue_wait_time`): the host work of a call. Once a program records faster
    /// than its graphs run, it waits there for the device, and `issue_ms` measures the device.
    pub host_ms: f64,
}

/// Times `call` as the benchmarks do: the first call alone, synced (compiles, autotune); then
/// `warmup` calls; then `iters` calls with their results kept alive (a result dropped unused is
/// dead code to the compiled system) and one sync at the end. Each call ends a step
/// (`mark_step`).
pub fn time_calls<B: Backend, T>(
    device: &B::Device,
    iters: usize,
    warmup: usize,
    mut call: impl FnMut() -> T,
) -> Timing {
    use std::time::Instant;
    let mark = || {
        burn_compile::mark_step();
        B::sync(device).expect("sync");
    };
    let start = Instant::now();
    let first = call();
    mark();
    let first_s = start.elapsed().as_secs_f64();
    drop(first);
    let mut warm = Vec::with_capacity(warmup);
    for _ in 0..warmup {
        warm.push(call());
        burn_compile::mark_step();
    }
    B::sync(device).expect("sync");
    drop(warm);
    // The replay profile (when on) covers the timed calls only.
    let _ = burn_compile::take_replay_profile();
    let waited_before = burn_compile::metrics().queue_wait_time;
    let mut outs = Vec::with_capacity(iters);
    let start = Instant::now();
    for _ in 0..iters {
        outs.push(call());
        burn_compile::mark_step();
    }
    let issued = start.elapsed().as_secs_f64() * 1e3 / iters as f64;
    let waited = (burn_compile::metrics().queue_wait_time - waited_before).as_secs_f64() * 1e3
        / iters as f64;
    B::sync(device).expect("sync");
    Timing {
        first_call_s: first_s,
        ms: start.elapsed().as_secs_f64() * 1e3 / iters as f64,
        issue_ms: issued,
        host_ms: issued - waited,
    }
}

/// The command line of `w2_bench` and `w3_bench`: `--dtypes f32|bf16` (one per process),
/// `--iters N`, `--warmup N`, `--small`, `--out FILE`, `--systems S,…`.
pub struct BenchOptions {
    pub dtype: String,
    pub iters: usize,
    pub warmup: usize,
    /// A tiny model, for a smoke run on the CPU.
    pub small: bool,
    /// A file the JSON lines are appended to.
    pub out: Option<String>,
    pub systems: Vec<String>,
}

impl BenchOptions {
    /// The options of this process's arguments; `systems` are those the program has.
    pub fn parse(systems: &[&str]) -> Result<Self, String> {
        let mut o = BenchOptions {
            dtype: "f32".into(),
            iters: 10,
            warmup: 3,
            small: false,
            out: None,
            systems: systems.iter().map(|s| s.to_string()).collect(),
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or(format!("{flag} needs a value"));
            match flag.as_str() {
                "--dtypes" => o.dtype = value()?,
                "--iters" => o.iters = value()?.parse().map_err(|e| format!("--iters: {e}"))?,
                "--warmup" => o.warmup = value()?.parse().map_err(|e| format!("--warmup: {e}"))?,
                "--out" => o.out = Some(value()?),
                "--small" => o.small = true,
                "--systems" => o.systems = value()?.split(',').map(String::from).collect(),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if let Some(s) = o.systems.iter().find(|s| !systems.contains(&s.as_str())) {
            return Err(format!("unknown system {s:?} (this build has {systems:?})"));
        }
        if !["f32", "bf16"].contains(&o.dtype.as_str()) {
            return Err(format!(
                "--dtypes {}: f32 or bf16, one per process",
                o.dtype
            ));
        }
        Ok(o)
    }

    /// Whether the compiled system's first training loss equals eager's within the dtype's
    /// tolerance (`burn_compile::incident::tolerance`); true when either system did not run.
    /// Says so on stderr when not.
    pub fn first_losses_agree(&self, eager: Option<f64>, compiled: Option<f64>) -> bool {
        let dtype = if self.dtype == "bf16" {
            burn::tensor::DType::BF16
        } else {
            burn::tensor::DType::F32
        };
        let (atol, rtol) = burn_compile::incident::tolerance(dtype);
        match (eager, compiled) {
            (Some(e), Some(c)) if (c - e).abs() > atol + rtol * e.abs() => {
                eprintln!("error: the first loss differs: {c} compiled, {e} eager");
                false
            }
            _ => true,
        }
    }

    /// [`BenchOptions::parse`], or the error and `usage` on stderr and exit code 2.
    pub fn parse_or_usage(systems: &[&str], usage: &str) -> Result<Self, std::process::ExitCode> {
        Self::parse(systems).map_err(|e| {
            eprintln!("error: {e}\nusage: {usage}");
            std::process::ExitCode::from(2)
        })
    }

    /// Emits `lines` ([`BenchOptions::emit`]); a failure when they could not be written or the
    /// first losses did not `agree`.
    pub fn finish(&self, lines: &[String], agree: bool) -> std::process::ExitCode {
        if let Err(e) = self.emit(lines) {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
        if agree {
            std::process::ExitCode::SUCCESS
        } else {
            std::process::ExitCode::FAILURE
        }
    }

    /// Prints each JSON line and appends it to `--out`'s file.
    pub fn emit(&self, lines: &[String]) -> Result<(), String> {
        use std::io::Write;
        let mut file = match &self.out {
            Some(path) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| format!("{path}: {e}"))?,
            ),
            None => None,
        };
        for line in lines {
            println!("{line}");
            if let Some(f) = file.as_mut() {
                writeln!(f, "{line}").map_err(|e| format!("writing the results: {e}"))?;
            }
        }
        Ok(())
    }
}

/// The `mode` field of a benchmark line: the compiled system's variant (`BENCH_MODE`, else
/// `BURN_COMPILE_MODE`, else `default`); the other systems have one mode.
pub fn bench_mode(system: &str) -> String {
    let compiled = || {
        std::env::var("BENCH_MODE")
            .or_else(|_| std::env::var("BURN_COMPILE_MODE"))
            .unwrap_or_else(|_| "default".into())
    };
    match system {
        "burn-compile" => compiled(),
        // A compiled step (`burn_compile::jit`), over the compiled system's mode.
        "burn-compile-jit" => match compiled().as_str() {
            "default" => "jit".into(),
            mode => format!("jit+{mode}"),
        },
        _ => "default".into(),
    }
}
