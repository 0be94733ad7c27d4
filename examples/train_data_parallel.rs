//! Data-parallel training through burn-collective: N peers, each a thread with its own device,
//! the global batch split across them; each peer runs its shard's forward and backward compiled
//! (`Autodiff<Compiled<X>>`), the gradients are averaged with Burn's
//! `GradientsParams::all_reduce` (burn-collective, Burn's `collective` feature), and each peer
//! takes the same Adam step. The same training on one device over the whole batch runs first;
//! the program prints both losses per step, the time per step of each, and fails when the
//! peers' parameters end farther from the one-device run's than the tolerance.
//!
//! ```text
//! # CPU: the peers share the Flex device (threads), a small transformer encoder:
//! cargo run --release -p burn-compile-examples --example train_data_parallel -- --peers 2
//! # One machine with several GPUs: peer i on GPU i (W1's encoder with --w1):
//! CUDARC_CUDA_VERSION=13000 cargo run --release -p burn-compile-examples \
//!     --example train_data_parallel --features cuda -- --peers 2 --w1
//! ```
//!
//! Flags: `--peers N` (default 2), `--steps N` (default 10), `--batch N` (the global batch,
//! split evenly; default 8 per peer), `--w1` (W1's encoder, d_model 512, 6 layers, seq 128;
//! default a small one: d_model 64, 2 layers, seq 16).
//!
//! Several nodes (machines): burn-collective's orchestrator coordinates them. Start one
//! (`burn::collective::start_global_orchestrator(port)`, async, in a process of its own), and
//! give every node's peers the same `CollectiveConfig` with `with_num_nodes(n)`,
//! `with_global_address(orchestrator)`, `with_node_address(this node)` and
//! `with_data_service_port(port)`: the peers of a node all-reduce locally, then the nodes among
//! themselves. This program registers local peers only.

use burn::collective::{CollectiveConfig, PeerId, ReduceOperation, finish_collective, register};
use burn::module::Module;
use burn::nn::transformer::{TransformerEncoder, TransformerEncoderConfig};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Tensor, TensorData};
use burn_compile_examples::{CollectWeights, encoder_config, forward, input_data, model_with};
use std::process::ExitCode;
use std::time::Instant;

#[cfg(not(feature = "cuda"))]
mod devices {
    pub type Inner = burn_flex::Flex;
    /// Every peer on the one Flex device (its threads share the CPU).
    pub fn device(_peer: usize) -> burn_flex::FlexDevice {
        Default::default()
    }
}

#[cfg(feature = "cuda")]
mod devices {
    pub type Inner = burn_cuda::Cuda<f32, i32>;
    /// Peer `i` on GPU `i`.
    pub fn device(peer: usize) -> burn_cuda::CudaDevice {
        burn_cuda::CudaDevice { index: peer }
    }
}

type B = burn::backend::Autodiff<burn_compile::Compiled<devices::Inner>>;

struct Options {
    peers: usize,
    steps: usize,
    batch: usize,
    w1: bool,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        peers: 2,
        steps: 10,
        batch: 0,
        w1: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            args.next()
                .ok_or(format!("{name} needs a value"))?
                .parse()
                .map_err(|e| format!("{name}: {e}"))
        };
        match arg.as_str() {
            "--peers" => o.peers = number("--peers")?,
            "--steps" => o.steps = number("--steps")?,
            "--batch" => o.batch = number("--batch")?,
            "--w1" => o.w1 = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if o.batch == 0 {
        o.batch = 8 * o.peers;
    }
    if o.peers == 0 || o.steps == 0 {
        return Err("--peers and --steps must be positive".into());
    }
    if !o.batch.is_multiple_of(o.peers) {
        return Err(format!(
            "--batch {} does not split evenly over {} peers",
            o.batch, o.peers
        ));
    }
    Ok(o)
}

/// The model, its initial weights and the sequence length.
struct Setup {
    config: TransformerEncoderConfig,
    weights: Vec<TensorData>,
    seq: usize,
    d_model: usize,
}

impl Setup {
    fn new(w1: bool) -> Self {
        let (config, seq, d_model) = if w1 {
            (encoder_config(512, 2048, 8, 6), 128, 512)
        } else {
            (encoder_config(64, 128, 4, 2), 16, 64)
        };
        let device = devices::device(0);
        let model = config.init::<devices::Inner>(&device);
        let mut collect = CollectWeights(Vec::new());
        model.visit(&mut collect);
        Self {
            config,
            weights: collect.0,
            seq,
            d_model,
        }
    }

    /// Rows `first..first + rows` of step `step`'s global batch (the same values however the
    /// batch is split).
    fn batch(&self, step: usize, global: usize, first: usize, rows: usize) -> TensorData {
        let all = input_data([global, self.seq, self.d_model], 1000 + step as u64);
        let per_row = self.seq * self.d_model;
        let values = all.to_vec::<f32>().expect("f32 input");
        TensorData::new(
            values[first * per_row..(first + rows) * per_row].to_vec(),
            [rows, self.seq, self.d_model],
        )
    }
}

const LR: f64 = 1e-4;

