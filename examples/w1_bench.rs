//! W1 (the reference transformer encoder: d_model 512, 8 heads, 6 layers, d_ff 2048, ReLU,
//! batch 32 × seq 128) for the benchmark table: inference and one training step (forward,
//! `mean(out²)`, backward, Adam), per dtype and per system, one JSON line per figure.
//!
//! ```text
//! # Burn eager CubeBackend<Cuda> and Compiled<CubeBackend<Cuda>>, f32 and bf16:
//! CUDARC_CUDA_VERSION=13000 cargo build --release -p burn-compile-examples --example w1_bench --features cuda
//! # Burn's own Fusion<CubeBackend<Cuda>> (its own build: with Burn's fusion on, the raw
//! # CubeBackend cannot be an inner backend of ours):
//! CUDARC_CUDA_VERSION=13000 cargo build --release -p burn-compile-examples --example w1_bench --features cuda-fusion
//! # Locally, on wgpu (f32; add --small on a CPU Vulkan):
//! cargo run --release -p burn-compile-examples --example w1_bench --features wgpu -- --small
//! # On the CPU: Flex eager against Compiled<Flex> (C kernels), at W1-cpu size:
//! cargo run --release -p burn-compile-examples --example w1_bench -- --cpu
//! ```
//!
//! Flags: `--dtypes f32` or `--dtypes bf16` (one per process: Burn fixes a device's default
//! float dtype at its first use, so a second dtype in the same process would silently run in
//! the first one's — the program refuses it), `--iters N` (timed, default 20), `--warmup N` (default 5),
//! `--small` (a tiny encoder, for smoke tests), `--cpu` (W1-cpu: W1's architecture at d_model 256,
//! 4 heads, 2 layers, d_ff 1024, batch 8 × seq 64, for `Compiled<Flex>` on a few cores), `--out FILE` (append the JSON lines there too),
//! `--systems burn-compile` (a subset of this build's systems; no eager comparison without
//! `burn-eager`; `burn-compile-jit` runs both as compiled steps: `burn_compile::jit` for inference, `jit_train` with `burn_compile::optim`'s Adam for training), `--infer-only` (skip the training step: e.g. under a kernel profiler).
//! With `BURN_COMPILE_PROFILE_REPLAY=1` the compiled system also prints its host time per replayed
//! step kind (add `BURN_COMPILE_DEVICE_THREAD=1` to include the runtime's own work per step).
//! With `BURN_COMPILE_DIAGNOSTICS=1` the compiled system also prints the explain report of one
//! training step (its kernels, one line each). `BENCH_GPU` and `BENCH_DATE` fill the `gpu` and `date` fields; `BENCH_MODE` labels the compiled
//! system's variant (e.g. `inner-matmul` with `BURN_COMPILE_LIBRARY_MATMUL=0`).
//!
//! Timing (as the reference programs in shared/bench): the first call is timed alone, synced
//! (`first_call_s`: autotune, kernel compilation, first graphs — autotune results are cached
//! per process, so the system measured second reuses what the first one tuned); then warm-up;
//! then `iters` calls with outputs kept alive and one sync at the end (`ms`: mean per call;
//! `issue_ms`: the same clock read before that sync — on the compiled system with
//! `BURN_COMPILE_ASYNC=0`, recording and replay both run on the caller, so with few iterations
//! (launch queues far from full) it is the host cost of a call, which bounds `ms`; `host_ms`:
//! `issue_ms` less the time the program waited for room in the execution thread's queue
//! (`metrics().queue_wait_time`) — a program that records faster than the device runs its graphs
//! waits there once 16 graphs are queued, and its `issue_ms` then measures the device). The compiled
//! system's inference output is compared with eager's and the difference printed
//! (`max_abs_diff_vs_eager`); a difference over the dtype's tolerance fails the run.

use burn::module::Module;
use burn::optim::AdamConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_compile_examples::{CollectWeights, encoder_config, forward, input_data, model_with};
use std::io::Write;
use std::process::ExitCode;

