//! What capture costs on the host, on CPU: `Compiled<Flex>` vs `Flex` in the same run.
//!
//! (a) host ns per captured op: chains of tiny elementwise ops on `[4]` tensors, read back;
//! (b) cost per graph that hits the cache: a loop recording one small graph per iteration, at two
//!     graph sizes, so the per-graph fixed cost (key + lookup + plan launch) separates from the
//!     per-op cost;
//! (c) medium workloads where op cost dominates (an MLP forward, a small transformer encoder
//!     forward): the ratio compiled/eager, against the goal "once warm, the compiled CPU run is
//!     not more than 5 % slower than eager".
//!
//! Compiled and eager measurements alternate (order flipped each repetition) and each figure is
//! the median of several repetitions, to reduce the noise of a shared machine.
//!
//! ```text
//! cargo run -p burn-compile-examples --example capture_overhead [-- --host-only]
//! ```

use burn::module::Module;
use burn::nn::activation::ActivationConfig;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor, TensorData};
use burn_compile::{Compiled, Metrics, mark_step, metrics};
use burn_flex::Flex;
use std::hint::black_box;
use std::time::Instant;

type E = Flex;
type C = Compiled<Flex>;

/// Repetitions of every measurement (odd: the median is one of them).
const REPS: usize = 9;
/// The goal for (c): compiled at most 5 % slower than eager.
const GOAL: f64 = 1.05;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Runs `eager` and `compiled` `REPS` times, alternating which goes first, and returns their
/// medians (each closure returns its own measurement).
fn alternate(mut eager: impl FnMut() -> f64, mut compiled: impl FnMut() -> f64) -> (f64, f64) {
    let (mut e, mut c) = (Vec::new(), Vec::new());
    for rep in 0..REPS {
        if rep % 2 == 0 {
            e.push(eager());
            c.push(compiled());
        } else {
            c.push(compiled());
            e.push(eager());
        }
    }
    (median(e), median(c))
}

/// Reproducible values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6364136223846793005) ^ 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn print_graphs(label: &str, m: &Metrics) {
    println!(
        "    {label}: {} graphs, cache {} hits / {} misses, {} ops recorded (drops included), {} executed",
        m.graphs, m.cache_hits, m.cache_misses, m.ops_recorded, m.ops_executed
    );
}

// ---------------------------------------------------------------------------------------------
// (a) Host cost per op.

/// Ops per measurement, cut into chains of these lengths (one graph per chain, each well under
/// the default `max_graph_ops`, drops included).
const TOTAL_OPS: usize = 10_000;
const CHAIN_LENGTHS: [usize; 3] = [10, 100, 1_000];

struct ChainTimes {
    /// ns per op spent recording (for eager: running) the ops, before the read.
    record: f64,
    /// ns per op, ops and read together.
    total: f64,
}

fn op_chains<B: Backend>(device: &B::Device, chain: usize) -> ChainTimes {
    let x = Tensor::<B, 1>::from_data([0.5f32, 1.0, 1.5, 2.0], device);
    let mut record = 0.0;
    let start = Instant::now();
    for _ in 0..TOTAL_OPS / chain {
        let t = Instant::now();
        let mut y = x.clone();
        for _ in 0..chain / 2 {
            y = y * 0.999;
            y = y + 0.001;
        }
        record += t.elapsed().as_secs_f64();
        black_box(y.into_data());
    }
    let total = start.elapsed().as_secs_f64();
    let ops = TOTAL_OPS as f64;
    ChainTimes {
        record: record * 1e9 / ops,
        total: total * 1e9 / ops,
    }
}

/// Returns the compiled − eager difference in ns per op for the longest chains.
fn per_op() -> f64 {
    println!(
        "(a) host cost per op: {TOTAL_OPS} elementwise ops on [4] tensors, in chains of n ops, each chain read back"
    );
    let device = Default::default();
    let mut diff = 0.0;
    for chain in CHAIN_LENGTHS {
        // Warm: the compiled chain's plan is built once.
        op_chains::<E>(&device, chain);
        op_chains::<C>(&device, chain);
        let before = metrics();
        let mut c_record = Vec::new();
        let (eager, compiled) = alternate(
            || op_chains::<E>(&device, chain).total,
            || {
                let t = op_chains::<C>(&device, chain);
                c_record.push(t.record);
                t.total
            },
        );
        let m = metrics().since(&before);
        let c_record = median(c_record);
        diff = compiled - eager;
        println!(
            "    n = {chain:>4}: eager {eager:>7.1} ns/op, compiled {compiled:>7.1} ns/op \
             ({c_record:.1} recording + {:.1} replay and read), difference {diff:+.1} ns/op",
            compiled - c_record
        );
        print_graphs("  compiled", &m);
    }
    diff
}

