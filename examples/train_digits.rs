//! A small ResNet (BasicBlocks with BatchNorm and ReLU) trained on real images through
//! burn-train's `Learner`, as a Burn user trains: the UCI handwritten digits
//! (`examples/data/digits.csv.gz`, 1,797 images of 8×8 pixels, CC BY 4.0; see
//! `examples/data/README.md`), a train/validation split, a `DataLoader`, Adam, loss and
//! accuracy metrics, checkpoints (the Learner's file checkpointer, on a thread of its own), early
//! stopping on the validation loss, one progress line per split, the learner's summary.
//!
//! First five SGD steps run on `Autodiff<Compiled<Flex>>` and on plain `Autodiff<Flex>`
//! (`Cuda` for `Flex` with `--features cuda`) from the same weights and batches: their losses
//! must be equal within f32's tolerance (`burn_compile::incident::tolerance`) — or, on a GPU,
//! the compiled losses equal to those of the same steps on the CPU (Flex) where eager's are
//! not (a kernel of the inner backend's own that is off, as Burn's CUDA gradient of a
//! one-channel input is: BENCHMARKS.md). (SGD, not Adam:
//! Adam's first update moves every weight by its learning rate in the sign of its gradient, so a
//! gradient near zero that rounds to the other sign on another kernel, as cuDNN's or cuBLASLt's
//! do, moves its weight by twice the rate; SGD's update is proportional to the gradient.) Each
//! system then takes one step on the last, partial batch, so that the timed epochs do not
//! include the first run of those shapes (Burn tunes its kernels for each new shape, the
//! compiled run builds its plan). Then the Learner trains both from the same
//! initial weights with the same shuffled batches, and the program prints the validation loss
//! and accuracy of both, the time per epoch and the speedup. (Over whole epochs the two runs
//! drift apart by rounding: a fused kernel rounds where eager does not.) It exits with 1 if
//! a first step differs, the untrained model's validation loss differs, or the compiled run's
//! validation loss did not decrease.
//!
//! ```text
//! cargo run --release -p burn-compile-examples --example train_digits [-- --epochs N] [--patience N]
//! # On a GPU: Autodiff<Compiled<Cuda>> against Autodiff<Cuda>
//! CUDARC_CUDA_VERSION=13000 cargo run --release -p burn-compile-examples --example train_digits --features cuda
//! ```

use burn::data::dataloader::{DataLoaderBuilder, batcher::Batcher};
use burn::data::dataset::InMemDataset;
use burn::module::{AutodiffModule, Module};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::optim::{AdamConfig, SgdConfig};
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use burn::train::metric::store::{Aggregate, Direction, EventStoreClient, Split};
use burn::train::metric::{AccuracyMetric, LossMetric, MetricDefinition};
use burn::train::renderer::{
    EvaluationName, EvaluationProgress, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining, ProgressType, TrainingProgress,
};
use burn::train::{
    ClassificationOutput, EarlyStoppingStrategy, InferenceStep, Learner,
    MetricEarlyStoppingStrategy, StoppingCondition, SupervisedTraining, TrainOutput, TrainStep,
};
use burn_compile::Compiled;
use burn_compile_examples::{CollectWeights, load_weights};

#[cfg(not(feature = "cuda"))]
mod target {
    pub type Inner = burn_flex::Flex;
    pub const NAME: &str = "Flex";
}

#[cfg(feature = "cuda")]
mod target {
    pub type Inner = burn_cuda::Cuda<f32, i32>;
    pub const NAME: &str = "Cuda";
}

use std::io::Read;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use target::{Inner, NAME};

type Ad<B> = burn::backend::Autodiff<B>;

/// One image and its digit.
#[derive(Clone, Debug)]
struct Digit {
    pixels: [f32; 64],
    label: u8,
}