type Ad<B> = burn::backend::Autodiff<B>;

#[cfg(all(feature = "cuda", not(feature = "cuda-fusion")))]
mod systems {
    pub trait Elem: burn_cubecl::FloatElement {}
    impl<T: burn_cubecl::FloatElement> Elem for T {}
    pub type Inner<F> = burn_cuda::Cuda<F, i32>;
    pub const RUNS: &[&str] = &["burn-eager", "burn-compile", "burn-compile-jit"];
    pub const DTYPES: &str = "f32,bf16";
}

#[cfg(feature = "cuda-fusion")]
mod systems {
    pub trait Elem: burn_cubecl::FloatElement {}
    impl<T: burn_cubecl::FloatElement> Elem for T {}
    pub type Inner<F> = burn_cuda::Cuda<F, i32>;
    pub const RUNS: &[&str] = &["burn-fusion"];
    pub const DTYPES: &str = "f32,bf16";
}

#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
mod systems {
    pub trait Elem: burn_cubecl::FloatElement {}
    impl<T: burn_cubecl::FloatElement> Elem for T {}
    pub type Inner<F> = burn_wgpu::Wgpu<F, i32, u32>;
    pub const RUNS: &[&str] = &["burn-eager", "burn-compile", "burn-compile-jit"];
    pub const DTYPES: &str = "f32";
}

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
mod systems {
    pub trait Elem: burn::tensor::Element {}
    impl<T: burn::tensor::Element> Elem for T {}
    pub type Inner<F> = burn_flex::Flex<F>;
    pub const RUNS: &[&str] = &["burn-eager", "burn-compile", "burn-compile-jit"];
    pub const DTYPES: &str = "f32";
}

use systems::{DTYPES, Elem, Inner, RUNS};

struct Options {
    dtypes: Vec<String>,
    iters: usize,
    warmup: usize,
    small: bool,
    cpu: bool,
    out: Option<String>,
    /// Systems of this build to run (default: all), e.g. only `burn-compile` under a profiler.
    systems: Option<Vec<String>>,
    /// Skip the training step (inference only).
    infer_only: bool,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        dtypes: vec!["f32".into()],
        iters: 20,
        warmup: 5,
        small: false,
        cpu: false,
        out: None,
        systems: None,
        infer_only: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--dtypes" => o.dtypes = value()?.split(',').map(String::from).collect(),
            "--iters" => o.iters = value()?.parse().map_err(|e| format!("--iters: {e}"))?,
            "--warmup" => o.warmup = value()?.parse().map_err(|e| format!("--warmup: {e}"))?,
            "--out" => o.out = Some(value()?),
            "--small" => o.small = true,
            "--cpu" => o.cpu = true,
            "--systems" => o.systems = Some(value()?.split(',').map(String::from).collect()),
            "--infer-only" => o.infer_only = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if let Some(unknown) = o
        .systems
        .iter()
        .flatten()
        .find(|s| !RUNS.contains(&s.as_str()))
    {
        return Err(format!(
            "--systems: {unknown:?} is not one of {RUNS:?} in this build"
        ));
    }
    if o.iters == 0 {
        return Err("--iters must be positive".into());
    }
    Ok(o)
}

/// One figure.
struct Figure {
    workload: &'static str,
    dtype: String,
    phase: &'static str,
    system: &'static str,
    /// Per call: wall, first call, issue and host times.
    timing: burn_compile_examples::Timing,
    max_abs_diff_vs_eager: Option<f64>,
}

impl Figure {
    /// A figure of what `time_calls` measured.
    fn timed(
        s: &Setup,
        dtype: &str,
        phase: &'static str,
        system: &'static str,
        timing: burn_compile_examples::Timing,
    ) -> Self {
        Self {
            workload: s.workload,
            dtype: dtype.into(),
            phase,
            system,
            timing,
            max_abs_diff_vs_eager: None,
        }
    }

