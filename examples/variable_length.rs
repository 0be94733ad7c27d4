//! A variable-length inference loop: W1 (small by default) forward passes whose sequence length
//! is drawn from a fixed list, eager against `Compiled` in three shape modes, side by side in
//! one process on the same inputs and weights:
//!
//! - `specialized` (`DynamicShapes::Never`): each length is its own compile of the forward's
//!   graph family, with kernels specialized on every size;
//! - `auto` (the default, `DynamicShapes::Auto`): the first length compiles specialized, the
//!   second recompiles with the sizes that changed symbolic, and later lengths reuse that plan;
//! - `symbolic` (`DynamicShapes::Always`): one symbolic plan and one kernel per fused group
//!   from the first pass, for every length.
//!
//! - `plain`: `specialized` without attention kernels and the memory slab, which symbolic plans
//!   do without (both are sized per problem).
//!
//! The plain-vs-symbolic ratio compares kernels with constant sizes against kernels that read
//! them at run time, over the same shapes and the same plan features. The example reports, per mode, the warm-up's
//! compiles and kernel builds, and checks that the timed loops compile nothing.
//!
//! ```text
//! cargo run --release -p burn-compile-examples --example variable_length [-- --steps 60 --full --mode symbolic]
//! # CUDA (the H200): the same loop on Compiled<Cuda> against Cuda
//! CUDARC_CUDA_VERSION=13000 cargo build --release -p burn-compile-examples --example variable_length --features cuda
//! ```
//!
//! Timing: the whole loop (every pass read back to host, as an inference server returns each
//! result), after a warm-up pass over every length; 3 rounds per side, alternating, the median
//! round printed with the ratio. The first-pass cost (compiles, kernel builds) is printed apart.
//! Every compiled output is compared with eager's: within 1e-4 of the output's scale on the CPU,
//! 5e-3 on CUDA (cuBLASLt and Burn's own matmul sum in other orders).

use burn::module::Module;
use burn::nn::transformer::TransformerEncoder;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_compile::{CompileConfig, Compiled, DynamicShapes, configure, metrics};
use burn_compile_examples::{CollectWeights, encoder_config, forward, input_data, model_with};
use std::time::{Duration, Instant};

#[cfg(feature = "cuda")]
type Inner = burn_cuda::Cuda<f32, i32>;
#[cfg(not(feature = "cuda"))]
type Inner = burn_flex::Flex;

type C = Compiled<Inner>;

/// The shape modes compared, by name: `dynamic`, and whether attention kernels and the memory
/// slab are allowed (a symbolic plan has neither: `plain` is the specialized plan without them,
/// so that `plain` vs `symbolic` compares only constant sizes against runtime ones).
const MODES: [(&str, DynamicShapes, bool); 4] = [
    ("specialized", DynamicShapes::Never, true),
    ("plain", DynamicShapes::Never, false),
    ("auto", DynamicShapes::Auto, true),
    ("symbolic", DynamicShapes::Always, true),
];

