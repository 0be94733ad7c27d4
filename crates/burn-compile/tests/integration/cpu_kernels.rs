//! The CPU path: `Compiled<Flex>` (and `Compiled<NdArray>`) runs its fused groups as C kernels, built by the system C
//! compiler at the end of a graph's first replay (one unit per graph) and called from its
//! second replay on. Every result is compared with eager `Flex` on the same inputs, on the
//! first run (the ops on Flex while the kernels build) and on the later ones (the C kernels).
//!
//! Needs a C compiler (`cc`, or `$CC`), as the CPU path does; without one these tests fail
//! (they are not skipped): `cpu_no_compiler.rs` covers that case.
//!
//! Tolerances per dtype (fused kernels compute half types in f32 and round once, where eager
//! Flex rounds after every op; C's `libm` and Flex's own SIMD functions differ in the last
//! bits):
//! - f32: relative 1e-4, absolute 1e-5;
//! - f64: relative 1e-9, absolute 1e-12;
//! - f16: relative and absolute 2e-2 (about 20 f16 ULPs: one rounding per op of a chain);
//! - bf16: relative and absolute 1e-1 (about 12 bf16 ULPs).

use burn::tensor::activation;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use burn_compile::{Compiled, Explanation, explain, mark_step};
use burn_flex::Flex;

use crate::support;

use support::{Rng, float_data};

type C = Compiled<Flex>;

use burn_compile::incident::approx_tolerance as tolerance;

fn assert_close(what: &str, got: TensorData, want: TensorData, dtype: DType) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    let (got, want) = (got.convert::<f64>(), want.convert::<f64>());
    if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        got.assert_approx_eq::<f64>(&want, tolerance(dtype));
    })) {
        let message = e
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "assertion failed".into());
        panic!("{what}: {message}");
    }
}

/// Runs `f` on `Compiled<Flex>` three times (the first run builds the kernels, the next two
/// call them) and on eager Flex; compares every run. Returns the first run's explanation.
fn differential(
    what: &str,
    dtype: DType,
    compiled: impl Fn() -> Vec<TensorData>,
    eager: impl Fn() -> Vec<TensorData>,
) -> Explanation {
    let want = eager();
    let (first, report) = explain(|| {
        let out = compiled();
        mark_step();
        out
    });
    for (run, got) in [first, compiled(), compiled()].into_iter().enumerate() {
        assert_eq!(got.len(), want.len());
        for (o, (g, w)) in got.into_iter().zip(&want).enumerate() {
            assert_close(
                &format!("{what}: run {run}, output {o}"),
                g,
                w.clone(),
                dtype,
            );
        }
    }
    report
}

fn tensor<B: Backend, const D: usize>(
    shape: [usize; D],
    seed: u64,
    dtype: FloatDType,
) -> Tensor<B, D> {
    Tensor::<B, D>::from_data(float_data(&shape, seed, -2.0, 2.0), &Default::default()).cast(dtype)
}

// ---------------------------------------------------------------------------------------------
// Models' kernels.
// ---------------------------------------------------------------------------------------------

/// Layer norm then bias + GELU: the row kernel and the pointwise kernel of a transformer MLP.
fn norm_gelu<B: Backend>(dtype: FloatDType) -> Vec<TensorData> {
    let x = tensor::<B, 2>([64, 96], 1, dtype);
    let gamma = tensor::<B, 1>([96], 2, dtype);
    let beta = tensor::<B, 1>([96], 3, dtype);
    let bias = tensor::<B, 1>([96], 4, dtype);
    let (var, mean) = x.clone().var_mean_bias(1);
    let normed = (x - mean) / (var + 1e-5).sqrt();
    let y = normed * gamma.unsqueeze() + beta.unsqueeze();
    let h = activation::gelu(y.clone() + bias.unsqueeze());
    vec![y.into_data(), h.into_data()]
}