    fn json(&self) -> String {
        let env = |k: &str| std::env::var(k).unwrap_or_else(|_| "unknown".into());
        let mut line = format!(
            "{{\"workload\":\"{}\",\"dtype\":\"{}\",\"phase\":\"{}\",\"system\":\"{}\",\"mode\":\"{}\",\"ms\":{:.4},\"first_call_s\":{:.3},\"date\":\"{}\",\"gpu\":\"{}\"",
            self.workload,
            self.dtype,
            self.phase,
            self.system,
            burn_compile_examples::bench_mode(self.system),
            self.timing.ms,
            self.timing.first_call_s,
            env("BENCH_DATE"),
            env("BENCH_GPU"),
        );
        line.push_str(&format!(
            ",\"issue_ms\":{:.4},\"host_ms\":{:.4}",
            self.timing.issue_ms, self.timing.host_ms
        ));
        if let Some(d) = self.max_abs_diff_vs_eager {
            line.push_str(&format!(",\"max_abs_diff_vs_eager\":{d:.3e}"));
        }
        line.push('}');
        line
    }
}

struct Setup {
    workload: &'static str,
    config: burn::nn::transformer::TransformerEncoderConfig,
    weights: Vec<TensorData>,
    input: TensorData,
    iters: usize,
    warmup: usize,
    systems: Option<Vec<String>>,
    infer_only: bool,
}

/// With `BURN_COMPILE_PROFILE_REPLAY=1`: host time per replayed step kind, per call.
fn print_replay_profile(system: &str, dtype: &str, phase: &str, calls: usize) {
    let profile = burn_compile::take_replay_profile();
    if profile.is_empty() {
        return;
    }
    // Parts (`step / part`) are inside their step's time.
    let total: f64 = profile
        .iter()
        .filter(|s| !s.part)
        .map(|s| s.total.as_secs_f64())
        .sum();
    eprintln!(
        "{system} {dtype} {phase}: replay host time per call {:.3} ms, by step:",
        total * 1e3 / calls as f64
    );
    for s in profile.iter().take(40) {
        eprintln!(
            "  {:>8.1} µs  {:>5.1} per call  {:>6.2} µs each  {}",
            s.total.as_secs_f64() * 1e6 / calls as f64,
            s.count as f64 / calls as f64,
            s.total.as_secs_f64() * 1e6 / s.count as f64,
            s.step
        );
    }
}

/// What reduce-overhead mode did in one phase (nothing when it recorded nothing).
fn print_recordings(system: &str, dtype: &str, phase: &str, before: &burn_compile::Metrics) {
    let m = burn_compile::metrics().since(before);
    if m.graph_recordings + m.recording_fallbacks == 0 {
        return;
    }
    eprintln!(
        "{system} {dtype} {phase}: CUDA graphs recorded {}, replays that launched one {}, \
         replays launch by launch where one was wanted {}; graph inputs copied in {}, kept \
         from the last launch {}; held outputs moved out {}",
        m.graph_recordings,
        m.graph_launches,
        m.recording_fallbacks,
        m.graph_inputs_copied,
        m.graph_inputs_kept,
        m.graph_outputs_moved
    );
}

