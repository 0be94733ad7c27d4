//! Horizontal fusion on the CPU: independent kernels of one program (an optimizer's update of
//! each parameter) launched as one, compared with eager Flex.
//!
//! A module of its own: its tests read process-wide launch counters and change the device's
//! configuration, which no other test may see (they hold `SERIAL` against each other).
//! Tolerances as `cpu_kernels.rs` (the C kernels against Flex's own ops, per dtype); the
//! training comparison as `autodiff.rs`'s (Adam makes each update about `lr` whatever the
//! gradient's size: relative 1e-4, absolute 5e-5).

use burn::backend::Autodiff;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, FloatDType, Tensor, TensorData, Tolerance, activation};
use burn_compile::incident::approx_tolerance as tolerance;
use burn_compile::{CompileConfig, Compiled, configure, explain, metrics};
use burn_flex::{Flex, FlexDevice};
use std::sync::{Mutex, MutexGuard};

use crate::support::{float_data, load, weights};

type C = Compiled<Flex>;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn assert_close(what: &str, got: TensorData, want: TensorData, dtype: DType) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    println!("checking {what}");
    got.convert::<f64>()
        .assert_approx_eq::<f64>(&want.convert::<f64>(), tolerance(dtype));
}

/// Three parameter updates as an optimizer records them (`p · 0.9 + g · 0.1`), each of its own
/// shape; the largest is big enough for the pool's threads.
fn updates<B: Backend>(dtype: FloatDType) -> Vec<TensorData> {
    let shapes = [[64, 96], [1, 96], [300, 200]];
    let tensors: Vec<(Tensor<B, 2>, Tensor<B, 2>)> = shapes
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let seed = 2 * i as u64 + 1;
            let t = |seed| {
                Tensor::<B, 2>::from_data(float_data(&s, seed, -2.0, 2.0), &Default::default())
                    .cast(dtype)
            };
            (t(seed), t(seed + 1))
        })
        .collect();
    // All three computed before any is read: one graph.
    let outs: Vec<Tensor<B, 2>> = tensors
        .into_iter()
        .map(|(p, g)| p * 0.9 + g * 0.1)
        .collect();
    outs.into_iter().map(|o| o.into_data()).collect()
}

/// The updates are one horizontal group: once the C functions are built (at the end of the
/// first run), one launch runs all three kernels, their tasks shared by the pool; every run's
/// values are eager Flex's.
#[test]
fn parameter_updates_run_as_one_horizontal_c_launch() {
    crate::own_process!(parameter_updates_run_as_one_horizontal_c_launch);
    let _serial = serial();
    for dtype in [FloatDType::F32, FloatDType::BF16] {
        let want = updates::<Flex>(dtype);
        let (first, report) = explain(|| updates::<C>(dtype));
        let graph = report
            .graphs
            .iter()
            .find(|g| g.fused_kernels == 3)
            .unwrap_or_else(|| panic!("{dtype:?}: one graph holds the three kernels:\n{report}"));
        assert_eq!(graph.horizontal_kernels, (1, 3), "{report}");
        assert!(
            report
                .to_string()
                .contains("3 of them launched as 1 horizontal kernel(s)"),
            "{report}"
        );
        for run in 0..3 {
            let before = metrics();
            let got = if run == 0 {
                first.clone()
            } else {
                updates::<C>(dtype)
            };
            let launched = metrics().since(&before).kernels_launched;
            if run > 0 {
                assert_eq!(launched, 1, "{dtype:?}, run {run}: one horizontal launch");
            }
            for (o, (g, w)) in got.into_iter().zip(&want).enumerate() {
                assert_close(
                    &format!("{dtype:?} run {run} output {o}"),
                    g,
                    w.clone(),
                    dtype.into(),
                );
            }
        }
    }
}

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    layers: Vec<Linear<B>>,
}

fn mlp<B: Backend>(init: Option<Vec<TensorData>>) -> Mlp<B> {
    let device = Default::default();
    let layers = [(24, 48), (48, 40), (40, 8)]
        .into_iter()
        .map(|(i, o)| LinearConfig::new(i, o).init(&device))
        .collect();
    let model = Mlp { layers };
    match init {
        Some(w) => load(model, w),
        None => model,
    }
}

struct Trained {
    losses: Vec<TensorData>,
    weights: Vec<TensorData>,
}

/// Five Adam steps (learning rate changed every step) of `mean((mlp(x) − y)²)` from `init`.
fn train<B: AutodiffBackend>(init: Vec<TensorData>) -> Trained {
    let device = Default::default();
    let mut model = mlp::<B>(Some(init));
    let x = Tensor::<B, 2>::from_data(float_data(&[16, 24], 7, -1.0, 1.0), &device);
    let y = Tensor::<B, 2>::from_data(float_data(&[16, 8], 8, -1.0, 1.0), &device);
    let mut optim = AdamConfig::new().init::<B, Mlp<B>>();
    let mut losses = Vec::new();
    for step in 0..5 {
        let mut h = x.clone();
        for (i, layer) in model.layers.iter().enumerate() {
            h = layer.forward(h);
            if i + 1 < model.layers.len() {
                h = activation::relu(h);
            }
        }
        let loss = (h - y.clone()).powi_scalar(2).mean();
        losses.push(loss.clone().into_data());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2 / (1.0 + step as f64), model, grads);
    }
    Trained {
        losses,
        weights: weights(&model),
    }
}

fn compare(what: &str, got: &[TensorData], want: &[TensorData]) {
    let tol: Tolerance<f32> = Tolerance::rel_abs(1e-4, 5e-5);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        println!("checking {what} {i}");
        g.assert_approx_eq::<f32>(w, tol);
    }
}

/// Adam's updates of the MLP's six parameters are horizontal kernels, and the training equals
/// eager Flex's (and with horizontal fusion off, the same training is equal too).
#[test]
fn adam_training_with_horizontal_updates_matches_eager() {
    crate::own_process!(adam_training_with_horizontal_updates_matches_eager);
    let _serial = serial();
    let init = weights(&mlp::<Flex>(None));
    let eager = train::<Autodiff<Flex>>(init.clone());
    let l0 = eager.losses[0].to_vec::<f32>().unwrap()[0];
    let l4 = eager.losses[4].to_vec::<f32>().unwrap()[0];
    assert!(l4 < l0, "eager training lowers the loss: {l0} → {l4}");

    let (together, report) = explain(|| train::<Autodiff<C>>(init.clone()));
    let (kernels, members) = report.graphs.iter().fold((0, 0), |(k, m), g| {
        (k + g.horizontal_kernels.0, m + g.horizontal_kernels.1)
    });
    assert!(
        kernels > 0 && members >= 2 * kernels,
        "the parameters' updates are launched together:\n{report}"
    );
    compare("losses", &together.losses, &eager.losses);
    compare("weights", &together.weights, &eager.weights);

    configure(
        &FlexDevice,
        CompileConfig {
            horizontal_fusion: false,
            ..CompileConfig::default()
        },
    );
    let (apart, report) = explain(|| train::<Autodiff<C>>(init.clone()));
    configure(&FlexDevice, CompileConfig::default());
    assert!(
        report.graphs.iter().all(|g| g.horizontal_kernels.0 == 0),
        "{report}"
    );
    compare(
        "losses, horizontal fusion off",
        &apart.losses,
        &eager.losses,
    );
    compare(
        "weights, horizontal fusion off",
        &apart.weights,
        &eager.weights,
    );
}
