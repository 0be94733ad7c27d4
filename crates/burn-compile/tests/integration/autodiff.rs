//! Autodiff over `Compiled<B>` must train like autodiff over eager `B`.
//!
//! - Gradients of composite functions: `Autodiff<Compiled<B>>` vs `Autodiff<B>` on the same
//!   seeded pseudo-random inputs (one `#[test]` per case and backend pair, like
//!   `differential.rs`; the compiled side runs twice, the second time on cached plans).
//! - A small TransformerEncoder trained 3 Adam steps on both, from identical weights: the loss
//!   of every step, the final outputs and the final weights must agree.

use burn::backend::Autodiff;
use burn::nn::activation::ActivationConfig;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::{
    DType, Element, ElementConversion, Int, Tensor, TensorData, Tolerance, activation,
    backend::{AutodiffBackend, Backend},
    module,
    ops::ConvOptions,
};
use burn_compile::Compiled;
use burn_flex::Flex;
use burn_ndarray::NdArray;
use std::sync::{Mutex, MutexGuard};

type Out = Vec<TensorData>;

// ---------------------------------------------------------------------------------------------
// Inputs: tests/support (seeded SplitMix64, identical data on both sides).
// ---------------------------------------------------------------------------------------------

use crate::support;
use support::{float_data, int_data, load, weights};

/// A leaf that requires grad, uniform in `[lo, hi)`.
fn param<B: AutodiffBackend, const D: usize>(
    dev: &B::Device,
    shape: [usize; D],
    seed: u64,
    lo: f32,
    hi: f32,
) -> Tensor<B, D> {
    Tensor::<B, D>::from_data(float_data(&shape, seed, lo, hi), dev).require_grad()
}

fn grad<B: AutodiffBackend, const D: usize>(x: &Tensor<B, D>, grads: &B::Gradients) -> TensorData {
    x.grad(grads)
        .expect("the leaf takes part in the loss")
        .into_data()
}

// ---------------------------------------------------------------------------------------------
// Harness.
// ---------------------------------------------------------------------------------------------

/// f32 gradients of the composite functions: the compiled side replays the inner backend's
/// kernels, except that burn-router decomposes the fused activation kernels (softmax, sigmoid,
/// ...) into primitive ops, which moves f32 results by ~1e-7 relative. Relative 1e-5 (~80 ULPs)
/// and absolute 1e-6 (for gradient entries that cancel to ~0) leave room for that and nothing
/// more.
fn grad_tolerance() -> Tolerance<f32> {
    Tolerance::rel_abs(1e-5, 1e-6)
}

/// Three Adam steps of a 2-layer transformer: Adam divides by sqrt(v), which amplifies the
/// ~1e-7 differences above on small gradient entries, and they compound over the steps, so the
/// training comparison uses relative 1e-4, and absolute 5e-5: Adam makes each update about
/// `lr` (1e-3) whatever the gradient's size, so a gradient entry near zero whose last bits
/// differ (the C kernels sum in another order than Flex) can move its weight by up to 2·lr the
/// other way; with every step on C kernels (their plans cached by an earlier test of the
/// module) the final outputs moved by up to 1.3e-5. A wrong kernel is off by orders more.
fn training_tolerance() -> Tolerance<f32> {
    Tolerance::rel_abs(1e-4, 5e-5)
}

fn compare<C: Backend>(
    case: &str,
    run: &str,
    got: &[TensorData],
    want: &[TensorData],
    tol: Tolerance<f32>,
) {
    assert_eq!(got.len(), want.len(), "{case}: number of outputs");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ctx = format!(
            "{case}: output {i} of the {run} (eager {:?} {:?})",
            w.dtype, w.shape
        );
        eprintln!("checking {ctx}");
        assert_eq!(g.shape, w.shape, "{ctx}: shape differs");
        if w.dtype.is_float() {
            assert_eq!(g.dtype, w.dtype, "{ctx}: dtype differs");
            g.assert_approx_eq::<f32>(w, tol);
        } else {
            // Ints: burn-router reads ints back as the default int element; exact after
            // widening both sides to i64.
            if g.dtype != w.dtype {
                assert_eq!(g.dtype, <C::IntElem as Element>::dtype(), "{ctx}");
            }
            g.clone()
                .convert::<i64>()
                .assert_eq(&w.clone().convert::<i64>(), true);
        }
    }
}

