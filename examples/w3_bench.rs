//! W3: ResNet-50 (`torchvision.models.resnet50()`'s layout: a 7×7 stem and max pool, Bottleneck
//! blocks of 3, 4, 6 and 3 with BatchNorm and ReLU, stride on the 3×3 convolution, average
//! pooling and a 1000-way head) on a batch of 64 × 3 × 224² random images: inference, and a
//! training step (cross-entropy, SGD with momentum 0.9) — on Burn eager and on `Compiled`,
//! from the same weights and images; one JSON line per system and phase (`"workload":"W3"`).
//! torch.compile's figures come from `benchmarks/h200/torch_workloads.py` (`WORKLOADS=W3`).
//!
//! ```text
//! CUDARC_CUDA_VERSION=13000 cargo build --release -p burn-compile-examples --example w3_bench --features cuda
//! ./w3_bench --dtypes bf16 [--iters N] [--warmup N] [--out FILE] [--systems burn-compile]
//! # A smoke run of the same program on the CPU (a tiny ResNet on 32² images, on Flex):
//! cargo run --release -p burn-compile-examples --example w3_bench -- --small
//! ```
//!
//! Timing as `w1_bench` (`burn_compile_examples::time_calls`). The first training step's loss
//! of each system is compared with eager's (the dtype's tolerance of
//! `burn_compile::incident::tolerance`); a difference beyond it fails the run.

use burn::module::{AutodiffModule, Module};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::activation::relu;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use burn_compile_examples::{
    BenchOptions, CollectWeights, bench_mode, input_data, load_weights, time_calls,
};
use std::process::ExitCode;

type Ad<B> = burn::backend::Autodiff<B>;

use burn_compile_examples::bench_backend::{Elem, Inner};

const LEARNING_RATE: f64 = 0.1;
const SYSTEMS: &[&str] = &["burn-eager", "burn-compile"];

/// The network and the batch.
#[derive(Clone, Copy)]
struct Shape {
    /// Bottleneck blocks per stage.
    blocks: [usize; 4],
    /// Channels of the first stage's 3×3 convolutions (64 in ResNet-50).
    width: usize,
    classes: usize,
    image: usize,
    batch: usize,
}

const RESNET50: Shape = Shape {
    blocks: [3, 4, 6, 3],
    width: 64,
    classes: 1000,
    image: 224,
    batch: 64,
};

const SMALL: Shape = Shape {
    blocks: [1, 1, 1, 1],
    width: 8,
    classes: 10,
    image: 32,
    batch: 2,
};

fn conv<B: Backend>(i: usize, o: usize, k: usize, s: usize, device: &B::Device) -> Conv2d<B> {
    Conv2dConfig::new([i, o], [k, k])
        .with_stride([s, s])
        .with_padding(PaddingConfig2d::Explicit(k / 2, k / 2, k / 2, k / 2))
        .with_bias(false)
        .init(device)
}

/// 1×1 → 3×3 (stride) → 1×1 to 4× the width, each with BatchNorm; the input through a 1×1
/// convolution and BatchNorm where the shape changes; ReLU after the sum.
#[derive(Module, Debug)]
struct Bottleneck<B: Backend> {
    conv1: Conv2d<B>,
    bn1: BatchNorm<B>,
    conv2: Conv2d<B>,
    bn2: BatchNorm<B>,
    conv3: Conv2d<B>,
    bn3: BatchNorm<B>,
    downsample: Option<(Conv2d<B>, BatchNorm<B>)>,
}

impl<B: Backend> Bottleneck<B> {
    fn new(input: usize, width: usize, stride: usize, device: &B::Device) -> Self {
        let output = 4 * width;
        Self {
            conv1: conv(input, width, 1, 1, device),
            bn1: BatchNormConfig::new(width).init(device),
            conv2: conv(width, width, 3, stride, device),
            bn2: BatchNormConfig::new(width).init(device),
            conv3: conv(width, output, 1, 1, device),
            bn3: BatchNormConfig::new(output).init(device),
            downsample: (input != output || stride != 1).then(|| {
                (
                    conv(input, output, 1, stride, device),
                    BatchNormConfig::new(output).init(device),
                )
            }),
        }
    }

    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let y = relu(self.bn1.forward(self.conv1.forward(x.clone())));
        let y = relu(self.bn2.forward(self.conv2.forward(y)));
        let y = self.bn3.forward(self.conv3.forward(y));
        let x = match &self.downsample {
            Some((conv, bn)) => bn.forward(conv.forward(x)),
            None => x,
        };
        relu(y + x)
    }
}

#[derive(Module, Debug)]
struct ResNet<B: Backend> {
    stem: Conv2d<B>,
    stem_bn: BatchNorm<B>,
    pool: MaxPool2d,
    blocks: Vec<Bottleneck<B>>,
    average: AdaptiveAvgPool2d,
    head: Linear<B>,
}

impl<B: Backend> ResNet<B> {
    fn new(s: &Shape, device: &B::Device) -> Self {
        let mut blocks = Vec::new();
        let mut channels = s.width;
        for (stage, &n) in s.blocks.iter().enumerate() {
            let width = s.width << stage;
            for b in 0..n {
                let stride = if stage > 0 && b == 0 { 2 } else { 1 };
                blocks.push(Bottleneck::new(channels, width, stride, device));
                channels = 4 * width;
            }
        }
        Self {
            stem: conv(3, s.width, 7, 2, device),
            stem_bn: BatchNormConfig::new(s.width).init(device),
            pool: MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(),
            blocks,
            average: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            head: LinearConfig::new(channels, s.classes).init(device),
        }
    }

    fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let mut x = self
            .pool
            .forward(relu(self.stem_bn.forward(self.stem.forward(images))));
        for block in &self.blocks {
            x = block.forward(x);
        }
        self.head.forward(self.average.forward(x).flatten(1, 3))
    }
}

/// One figure of one system.
struct Figure {
    system: &'static str,
    phase: &'static str,
    /// Per call: wall, first call, issue and host times.
    timing: burn_compile_examples::Timing,
    /// The first training step's loss (training only).
    first_loss: Option<f64>,
}

fn measure<B: AutodiffBackend>(
    system: &'static str,
    s: &Shape,
    weights: &[TensorData],
    images: &TensorData,
    labels: &TensorData,
    o: &BenchOptions,
) -> Vec<Figure> {
    let device = B::Device::default();
    let model = load_weights(ResNet::<B>::new(s, &device), weights, &device);
    let x = Tensor::<B, 4>::from_data(images.clone(), &device);
    let y = Tensor::<B, 1, Int>::from_data(labels.clone(), &device);
    // Inference on the inner backend, BatchNorm in evaluation mode.
    let eval = model.valid();
    let xi = x.clone().inner();
    let timing =
        time_calls::<B::InnerBackend, _>(&device, o.iters, o.warmup, || eval.forward(xi.clone()));
    let infer = Figure {
        system,
        phase: "infer",
        timing,
        first_loss: None,
    };
    let mut model = Some(model);
    let mut optim = SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
        .init::<B, ResNet<B>>();
    let mut step = || {
        let m = model.take().expect("the model");
        let loss = CrossEntropyLossConfig::new()
            .init(&device)
            .forward(m.forward(x.clone()), y.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &m);
        model = Some(optim.step(LEARNING_RATE, m, grads));
        loss.inner()
    };
    let first_loss = step().into_scalar().elem::<f64>();
    let timing = time_calls::<B, _>(&device, o.iters, o.warmup, &mut step);
    let train = Figure {
        system,
        phase: "train",
        timing,
        first_loss: Some(first_loss),
    };
    vec![infer, train]
}

/// A ResNet's parameters drawn (seeded) on `B`, once for both systems.
fn initial_weights<B: Backend>(s: &Shape) -> Vec<TensorData> {
    let device = B::Device::default();
    B::seed(&device, 7);
    let mut collect = CollectWeights(Vec::new());
    ResNet::<B>::new(s, &device).visit(&mut collect);
    collect.0
}

fn run<F: Elem>(o: &BenchOptions, s: &Shape) -> Result<Vec<Figure>, String>
where
    Inner<F>: Backend,
    burn_compile::Compiled<Inner<F>>: Backend,
{
    let weights = initial_weights::<Inner<F>>(s);
    let images = input_data([s.batch * 3, s.image, s.image], 3);
    let images = TensorData::new(
        images.to_vec::<f32>().expect("floats"),
        [s.batch, 3, s.image, s.image],
    );
    let labels = TensorData::new(
        (0..s.batch)
            .map(|i| (i * 7 % s.classes) as i64)
            .collect::<Vec<_>>(),
        [s.batch],
    );
    let mut figures = Vec::new();
    for system in SYSTEMS.iter().filter(|x| o.systems.iter().any(|o| o == *x)) {
        let f = match *system {
            "burn-compile" => measure::<Ad<burn_compile::Compiled<Inner<F>>>>(
                system, s, &weights, &images, &labels, o,
            ),
            _ => measure::<Ad<Inner<F>>>(system, s, &weights, &images, &labels, o),
        };
        for figure in &f {
            eprintln!(
                "{system} {} {}: {:.3} ms (issued in {:.3} ms), first call {:.2} s{}",
                o.dtype,
                figure.phase,
                figure.timing.ms,
                figure.timing.issue_ms,
                figure.timing.first_call_s,
                figure
                    .first_loss
                    .map_or(String::new(), |l| format!(", first loss {l:.6}")),
            );
        }
        figures.extend(f);
    }
    Ok(figures)
}

fn main() -> ExitCode {
    // `BURN_COMPILE_LOGS=graphs`: each new plan's launches and the ops it leaves to the inner
    // backend.
    burn_compile::init_logs();
    let o = match BenchOptions::parse_or_usage(
        SYSTEMS,
        "w3_bench [--dtypes f32|bf16] [--iters N] [--warmup N] [--small] [--out FILE] \
         [--systems S,…]",
    ) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let (shape, workload) = if o.small {
        (SMALL, "W3-small")
    } else {
        (RESNET50, "W3")
    };
    let figures = match o.dtype.as_str() {
        // Burn's CPU backend is instantiated for f32 only here.
        #[cfg(feature = "cuda")]
        "bf16" => run::<burn::tensor::bf16>(&o, &shape),
        "f32" => run::<f32>(&o, &shape),
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
            .find(|f| f.system == system && f.phase == "train")
            .and_then(|f| f.first_loss)
    };
    let agree = o.first_losses_agree(loss("burn-eager"), loss("burn-compile"));
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| "unknown".into());
    let lines: Vec<String> = figures
        .iter()
        .map(|f| {
            format!(
                "{{\"workload\":\"{workload}\",\"dtype\":\"{}\",\"phase\":\"{}\",\"system\":\"{}\",\"mode\":\"{}\",\"ms\":{:.4},\"first_call_s\":{:.3},\"issue_ms\":{:.4},\"host_ms\":{:.4},\"date\":\"{}\",\"gpu\":\"{}\"}}",
                o.dtype,
                f.phase,
                f.system,
                bench_mode(f.system),
                f.timing.ms,
                f.timing.first_call_s,
                f.timing.issue_ms,
                f.timing.host_ms,
                env("BENCH_DATE"),
                env("BENCH_GPU"),
            )
        })
        .collect();
    o.finish(&lines, agree)
}