/// Loss `mean(out²)` over `x`: the mean of equal shards' losses is the whole batch's.
fn loss<Bk: Backend>(
    model: &TransformerEncoder<Bk>,
    x: TensorData,
    device: &Bk::Device,
) -> Tensor<Bk, 1> {
    forward(model, &Tensor::from_data(x, device))
        .square()
        .mean()
}

/// What one run reports: loss per step, ms per step (after the first), final weights.
struct Run {
    losses: Vec<f64>,
    ms_per_step: f64,
    weights: Vec<TensorData>,
}

/// Peer `peer` of `peers` (or the whole batch alone when `peers` is 1 and no collective).
fn train<Bk: AutodiffBackend>(
    s: &Setup,
    o: &Options,
    model: TransformerEncoder<Bk>,
    peer: usize,
    peers: usize,
    device: Bk::Device,
) -> Run {
    let id = PeerId::from(peer);
    let collective = peers > 1;
    if collective {
        let config = CollectiveConfig::default().with_num_devices(peers);
        register::<Bk::InnerBackend>(id, device.clone(), config).expect("register the peer");
    }
    // Every peer's model has the same parameter ids: the all-reduce pairs gradients by id.
    let mut model = model.fork(&device);
    let mut optim = AdamConfig::new().init::<Bk, TransformerEncoder<Bk>>();
    let rows = o.batch / peers;
    let mut losses = Vec::with_capacity(o.steps);
    let mut start = Instant::now();
    for step in 0..o.steps {
        if step == 1 {
            // The first step compiles: timed apart.
            start = Instant::now();
        }
        let l = loss(&model, s.batch(step, o.batch, peer * rows, rows), &device);
        let mut grads = GradientsParams::from_grads(l.backward(), &model);
        if collective {
            grads = grads
                .all_reduce::<Bk::InnerBackend>(id, ReduceOperation::Mean)
                .expect("all-reduce the gradients");
        }
        model = optim.step(LR, model, grads);
        losses.push(l.into_scalar().elem::<f64>());
        burn_compile::mark_step();
    }
    let ms_per_step = start.elapsed().as_secs_f64() * 1e3 / (o.steps - 1).max(1) as f64;
    if collective {
        finish_collective::<Bk::InnerBackend>(id).expect("leave the collective");
    }
    let mut collect = CollectWeights(Vec::new());
    model.visit(&mut collect);
    Run {
        losses,
        ms_per_step,
        weights: collect.0,
    }
}

fn max_abs_diff(a: &[TensorData], b: &[TensorData]) -> f64 {
    a.iter()
        .zip(b)
        .flat_map(|(a, b)| {
            let (a, b) = (
                a.to_vec::<f32>().expect("f32"),
                b.to_vec::<f32>().expect("f32"),
            );
            a.into_iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs() as f64)
                .collect::<Vec<_>>()
        })
        .fold(0.0, f64::max)
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("train_data_parallel: {e}");
            return ExitCode::FAILURE;
        }
    };
    let s = Setup::new(o.w1);
    println!(
        "{} peers, global batch {} ({} per peer), {} steps, {}",
        o.peers,
        o.batch,
        o.batch / o.peers,
        o.steps,
        if o.w1 { "W1 encoder" } else { "small encoder" }
    );
    let model = model_with::<B>(&s.config, &s.weights, &devices::device(0));
    let one = train::<B>(&s, &o, model.clone(), 0, 1, devices::device(0));
    let runs: Vec<Run> = std::thread::scope(|scope| {
        let (s, o) = (&s, &o);
        let peers: Vec<_> = (0..o.peers)
            .map(|p| {
                let model = model.clone();
                scope.spawn(move || train::<B>(s, o, model, p, o.peers, devices::device(p)))
            })
            .collect();
        peers
            .into_iter()
            .map(|p| p.join().expect("a peer panicked"))
            .collect()
    });
    println!("step  one device  data-parallel (mean of the peers' losses)");
    for (step, alone) in one.losses.iter().enumerate() {
        let mean = runs.iter().map(|r| r.losses[step]).sum::<f64>() / runs.len() as f64;
        println!("{step:>4}  {alone:>10.6}  {mean:>10.6}");
    }
    let slowest = runs.iter().map(|r| r.ms_per_step).fold(0.0, f64::max);
    println!(
        "ms per step after the first: one device {:.2}, {} peers {:.2} ({:.2}x the samples per second)",
        one.ms_per_step,
        o.peers,
        slowest,
        one.ms_per_step / slowest
    );
    let diff = runs
        .iter()
        .map(|r| max_abs_diff(&r.weights, &one.weights))
        .fold(0.0, f64::max);
    // Adam moves each weight by about the learning rate per step whatever its gradient: a
    // gradient entry near zero summed in another order can flip its update, so the bound is
    // lr-sized per step; a wrong all-reduce (a sum, one shard) is off by far more.
    let tolerance = 2.0 * LR * o.steps as f64;
    println!(
        "max |weight difference| after {} steps: {diff:.2e} (tolerance {tolerance:.1e})",
        o.steps
    );
    let m = burn_compile::metrics();
    println!(
        "compiled graphs: {} ({} from the plan cache), eager fallbacks {}",
        m.graphs, m.cache_hits, m.compile_fallbacks
    );
    if diff > tolerance {
        eprintln!("train_data_parallel: the peers' weights differ from one device's");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