fn check<C: AutodiffBackend, E: AutodiffBackend>(
    case: &str,
    compiled: fn(&C::Device) -> Out,
    eager: fn(&E::Device) -> Out,
) {
    let want = eager(&Default::default());
    let first = compiled(&Default::default());
    compare::<C>(case, "first compiled run", &first, &want, grad_tolerance());
    let second = compiled(&Default::default());
    compare::<C>(
        case,
        "second compiled run (cached plans)",
        &second,
        &want,
        grad_tolerance(),
    );
}

/// The gradient cases every backend pair runs.
macro_rules! gradient_tests {
    ($pair:ident: $compiled:ty, $eager:ty) => {
        support::pair_tests!($pair: $compiled, $eager; [
            matmul_tanh_sum,
            softmax_cross_entropy,
            nn_cross_entropy_loss,
            conv2d_relu_mean,
            pooling_and_indexing,
            attention_and_layer_norm,
            gelu_gradient,
            activation_gradients,
            elementwise_chain,
            host_read_before_backward,
            two_backward_passes,
        ]);
    };
}

gradient_tests!(flex: Autodiff<Compiled<Flex>>, Autodiff<Flex>);
gradient_tests!(ndarray: Autodiff<Compiled<NdArray>>, Autodiff<NdArray>);

// ---------------------------------------------------------------------------------------------
// Composite functions: loss and gradients of every leaf.
// ---------------------------------------------------------------------------------------------

fn matmul_tanh_sum<B: AutodiffBackend>(dev: &B::Device) -> Out {
    let x = param::<B, 2>(dev, [4, 8], 1, -1.0, 1.0);
    let w = param::<B, 2>(dev, [8, 6], 2, -0.5, 0.5);
    let loss = x.clone().matmul(w.clone()).tanh().sum();
    let grads = loss.backward();
    vec![loss.into_data(), grad(&x, &grads), grad(&w, &grads)]
}

fn softmax_cross_entropy<B: AutodiffBackend>(dev: &B::Device) -> Out {
    let x = Tensor::<B, 2>::from_data(float_data(&[6, 10], 3, -1.0, 1.0), dev);
    let w = param::<B, 2>(dev, [10, 5], 4, -0.5, 0.5);
    let b = param::<B, 1>(dev, [5], 5, -0.1, 0.1);
    let targets = Tensor::<B, 1, Int>::from_data(int_data(&[6], 6, 0, 5), dev);
    let logits = x.matmul(w.clone()) + b.clone().unsqueeze::<2>();
    let log_probs = activation::log_softmax(logits.clone(), 1);
    let one_hot = targets.one_hot::<2>(5).float();
    let loss = (log_probs * one_hot).sum_dim(1).mean().neg();
    // A second term through softmax (not log_softmax), so both backward paths are covered.
    let loss = loss + activation::softmax(logits, 1).powf_scalar(2.0).mean();
    let grads = loss.backward();
    vec![loss.into_data(), grad(&w, &grads), grad(&b, &grads)]
}

fn nn_cross_entropy_loss<B: AutodiffBackend>(dev: &B::Device) -> Out {
    let logits = param::<B, 2>(dev, [7, 4], 7, -2.0, 2.0);
    let targets = Tensor::<B, 1, Int>::from_data(int_data(&[7], 8, 0, 4), dev);
    let loss = CrossEntropyLossConfig::new()
        .with_smoothing(Some(0.1))
        .init(dev)
        .forward(logits.clone(), targets);
    let grads = loss.backward();
    vec![loss.into_data(), grad(&logits, &grads)]
}

fn conv2d_relu_mean<B: AutodiffBackend>(dev: &B::Device) -> Out {
    let x = param::<B, 4>(dev, [2, 3, 8, 8], 9, -1.0, 1.0);
    let w = param::<B, 4>(dev, [4, 3, 3, 3], 10, -0.3, 0.3);
    let b = param::<B, 1>(dev, [4], 11, -0.1, 0.1);
    let y = module::conv2d(
        x.clone(),
        w.clone(),
        Some(b.clone()),
        ConvOptions::new([1, 1], [1, 1], [1, 1], 1),
    );
    let loss = activation::relu(y).mean();
    let grads = loss.backward();
    vec![
        loss.into_data(),
        grad(&x, &grads),
        grad(&w, &grads),
        grad(&b, &grads),
    ]
}

