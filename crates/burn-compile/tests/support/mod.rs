//! Test inputs shared by the test binaries: a tiny seeded PRNG (SplitMix64), so every case gets
//! fresh but reproducible values and both sides of a differential comparison see exactly the
//! same data. (Each binary uses a part: unused items are expected.)
#![allow(dead_code)]

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

#[cfg(any(feature = "wgpu", feature = "wgpu-fusion", feature = "cuda"))]
pub mod wgpu;

/// Two linear layers with a ReLU between, from given weights `[w_a, b_a, w_b, b_b]`: the
/// training tests' small model.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    a: burn::nn::Linear<B>,
    b: burn::nn::Linear<B>,
}

impl<B: Backend> Mlp<B> {
    pub fn new(w: &[TensorData; 4], device: &B::Device) -> Self {
        let linear = |w: &TensorData, b: &TensorData| burn::nn::Linear {
            weight: Param::from_tensor(Tensor::from_data(w.clone(), device)),
            bias: Some(Param::from_tensor(Tensor::from_data(b.clone(), device))),
        };
        Self {
            a: linear(&w[0], &w[1]),
            b: linear(&w[2], &w[3]),
        }
    }

    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.b
            .forward(burn::tensor::activation::relu(self.a.forward(x)))
    }
}

/// One `#[test]` per case for a backend pair, in a module named after the pair: each calls the
/// binary's own `check::<compiled, eager>(name, case::<compiled>, case::<eager>)`.
#[allow(unused_macros)]
macro_rules! pair_tests {
    ($module:ident: $compiled:ty, $eager:ty; [$($(#[$attr:meta])* $case:ident),* $(,)?]) => {
        mod $module {
            use super::*;
            $(
                #[test]
                $(#[$attr])*
                fn $case() {
                    crate::own_process!($case);
                    check::<$compiled, $eager>(
                        concat!(stringify!($module), "::", stringify!($case)),
                        super::$case::<$compiled>,
                        super::$case::<$eager>,
                    );
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use pair_tests;

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0xA24B_AED4_963E_E407) ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// `n` floats uniform in `[-1, 1)`.
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect()
}

/// A `[rows, cols]` matrix of floats uniform in `[-1, 1)`.
pub fn matrix(shape: [usize; 2], seed: u64) -> TensorData {
    TensorData::new(values(shape[0] * shape[1], seed), shape)
}

/// Floats uniform in `[lo, hi)`.
pub fn float_data(shape: &[usize], seed: u64, lo: f32, hi: f32) -> TensorData {
    let mut rng = Rng::new(seed);
    let values: Vec<f32> = (0..numel(shape))
        .map(|_| lo + (hi - lo) * rng.unit())
        .collect();
    TensorData::new(values, shape.to_vec())
}

/// Multiples of 0.5 in `[-2, 2]`: float data with many ties, so equality-based ops are not
/// trivially all-false.
pub fn stepped_data(shape: &[usize], seed: u64) -> TensorData {
    let mut rng = Rng::new(seed);
    let values: Vec<f32> = (0..numel(shape))
        .map(|_| (rng.next_u64() % 9) as f32 * 0.5 - 2.0)
        .collect();
    TensorData::new(values, shape.to_vec())
}

/// Integers in `[lo, hi)`.
pub fn int_data(shape: &[usize], seed: u64, lo: i64, hi: i64) -> TensorData {
    let mut rng = Rng::new(seed);
    let span = (hi - lo) as u64;
    let values: Vec<i64> = (0..numel(shape))
        .map(|_| lo + (rng.next_u64() % span) as i64)
        .collect();
    TensorData::new(values, shape.to_vec())
}

pub fn bool_data(shape: &[usize], seed: u64) -> TensorData {
    let mut rng = Rng::new(seed);
    let values: Vec<bool> = (0..numel(shape)).map(|_| rng.next_u64() & 1 == 1).collect();
    TensorData::new(values, shape.to_vec())
}

/// Every float parameter, in visiting order (forces lazy initialization).
pub struct Collect(Vec<TensorData>);

impl<B: Backend> ModuleVisitor<B> for Collect {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.push(param.val().into_data());
    }
}

pub fn weights<B: Backend, M: Module<B>>(model: &M) -> Vec<TensorData> {
    let mut collect = Collect(Vec::new());
    model.visit(&mut collect);
    collect.0
}

/// Replaces every float parameter, in visiting order, by the given data (same ids, same
/// require-grad flag).
pub struct Load(std::vec::IntoIter<TensorData>);

impl<B: Backend> ModuleMapper<B> for Load {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let data = self.0.next().expect("as many tensors as float parameters");
        param.map(|tensor| {
            assert_eq!(tensor.shape(), data.shape, "parameter shape");
            let require_grad = tensor.is_require_grad();
            Tensor::from_data(data, &tensor.device()).set_require_grad(require_grad)
        })
    }
}

pub fn load<B: Backend, M: Module<B>>(model: M, weights: Vec<TensorData>) -> M {
    let mut load = Load(weights.into_iter());
    let model = model.map(&mut load);
    assert!(
        load.0.next().is_none(),
        "more tensors than float parameters"
    );
    model
}