/// Inference and training figures of backend `B`; returns them and the first forward output.
fn measure<B: Backend>(system: &'static str, dtype: &str, s: &Setup) -> (Vec<Figure>, TensorData) {
    let device = B::Device::default();
    let x = Tensor::<B, 3>::from_data(s.input.clone(), &device);
    let model = model_with::<B>(&s.config, &s.weights, &device);
    let output = forward(&model, &x).into_data();
    if system == "burn-compile" {
        // What the compiled forward launches (one line: the figures below are for this plan).
        let (_, report) = burn_compile::explain(|| forward(&model, &x).into_data());
        eprintln!(
            "{system} {dtype} infer plan: {} launches ({} generated kernels, {} library matmuls, \
             {} attention kernels)",
            report.launches_per_graph.iter().sum::<usize>(),
            report.fused_kernels,
            report.library_matmuls,
            report.attention_kernels,
        );
    }
    let before = burn_compile::metrics();
    let timing = burn_compile_examples::time_calls::<B, _>(&device, s.iters, s.warmup, || {
        forward(&model, &x)
    });
    print_replay_profile(system, dtype, "infer", s.iters);
    print_recordings(system, dtype, "infer", &before);
    let infer = Figure::timed(s, dtype, "infer", system, timing);
    if s.infer_only {
        return (vec![infer], output);
    }

    let xa = Tensor::<Ad<B>, 3>::from_data(s.input.clone(), &device);
    let mut model = Some(model_with::<Ad<B>>(&s.config, &s.weights, &device));
    let mut optim = AdamConfig::new().init();
    let before = burn_compile::metrics();
    let timing = burn_compile_examples::time_calls::<B, _>(&device, s.iters, s.warmup, || {
        let (next, loss) =
            burn_compile_examples::train_step(model.take().expect("model"), &mut optim, &xa);
        model = Some(next);
        loss
    });
    print_replay_profile(system, dtype, "train", s.iters);
    print_recordings(system, dtype, "train", &before);
    if system == "burn-compile" {
        // What one more training step launches (after the timed ones: its plans are cached).
        let (_, report) = burn_compile::explain(|| {
            let (next, loss) =
                burn_compile_examples::train_step(model.take().expect("model"), &mut optim, &xa);
            model = Some(next);
            loss.into_data()
        });
        print_train_plan(system, dtype, &report);
    }
    let train = Figure::timed(s, dtype, "train", system, timing);
    (vec![infer, train], output)
}

/// One line on what a training step launches (the whole report too with
/// `BURN_COMPILE_DIAGNOSTICS`).
fn print_train_plan(system: &str, dtype: &str, report: &burn_compile::Explanation) {
    if std::env::var_os("BURN_COMPILE_DIAGNOSTICS").is_some() {
        eprintln!("{report}");
    }
    let horizontal = report
        .graphs
        .iter()
        .map(|g| g.horizontal_kernels)
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    eprintln!(
        "{system} {dtype} train plan: {} launches in {} graph(s) ({} generated kernels, {} of \
         them in {} horizontal kernels; {} library matmuls, {} attention kernels)",
        report.launches_per_graph.iter().sum::<usize>(),
        report.graph_count,
        report.fused_kernels,
        horizontal.1,
        horizontal.0,
        report.library_matmuls,
        report.attention_kernels,
    );
    let m = burn_compile::metrics();
    if m.tuned_matmuls > 0 {
        eprintln!(
            "{system} {dtype}: library matmul shapes timed so far in this process {}, {} of them \
             faster on another algorithm than the library's first choice",
            m.tuned_matmuls, m.tuned_matmuls_changed
        );
    }
}

/// The optimizer of a compiled training step: Burn's Adam with its step count on the device.
type JitAdam<B> = burn_compile::optim::Adaptor<
    burn_compile::optim::Adam,
    burn::nn::transformer::TransformerEncoder<Ad<B>>,
    Ad<B>,
>;

