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
use burn_optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer, SimpleOptimizer};

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

/// Burn's `OptimizerAdaptor` over a [`SimpleOptimizer`] (its steps are Burn's, through one held
/// inside), with the per-parameter state kept here: a compiled training step
/// ([`crate::jit_train`]) moves the state out and back at every call, where Burn's adaptor
/// hands it out only as a copy of its map ([`Optimizer::to_record`]). Its record is Burn's
/// adaptor's: saved and loaded records are interchangeable with it.
#[derive(Clone)]
pub struct Adaptor<O, M, B>
where
    O: SimpleOptimizer<B::InnerBackend>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    /// Holds no state between steps.
    inner: OptimizerAdaptor<O, M, B>,
    state: AdaptorRecords<O, M, B>,
}

/// The record of Burn's optimizer adaptor over `O`.
pub type AdaptorRecords<O, M, B> = <OptimizerAdaptor<O, M, B> as Optimizer<M, B>>::Record;

impl<O, M, B> Adaptor<O, M, B>
where
    O: SimpleOptimizer<B::InnerBackend>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    fn new(optim: O, clipping: &Option<GradientClippingConfig>) -> Self {
        let inner = OptimizerAdaptor::from(optim);
        let inner = match clipping {
            Some(config) => inner.with_grad_clipping(config.init()),
            None => inner,
        };
        Self {
            inner,
            state: Default::default(),
        }
    }

    /// Moves the state out (the optimizer holds none until [`Adaptor::put_state`]).
    pub(crate) fn take_state(&mut self) -> AdaptorRecords<O, M, B> {
        std::mem::take(&mut self.state)
    }

    pub(crate) fn put_state(&mut self, state: AdaptorRecords<O, M, B>) {
        self.state = state;
    }

    /// Runs a step of the inner adaptor on the state.
    fn step_with(&mut self, step: impl FnOnce(&mut OptimizerAdaptor<O, M, B>) -> M) -> M {
        let state = std::mem::take(&mut self.state);
        replace_with::replace_with_or_abort(&mut self.inner, |inner| inner.load_record(state));
        let module = step(&mut self.inner);
        // The inner adaptor's references go, so that the state is held here alone.
        self.state = self.inner.to_record();
        replace_with::replace_with_or_abort(&mut self.inner, |inner| {
            inner.load_record(Default::default())
        });
        module
    }
}

impl<O, M, B> Optimizer<M, B> for Adaptor<O, M, B>
where
    O: SimpleOptimizer<B::InnerBackend>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    type Record = AdaptorRecords<O, M, B>;

    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        self.step_with(|inner| inner.step(lr, module, grads))
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        self.step_with(|inner| inner.step_multi(lr, module, grads))
    }

    fn to_record(&self) -> Self::Record {
        self.state.clone()
    }

    fn load_record(mut self, record: Self::Record) -> Self {
        self.state = record;
        self
    }
}

impl AdamConfig {
    /// The optimizer for module `M`.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(&self) -> Adaptor<Adam, M, B> {
        let adam = Adam {
            beta_1: self.beta_1,
            beta_2: self.beta_2,
            epsilon: self.epsilon,
            penalty: self.weight_decay.as_ref().map(|w| w.penalty),
            decoupled: 0.0,
        };
        Adaptor::new(adam, &self.grad_clipping)
    }
}

impl AdamWConfig {
    /// The optimizer for module `M`.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(&self) -> Adaptor<Adam, M, B> {
        let adam = Adam {
            beta_1: self.beta_1,
            beta_2: self.beta_2,
            epsilon: self.epsilon,
            penalty: None,
            decoupled: self.weight_decay,
        };
        Adaptor::new(adam, &self.grad_clipping)
    }
}

#[cfg(test)]
mod tests {
    use super::{AdamConfig, Optimizer, Tensor};
    use ::burn::nn::{Linear, LinearConfig};
    use burn_autodiff::Autodiff;
    use burn_flex::Flex;
    use burn_optim::GradientsParams;

    type B = Autodiff<Flex>;

    fn step<O: Optimizer<Linear<B>, B>>(model: Linear<B>, optim: &mut O, seed: u64) -> Linear<B> {
        let device = Default::default();
        let x = Tensor::<B, 2>::from_data(
            ::burn::tensor::TensorData::new(
                (0..24)
                    .map(|i| ((i as u64 * 7 + seed) % 11) as f32 / 11.0 - 0.5)
                    .collect(),
                [4, 6],
            ),
            &device,
        );
        let loss = model.forward(x).square().mean();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        optim.step(1e-2, model, grads)
    }

    /// The adaptor's record is Burn's adaptor's: state saved from one and loaded into the other
    /// continues the same steps (bit for bit: the same update on the same backend), and the
    /// adaptor's own steps keep no reference to the state in the adaptor it runs them through.
    #[test]
    fn the_adaptors_record_continues_in_burns_adaptor() {
        let device = Default::default();
        let mut model = LinearConfig::new(6, 3).init::<B>(&device);
        let mut ours = AdamConfig::new().init::<B, Linear<B>>();
        for seed in 0..3 {
            model = step(model, &mut ours, seed);
        }
        assert!(
            ours.inner.to_record().is_empty(),
            "the inner adaptor holds no state"
        );
        let mut burns = ours.inner.clone().load_record(ours.to_record());
        let (mut a, mut b) = (model.clone(), model);
        for seed in 3..6 {
            a = step(a, &mut ours, seed);
            b = step(b, &mut burns, seed);
        }
        assert_eq!(a.weight.val().into_data(), b.weight.val().into_data());
        let mut again = AdamConfig::new()
            .init::<B, Linear<B>>()
            .load_record(burns.to_record());
        let (c, d) = (step(a, &mut again, 6), step(b, &mut burns, 6));
        assert_eq!(c.weight.val().into_data(), d.weight.val().into_data());
    }
}