fn pooling_and_indexing<B: AutodiffBackend>(dev: &B::Device) -> Out {
    let x = param::<B, 4>(dev, [2, 3, 6, 6], 12, -1.0, 1.0);
    let v = param::<B, 2>(dev, [2, 4], 13, -1.0, 1.0);
    let maxed = module::max_pool2d(x.clone(), [2, 2], [2, 2], [0, 0], [1, 1], false);
    let avged = module::avg_pool2d(x.clone(), [3, 3], [1, 1], [1, 1], true, false);
    let flat = Tensor::cat(vec![maxed.flatten::<2>(1, 3), avged.flatten::<2>(1, 3)], 1); // [2, 27 + 108]
    let picked = flat.clone().gather(
        1,
        Tensor::<B, 2, Int>::from_data(int_data(&[2, 20], 14, 0, 135), dev),
    );
    let selected = flat.select(
        1,
        Tensor::<B, 1, Int>::from_data(int_data(&[9], 15, 0, 135), dev),
    );
    let assigned = selected.slice_assign([0..2, 2..6], v.clone());
    let loss = picked.powf_scalar(2.0).sum() + assigned.exp().mean();
    let grads = loss.backward();
    vec![loss.into_data(), grad(&x, &grads), grad(&v, &grads)]
}

fn attention_and_layer_norm<B: AutodiffBackend>(dev: &B::Device) -> Out {
    let x = param::<B, 3>(dev, [2, 5, 8], 16, -1.0, 1.0);
    let wq = param::<B, 2>(dev, [8, 8], 17, -0.4, 0.4);
    let wk = param::<B, 2>(dev, [8, 8], 18, -0.4, 0.4);
    let wv = param::<B, 2>(dev, [8, 8], 19, -0.4, 0.4);
    let q = x.clone().matmul(wq.clone().unsqueeze::<3>());
    let k = x.clone().matmul(wk.clone().unsqueeze::<3>());
    let v = x.clone().matmul(wv.clone().unsqueeze::<3>());
    let scores = q.matmul(k.swap_dims(1, 2)) / (8.0f32).sqrt();
    let attn = activation::softmax(scores, 2).matmul(v) + x.clone();
    let (var, mean) = attn.clone().var_mean_bias(2);
    let normed = (attn - mean) / (var + 1e-5).sqrt();
    let loss = activation::gelu(normed).powf_scalar(2.0).mean();
    let grads = loss.backward();
    vec![
        loss.into_data(),
        grad(&x, &grads),
        grad(&wq, &grads),
        grad(&wk, &grads),
        grad(&wv, &grads),
    ]
}

fn gelu_gradient<B: AutodiffBackend>(dev: &B::Device) -> Out {
    let x = param::<B, 2>(dev, [5, 8], 28, -3.0, 3.0);
    let upstream = Tensor::<B, 2>::from_data(float_data(&[5, 8], 29, -1.0, 1.0), dev);
    let y = activation::gelu(x.clone());
    let loss = (y.clone() * upstream).sum();
    let grads = loss.backward();
    vec![y.into_data(), grad(&x, &grads)]
}

/// Backward of the activations a backend may implement with its own kernels (Flex overrides
/// relu, leaky_relu, prelu, sigmoid, hard_sigmoid, log_sigmoid and softmax), gelu apart.
///
/// The shape has 28 < 32 elements on purpose: from 32 elements on, eager NdArray's
/// `float_recip` (used by the backward of division and of log_sigmoid) takes a SIMD path with
/// the *approximate* `_mm256_rcp_ps` (~1e-4 relative) on the aligned part of the buffer and the
/// exact scalar reciprocal on the unaligned head (burn-ndarray-0.21.0/src/ops/simd/unary.rs,
/// `should_use_simd`: `len >= 32`), so its results depend on allocation alignment and buffer
/// ownership: two identical eager `Autodiff<NdArray>` runs of a [4, 9] softplus gradient
/// differ by 1.4e-4 relative. That is NdArray's own nondeterminism, not the capture's.
fn activation_gradients<B: AutodiffBackend>(dev: &B::Device) -> Out {
    let x = param::<B, 2>(dev, [4, 7], 30, -3.0, 3.0);
    let alpha = param::<B, 1>(dev, [7], 31, 0.0, 0.5);
    let upstream = Tensor::<B, 2>::from_data(float_data(&[4, 7], 32, -1.0, 1.0), dev);
    let ys = [
        activation::relu(x.clone()),
        activation::leaky_relu(x.clone(), 0.1),
        activation::prelu(x.clone(), alpha.clone()),
        activation::sigmoid(x.clone()),
        activation::hard_sigmoid(x.clone(), 0.2, 0.5),
        activation::log_sigmoid(x.clone()),
        activation::softmax(x.clone(), 1),
        activation::log_softmax(x.clone(), 1),
        activation::silu(x.clone()),
        activation::mish(x.clone()),
        activation::softplus(x.clone(), 1.0),
    ];
    let mut out: Out = ys.iter().map(|y| y.clone().into_data()).collect();
    let loss = ys
        .into_iter()
        .map(|y| (y * upstream.clone()).sum())
        .reduce(|a, b| a + b)
        .unwrap();
    let grads = loss.backward();
    out.push(grad(&x, &grads));
    out.push(grad(&alpha, &grads));
    out
}

