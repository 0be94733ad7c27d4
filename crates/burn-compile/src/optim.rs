//! Optimizers whose whole state lives in tensors, so that a compiled training step
//! ([`crate::jit_train`]) can replay their update: Adam and AdamW with the step count's
//! powers of the betas kept on the device. Burn's own Adam and AdamW count steps on the host
//! and compute their bias corrections there, values a replay could not follow.
//!
//! The update is Burn's (same configs, same defaults, same formulas); only where the bias
//! corrections are computed differs, so results agree with Burn's within rounding.

use crate::jit::StepSimpleOptimizer;
use burn::config::Config;
use burn::module::AutodiffModule;
use burn::record::Record;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Shape, Tensor};
use burn_core as burn;
use burn_optim::adaptor::OptimizerAdaptor;
use burn_optim::decay::WeightDecayConfig;
use burn_optim::grad_clipping::GradientClippingConfig;
use burn_optim::{LearningRate, SimpleOptimizer};

/// [`Adam`]'s configuration: Burn's `AdamConfig` (L2 weight decay added to the gradient).
#[derive(Config, Debug)]
pub struct AdamConfig {
    /// Exponential decay of the first moment.
    #[config(default = 0.9)]
    beta_1: f32,
    /// Exponential decay of the second moment.
    #[config(default = 0.999)]
    beta_2: f32,
    /// Added to the denominator for numerical stability.
    #[config(default = 1e-5)]
    epsilon: f32,
    /// L2 penalty added to the gradient.
    weight_decay: Option<WeightDecayConfig>,
    /// Gradient clipping.
    grad_clipping: Option<GradientClippingConfig>,
}

/// [`Adam`] with decoupled weight decay: Burn's `AdamWConfig`.
#[derive(Config, Debug)]
pub struct AdamWConfig {
    /// Exponential decay of the first moment.
    #[config(default = 0.9)]
    beta_1: f32,
    /// Exponential decay of the second moment.
    #[config(default = 0.999)]
    beta_2: f32,
    /// Added to the denominator for numerical stability.
    #[config(default = 1e-5)]
    epsilon: f32,
    /// Decoupled weight decay: each step scales the parameters by `1 - lr * weight_decay`.
    #[config(default = 1e-4)]
    weight_decay: f32,
    /// Gradient clipping.
    grad_clipping: Option<GradientClippingConfig>,
}

/// Adam (and AdamW) with its whole state in tensors.
#[derive(Clone, Debug)]
pub struct Adam {
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
    /// L2 penalty added to the gradient (Adam).
    penalty: Option<f32>,
    /// Decoupled weight decay (AdamW), 0 for none.
    decoupled: f32,
}

/// [`Adam`]'s state for one parameter: the moments and `beta^t` for the step count `t`, as
/// one-element tensors of the parameter's rank (they broadcast over it).
#[derive(Record, Clone)]
pub struct AdamState<B: Backend, const D: usize> {
    /// First moment.
    pub moment_1: Tensor<B, D>,
    /// Second moment.
    pub moment_2: Tensor<B, D>,
    /// `beta_1^t`.
    pub beta_1_power: Tensor<B, D>,
    /// `beta_2^t`.
    pub beta_2_power: Tensor<B, D>,
}

impl<B: Backend> SimpleOptimizer<B> for Adam {
    type State<const D: usize> = AdamState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        mut grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        // The step count's powers and the bias corrections first, one-element tensors: recorded
        // before the parameter-shaped ops, they leave those as one run, one generated kernel
        // per parameter (a change of shape ends a kernel: recorded in between, they cut the
        // update into three).
        let (beta_1_power, beta_2_power, moments) = match state {
            Some(s) => (
                s.beta_1_power.mul_scalar(self.beta_1),
                s.beta_2_power.mul_scalar(self.beta_2),
                Some((s.moment_1, s.moment_2)),
            ),
            None => {
                let device = tensor.device();
                let one = Shape::new([1; D]);
                (
                    Tensor::full(one.clone(), self.beta_1, &device),
                    Tensor::full(one, self.beta_2, &device),
                    None,
                )
            }
        };
        // Burn's bias corrections, from the powers on the device: sqrt(1 - b2^t) / (1 - b1^t)
        // scales the first moment, eps * sqrt(1 - b2^t) is added to sqrt(v).
        let correction_2 = beta_2_power.clone().neg().add_scalar(1.0).sqrt();
        let factor = correction_2
            .clone()
            .div(beta_1_power.clone().neg().add_scalar(1.0));
        let epsilon = correction_2.mul_scalar(self.epsilon);

        if let Some(penalty) = self.penalty {
            grad = tensor.clone().mul_scalar(penalty).add(grad);
        }
        let (f1, f2) = (1.0 - self.beta_1, 1.0 - self.beta_2);
        let (moment_1, moment_2) = match moments {
            Some((m1, m2)) => (
                m1.mul_scalar(self.beta_1).add(grad.clone().mul_scalar(f1)),
                m2.mul_scalar(self.beta_2).add(grad.square().mul_scalar(f2)),
            ),
            None => (grad.clone().mul_scalar(f1), grad.square().mul_scalar(f2)),
        };
        let delta = moment_1
            .clone()
            .mul(factor)
            .div(moment_2.clone().sqrt().add(epsilon));
        // The learning rate multiplies alone, so that a compiled step binds it to its input.
        let tensor = if self.decoupled != 0.0 {
            tensor.clone() - tensor.mul_scalar(self.decoupled).mul_scalar(lr)
        } else {
            tensor
        };
        let state = AdamState {
            moment_1,
            moment_2,
            beta_1_power,
            beta_2_power,
        };
        (tensor - delta.mul_scalar(lr), Some(state))
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        AdamState {
            moment_1: state.moment_1.to_device(device),
            moment_2: state.moment_2.to_device(device),
            beta_1_power: state.beta_1_power.to_device(device),
            beta_2_power: state.beta_2_power.to_device(device),
        }
    }
}

impl<B: Backend> StepSimpleOptimizer<B> for Adam {
    fn map_state<const D: usize>(
        state: Self::State<D>,
        f: &mut dyn FnMut(Tensor<B, D>) -> Tensor<B, D>,
    ) -> Self::State<D> {
        AdamState {
            moment_1: f(state.moment_1),
            moment_2: f(state.moment_2),
            beta_1_power: f(state.beta_1_power),
            beta_2_power: f(state.beta_2_power),
        }
    }
}

fn adaptor<B: AutodiffBackend, M: AutodiffModule<B>>(
    adam: Adam,
    clipping: &Option<GradientClippingConfig>,
) -> OptimizerAdaptor<Adam, M, B> {
    let optim = OptimizerAdaptor::from(adam);
    match clipping {
        Some(config) => optim.with_grad_clipping(config.init()),
        None => optim,
    }
}

impl AdamConfig {
    /// The optimizer for module `M`.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(&self) -> OptimizerAdaptor<Adam, M, B> {
        let adam = Adam {
            beta_1: self.beta_1,
            beta_2: self.beta_2,
            epsilon: self.epsilon,
            penalty: self.weight_decay.as_ref().map(|w| w.penalty),
            decoupled: 0.0,
        };
        adaptor(adam, &self.grad_clipping)
    }
}

impl AdamWConfig {
    /// The optimizer for module `M`.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(&self) -> OptimizerAdaptor<Adam, M, B> {
        let adam = Adam {
            beta_1: self.beta_1,
            beta_2: self.beta_2,
            epsilon: self.epsilon,
            penalty: None,
            decoupled: self.weight_decay,
        };
        adaptor(adam, &self.grad_clipping)
    }
}