/// Inference and training as compiled steps (`burn_compile::jit`, `jit_train`): each recorded
/// on its first calls, then replayed without running the step's code. Training uses
/// `burn_compile::optim`'s Adam (Burn's update, its step count on the device) with the learning
/// rate as a scalar input.
fn measure_jit<X: burn_compile::BackendIr>(
    system: &'static str,
    dtype: &str,
    s: &Setup,
) -> (Vec<Figure>, TensorData) {
    type C<X> = burn_compile::Compiled<X>;
    let device = Default::default();
    let x = Tensor::<C<X>, 3>::from_data(s.input.clone(), &device);
    let mut model = Some(model_with::<C<X>>(&s.config, &s.weights, &device));
    let mut step = burn_compile::jit(
        |model: burn::nn::transformer::TransformerEncoder<C<X>>, x: Tensor<C<X>, 3>| {
            let y = forward(&model, &x);
            (model, y)
        },
    );
    let mut call = || {
        let (next, y) = step.call(model.take().expect("model"), x.clone());
        model = Some(next);
        y
    };
    let output = call().into_data();
    let before = burn_compile::metrics();
    let timing =
        burn_compile_examples::time_calls::<C<X>, _>(&device, s.iters, s.warmup, &mut call);
    report_jit(system, dtype, "infer", step.stats(), step.ineligible());
    print_recordings(system, dtype, "infer", &before);
    let infer = Figure::timed(s, dtype, "infer", system, timing);
    if s.infer_only {
        return (vec![infer], output);
    }

    let xa = Tensor::<Ad<C<X>>, 3>::from_data(s.input.clone(), &device);
    let mut model = Some(model_with::<Ad<C<X>>>(&s.config, &s.weights, &device));
    let mut optim: JitAdam<C<X>> = burn_compile::optim::AdamConfig::new().init();
    let mut step = burn_compile::jit_train(
        |model: burn::nn::transformer::TransformerEncoder<Ad<C<X>>>,
         optim: &mut JitAdam<C<X>>,
         (x, lr): (Tensor<Ad<C<X>>, 3>, f64)| {
            burn_compile_examples::train_step_at(model, optim, lr, &x)
        },
    );
    let mut call = || {
        let lr = burn_compile_examples::LEARNING_RATE;
        let (next, loss) = step.call(model.take().expect("model"), &mut optim, (xa.clone(), lr));
        model = Some(next);
        loss
    };
    // What the step launches: its second call, recorded under capture like any graph (the
    // first creates the optimizer's state, a step of another structure, never replayed). The
    // first call is timed here (reading its loss waits for it), as `time_calls` times its own.
    let started = std::time::Instant::now();
    call().into_data();
    let first = started.elapsed().as_secs_f64();
    let (_, report) = burn_compile::explain(|| call().into_data());
    print_train_plan(system, dtype, &report);
    let before = burn_compile::metrics();
    let mut timing =
        burn_compile_examples::time_calls::<C<X>, _>(&device, s.iters, s.warmup, &mut call);
    report_jit(system, dtype, "train", step.stats(), step.ineligible());
    print_recordings(system, dtype, "train", &before);
    // The first call is the one timed above (`time_calls`' own is the step's fourth).
    timing.first_call_s = first;
    let train = Figure::timed(s, dtype, "train", system, timing);
    (vec![infer, train], output)
}

/// One line on what a compiled step replayed, and why not where it did not.
fn report_jit(
    system: &str,
    dtype: &str,
    phase: &str,
    stats: burn_compile::JitStats,
    refused: Vec<String>,
) {
    eprintln!(
        "{system} {dtype} {phase}: {} calls recorded, {} replayed{}",
        stats.recordings,
        stats.replays,
        refused
            .first()
            .map(|why| format!(" (refused: {why})"))
            .unwrap_or_default()
    );
}

fn max_abs_diff(a: &TensorData, b: &TensorData) -> f64 {
    let a = a.clone().convert::<f32>().to_vec::<f32>().expect("floats");
    let b = b.clone().convert::<f32>().to_vec::<f32>().expect("floats");
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() as f64)
        .fold(0.0, f64::max)
}