fn elementwise_chain<B: AutodiffBackend>(dev: &B::Device) -> Out {
    let a = param::<B, 2>(dev, [5, 6], 20, 0.5, 2.0);
    let b = param::<B, 2>(dev, [5, 6], 21, -1.0, 1.0);
    let mask = a.clone().greater_elem(1.2);
    let y = (a.clone().powf(b.clone()) + a.clone().sqrt() * b.clone().exp()) / (a.clone() + 1.0);
    let y = y.log() + activation::sigmoid(b.clone()) * a.clone().recip();
    let y = y.mask_where(mask, b.clone().tanh() * 3.0);
    let loss = y.clone().sum() + y.max_dim(1).mean() + activation::silu(b.clone()).min();
    let grads = loss.backward();
    vec![loss.into_data(), grad(&a, &grads), grad(&b, &grads)]
}

fn host_read_before_backward<B: AutodiffBackend>(dev: &B::Device) -> Out {
    // A graph break between the forward pass and backward.
    let x = param::<B, 2>(dev, [3, 4], 22, -1.0, 1.0);
    let w = param::<B, 2>(dev, [4, 4], 23, -1.0, 1.0);
    let h = x.clone().matmul(w.clone()).exp();
    let scale: f32 = h.clone().max().into_scalar().elem();
    let loss = (h / scale).sum();
    let grads = loss.backward();
    vec![
        TensorData::new(vec![scale], [1]),
        loss.into_data(),
        grad(&x, &grads),
        grad(&w, &grads),
    ]
}

fn two_backward_passes<B: AutodiffBackend>(dev: &B::Device) -> Out {
    // The same leaves in two independent graphs, each with its own backward.
    let w = param::<B, 2>(dev, [4, 3], 24, -1.0, 1.0);
    let x1 = Tensor::<B, 2>::from_data(float_data(&[2, 4], 25, -1.0, 1.0), dev);
    let x2 = Tensor::<B, 2>::from_data(float_data(&[5, 4], 26, -1.0, 1.0), dev);
    let l1 = x1.matmul(w.clone()).sin().sum();
    let g1 = l1.backward();
    let l2 = x2.matmul(w.clone()).cos().powf_scalar(3.0).mean();
    let g2 = l2.backward();
    vec![l1.into_data(), grad(&w, &g1), l2.into_data(), grad(&w, &g2)]
}

// ---------------------------------------------------------------------------------------------
// TransformerEncoder training with Adam.
// ---------------------------------------------------------------------------------------------

/// The inner backends keep their RNG in a process-wide static (shared by `Compiled<Flex>` and
/// `Flex`): model initialization draws from it, so tests that seed and initialize hold this.
static RNG: Mutex<()> = Mutex::new(());

fn rng_lock() -> MutexGuard<'static, ()> {
    RNG.lock().unwrap_or_else(|e| e.into_inner())
}

fn encoder_config() -> TransformerEncoderConfig {
    TransformerEncoderConfig::new(32, 64, 2, 2)
        .with_dropout(0.0)
        .with_activation(ActivationConfig::Relu)
}

struct Trained {
    losses: Vec<TensorData>,
    output: TensorData,
    weights: Vec<TensorData>,
}