// ---------------------------------------------------------------------------------------------
// (b) Cost per graph that hits the cache.

const GRAPHS: usize = 2_000;

/// ns per iteration of a loop recording one graph of `ops` elementwise ops per iteration, closed
/// by `mark_step` (a no-op on the eager backend) with its result alive.
fn graph_loop<B: Backend>(device: &B::Device, ops: usize) -> f64 {
    let x = Tensor::<B, 1>::from_data([0.5f32, 1.0, 1.5, 2.0], device);
    let mut keep = x.clone();
    let start = Instant::now();
    for _ in 0..GRAPHS {
        let mut y = x.clone();
        for _ in 0..ops {
            y = y * 1.001;
        }
        keep = y; // the previous result is dropped: one more op in the graph
        mark_step();
    }
    let elapsed = start.elapsed().as_secs_f64();
    black_box(keep.into_data());
    elapsed * 1e9 / GRAPHS as f64
}

fn per_graph(per_op_diff: f64) {
    println!(
        "(b) cost per graph hitting the cache: {GRAPHS} iterations, one graph each (mark_step)"
    );
    let device = Default::default();
    let sizes = [1usize, 16];
    let mut diffs = Vec::new();
    for ops in sizes {
        graph_loop::<E>(&device, ops);
        graph_loop::<C>(&device, ops);
        let before = metrics();
        let (eager, compiled) = alternate(
            || graph_loop::<E>(&device, ops),
            || graph_loop::<C>(&device, ops),
        );
        let m = metrics().since(&before);
        println!(
            "    {ops:>2} op(s)/graph: eager {eager:>8.0} ns/iter, compiled {compiled:>8.0} ns/graph, \
             difference {:+.0} ns/graph",
            compiled - eager
        );
        print_graphs("  compiled", &m);
        if m.cache_misses > 0 {
            println!(
                "    note: {} cache miss(es) in the measured loops",
                m.cache_misses
            );
        }
        diffs.push(compiled - eager);
    }
    let (n0, n1) = (sizes[0] as f64, sizes[1] as f64);
    let slope = (diffs[1] - diffs[0]) / (n1 - n0);
    let fixed = diffs[0] - slope * n0;
    println!(
        "    fit: {fixed:.0} ns fixed per graph (key, cache lookup, plan launch) + {slope:.1} ns per op \
         ((a) measured {per_op_diff:+.1} ns/op with chains of {} ops)",
        CHAIN_LENGTHS[CHAIN_LENGTHS.len() - 1]
    );
}

// ---------------------------------------------------------------------------------------------
// (c) Medium workloads.

struct Mlp<B: Backend> {
    layers: Vec<(Tensor<B, 2>, Tensor<B, 2>)>,
}

impl<B: Backend> Mlp<B> {
    fn new(dims: &[usize], device: &B::Device) -> Self {
        let layers = dims
            .windows(2)
            .enumerate()
            .map(|(i, d)| {
                let scale = (1.0 / d[0] as f32).sqrt();
                let w: Vec<f32> = values(d[0] * d[1], 100 + i as u64)
                    .into_iter()
                    .map(|v| v * scale)
                    .collect();
                let b = values(d[1], 200 + i as u64);
                (
                    Tensor::from_data(TensorData::new(w, [d[0], d[1]]), device),
                    Tensor::from_data(TensorData::new(b, [1, d[1]]), device),
                )
            })
            .collect();
        Self { layers }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let last = self.layers.len() - 1;
        self.layers.iter().enumerate().fold(x, |x, (i, (w, b))| {
            let y = x.matmul(w.clone()) + b.clone();
            if i < last {
                burn::tensor::activation::relu(y)
            } else {
                y
            }
        })
    }
}

const MLP_DIMS: [usize; 4] = [512, 1024, 1024, 512];
const MLP_BATCH: usize = 64;
const ITERS: usize = 5;

/// ms per forward + read of the loss; returns the last loss too.
fn mlp_loop<B: Backend>(mlp: &Mlp<B>, x: &Tensor<B, 2>) -> (f64, f32) {
    let start = Instant::now();
    let mut loss = 0.0;
    for _ in 0..ITERS {
        loss = mlp.forward(x.clone()).square().mean().into_scalar().elem();
    }
    (start.elapsed().as_secs_f64() * 1e3 / ITERS as f64, loss)
}