#[test]
fn a_layer_norm_and_gelu_run_as_c_kernels_built_once_per_graph() {
    crate::own_process!(a_layer_norm_and_gelu_run_as_c_kernels_built_once_per_graph);
    for dtype in [
        FloatDType::F32,
        FloatDType::F64,
        FloatDType::F16,
        FloatDType::BF16,
    ] {
        let report = differential(
            &format!("norm_gelu {dtype:?}"),
            dtype.into(),
            || norm_gelu::<C>(dtype),
            || norm_gelu::<Flex>(dtype),
        );
        // The norm's two means, its affine map, the bias and the GELU: one row kernel with two
        // outputs.
        let fused_ops: usize = report.graphs.iter().map(|g| g.fused_ops).sum();
        assert!(
            fused_ops >= 13,
            "{dtype:?}: the norm and the GELU are fused:\n{report}"
        );
        // Each graph with kernels built them all at once, at its first replay.
        for g in report.graphs.iter().filter(|g| g.fused_kernels > 0) {
            let build = g.kernel_build.as_ref().unwrap_or_else(|| {
                panic!("{dtype:?}: graph {} reports its build:\n{report}", g.key)
            });
            assert_eq!(build.error, None, "{report}");
            assert_eq!(
                build.kernels, g.fused_kernels,
                "one unit per graph:\n{report}"
            );
            assert!(build.time > std::time::Duration::ZERO);
        }
        let text = report.to_string();
        assert!(
            text.contains("C kernel(s)"),
            "explain shows the build:\n{text}"
        );
    }
}

/// `Compiled<NdArray>` runs the same C kernels on NdArray's tensors (f32 and f64: NdArray has
/// no half types).
#[test]
fn ndarray_runs_the_c_kernels_too() {
    crate::own_process!(ndarray_runs_the_c_kernels_too);
    use burn_ndarray::NdArray;
    for dtype in [FloatDType::F32, FloatDType::F64] {
        let report = differential(
            &format!("ndarray norm_gelu {dtype:?}"),
            dtype.into(),
            || norm_gelu::<Compiled<NdArray>>(dtype),
            || norm_gelu::<NdArray>(dtype),
        );
        let build = report
            .graphs
            .iter()
            .find_map(|g| g.kernel_build.clone())
            .unwrap_or_else(|| panic!("{dtype:?}: a C unit was built:\n{report}"));
        assert_eq!(build.error, None);
        let p = random_program(7);
        differential(
            &format!("ndarray {dtype:?} {p:?}"),
            dtype.into(),
            || run_program::<Compiled<NdArray>>(&p, dtype),
            || run_program::<NdArray>(&p, dtype),
        );
    }
}

/// The second time a graph comes (a cached plan, its kernels built), nothing is built.
#[test]
fn a_cached_graph_builds_nothing() {
    crate::own_process!(a_cached_graph_builds_nothing);
    let dtype = FloatDType::F32;
    let run = || {
        let x = tensor::<C, 2>([33, 47], 11, dtype);
        let y = (x.clone().exp() * 0.5 - x).tanh();
        y.into_data()
    };
    let _ = run();
    let (_, report) = explain(run);
    assert!(
        report.graphs.iter().all(|g| g.kernel_build.is_none()),
        "{report}"
    );
    assert!(report.kernel_build_time.is_zero());
}

/// Inputs that are views of the inner backend (transposed, sliced, flipped, broadcast): the
/// C functions read them through their own strides and start, and the user's tensors keep
/// their values.
#[test]
fn views_are_read_through_their_strides() {
    crate::own_process!(views_are_read_through_their_strides);
    fn views<B: Backend>() -> Vec<TensorData> {
        let a = tensor::<B, 2>([24, 40], 21, FloatDType::F32);
        let b = tensor::<B, 2>([40, 24], 22, FloatDType::F32);
        let c = tensor::<B, 2>([30, 50], 23, FloatDType::F32);
        let transposed = b.clone().transpose();
        let sliced = c.clone().slice([3..27, 5..45]);
        let flipped = a.clone().flip([0, 1]);
        let column = tensor::<B, 2>([24, 1], 24, FloatDType::F32);
        let y = (transposed * 2.0 + sliced.clone()).exp() - flipped * column.clone();
        let z = activation::softmax(sliced.clone().transpose(), 1);
        vec![
            y.into_data(),
            z.into_data(),
            a.into_data(),
            b.into_data(),
            c.into_data(),
            column.into_data(),
        ]
    }
    let report = differential("views", DType::F32, views::<C>, views::<Flex>);
    let fused: usize = report.graphs.iter().map(|g| g.fused_kernels).sum();
    assert!(fused >= 1, "{report}");
}

