//! A variable-length inference loop: W1 (small by default) forward passes whose sequence length
//! is drawn from a fixed list, on `Compiled<Flex>` against eager Flex, side by side in one
//! process on the same inputs and weights. Each length is a specialization of the forward's
//! graph family: the first pass at a length compiles (a recompile of the family after the
//! first), later passes at it replay its cached plan and C kernels. The example reports how
//! many graphs compiled, recompiled and ran past `recompile_limit` during the timed loops.
//!
//! ```text
//! cargo run --release -p burn-compile-examples --example variable_length [-- --steps 60 --full]
//! ```
//!
//! Timing: the whole loop (every pass read back to host, as an inference server returns each
//! result), after a warm-up pass over every length; 3 rounds per side, alternating, the median
//! round printed with the ratio. The first-pass cost (compiles, C builds) is printed apart.
//! Every compiled output is compared with eager's (relative 1e-4 of the output's scale).

use burn::module::Module;
use burn::nn::transformer::TransformerEncoder;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_compile::{Compiled, metrics};
use burn_compile_examples::{CollectWeights, encoder_config, forward, input_data, model_with};
use burn_flex::Flex;
use std::time::Instant;

type C = Compiled<Flex>;

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
    let (d_model, d_ff, heads, layers, batch) = if full {
        (512, 2048, 8, 6, 8)
    } else {
        (128, 512, 4, 2, 4)
    };
    let config = encoder_config(d_model, d_ff, heads, layers);
    let device = Default::default();
    let mut weights = CollectWeights(Vec::new());
    config.init::<Flex>(&device).visit(&mut weights);
    let eager = model_with::<Flex>(&config, &weights.0, &device);
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

    // First pass at every length: compiles (and C builds) on the compiled side.
    let before = metrics();
    let start = Instant::now();
    for &s in &LENGTHS {
        let got = forward(&compiled, &Tensor::<C, 3>::from_data(input_of(s), &device)).into_data();
        let want = forward(&eager, &Tensor::<Flex, 3>::from_data(input_of(s), &device)).into_data();
        check(s, &got, &want);
    }
    // A second pass: the C kernels are built at the end of a graph's first replay.
    for &s in &LENGTHS {
        let _ = forward(&compiled, &Tensor::<C, 3>::from_data(input_of(s), &device)).into_data();
    }
    let first = start.elapsed();
    let warm = metrics().since(&before);

    let before = metrics();
    let (mut c, mut e) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        e.push(time_loop(&eager, &schedule, &input_of));
        c.push(time_loop(&compiled, &schedule, &input_of));
    }
    let timed = metrics().since(&before);
    c.sort();
    e.sort();
    let (c, e) = (c[1], e[1]);
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e3 / steps as f64;
    println!(
        "variable-length W1{} forward, batch {batch}, lengths {LENGTHS:?}, {steps} passes per loop",
        if full { "" } else { "-small" }
    );
    println!(
        "  warm-up (every length twice): {:.2?}; {} compile(s), {} of them recompile(s), {} C build(s)",
        first, warm.cache_misses, warm.recompiles, warm.kernel_builds
    );
    println!(
        "  loop: eager {:.3} ms/pass, compiled {:.3} ms/pass, speedup {:.2}x",
        per(e),
        per(c),
        e.as_secs_f64() / c.as_secs_f64()
    );
    println!(
        "  during the timed loops: {} compile(s), {} graph(s) past recompile_limit",
        timed.cache_misses, timed.past_recompile_limit
    );
    assert_eq!(
        timed.cache_misses, 0,
        "every length was compiled in the warm-up"
    );
}

/// One loop over `schedule`'s lengths, every pass read back.
fn time_loop<B: Backend>(
    model: &TransformerEncoder<B>,
    schedule: &[usize],
    input_of: &dyn Fn(usize) -> TensorData,
) -> std::time::Duration {
    let device = Default::default();
    let start = Instant::now();
    for &s in schedule {
        let _ = forward(model, &Tensor::<B, 3>::from_data(input_of(s), &device)).into_data();
    }
    start.elapsed()
}

fn check(s: usize, got: &TensorData, want: &TensorData) {
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    let scale = w.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    let worst = g
        .iter()
        .zip(&w)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        worst <= 1e-4 * scale,
        "length {s}: compiled differs from eager by {worst} (scale {scale})"
    );
}