fn transformer_config() -> TransformerEncoderConfig {
    TransformerEncoderConfig::new(128, 512, 4, 2)
        .with_dropout(0.0)
        .with_activation(ActivationConfig::Relu)
}
const TF_SHAPE: [usize; 3] = [8, 64, 128];

fn transformer_loop<B: Backend>(model: &TransformerEncoder<B>, x: &Tensor<B, 3>) -> f64 {
    let start = Instant::now();
    for _ in 0..ITERS {
        let out = model.forward(TransformerEncoderInput::new(x.clone()));
        black_box(out.sum().into_scalar());
    }
    start.elapsed().as_secs_f64() * 1e3 / ITERS as f64
}

fn verdict(label: &str, eager: f64, compiled: f64) -> bool {
    let ratio = compiled / eager;
    let pass = ratio <= GOAL;
    println!(
        "    {label}: eager {eager:.3} ms, compiled {compiled:.3} ms, compiled/eager {ratio:.3} \
         ({:+.1} %): {}",
        (ratio - 1.0) * 100.0,
        if pass { "PASS" } else { "FAIL" }
    );
    pass
}

fn medium() -> bool {
    println!(
        "(c) medium workloads, {ITERS} iterations per measurement, one host read per iteration; \
         goal: compiled <= {GOAL} x eager"
    );
    let device = Default::default();
    let x_data = TensorData::new(values(MLP_BATCH * MLP_DIMS[0], 7), [MLP_BATCH, MLP_DIMS[0]]);

    // MLP with identical weights on both backends.
    let (mlp_e, mlp_c) = (
        Mlp::<E>::new(&MLP_DIMS, &device),
        Mlp::<C>::new(&MLP_DIMS, &device),
    );
    let (xe, xc) = (
        Tensor::<E, 2>::from_data(x_data.clone(), &device),
        Tensor::<C, 2>::from_data(x_data, &device),
    );
    let (_, loss_e) = mlp_loop(&mlp_e, &xe);
    let (_, loss_c) = mlp_loop(&mlp_c, &xc);
    let before = metrics();
    let (eager, compiled) = alternate(|| mlp_loop(&mlp_e, &xe).0, || mlp_loop(&mlp_c, &xc).0);
    let m = metrics().since(&before);
    let label = format!(
        "MLP {MLP_DIMS:?} ReLU, batch {MLP_BATCH} (loss eager {loss_e:.6}, compiled {loss_c:.6})"
    );
    let mlp_pass = verdict(&label, eager, compiled);
    print_graphs("  compiled", &m);

    // Small transformer encoder forward (weights differ between the two: timing only).
    let config = transformer_config();
    let model_e = config.init::<E>(&device);
    let model_c = config.init::<C>(&device);
    let n = TF_SHAPE.iter().product();
    let x_data = TensorData::new(values(n, 9), TF_SHAPE);
    let (xe, xc) = (
        Tensor::<E, 3>::from_data(x_data.clone(), &device),
        Tensor::<C, 3>::from_data(x_data, &device),
    );
    transformer_loop(&model_e, &xe);
    transformer_loop(&model_c, &xc);
    let before = metrics();
    let (eager, compiled) = alternate(
        || transformer_loop(&model_e, &xe),
        || transformer_loop(&model_c, &xc),
    );
    let m = metrics().since(&before);
    let label = format!(
        "TransformerEncoder d_model {}, {} heads, {} layers, d_ff {}, input {TF_SHAPE:?} ({} params)",
        config.d_model,
        config.n_heads,
        config.n_layers,
        config.d_ff,
        model_e.num_params()
    );
    let tf_pass = verdict(&label, eager, compiled);
    print_graphs("  compiled", &m);
    mlp_pass && tf_pass
}

fn main() {
    println!(
        "capture overhead on CPU: Compiled<Flex> vs Flex, median of {REPS} alternated repetitions"
    );
    // `--host-only`: parts (a) and (b) only (for profiling the capture itself).
    let host_only = std::env::args().any(|a| a == "--host-only");
    let per_op_diff = per_op();
    per_graph(per_op_diff);
    if host_only {
        return;
    }
    let pass = medium();
    println!(
        "goal \"once warm, compiled CPU run not more than 5 % slower than eager\": {}",
        if pass { "PASS" } else { "FAIL" }
    );
}
