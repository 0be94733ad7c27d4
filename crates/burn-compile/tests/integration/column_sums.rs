//! Column sums on the CPU target: a training step through Burn's `BatchNorm` and a linear
//! layer's bias gradient on `Compiled<Flex>` and `Compiled<NdArray>` sum on the host (f64
//! accumulation) instead of the inner backend's reductions, one pass per group: the batch norm's
//! statistics read the activation in place (no copy of its swapped view), its gradients over
//! batch and space are one sum each. Values and gradients compared with eager's.
//!
//! A module of its own: its tests read process-wide launch counters (and hold `SERIAL` against
//! each other).

use burn::backend::Autodiff;
use burn::module::Module;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_compile::{Compiled, explain, metrics};
use burn_flex::Flex;
use burn_ndarray::NdArray;

use crate::support::float_data;

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const SHAPE: [usize; 4] = [4, 6, 5, 3];

/// One step: `BatchNorm` on `x` (NCHW, or built NHWC and permuted: a strided view), then a
/// linear layer over its last dimension, the loss weighted by `r`. The output, the running
/// statistics and the gradients of x, γ, β and the layer's bias.
fn step<B: AutodiffBackend>(d: &[TensorData; 5], channels_last: bool) -> Vec<TensorData> {
    let device = Default::default();
    let mut bn = burn::nn::BatchNormConfig::new(SHAPE[1]).init::<B>(&device);
    let param = |data: &TensorData| Tensor::from_data(data.clone(), &device).require_grad();
    bn.gamma = bn.gamma.map(|_| param(&d[1]));
    bn.beta = bn.beta.map(|_| param(&d[2]));
    let x = if channels_last {
        Tensor::<B, 4>::from_data(d[0].clone(), &device)
            .permute([0, 2, 3, 1])
            .into_data()
    } else {
        d[0].clone()
    };
    let x = if channels_last {
        Tensor::<B, 4>::from_data(x, &device).permute([0, 3, 1, 2])
    } else {
        Tensor::<B, 4>::from_data(x, &device)
    }
    .require_grad();
    let linear = burn::nn::LinearConfig::new(SHAPE[3], SHAPE[3]).init::<B>(&device);
    let linear = linear.map(&mut Reinit(&d[4]));
    let y = linear.forward(bn.forward(x.clone()));
    let r = Tensor::<B, 4>::from_data(d[3].clone(), &device);
    let g = (y.clone() * r).sum().backward();
    vec![
        y.into_data(),
        bn.running_mean.value().into_data(),
        bn.running_var.value().into_data(),
        x.grad(&g).unwrap().into_data(),
        bn.gamma.grad(&g).unwrap().into_data(),
        bn.beta.grad(&g).unwrap().into_data(),
        linear.bias.as_ref().unwrap().grad(&g).unwrap().into_data(),
    ]
}

/// Sets every float parameter from one set of values (repeated to its size), tracked.
struct Reinit<'a>(&'a TensorData);

impl<B: AutodiffBackend> burn::module::ModuleMapper<B> for Reinit<'_> {
    fn map_float<const D: usize>(
        &mut self,
        param: burn::module::Param<Tensor<B, D>>,
    ) -> burn::module::Param<Tensor<B, D>> {
        let values = self.0.to_vec::<f32>().unwrap();
        param.map(|t| {
            let shape = t.shape();
            let n = shape.num_elements();
            let data: Vec<f32> = values.iter().copied().cycle().take(n).collect();
            Tensor::from_data(TensorData::new(data, shape), &t.device()).require_grad()
        })
    }
}

fn data() -> [TensorData; 5] {
    [
        float_data(&SHAPE, 701, -1.0, 2.0),
        float_data(&[SHAPE[1]], 702, 0.5, 1.5),
        float_data(&[SHAPE[1]], 703, -0.5, 0.5),
        float_data(&SHAPE, 704, -1.0, 1.0),
        float_data(&[SHAPE[3] * SHAPE[3]], 705, -0.5, 0.5),
    ]
}

fn check<C: AutodiffBackend, E: AutodiffBackend>() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = data();
    let names = [
        "output",
        "running mean",
        "running var",
        "x",
        "γ",
        "β",
        "linear bias",
    ];
    // Sums of 60 values per channel, in f64 against eager's f32 reductions.
    let tol = Tolerance::relative(1e-4).set_absolute(1e-5);
    for channels_last in [false, true] {
        let before = metrics();
        let (got, report) = explain(|| step::<C>(&d, channels_last));
        let planned: usize = report.graphs.iter().map(|g| g.column_kernels).sum();
        let ran = metrics().since(&before).column_kernels;
        println!("channels-last {channels_last}: {planned} column sums planned, {ran} ran");
        // The mean and the variance, the γ and β gradients, the bias gradient.
        assert!(
            planned >= 5,
            "statistics and gradients are column sums: {report}"
        );
        assert_eq!(ran, planned as u64, "each ran on the host, not as its sums");
        let means: Vec<_> = report
            .eager_ops
            .iter()
            .filter(|(name, _)| name.contains("MeanDim") || name.contains("BiasBackward"))
            .collect();
        assert!(
            means.is_empty(),
            "none left to the inner backend: {means:?}"
        );
        let want = step::<E>(&d, channels_last);
        for ((g, w), name) in got.iter().zip(&want).zip(names) {
            println!("checking {name}");
            g.assert_approx_eq::<f32>(w, tol);
        }
    }
}

#[test]
fn batch_norm_and_bias_gradients_are_host_column_sums_on_flex() {
    crate::own_process!(batch_norm_and_bias_gradients_are_host_column_sums_on_flex);
    check::<Autodiff<Compiled<Flex>>, Autodiff<Flex>>();
}

#[test]
fn batch_norm_and_bias_gradients_are_host_column_sums_on_ndarray() {
    crate::own_process!(batch_norm_and_bias_gradients_are_host_column_sums_on_ndarray);
    check::<Autodiff<Compiled<NdArray>>, Autodiff<NdArray>>();
}