/// The images of `examples/data/digits.csv.gz`, in file order. The file (57 kB) is part of
/// the binary: a release build runs from anywhere, a GPU machine without the checkout too.
fn digits() -> Result<Vec<Digit>, String> {
    const GZ: &[u8] = include_bytes!("data/digits.csv.gz");
    let path = "examples/data/digits.csv.gz";
    let mut text = String::new();
    flate2::read::GzDecoder::new(GZ)
        .read_to_string(&mut text)
        .map_err(|e| format!("{path}: {e}"))?;
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let values: Vec<u8> = line
                .split(',')
                .map(|v| v.trim().parse::<u8>())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{path}, line {}: {e}", i + 1))?;
            if values.len() != 65 || values[64] > 9 {
                return Err(format!("{path}, line {}: not 64 pixels and a digit", i + 1));
            }
            let mut pixels = [0.0; 64];
            for (p, v) in pixels.iter_mut().zip(&values) {
                *p = *v as f32 / 16.0;
            }
            Ok(Digit {
                pixels,
                label: values[64],
            })
        })
        .collect()
}

#[derive(Clone, Debug)]
struct DigitsBatch<B: Backend> {
    images: Tensor<B, 4>,
    targets: Tensor<B, 1, Int>,
}

#[derive(Clone, Default)]
struct DigitsBatcher;

impl<B: Backend> Batcher<B, Digit, DigitsBatch<B>> for DigitsBatcher {
    fn batch(&self, items: Vec<Digit>, device: &B::Device) -> DigitsBatch<B> {
        let n = items.len();
        let pixels: Vec<f32> = items.iter().flat_map(|d| d.pixels).collect();
        let labels: Vec<i64> = items.iter().map(|d| d.label as i64).collect();
        DigitsBatch {
            images: Tensor::from_data(TensorData::new(pixels, [n, 1, 8, 8]), device),
            targets: Tensor::from_data(TensorData::new(labels, [n]), device),
        }
    }
}

/// conv 3×3 → BatchNorm → ReLU → conv 3×3 → BatchNorm, plus the input (through a 1×1
/// convolution and BatchNorm where the block changes the width or the stride), then ReLU.
#[derive(Module, Debug)]
struct BasicBlock<B: Backend> {
    conv1: Conv2d<B>,
    bn1: BatchNorm<B>,
    conv2: Conv2d<B>,
    bn2: BatchNorm<B>,
    shortcut: Option<(Conv2d<B>, BatchNorm<B>)>,
    relu: Relu,
}

impl<B: Backend> BasicBlock<B> {
    fn new(input: usize, output: usize, stride: usize, device: &B::Device) -> Self {
        let conv = |i, o, k, s| {
            Conv2dConfig::new([i, o], [k, k])
                .with_stride([s, s])
                .with_padding(PaddingConfig2d::Explicit(k / 2, k / 2, k / 2, k / 2))
                .with_bias(false)
                .init(device)
        };
        let shortcut = (input != output || stride != 1).then(|| {
            (
                conv(input, output, 1, stride),
                BatchNormConfig::new(output).init(device),
            )
        });
        Self {
            conv1: conv(input, output, 3, stride),
            bn1: BatchNormConfig::new(output).init(device),
            conv2: conv(output, output, 3, 1),
            bn2: BatchNormConfig::new(output).init(device),
            shortcut,
            relu: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let y = self
            .relu
            .forward(self.bn1.forward(self.conv1.forward(x.clone())));
        let y = self.bn2.forward(self.conv2.forward(y));
        let x = match &self.shortcut {
            Some((conv, bn)) => bn.forward(conv.forward(x)),
            None => x,
        };
        self.relu.forward(y + x)
    }
}

/// A ResNet for 8×8 images: a stem, two blocks (16 then 32 channels, the second at stride 2),
/// global average pooling and a linear head over the 10 digits.
#[derive(Module, Debug)]
struct ResNet<B: Backend> {
    stem: BasicBlock<B>,
    block1: BasicBlock<B>,
    block2: BasicBlock<B>,
    pool: AdaptiveAvgPool2d,
    head: Linear<B>,
}

impl<B: Backend> ResNet<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            stem: BasicBlock::new(1, 16, 1, device),
            block1: BasicBlock::new(16, 16, 1, device),
            block2: BasicBlock::new(16, 32, 2, device),
            pool: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            head: LinearConfig::new(32, 10).init(device),
        }
    }

    fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self
            .block2
            .forward(self.block1.forward(self.stem.forward(images)));
        self.head.forward(self.pool.forward(x).flatten(1, 3))
    }

    fn classify(&self, batch: DigitsBatch<B>) -> ClassificationOutput<B> {
        let output = self.forward(batch.images);
        let loss = CrossEntropyLossConfig::new()
            .init(&output.device())
            .forward(output.clone(), batch.targets.clone());
        ClassificationOutput::new(loss, output, batch.targets)
    }
}