/// 3 Adam steps of loss = mean(out²) on a fixed batch [2, 5, 32], from `init` weights.
fn train<B: AutodiffBackend>(init: Vec<TensorData>) -> Trained {
    let dev = Default::default();
    let model: TransformerEncoder<B> = {
        // `init` draws the (lazy) initializers when `load` touches each parameter: those draws
        // are thrown away, but they must not interleave with a seeded test's draws. On
        // `Compiled<B>` a draw runs when its graph is flushed, so sync before unlocking.
        let _guard = rng_lock();
        let model = load(encoder_config().init(&dev), init);
        B::sync(&dev).expect("sync");
        model
    };
    let x = Tensor::<B, 3>::from_data(float_data(&[2, 5, 32], 27, -1.0, 1.0), &dev);
    let mut optim = AdamConfig::new().init::<B, TransformerEncoder<B>>();
    let mut model = model;
    let mut losses = Vec::new();
    for _ in 0..3 {
        let out = model.forward(TransformerEncoderInput::new(x.clone()));
        let loss = (out.clone() * out).mean();
        losses.push(loss.clone().into_data());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-3, model, grads);
    }
    let output = model.forward(TransformerEncoderInput::new(x)).into_data();
    Trained {
        losses,
        output,
        weights: weights(&model),
    }
}

/// Initial weights drawn on `B` from a seed.
fn seeded_init<B: Backend>(seed: u64) -> Vec<TensorData> {
    let dev = Default::default();
    B::seed(&dev, seed);
    let model: TransformerEncoder<B> = encoder_config().init(&dev);
    weights(&model)
}

fn training_matches<C: AutodiffBackend, E: AutodiffBackend>(case: &str) {
    let init = {
        let _guard = rng_lock();
        seeded_init::<E>(42)
    };
    let eager = train::<E>(init.clone());
    let compiled = train::<C>(init.clone());

    // The weights really moved, and the loss is finite: the comparison is not vacuous.
    let l0 = eager.losses[0].to_vec::<f32>().unwrap()[0];
    let l2 = eager.losses[2].to_vec::<f32>().unwrap()[0];
    assert!(
        l0.is_finite() && l2.is_finite() && l0 != l2,
        "eager losses {l0} {l2}"
    );
    assert_ne!(
        eager.weights[0].to_vec::<f32>().unwrap(),
        init[0].to_vec::<f32>().unwrap()
    );

    let tol = training_tolerance();
    compare::<C>(
        case,
        "per-step losses",
        &compiled.losses,
        &eager.losses,
        tol,
    );
    compare::<C>(
        case,
        "final outputs",
        &[compiled.output],
        &[eager.output],
        tol,
    );
    compare::<C>(
        case,
        "final weights",
        &compiled.weights,
        &eager.weights,
        tol,
    );
}

#[test]
fn flex_transformer_adam_training_matches_eager() {
    crate::own_process!(flex_transformer_adam_training_matches_eager);
    training_matches::<Autodiff<Compiled<Flex>>, Autodiff<Flex>>("flex transformer training");
}

#[test]
fn ndarray_transformer_adam_training_matches_eager() {
    crate::own_process!(ndarray_transformer_adam_training_matches_eager);
    training_matches::<Autodiff<Compiled<NdArray>>, Autodiff<NdArray>>(
        "ndarray transformer training",
    );
}

/// Seeding both backends identically and initializing gives identical weights: the compiled
/// backend draws the initializers' random numbers in eager's order.
fn seeded_init_matches<C: Backend, E: Backend>() {
    let (eager, compiled) = {
        let _guard = rng_lock();
        (seeded_init::<E>(7), seeded_init::<C>(7))
    };
    assert_eq!(eager.len(), compiled.len());
    assert!(!eager.is_empty());
    for (i, (c, e)) in compiled.iter().zip(&eager).enumerate() {
        assert_eq!(c.dtype, DType::F32, "parameter {i}");
        c.assert_eq(e, true);
    }
}

#[test]
fn flex_seeded_init_gives_identical_weights() {
    crate::own_process!(flex_seeded_init_gives_identical_weights);
    seeded_init_matches::<Autodiff<Compiled<Flex>>, Autodiff<Flex>>();
}

#[test]
fn ndarray_seeded_init_gives_identical_weights() {
    crate::own_process!(ndarray_seeded_init_gives_identical_weights);
    seeded_init_matches::<Autodiff<Compiled<NdArray>>, Autodiff<NdArray>>();
}