/// Every system of this build for element type `F`.
fn run_dtype<F: Elem>(dtype: &str, s: &Setup) -> Result<Vec<Figure>, String>
where
    Inner<F>: Backend,
    Inner<F>: burn_compile::BackendIr,
{
    // Burn fixes a device's default float dtype at its first use: one dtype per process.
    let probe = Tensor::<Inner<F>, 1>::zeros([1], &Default::default()).dtype();
    if probe != F::dtype() {
        return Err(format!(
            "this process already fixed the device's float dtype to {probe:?}: \
             run one --dtypes value per process"
        ));
    }
    // Weights and input in the element type.
    let s = &Setup {
        workload: s.workload,
        config: s.config.clone(),
        weights: s.weights.iter().map(|w| w.clone().convert::<F>()).collect(),
        input: s.input.clone().convert::<F>(),
        iters: s.iters,
        warmup: s.warmup,
        systems: s.systems.clone(),
        infer_only: s.infer_only,
    };
    let mut figures = Vec::new();
    let mut eager_output = None;
    let selected = |system: &&&str| {
        s.systems
            .as_ref()
            .is_none_or(|only| only.iter().any(|o| o.as_str() == **system))
    };
    for system in RUNS.iter().filter(selected) {
        let (mut f, output) = match *system {
            "burn-compile" => measure::<burn_compile::Compiled<Inner<F>>>(system, dtype, s),
            "burn-compile-jit" => measure_jit::<Inner<F>>(system, dtype, s),
            _ => measure::<Inner<F>>(system, dtype, s),
        };
        if *system == "burn-eager" {
            eager_output = Some(output);
        } else if let Some(eager) = &eager_output {
            let diff = max_abs_diff(eager, &output);
            // Eager and compiled differ by reduction order and, on CUDA, by matmul kernels:
            // cuBLASLt with TF32 tensor cores (10-bit mantissa inputs) against cubek, through
            // six layers; bf16 by its rounding too. A wrong kernel is off by O(1).
            let tolerance = if dtype == "bf16" { 0.1 } else { 2e-2 };
            if diff > tolerance {
                return Err(format!(
                    "{system} {dtype}: inference output differs from eager by {diff:e} > {tolerance:e}"
                ));
            }
            f[0].max_abs_diff_vs_eager = Some(diff);
        }
        figures.extend(f);
    }
    Ok(figures)
}

fn main() -> ExitCode {
    burn_compile::init_logs();
    let options = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "error: {e}\nusage: w1_bench [--dtypes f32|bf16] [--iters N] [--warmup N] [--small|--cpu] [--out FILE] [--systems S,…] [--infer-only]"
            );
            return ExitCode::from(2);
        }
    };
    let (config, shape) = if options.small {
        (encoder_config(64, 128, 4, 2), [4, 16, 64])
    } else if options.cpu {
        // W1's architecture at a size a few CPU cores run in tens of milliseconds.
        (encoder_config(256, 1024, 4, 2), [8, 64, 256])
    } else {
        (encoder_config(512, 2048, 8, 6), [32, 128, 512])
    };
    let weights = {
        let mut collect = CollectWeights(Vec::new());
        config
            .init::<burn_flex::Flex>(&Default::default())
            .visit(&mut collect);
        collect.0
    };
    let setup = Setup {
        workload: if options.small {
            "W1-small"
        } else if options.cpu {
            "W1-cpu"
        } else {
            "W1"
        },
        config,
        weights,
        input: input_data(shape, 42),
        iters: options.iters,
        warmup: options.warmup,
        systems: options.systems.clone(),
        infer_only: options.infer_only,
    };
    let mut out = options.out.as_ref().map(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|e| panic!("cannot open {path}: {e}"))
    });
    for dtype in &options.dtypes {
        let figures = match dtype.as_str() {
            "f32" => run_dtype::<f32>("f32", &setup),
            // Burn's CPU backend is instantiated for f32 only here.
            #[cfg(any(feature = "wgpu", feature = "cuda"))]
            "bf16" => run_dtype::<burn::tensor::bf16>("bf16", &setup),
            other => Err(format!("unknown dtype {other:?} (this build: {DTYPES})")),
        };
        let figures = match figures {
            Ok(f) => f,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        for f in figures {
            let line = f.json();
            println!("{line}");
            if let Some(file) = out.as_mut() {
                writeln!(file, "{line}").expect("write results");
            }
        }
    }
    ExitCode::SUCCESS
}
