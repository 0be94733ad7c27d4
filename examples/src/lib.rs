//! Example programs live beside this crate: `cargo run -p burn-compile-examples --example …`.
//! This library holds the workload they share: the W1 transformer encoder, its input and its
//! training step.

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
    let out = forward(&model, x);
    let loss = out.square().mean();
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    let model = optim.step(LEARNING_RATE, model, grads);
    (model, loss.inner())
}