impl<B: AutodiffBackend> TrainStep for ResNet<B> {
    type Input = DigitsBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: DigitsBatch<B>) -> TrainOutput<ClassificationOutput<B>> {
        let item = self.classify(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl<B: Backend> InferenceStep for ResNet<B> {
    type Input = DigitsBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: DigitsBatch<B>) -> ClassificationOutput<B> {
        self.classify(batch)
    }
}

/// Mean loss and accuracy of `model` over `items`, in batches of 64.
fn evaluate<B: Backend>(model: &ResNet<B>, items: &[Digit], device: &B::Device) -> (f64, f64) {
    let (mut loss, mut correct) = (0.0, 0usize);
    for chunk in items.chunks(64) {
        let batch: DigitsBatch<B> = DigitsBatcher.batch(chunk.to_vec(), device);
        let out = model.classify(batch);
        loss += out.loss.into_scalar().elem::<f64>() * chunk.len() as f64;
        let predicted = out.output.argmax(1).flatten::<1>(0, 1);
        let hits: i64 = predicted
            .equal(out.targets)
            .int()
            .sum()
            .into_scalar()
            .elem();
        correct += hits as usize;
    }
    (
        loss / items.len() as f64,
        correct as f64 / items.len() as f64,
    )
}

/// One progress line per split, rewritten in place (`epoch 2/4 train 640/1497`); the learner's
/// summary of metrics follows the last epoch.
struct ProgressLine {
    run: &'static str,
}

impl ProgressLine {
    fn show(&self, split: &str, item: &TrainingProgress) {
        use std::io::Write;
        let Some(p) = &item.progress else { return };
        let epoch = &item.global_progress;
        print!(
            "\r{}: epoch {}/{} {split} {}/{}   ",
            self.run, epoch.items_processed, epoch.items_total, p.items_processed, p.items_total
        );
        if p.items_processed == p.items_total {
            println!();
        }
        let _ = std::io::stdout().flush();
    }
}

impl MetricsRendererTraining for ProgressLine {
    fn update_train(&mut self, _state: MetricState) {}
    fn update_valid(&mut self, _state: MetricState) {}
    fn render_train(&mut self, item: TrainingProgress, _: Vec<ProgressType>) {
        self.show("train", &item);
    }
    fn render_valid(&mut self, item: TrainingProgress, _: Vec<ProgressType>) {
        self.show("valid", &item);
    }
}

impl MetricsRendererEvaluation for ProgressLine {
    fn update_test(&mut self, _name: EvaluationName, _state: MetricState) {}
    fn render_test(&mut self, _item: EvaluationProgress, _: Vec<ProgressType>) {}
}

impl MetricsRenderer for ProgressLine {
    fn manual_close(&mut self) {}
    fn register_metric(&mut self, _definition: MetricDefinition) {}
}

/// The training losses of the first `steps` SGD steps over the first batches (file order),
/// read after each step, from `weights`; then one step on the last batch of the epoch (a
/// partial one), whose shapes run here for the first time rather than in a timed epoch.
fn first_steps<B: AutodiffBackend>(
    weights: &[TensorData],
    items: &[Digit],
    steps: usize,
    device: &B::Device,
) -> Vec<f64> {
    let mut model = load_weights(ResNet::<B>::new(device), weights, device);
    let mut optim = SgdConfig::new().init();
    let mut step = |chunk: &[Digit]| {
        let out = model.classify(DigitsBatcher.batch(chunk.to_vec(), device));
        let loss = out.loss.clone().into_scalar().elem::<f64>();
        let grads = GradientsParams::from_grads(out.loss.backward(), &model);
        model = optim.step(SGD_LEARNING_RATE, model.clone(), grads);
        loss
    };
    let losses = items.chunks(64).take(steps).map(&mut step).collect();
    if let Some(last) = items.chunks(64).last().filter(|c| c.len() < 64) {
        step(last);
    }
    losses
}

/// The SGD learning rate of the compared first steps.
const SGD_LEARNING_RATE: f64 = 0.05;

/// Adam's learning rate (constant).
const LEARNING_RATE: f64 = 2e-3;

struct Run {
    name: &'static str,
    before: (f64, f64),
    after: (f64, f64),
    seconds_per_epoch: f64,
    /// Epochs trained (fewer than asked when early stopping ended the run).
    epochs: usize,
}

/// Early stopping on the validation loss (no improvement for `patience` epochs), counting the
/// epochs it saw: the Learner asks it after every epoch, so the last one is how many ran.
#[derive(Clone)]
struct CountedStopping {
    inner: MetricEarlyStoppingStrategy,
    epochs: Arc<AtomicUsize>,
}

impl EarlyStoppingStrategy for CountedStopping {
    fn should_stop(&mut self, epoch: usize, store: &EventStoreClient) -> bool {
        self.epochs.fetch_max(epoch, Ordering::Relaxed);
        self.inner.should_stop(epoch, store)
    }
}

/// Trains a model with `weights` on `B` through the Learner; evaluates before and after.
fn train<B: AutodiffBackend>(
    name: &'static str,
    weights: &[TensorData],
    train_items: &[Digit],
    valid_items: &[Digit],
    epochs: usize,
    patience: usize,
    device: &B::Device,
) -> Run {
    let model = load_weights(ResNet::<B>::new(device), weights, device);
    let before = evaluate(&model.valid(), valid_items, device);
    let train_loader = DataLoaderBuilder::new(DigitsBatcher)
        .batch_size(64)
        .shuffle(7)
        .build(InMemDataset::new(train_items.to_vec()));
    let valid_loader = DataLoaderBuilder::new(DigitsBatcher)
        .batch_size(64)
        .build(InMemDataset::new(valid_items.to_vec()));
    let directory = std::env::temp_dir().join(format!("burn-compile-train-digits-{name}"));
    // The Learner's summary reads every epoch logged in its directory: an earlier run's would
    // be counted with this one's.
    let _ = std::fs::remove_dir_all(&directory);
    let learner = Learner::new(model, AdamConfig::new().init(), LEARNING_RATE);
    let ran = Arc::new(AtomicUsize::new(0));
    let stopping = CountedStopping {
        inner: MetricEarlyStoppingStrategy::new(
            &LossMetric::<B>::new(),
            Aggregate::Mean,
            Direction::Lowest,
            Split::Valid,
            StoppingCondition::NoImprovementSince { n_epochs: patience },
        ),
        epochs: ran.clone(),
    };
    let started = Instant::now();
    let result = SupervisedTraining::new(&directory, train_loader, valid_loader)
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .with_file_checkpointer(burn::record::CompactRecorder::new())
        .num_epochs(epochs)
        .early_stopping(stopping)
        .renderer(ProgressLine { run: name })
        .summary()
        .launch(learner);
    let epochs = ran.load(Ordering::Relaxed).max(1);
    let seconds_per_epoch = started.elapsed().as_secs_f64() / epochs as f64;
    let after = evaluate(&result.model, valid_items, device);
    Run {
        name,
        before,
        after,
        seconds_per_epoch,
        epochs,
    }
}

fn main() -> ExitCode {
    let (mut epochs, mut patience) = (4, 2);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            flag @ ("--epochs" | "--patience") => match args.next().map(|v| v.parse::<usize>()) {
                Some(Ok(n)) if n > 0 => {
                    if flag == "--epochs" {
                        epochs = n
                    } else {
                        patience = n
                    }
                }
                _ => {
                    eprintln!("{flag} takes a positive number");
                    return ExitCode::from(2);
                }
            },
            _ => {
                eprintln!("usage: train_digits [--epochs N] [--patience N]");
                return ExitCode::from(2);
            }
        }
    }
    let items = match digits() {
        Ok(items) => items,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    // The last sixth of the file is the validation split (the file's order is the writers').
    let split = items.len() * 5 / 6;
    let (train_items, valid_items) = items.split_at(split);
    println!(
        "UCI digits: {} training images, {} for validation; up to {epochs} epochs (stopping \
         after {patience} without a lower validation loss)",
        train_items.len(),
        valid_items.len()
    );
    let device = burn::tensor::Device::<Inner>::default();
    let mut weights = CollectWeights(Vec::new());
    ResNet::<Inner>::new(&device).visit(&mut weights);
    // The first steps, value for value: the same weights, batches and optimizer on both.
    let steps = 5;
    // On a fresh GPU machine each of these first takes a minute or more (Burn compiles and
    // tunes its kernels): say what is running.
    let timed = |what: &str, run: &dyn Fn() -> Vec<f64>| {
        println!("{what}: first {steps} SGD steps…");
        let start = Instant::now();
        let losses = run();
        println!(
            "{what}: first {steps} SGD steps (and the partial batch) in {:.1} s",
            start.elapsed().as_secs_f64()
        );
        losses
    };
    let compiled = timed("compiled", &|| {
        first_steps::<Ad<Compiled<Inner>>>(&weights.0, train_items, steps, &device)
    });
    let eager = timed("eager", &|| {
        first_steps::<Ad<Inner>>(&weights.0, train_items, steps, &device)
    });
    let (atol, rtol) = burn_compile::incident::tolerance(burn::tensor::DType::F32);
    let equal = |a: &f64, b: &f64| (a - b).abs() <= atol + rtol * b.abs();
    println!("first {steps} training losses (SGD), compiled vs eager:");
    for (step, (c, e)) in compiled.iter().zip(&eager).enumerate() {
        println!("  step {}: {c:.6} vs {e:.6}", step + 1);
    }
    if let Some(step) = compiled.iter().zip(&eager).position(|(c, e)| !equal(c, e)) {
        // On a GPU, the CPU's losses from the same weights and batches say which side is off:
        // a kernel of the inner backend's own that is off (BENCHMARKS.md: Burn's CUDA gradient
        // of a one-channel input) is not the compiled run's difference.
        let on_cpu = (NAME != "Flex").then(|| {
            timed("CPU (Flex)", &|| {
                first_steps::<Ad<burn_flex::Flex>>(
                    &weights.0,
                    train_items,
                    steps,
                    &Default::default(),
                )
            })
        });
        let compiled_is_right = on_cpu.as_ref().is_some_and(|cpu| {
            compiled.iter().zip(cpu).all(|(c, r)| equal(c, r))
                && !eager.iter().zip(cpu).all(|(e, r)| equal(e, r))
        });
        if !compiled_is_right {
            eprintln!(
                "step {}: the compiled loss differs from eager's beyond f32's tolerance",
                step + 1
            );
            return ExitCode::FAILURE;
        }
        let cpu = on_cpu.expect("compared with the CPU");
        println!("eager {NAME} parts from the CPU's losses; the compiled run does not:");
        for (step, ((c, e), r)) in compiled.iter().zip(&eager).zip(&cpu).enumerate() {
            println!(
                "  step {}: compiled {c:.6}, eager {e:.6}, CPU {r:.6}",
                step + 1
            );
        }
    }
    let runs = [
        train::<Ad<Compiled<Inner>>>(
            "compiled",
            &weights.0,
            train_items,
            valid_items,
            epochs,
            patience,
            &device,
        ),
        train::<Ad<Inner>>(
            "eager",
            &weights.0,
            train_items,
            valid_items,
            epochs,
            patience,
            &device,
        ),
    ];
    println!();
    for r in &runs {
        println!(
            "{:<9} validation loss {:.4} → {:.4}, accuracy {:.1} % → {:.1} %, {} epoch(s){}, \
             {:.2} s per epoch",
            r.name,
            r.before.0,
            r.after.0,
            r.before.1 * 100.0,
            r.after.1 * 100.0,
            r.epochs,
            if r.epochs < epochs {
                " (stopped early)"
            } else {
                ""
            },
            r.seconds_per_epoch
        );
    }
    let (compiled, eager) = (&runs[0], &runs[1]);
    println!(
        "Compiled<{NAME}> / {NAME}: {:.2}× the speed per epoch; final validation loss {:.4} vs {:.4}",
        eager.seconds_per_epoch / compiled.seconds_per_epoch,
        compiled.after.0,
        eager.after.0
    );
    if (compiled.before.0 - eager.before.0).abs() > atol + rtol * eager.before.0.abs() {
        eprintln!(
            "the untrained model's validation loss differs: {} compiled, {} eager",
            compiled.before.0, eager.before.0
        );
        return ExitCode::FAILURE;
    }
    if compiled.after.0 >= compiled.before.0 {
        eprintln!("the compiled run's validation loss did not decrease");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