/// The sequence lengths the loop draws from.
const LENGTHS: [usize; 5] = [16, 24, 32, 48, 64];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let steps: usize = args
        .iter()
        .position(|a| a == "--steps")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let full = args.iter().any(|a| a == "--full");
    // `--mode NAME`: that mode alone (its warm-up then pays the first compiles of its own
    // kernels, not reusing another mode's).
    let only: Option<String> = args
        .iter()
        .position(|a| a == "--mode")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let modes: Vec<(&str, DynamicShapes, bool)> = MODES
        .iter()
        .copied()
        .filter(|(name, _, _)| only.as_deref().is_none_or(|o| o == *name))
        .collect();
    assert!(
        !modes.is_empty(),
        "--mode: one of specialized, plain, auto, symbolic"
    );
    let (d_model, d_ff, heads, layers, batch) = if full {
        (512, 2048, 8, 6, 8)
    } else {
        (128, 512, 4, 2, 4)
    };
    let config = encoder_config(d_model, d_ff, heads, layers);
    let device = Default::default();
    let mut weights = CollectWeights(Vec::new());
    config.init::<Inner>(&device).visit(&mut weights);
    let eager = model_with::<Inner>(&config, &weights.0, &device);
    let compiled = model_with::<C>(&config, &weights.0, &device);

    // The lengths of the loop: a fixed pseudo-random draw from the list.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let schedule: Vec<usize> = (0..steps)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            LENGTHS[(state % LENGTHS.len() as u64) as usize]
        })
        .collect();
    let inputs: Vec<TensorData> = LENGTHS
        .iter()
        .map(|&s| input_data([batch, s, d_model], s as u64))
        .collect();
    let input_of = |s: usize| inputs[LENGTHS.iter().position(|l| *l == s).unwrap()].clone();
    let mode_config = |dynamic, extras: bool| CompileConfig {
        dynamic,
        attention: extras,
        memory_planning: extras,
        ..CompileConfig::default()
    };

    println!(
        "variable-length W1{} forward on {}, batch {batch}, lengths {LENGTHS:?}, {steps} passes per loop",
        if full { "" } else { "-small" },
        std::any::type_name::<Inner>()
    );
    // Warm-up of each mode: every length twice (a graph's CPU kernels are built at the end of
    // its first replay, a GPU kernel at its first launch; Burn's autotune runs then too).
    let _ = time_loop(&eager, &LENGTHS, &input_of);
    for &(name, dynamic, extras) in &modes {
        configure(&device, mode_config(dynamic, extras));
        let before = metrics();
        let start = Instant::now();
        for &s in &LENGTHS {
            let got =
                forward(&compiled, &Tensor::<C, 3>::from_data(input_of(s), &device)).into_data();
            let want =
                forward(&eager, &Tensor::<Inner, 3>::from_data(input_of(s), &device)).into_data();
            check(name, s, &got, &want);
        }
        for &s in &LENGTHS {
            let _ =
                forward(&compiled, &Tensor::<C, 3>::from_data(input_of(s), &device)).into_data();
        }
        let warm = metrics().since(&before);
        println!(
            "  {name:>11} warm-up (every length twice): {:.2?}; {} compile(s), {} of them \
             recompile(s), {} C build(s), {} graph(s) symbolic",
            start.elapsed(),
            warm.cache_misses,
            warm.recompiles,
            warm.kernel_builds,
            warm.symbolic_graphs
        );
    }

    // Timed loops, alternating sides, 3 rounds.
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); modes.len() + 1];
    let mut compiles = 0;
    for _ in 0..3 {
        times[0].push(time_loop(&eager, &schedule, &input_of));
        for (m, (_, dynamic, extras)) in modes.iter().enumerate() {
            configure(&device, mode_config(*dynamic, *extras));
            let before = metrics();
            times[m + 1].push(time_loop(&compiled, &schedule, &input_of));
            compiles += metrics().since(&before).cache_misses;
        }
    }
    let median = |t: &mut Vec<Duration>| {
        t.sort();
        t[1]
    };
    let medians: Vec<Duration> = times.iter_mut().map(median).collect();
    let per = |d: Duration| d.as_secs_f64() * 1e3 / steps as f64;
    println!("  loop: eager {:.3} ms/pass", per(medians[0]));
    for (m, (name, _, _)) in modes.iter().enumerate() {
        println!(
            "  loop: {name:>11} {:.3} ms/pass, speedup vs eager {:.2}x",
            per(medians[m + 1]),
            medians[0].as_secs_f64() / medians[m + 1].as_secs_f64()
        );
    }
    if modes.len() == MODES.len() {
        println!(
            "  plain specialized / symbolic, same shapes and plan features: {:.2}x (above 1: \
             symbolic faster)",
            medians[2].as_secs_f64() / medians[4].as_secs_f64()
        );
    }
    println!("  during the timed loops: {compiles} compile(s)");
    assert_eq!(compiles, 0, "every length was compiled in the warm-up");
}

/// One loop over `schedule`'s lengths, every pass read back.
fn time_loop<B: Backend>(
    model: &TransformerEncoder<B>,
    schedule: &[usize],
    input_of: &dyn Fn(usize) -> TensorData,
) -> Duration {
    let device = Default::default();
    let start = Instant::now();
    for &s in schedule {
        let _ = forward(model, &Tensor::<B, 3>::from_data(input_of(s), &device)).into_data();
    }
    start.elapsed()
}

fn check(mode: &str, s: usize, got: &TensorData, want: &TensorData) {
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    let scale = w.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    let worst = g
        .iter()
        .zip(&w)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    // CPU: the C kernels and Flex agree to rounding. CUDA: matmuls run in cuBLASLt (compiled)
    // and in Burn's CubeCL matmul (eager), which sum in other orders (w1_bench's tolerance).
    let relative = if cfg!(feature = "cuda") { 5e-3 } else { 1e-4 };
    assert!(
        worst <= relative * scale,
        "{mode}, length {s}: compiled differs from eager by {worst} (scale {scale})"
    );
}