/// The softmax of half inputs rounds once: within half an ULP (plus the f32 arithmetic's
/// own error) of the exact softmax of the half inputs.
#[test]
fn half_softmax_rounds_once() {
    crate::own_process!(half_softmax_rounds_once);
    for dtype in [FloatDType::F16, FloatDType::BF16] {
        let x = tensor::<C, 2>([8, 100], 31, dtype);
        let exact: Vec<f64> = x
            .clone()
            .cast(FloatDType::F64)
            .into_data()
            .to_vec::<f64>()
            .unwrap()
            .chunks(100)
            .flat_map(|row| {
                let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
                row.iter()
                    .map(move |v| (v - max).exp() / sum)
                    .collect::<Vec<_>>()
            })
            .collect();
        // The first run is eager Flex's softmax (the kernel builds meanwhile), which rounds
        // intermediate values to the half type: only the C kernel's runs are checked.
        let _ = activation::softmax(x.clone(), 1).into_data();
        for run in 1..3 {
            let got = activation::softmax(x.clone(), 1)
                .cast(FloatDType::F64)
                .into_data()
                .to_vec::<f64>()
                .unwrap();
            let ulp = match dtype {
                FloatDType::F16 => 2f64.powi(-10),
                _ => 2f64.powi(-7),
            };
            for (i, (g, e)) in got.iter().zip(&exact).enumerate() {
                // Half an ULP of the value's binade, and a little for the f32 arithmetic.
                let bound = 0.5 * ulp * 2f64.powi(e.log2().floor() as i32) * 1.01 + 1e-7;
                assert!(
                    (g - e).abs() <= bound,
                    "{dtype:?} run {run}: [{i}] = {g}, exact {e}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Random graphs: elementwise chains and reductions over shapes with size-1 (broadcast) and
// size-0 dimensions, in every float dtype Flex supports.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Step {
    /// A unary function (kept on its domain).
    Unary(u8),
    /// A binary op with input `i`.
    Binary(u8, usize),
    /// An op with a scalar.
    Scalar(u8, f32),
    /// A reduction over the last dimension, broadcast back.
    Reduce(u8),
    Softmax,
    /// The running value is also an output.
    Output,
}

#[derive(Debug)]
struct Program {
    shape: [usize; 3],
    inputs: Vec<[usize; 3]>,
    steps: Vec<Step>,
    seed: u64,
}

fn random_program(seed: u64) -> Program {
    let mut rng = Rng::new(seed);
    let mut pick = |n: usize| (rng.next_u64() % n as u64) as usize;
    const DIMS: [usize; 8] = [1, 1, 2, 3, 5, 8, 17, 64];
    let mut shape = [DIMS[pick(8)], DIMS[pick(8)], DIMS[pick(8)]];
    // One program in eight has an empty dimension.
    if pick(8) == 0 {
        shape[pick(3)] = 0;
    }
    let n_inputs = 1 + pick(3);
    let inputs: Vec<[usize; 3]> = (0..n_inputs)
        .map(|i| {
            // The first input has the full shape; the others broadcast along some dimensions.
            let mut s = shape;
            if i > 0 {
                for d in s.iter_mut() {
                    if pick(3) == 0 {
                        *d = 1;
                    }
                }
            }
            s
        })
        .collect();
    let n_steps = 2 + pick(7);
    let steps = (0..n_steps)
        .map(|_| match pick(10) {
            0..=2 => Step::Unary(pick(12) as u8),
            3..=4 => Step::Binary(pick(4) as u8, pick(n_inputs)),
            5..=6 => Step::Scalar(pick(4) as u8, [0.5, -1.25, 3.0, 0.1][pick(4)]),
            7 => Step::Reduce(pick(4) as u8),
            8 => Step::Softmax,
            _ => Step::Output,
        })
        .collect();
    Program {
        shape,
        inputs,
        steps,
        seed,
    }
}

fn run_program<B: Backend>(p: &Program, dtype: FloatDType) -> Vec<TensorData> {
    let inputs: Vec<Tensor<B, 3>> = p
        .inputs
        .iter()
        .enumerate()
        .map(|(i, s)| tensor::<B, 3>(*s, p.seed * 10 + i as u64, dtype))
        .collect();
    let mut v = inputs[0].clone();
    let mut outputs = Vec::new();
    let reducible = p.shape[2] > 0;
    for step in &p.steps {
        v = match *step {
            Step::Unary(op) => match op {
                0 => v.tanh().exp(),
                1 => (v.abs() + 1.0).log(),
                2 => v.tanh(),
                3 => activation::sigmoid(v),
                4 => activation::relu(v),
                5 => activation::gelu(v),
                6 => (v.abs() + 0.1).sqrt(),
                7 => (v.abs() + 0.5).recip(),
                8 => -v,
                9 => v.sin(),
                10 => v.cos(),
                _ => v.erf(),
            },
            Step::Binary(op, i) => {
                let x = inputs[i].clone();
                match op {
                    0 => v + x,
                    1 => v - x,
                    2 => v * x,
                    _ => v / (x.abs() + 0.5),
                }
            }
            Step::Scalar(op, s) => match op {
                0 => v * s,
                1 => v + s,
                2 => v / s,
                // Away from 0, where a power below 1 amplifies rounding without bound.
                _ => (v.abs() + 0.5).powf_scalar(s.abs().min(2.0)),
            },
            Step::Reduce(_) if !reducible => v,
            Step::Reduce(op) => match op {
                0 => v.clone() - v.mean_dim(2),
                1 => v.clone() / (v.abs().sum_dim(2) + 1.0),
                2 => v.clone() - v.max_dim(2),
                // A large epsilon: over a few nearly equal values, a small one divides eager's
                // per-op rounding (half types) by a tiny deviation, beyond any tolerance.
                _ => {
                    let (var, mean) = v.clone().var_mean_bias(2);
                    (v - mean) / (var + 0.1).sqrt()
                }
            },
            Step::Softmax if !reducible => v,
            Step::Softmax => activation::softmax(v, 2),
            Step::Output => {
                outputs.push(v.clone().into_data());
                v
            }
        };
    }
    outputs.push(v.into_data());
    for x in inputs {
        // The user's tensors keep their values.
        outputs.push(x.into_data());
    }
    outputs
}

fn random_graphs(dtype: FloatDType, seeds: std::ops::Range<u64>) {
    let mut fused = 0;
    for seed in seeds {
        let p = random_program(seed);
        let report = differential(
            &format!("{dtype:?} {p:?}"),
            dtype.into(),
            || run_program::<C>(&p, dtype),
            || run_program::<Flex>(&p, dtype),
        );
        fused += report.graphs.iter().map(|g| g.fused_kernels).sum::<usize>();
    }
    assert!(
        fused > 20,
        "{dtype:?}: the programs fused only {fused} kernels"
    );
}

#[test]
fn random_graphs_f32() {
    crate::own_process!(random_graphs_f32);
    random_graphs(FloatDType::F32, 0..40);
}

#[test]
fn random_graphs_f64() {
    crate::own_process!(random_graphs_f64);
    random_graphs(FloatDType::F64, 100..130);
}

#[test]
fn random_graphs_f16() {
    crate::own_process!(random_graphs_f16);
    random_graphs(FloatDType::F16, 200..230);
}

#[test]
fn random_graphs_bf16() {
    crate::own_process!(random_graphs_bf16);
    random_graphs(FloatDType::BF16, 300..330);
}
