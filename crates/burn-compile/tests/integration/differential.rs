//! Differential tests: `Compiled<B>` must compute what eager `B` computes.
//!
//! Every case is a plain Burn function generic over `B: Backend` that builds its inputs from
//! seeded pseudo-random data (fresh values, nothing hard-coded) and returns its outputs as
//! `TensorData`. The `support::pair_tests!` macro turns each case into one `#[test]` per backend pair
//! (`flex::case` runs `Compiled<Flex>` vs `Flex`, `ndarray::case` runs `Compiled<NdArray>` vs
//! `NdArray`). The compiled side runs twice: the first run compiles its graphs, the second replays
//! the cached plans; both must match eager.
//!
//! Comparison rules (see `compare`):
//! - floats: `assert_approx_eq::<f32>` with the per-dtype tolerance of `tolerance`;
//! - ints and bools: exact.
#![allow(clippy::single_range_in_vec_init)] // Burn's slice API takes arrays of ranges

use burn::tensor::{
    Bool, DType, Distribution, Element, ElementConversion, FloatDType, IndexingUpdateOp, Int,
    IntDType, Tensor, TensorData, activation,
    backend::Backend,
    loss, module,
    ops::{
        AttentionModuleOptions, ConvOptions, ConvTransposeOptions, InterpolateMode,
        InterpolateOptions, PadMode, UnfoldOptions,
    },
    s,
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
use support::{bool_data, float_data, int_data, stepped_data};

/// Floats uniform in `[-1, 1)`.
fn fl<B: Backend, const D: usize>(dev: &B::Device, shape: [usize; D], seed: u64) -> Tensor<B, D> {
    Tensor::from_data(float_data(&shape, seed, -1.0, 1.0), dev)
}

/// Floats uniform in `[lo, hi)`.
fn fr<B: Backend, const D: usize>(
    dev: &B::Device,
    shape: [usize; D],
    seed: u64,
    lo: f32,
    hi: f32,
) -> Tensor<B, D> {
    Tensor::from_data(float_data(&shape, seed, lo, hi), dev)
}

fn stepped<B: Backend, const D: usize>(
    dev: &B::Device,
    shape: [usize; D],
    seed: u64,
) -> Tensor<B, D> {
    Tensor::from_data(stepped_data(&shape, seed), dev)
}

fn int<B: Backend, const D: usize>(
    dev: &B::Device,
    shape: [usize; D],
    seed: u64,
    lo: i64,
    hi: i64,
) -> Tensor<B, D, Int> {
    Tensor::from_data(int_data(&shape, seed, lo, hi), dev)
}

fn bools<B: Backend, const D: usize>(
    dev: &B::Device,
    shape: [usize; D],
    seed: u64,
) -> Tensor<B, D, Bool> {
    Tensor::from_data(bool_data(&shape, seed), dev)
}

fn dims_data<const D: usize>(dims: [usize; D]) -> TensorData {
    TensorData::new(dims.iter().map(|&d| d as i64).collect::<Vec<_>>(), [D])
}

// ---------------------------------------------------------------------------------------------
// Harness.
// ---------------------------------------------------------------------------------------------

/// Tolerance per dtype of the eager result: the accuracy check's
/// (`burn_compile::incident::tolerance`), so that what these tests accept is what a user's
/// accuracy check accepts.
use burn_compile::incident::approx_tolerance as tolerance;

fn compare<C: Backend>(case: &str, run: &str, got: &[TensorData], want: &[TensorData]) {
    assert_eq!(
        got.len(),
        want.len(),
        "{case}: the {run} returned {} outputs, eager {}",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ctx = format!(
            "{case}: output {i} of the {run} (eager {:?} {:?})",
            w.dtype, w.shape
        );
        eprintln!("checking {ctx}");
        assert_eq!(g.shape, w.shape, "{ctx}: shape differs");
        if w.dtype.is_float() {
            if g.dtype != w.dtype {
                // Known burn-router limitation: `float_into_data` converts what it reads to the
                // backend's default float element, so an f16 / bf16 / f64 tensor of `Compiled<B>`
                // is read back as `C::FloatElem` data. The values are converted exactly, so we
                // compare both sides after converting them to f32.
                assert_eq!(
                    g.dtype,
                    <C::FloatElem as Element>::dtype(),
                    "{ctx}: compiled dtype {:?}",
                    g.dtype
                );
            }
            g.clone()
                .convert::<f64>()
                .assert_approx_eq::<f64>(&w.clone().convert::<f64>(), tolerance(w.dtype));
        } else if w.dtype.is_int() || w.dtype.is_uint() {
            if g.dtype != w.dtype {
                // Same burn-router limitation for ints: `int_into_data` converts to the
                // backend's default int element. Compared exactly after widening to i64.
                assert_eq!(
                    g.dtype,
                    <C::IntElem as Element>::dtype(),
                    "{ctx}: compiled dtype {:?}",
                    g.dtype
                );
            }
            g.clone()
                .convert::<i64>()
                .assert_eq(&w.clone().convert::<i64>(), true);
        } else {
            g.assert_eq(w, true);
        }
    }
}

fn check<C: Backend, E: Backend>(
    case: &str,
    compiled: fn(&C::Device) -> Out,
    eager: fn(&E::Device) -> Out,
) {
    let want = eager(&Default::default());
    let first = compiled(&Default::default());
    compare::<C>(case, "first compiled run", &first, &want);
    let second = compiled(&Default::default());
    compare::<C>(case, "second compiled run (cached plans)", &second, &want);
}

/// The cases every backend pair runs; `$pair!` receives the list.
macro_rules! all_cases {
    ($pair:ident: $compiled:ty, $eager:ty) => {
        support::pair_tests!($pair: $compiled, $eager; [
            // arithmetic
            float_binary,
            float_broadcast_binary,
            float_scalar,
            float_unary,
            float_trig_and_hyperbolic,
            float_rounding,
            float_nan_inf,
            int_binary,
            int_scalar,
            int_unary,
            int_bitwise,
            // comparisons and bool ops
            float_comparisons,
            float_comparisons_scalar,
            int_comparisons,
            bool_ops,
            // reductions
            float_reductions_full,
            float_reductions_dim,
            float_arg_reductions,
            float_statistics,
            int_reductions,
            cumulative,
            sort_and_topk,
            // indexing and layout
            slice_ops,
            slice_assign_ops,
            gather_scatter,
            select_ops,
            cat_stack,
            mask_ops,
            narrow_chunk_split,
            layout_ops,
            layout_then_compute,
            pad_ops,
            one_hot_and_argwhere,
            int_and_bool_indexing,
            // linear algebra
            matmul_2d,
            matmul_batched_3d,
            matmul_broadcast_4d,
            matmul_transposed_operands,
            linear_and_embedding,
            // convolutions and pooling
            conv1d_ops,
            conv2d_ops,
            conv3d_op,
            conv_transpose_ops,
            unfold4d_op,
            pool2d_ops,
            pool1d_ops,
            interpolate_ops,
            // activations
            activations,
            softmax_family,
            attention_op,
            // casts
            casts_between_kinds,
            cast_float_f64,
            cast_int_dtypes,
            cast_int_to_int,
            unsigned_ints,
            // random
            random_distributions,
            random_interleaved_with_drops_and_reseeds,
            random_int_and_like,
            // in-place patterns
            inplace_loop_with_live_clone,
            inplace_ops_keep_live_clones,
            inplace_across_breaks,
            inplace_int_and_bool,
            // empty and zero-size tensors
            empty_float,
            empty_int_and_bool,
            // creation
            creation_float,
            creation_int,
            creation_bool,
            // breaks inside a computation
            host_reads_mid_computation,
        ]);
    };
}

all_cases!(flex: Compiled<Flex>, Flex);
all_cases!(ndarray: Compiled<NdArray>, NdArray);

// Cases the NdArray pair skips, each for a stated reason:
// - half precision: Flex supports f16 and bf16 storage and arithmetic; NdArray 0.21 does not
//   (`NdArray::dtype_usage` is empty for F16 and BF16). `ndarray_has_no_half_precision` below
//   fails as soon as NdArray gains them, so this skip is revisited then.
// - `empty_matmul`: eager NdArray 0.21 itself panics on a zero-size matmul ("attempt to divide
//   by zero" in burn-ndarray-0.21.0/src/ops/matmul.rs:25), so there is no eager result to
//   compare with.
support::pair_tests!(flex_only: Compiled<Flex>, Flex; [
    cast_float_f16,
    cast_float_bf16,
    empty_matmul,
    half_softmax,
]);

#[test]
fn ndarray_has_no_half_precision() {
    crate::own_process!(ndarray_has_no_half_precision);
    let dev = burn_ndarray::NdArrayDevice::default();
    for dtype in [DType::F16, DType::BF16] {
        assert!(
            NdArray::<f32>::dtype_usage(&dev, dtype).is_empty(),
            "NdArray now supports {dtype:?}: add the half cases to the ndarray pair"
        );
        assert!(
            <Compiled<NdArray> as Backend>::dtype_usage(&dev, dtype).is_empty(),
            "Compiled<NdArray> must report the dtype usage of NdArray for {dtype:?}"
        );
    }
    let dev = burn_flex::FlexDevice;
    for dtype in [DType::F16, DType::BF16] {
        assert_eq!(
            <Compiled<Flex> as Backend>::dtype_usage(&dev, dtype),
            Flex::dtype_usage(&dev, dtype),
            "Compiled<Flex> must report the dtype usage of Flex for {dtype:?}"
        );
        assert!(!Flex::dtype_usage(&dev, dtype).is_empty());
    }
}

// ---------------------------------------------------------------------------------------------
// Arithmetic.
// ---------------------------------------------------------------------------------------------

fn float_binary<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 2>(dev, [4, 6], 1);
    let b = fl::<B, 2>(dev, [4, 6], 2);
    let pos = fr::<B, 2>(dev, [4, 6], 3, 0.5, 2.0);
    vec![
        (a.clone() + b.clone()).into_data(),
        (a.clone() - b.clone()).into_data(),
        (a.clone() * b.clone()).into_data(),
        (a.clone() / pos.clone()).into_data(),
        a.clone().remainder(pos.clone()).into_data(),
        a.clone().fmod(pos.clone()).into_data(),
        pos.clone().powf(b.clone()).into_data(),
        a.clone().atan2(b.clone()).into_data(),
        a.clone().max_pair(b.clone()).into_data(),
        a.clone().min_pair(b.clone()).into_data(),
        a.clone()
            .powi(int::<B, 2>(dev, [4, 6], 4, 0, 4).float())
            .into_data(),
        a.add(b).div(pos).into_data(),
    ]
}

fn float_broadcast_binary<B: Backend>(dev: &B::Device) -> Out {
    let col = fl::<B, 2>(dev, [3, 1], 5);
    let row = fr::<B, 2>(dev, [1, 4], 6, 0.5, 1.5);
    let full = fl::<B, 3>(dev, [2, 3, 4], 7);
    vec![
        (col.clone() + row.clone()).into_data(),
        (col.clone() * row.clone()).into_data(),
        (col.clone() / row.clone()).into_data(),
        (full.clone() - row.clone().unsqueeze::<3>()).into_data(),
        (full * col.unsqueeze::<3>()).into_data(),
    ]
}

fn float_scalar<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 2>(dev, [5, 3], 8);
    let pos = fr::<B, 2>(dev, [5, 3], 9, 0.1, 3.0);
    vec![
        a.clone().add_scalar(2.5).into_data(),
        a.clone().sub_scalar(-0.75).into_data(),
        a.clone().mul_scalar(3.0).into_data(),
        a.clone().div_scalar(7.0).into_data(),
        a.clone().remainder_scalar(0.3).into_data(),
        a.clone().fmod_scalar(0.3).into_data(),
        pos.clone().powf_scalar(2.5).into_data(),
        pos.clone().powf_scalar(-0.5).into_data(),
        a.clone().powi_scalar(3).into_data(),
        a.clone().clamp(-0.5, 0.25).into_data(),
        a.clone().clamp_min(0.1).into_data(),
        a.clone().clamp_max(-0.1).into_data(),
        (a.clone() + 1.0).into_data(),
        (a.clone() * -2.0 - 0.5).into_data(),
        (a / 4.0).into_data(),
    ]
}

/// Shapes of the `recip` inputs stay under 32 elements: from 32 on, eager NdArray computes
/// `recip` with the approximate SIMD `_mm256_rcp_ps` on the aligned part of the buffer only, so
/// its own results depend on allocation alignment (see `activation_gradients` in autodiff.rs).
fn float_unary<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 2>(dev, [4, 5], 10);
    let pos = fr::<B, 2>(dev, [4, 5], 11, 0.05, 4.0);
    vec![
        a.clone().neg().into_data(),
        (-a.clone()).into_data(),
        a.clone().abs().into_data(),
        pos.clone().sqrt().into_data(),
        a.clone().exp().into_data(),
        pos.clone().log().into_data(),
        a.clone().abs().log1p().into_data(),
        a.clone().erf().into_data(),
        pos.clone().recip().into_data(),
        a.clone().square().into_data(),
        a.clone().sign().into_data(),
        a.clone().deg2rad().into_data(),
        a.rad2deg().into_data(),
    ]
}

fn float_trig_and_hyperbolic<B: Backend>(dev: &B::Device) -> Out {
    let a = fr::<B, 2>(dev, [3, 7], 12, -0.9, 0.9);
    let big = fr::<B, 2>(dev, [3, 7], 13, 1.0, 5.0);
    vec![
        a.clone().sin().into_data(),
        a.clone().cos().into_data(),
        a.clone().tan().into_data(),
        a.clone().tanh().into_data(),
        a.clone().sinh().into_data(),
        a.clone().cosh().into_data(),
        a.clone().asin().into_data(),
        a.clone().acos().into_data(),
        a.clone().atan().into_data(),
        a.clone().atanh().into_data(),
        a.asinh().into_data(),
        big.acosh().into_data(),
    ]
}

fn float_rounding<B: Backend>(dev: &B::Device) -> Out {
    let a = fr::<B, 2>(dev, [4, 4], 14, -5.0, 5.0);
    vec![
        a.clone().floor().into_data(),
        a.clone().ceil().into_data(),
        a.clone().round().into_data(),
        a.trunc().into_data(),
    ]
}

fn float_nan_inf<B: Backend>(dev: &B::Device) -> Out {
    // log of negatives gives NaN, 1/0 gives inf: masks and NaN propagation must match.
    let a = stepped::<B, 2>(dev, [4, 5], 15);
    let logged = a.clone().log();
    let inv = a.clone().recip();
    vec![
        logged.clone().into_data(),
        inv.clone().into_data(),
        logged.clone().is_nan().into_data(),
        inv.clone().is_inf().into_data(),
        (logged + inv).is_finite().into_data(),
        a.contains_nan().into_data(),
    ]
}

fn int_binary<B: Backend>(dev: &B::Device) -> Out {
    let a = int::<B, 2>(dev, [4, 6], 16, -20, 20);
    let b = int::<B, 2>(dev, [4, 6], 17, -20, 20);
    let nonzero = int::<B, 2>(dev, [4, 6], 18, 1, 7);
    let small = int::<B, 2>(dev, [4, 6], 19, -4, 5);
    let exps = int::<B, 2>(dev, [4, 6], 20, 0, 4);
    vec![
        (a.clone() + b.clone()).into_data(),
        (a.clone() - b.clone()).into_data(),
        (a.clone() * b.clone()).into_data(),
        (a.clone() / nonzero.clone()).into_data(),
        a.clone().remainder(nonzero.clone()).into_data(),
        small.powi(exps).into_data(),
        a.clone().max_pair(b.clone()).into_data(),
        a.clone().min_pair(b.clone()).into_data(),
        (a.clone() + int::<B, 2>(dev, [1, 6], 21, -3, 3)).into_data(),
        (a * int::<B, 2>(dev, [4, 1], 22, -3, 3)).into_data(),
    ]
}

fn int_scalar<B: Backend>(dev: &B::Device) -> Out {
    let a = int::<B, 2>(dev, [3, 5], 23, -50, 50);
    vec![
        a.clone().add_scalar(7).into_data(),
        a.clone().sub_scalar(-3).into_data(),
        a.clone().mul_scalar(-4).into_data(),
        a.clone().div_scalar(3).into_data(),
        a.clone().remainder_scalar(6).into_data(),
        int::<B, 2>(dev, [3, 5], 24, -5, 6)
            .powi_scalar(3)
            .into_data(),
        a.clone().clamp(-10, 12).into_data(),
        (a.clone() + 1).into_data(),
        (a * 2 - 5).into_data(),
    ]
}

fn int_unary<B: Backend>(dev: &B::Device) -> Out {
    let a = int::<B, 2>(dev, [4, 4], 25, -9, 10);
    vec![
        a.clone().neg().into_data(),
        (-a.clone()).into_data(),
        a.clone().abs().into_data(),
        a.sign().into_data(),
    ]
}

fn int_bitwise<B: Backend>(dev: &B::Device) -> Out {
    let a = int::<B, 2>(dev, [3, 4], 26, 0, 256);
    let b = int::<B, 2>(dev, [3, 4], 27, 0, 256);
    let shifts = int::<B, 2>(dev, [3, 4], 28, 0, 5);
    vec![
        a.clone().bitwise_and(b.clone()).into_data(),
        a.clone().bitwise_or(b.clone()).into_data(),
        a.clone().bitwise_xor(b).into_data(),
        a.clone().bitwise_not().into_data(),
        a.clone().bitwise_left_shift(shifts.clone()).into_data(),
        a.clone().bitwise_right_shift(shifts).into_data(),
        a.clone().bitwise_and_scalar(0x5a.elem()).into_data(),
        a.clone().bitwise_or_scalar(0x21.elem()).into_data(),
        a.clone().bitwise_xor_scalar(0xff.elem()).into_data(),
        a.clone().bitwise_left_shift_scalar(2.elem()).into_data(),
        a.bitwise_right_shift_scalar(3.elem()).into_data(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Comparisons and bool ops.
// ---------------------------------------------------------------------------------------------

fn float_comparisons<B: Backend>(dev: &B::Device) -> Out {
    let a = stepped::<B, 2>(dev, [5, 6], 29);
    let b = stepped::<B, 2>(dev, [5, 6], 30);
    vec![
        a.clone().equal(b.clone()).into_data(),
        a.clone().not_equal(b.clone()).into_data(),
        a.clone().greater(b.clone()).into_data(),
        a.clone().greater_equal(b.clone()).into_data(),
        a.clone().lower(b.clone()).into_data(),
        a.clone().lower_equal(b.clone()).into_data(),
        // Broadcast comparison.
        a.greater(stepped::<B, 2>(dev, [1, 6], 31)).into_data(),
    ]
}

fn float_comparisons_scalar<B: Backend>(dev: &B::Device) -> Out {
    let a = stepped::<B, 2>(dev, [5, 6], 32);
    vec![
        a.clone().equal_elem(0.5).into_data(),
        a.clone().not_equal_elem(0.5).into_data(),
        a.clone().greater_elem(0.0).into_data(),
        a.clone().greater_equal_elem(0.0).into_data(),
        a.clone().lower_elem(-1.0).into_data(),
        a.lower_equal_elem(-1.0).into_data(),
    ]
}

fn int_comparisons<B: Backend>(dev: &B::Device) -> Out {
    let a = int::<B, 2>(dev, [5, 6], 33, -3, 4);
    let b = int::<B, 2>(dev, [5, 6], 34, -3, 4);
    vec![
        a.clone().equal(b.clone()).into_data(),
        a.clone().not_equal(b.clone()).into_data(),
        a.clone().greater(b.clone()).into_data(),
        a.clone().greater_equal(b.clone()).into_data(),
        a.clone().lower(b.clone()).into_data(),
        a.clone().lower_equal(b).into_data(),
        a.clone().equal_elem(1).into_data(),
        a.clone().greater_elem(0).into_data(),
        a.clone().greater_equal_elem(0).into_data(),
        a.clone().lower_elem(2).into_data(),
        a.lower_equal_elem(-2).into_data(),
    ]
}

fn bool_ops<B: Backend>(dev: &B::Device) -> Out {
    let p = bools::<B, 2>(dev, [4, 5], 35);
    let q = bools::<B, 2>(dev, [4, 5], 36);
    vec![
        p.clone().bool_not().into_data(),
        p.clone().bool_and(q.clone()).into_data(),
        p.clone().bool_or(q.clone()).into_data(),
        p.clone().bool_xor(q.clone()).into_data(),
        p.clone().equal(q.clone()).into_data(),
        p.clone().not_equal(q.clone()).into_data(),
        p.clone().any().into_data(),
        p.clone().all().into_data(),
        p.clone().any_dim(1).into_data(),
        p.clone().all_dim(0).into_data(),
        p.bool_not().bool_and(q).bool_not().into_data(),
        fl::<B, 2>(dev, [3, 3], 37)
            .greater_elem(0.0)
            .all()
            .into_data(),
        stepped::<B, 2>(dev, [3, 4], 38).bool().into_data(),
        int::<B, 2>(dev, [3, 4], 39, -1, 2).bool().into_data(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Reductions.
// ---------------------------------------------------------------------------------------------

fn float_reductions_full<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 3>(dev, [3, 4, 5], 40);
    let near_one = fr::<B, 2>(dev, [3, 4], 41, 0.8, 1.2);
    vec![
        a.clone().sum().into_data(),
        a.clone().mean().into_data(),
        a.clone().max().into_data(),
        a.clone().min().into_data(),
        a.clone().max_abs().into_data(),
        near_one.prod().into_data(),
    ]
}

fn float_reductions_dim<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 3>(dev, [3, 4, 5], 42);
    let near_one = fr::<B, 3>(dev, [3, 4, 5], 43, 0.8, 1.2);
    vec![
        a.clone().sum_dim(0).into_data(),
        a.clone().sum_dim(2).into_data(),
        a.clone().mean_dim(1).into_data(),
        a.clone().max_dim(2).into_data(),
        a.clone().min_dim(0).into_data(),
        a.clone().max_abs_dim(1).into_data(),
        near_one.prod_dim(1).into_data(),
        a.clone().sum_dims(&[0, 2]).into_data(),
        a.clone().mean_dims(&[1, 2]).into_data(),
        a.clone().max_dims(&[0, 1]).into_data(),
        a.clone().sum_dims_squeeze::<1, _>(&[0, 2]).into_data(),
        a.sum_dim(1).sum_dim(0).into_data(),
    ]
}

fn float_arg_reductions<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 3>(dev, [3, 4, 5], 44);
    let (max, max_idx) = a.clone().max_dim_with_indices(1);
    let (min, min_idx) = a.clone().min_dim_with_indices(2);
    vec![
        a.clone().argmax(0).into_data(),
        a.clone().argmax(2).into_data(),
        a.clone().argmin(1).into_data(),
        max.into_data(),
        max_idx.into_data(),
        min.into_data(),
        min_idx.into_data(),
    ]
}

fn float_statistics<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 2>(dev, [4, 9], 45);
    let (var, mean) = a.clone().var_mean(1);
    let (var_b, mean_b) = a.clone().var_mean_bias(0);
    vec![
        a.clone().var(1).into_data(),
        a.clone().var_bias(0).into_data(),
        var.into_data(),
        mean.into_data(),
        var_b.into_data(),
        mean_b.into_data(),
        a.median(1).into_data(),
    ]
}

fn int_reductions<B: Backend>(dev: &B::Device) -> Out {
    let a = int::<B, 3>(dev, [3, 4, 5], 46, -30, 30);
    let small = int::<B, 2>(dev, [3, 4], 47, -3, 4);
    let (max, max_idx) = a.clone().max_dim_with_indices(2);
    vec![
        a.clone().sum().into_data(),
        a.clone().max().into_data(),
        a.clone().min().into_data(),
        a.clone().sum_dim(1).into_data(),
        a.clone().mean_dim(0).into_data(),
        a.clone().max_dim(0).into_data(),
        a.clone().min_dim(2).into_data(),
        a.clone().argmax(1).into_data(),
        a.clone().argmin(2).into_data(),
        max.into_data(),
        max_idx.into_data(),
        small.clone().prod().into_data(),
        small.prod_dim(1).into_data(),
    ]
}

fn cumulative<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 2>(dev, [4, 6], 48);
    let near_one = fr::<B, 2>(dev, [4, 6], 49, 0.8, 1.2);
    let i = int::<B, 2>(dev, [4, 6], 50, -5, 6);
    vec![
        a.clone().cumsum(0).into_data(),
        a.clone().cumsum(1).into_data(),
        near_one.cumprod(1).into_data(),
        a.clone().cummin(1).into_data(),
        a.cummax(0).into_data(),
        i.clone().cumsum(1).into_data(),
        i.clone().cummax(1).into_data(),
        i.cummin(0).into_data(),
    ]
}

fn sort_and_topk<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 2>(dev, [4, 7], 51);
    let i = int::<B, 2>(dev, [4, 7], 52, -100, 100);
    let (sorted, idx) = a.clone().sort_descending_with_indices(1);
    let (top, top_idx) = a.clone().topk_with_indices(3, 1);
    vec![
        a.clone().sort(1).into_data(),
        a.clone().sort(0).into_data(),
        sorted.into_data(),
        idx.into_data(),
        a.clone().argsort(1).into_data(),
        top.into_data(),
        top_idx.into_data(),
        a.topk(2, 0).into_data(),
        i.clone().sort(1).into_data(),
        i.argsort_descending(0).into_data(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Indexing and layout.
// ---------------------------------------------------------------------------------------------

fn slice_ops<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 3>(dev, [4, 6, 5], 53);
    vec![
        a.clone().slice([1..3, 0..6, 2..5]).into_data(),
        a.clone().slice([0..2]).into_data(),
        a.clone().slice(s![.., 1..;2, ..;-1]).into_data(),
        a.clone().slice(s![-2.., .., 0..1]).into_data(),
        a.clone().slice_dim(1, 2..5).into_data(),
        // Slice then compute: the view is consumed by an op.
        (a.clone().slice([0..2, 1..4]) * 2.0).exp().into_data(),
        a.slice(s![..;2, ..;3]).sum_dim(2).into_data(),
    ]
}

fn slice_assign_ops<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 2>(dev, [5, 6], 54);
    let v = fl::<B, 2>(dev, [2, 3], 55);
    let i = int::<B, 2>(dev, [5, 6], 56, -9, 9);
    vec![
        a.clone().slice_assign([1..3, 2..5], v.clone()).into_data(),
        a.clone().slice_assign(s![..;3, 3..], v.clone()).into_data(),
        a.clone().slice_fill([0..5, 4..6], -3.5).into_data(),
        a.clone().slice_fill(s![1..4, ..;2], 7.0).into_data(),
        i.clone()
            .slice_assign([0..2, 0..3], int::<B, 2>(dev, [2, 3], 57, 50, 60))
            .into_data(),
        i.slice_fill([3..5, 1..2], 42).into_data(),
        // Assign into the result of a computation, then keep computing.
        (a.exp().slice_assign([0..2, 0..3], v) + 1.0).into_data(),
    ]
}

fn gather_scatter<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 2>(dev, [4, 5], 58);
    let idx1 = int::<B, 2>(dev, [4, 7], 59, 0, 5);
    let idx0 = int::<B, 2>(dev, [6, 5], 60, 0, 4);
    let values = fl::<B, 2>(dev, [4, 7], 61);
    let i = int::<B, 2>(dev, [4, 5], 62, -9, 9);
    vec![
        a.clone().gather(1, idx1.clone()).into_data(),
        a.clone().gather(0, idx0).into_data(),
        // Duplicate indices accumulate.
        a.clone()
            .scatter(1, idx1.clone(), values, IndexingUpdateOp::Add)
            .into_data(),
        Tensor::<B, 2>::zeros([4, 5], dev)
            .scatter(
                0,
                int::<B, 2>(dev, [3, 5], 63, 0, 4),
                fl::<B, 2>(dev, [3, 5], 64),
                IndexingUpdateOp::Add,
            )
            .into_data(),
        i.clone().gather(1, idx1.clone()).into_data(),
        i.scatter(
            1,
            idx1,
            int::<B, 2>(dev, [4, 7], 65, -5, 5),
            IndexingUpdateOp::Add,
        )
        .into_data(),
    ]
}

fn select_ops<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 3>(dev, [5, 3, 4], 66);
    let rows = int::<B, 1>(dev, [7], 67, 0, 5);
    let cols = int::<B, 1>(dev, [6], 68, 0, 4);
    let i = int::<B, 2>(dev, [5, 4], 69, -9, 9);
    vec![
        a.clone().select(0, rows.clone()).into_data(),
        a.clone().select(2, cols.clone()).into_data(),
        a.clone()
            .select_assign(
                0,
                rows.clone(),
                fl::<B, 3>(dev, [7, 3, 4], 70),
                IndexingUpdateOp::Add,
            )
            .into_data(),
        a.select_assign(
            2,
            cols.clone(),
            fl::<B, 3>(dev, [5, 3, 6], 71),
            IndexingUpdateOp::Add,
        )
        .into_data(),
        i.clone().select(1, cols.clone()).into_data(),
        i.select_assign(
            0,
            rows,
            int::<B, 2>(dev, [7, 4], 72, -3, 3),
            IndexingUpdateOp::Add,
        )
        .into_data(),
    ]
}

fn cat_stack<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 2>(dev, [2, 3], 73);
    let b = fl::<B, 2>(dev, [4, 3], 74);
    let c = fl::<B, 2>(dev, [2, 5], 75);
    let i = int::<B, 2>(dev, [2, 3], 76, -9, 9);
    let j = int::<B, 2>(dev, [2, 3], 77, -9, 9);
    let p = bools::<B, 2>(dev, [2, 3], 78);
    let q = bools::<B, 2>(dev, [1, 3], 79);
    vec![
        Tensor::cat(vec![a.clone(), b.clone()], 0).into_data(),
        Tensor::cat(vec![a.clone(), c.clone(), a.clone()], 1).into_data(),
        Tensor::stack::<3>(vec![a.clone(), a.clone().exp(), a.clone() * 2.0], 0).into_data(),
        Tensor::stack::<3>(vec![a.clone(), c.clone().slice([0..2, 0..3])], 2).into_data(),
        Tensor::cat(vec![i.clone(), j.clone()], 1).into_data(),
        Tensor::stack::<3>(vec![i, j], 1).into_data(),
        Tensor::cat(vec![p.clone(), q], 0).into_data(),
        Tensor::stack::<3>(vec![p.clone(), p.bool_not()], 2).into_data(),
        // Cat then compute on the result.
        Tensor::cat(vec![a, b], 0).sum_dim(0).into_data(),
    ]
}

fn mask_ops<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 2>(dev, [4, 5], 80);
    let b = fl::<B, 2>(dev, [4, 5], 81);
    let m = bools::<B, 2>(dev, [4, 5], 82);
    let i = int::<B, 2>(dev, [4, 5], 83, -9, 9);
    vec![
        a.clone().mask_where(m.clone(), b.clone()).into_data(),
        a.clone().mask_fill(m.clone(), -7.5).into_data(),
        // Broadcast mask.
        a.clone()
            .mask_fill(bools::<B, 2>(dev, [1, 5], 84), 0.0)
            .into_data(),
        // Mask computed in the graph.
        a.clone()
            .mask_where(a.clone().greater(b.clone()), b * 10.0)
            .into_data(),
        i.clone()
            .mask_where(m.clone(), int::<B, 2>(dev, [4, 5], 85, 100, 200))
            .into_data(),
        i.clone().mask_fill(m.clone(), 99).into_data(),
        a.clone().tril(0).into_data(),
        a.triu(1).into_data(),
        i.tril(-1).into_data(),
    ]
}

fn narrow_chunk_split<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 2>(dev, [6, 7], 86);
    let mut out = vec![
        a.clone().narrow(0, 1, 3).into_data(),
        a.clone().narrow(1, 4, 3).into_data(),
    ];
    out.extend(a.clone().chunk(3, 1).into_iter().map(|t| t.into_data()));
    out.extend(a.clone().split(4, 0).into_iter().map(|t| t.into_data()));
    out.extend(
        a.clone()
            .split_with_sizes(vec![1, 4, 2], 1)
            .into_iter()
            .map(|t| (t * 3.0).into_data()),
    );
    out.extend(
        int::<B, 2>(dev, [4, 4], 87, -9, 9)
            .chunk(2, 0)
            .into_iter()
            .map(|t| t.into_data()),
    );
    out
}

fn layout_ops<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 3>(dev, [2, 3, 4], 88);
    let col = fl::<B, 2>(dev, [3, 1], 89);
    vec![
        a.clone().flip([0, 2]).into_data(),
        a.clone().flip([-1]).into_data(),
        a.clone().repeat(&[2, 1, 3]).into_data(),
        a.clone().repeat_dim(1, 2).into_data(),
        col.clone().expand([2, 3, 4]).into_data(),
        col.expand([3, 5]).into_data(),
        a.clone().reshape([4, 6]).into_data(),
        a.clone().reshape([-1, 2]).into_data(),
        a.clone().swap_dims(0, 2).into_data(),
        a.clone().permute([2, 0, 1]).into_data(),
        a.clone().transpose().into_data(),
        a.clone().unsqueeze_dim::<4>(1).into_data(),
        a.clone()
            .unsqueeze_dim::<4>(1)
            .squeeze_dim::<3>(1)
            .into_data(),
        a.clone().flatten::<2>(1, 2).into_data(),
        a.clone().movedim(0, 2).into_data(),
        a.clone().roll_dim(1, 2).into_data(),
        a.roll(&[1, -2], &[0, 1]).into_data(),
    ]
}

fn layout_then_compute<B: Backend>(dev: &B::Device) -> Out {
    // Views (transposes, permutes, flips, expands) consumed by elementwise ops and reductions.
    let a = fl::<B, 3>(dev, [2, 3, 4], 90);
    let b = fl::<B, 3>(dev, [4, 3, 2], 91);
    let col = fl::<B, 2>(dev, [3, 1], 92);
    vec![
        (a.clone().permute([2, 1, 0]) + b.clone()).into_data(),
        (a.clone().swap_dims(0, 2).exp() * b.clone().flip([1])).into_data(),
        (a.clone().transpose().reshape([2, 12]) - 1.0).into_data(),
        (col.expand([3, 4]) + a.clone().sum_dim(0).squeeze_dim::<2>(0)).into_data(),
        a.clone().repeat(&[1, 2, 1]).sum_dim(1).into_data(),
        a.flip([1]).permute([1, 2, 0]).cumsum(1).into_data(),
    ]
}

fn pad_ops<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 3>(dev, [2, 4, 5], 93);
    vec![
        a.clone()
            .pad((1, 2, 0, 1), PadMode::Constant(0.5))
            .into_data(),
        a.clone().pad((2, 1, 1, 2), PadMode::Reflect).into_data(),
        a.pad((3, 0, 2, 2), PadMode::Edge).into_data(),
    ]
}

fn one_hot_and_argwhere<B: Backend>(dev: &B::Device) -> Out {
    let labels = int::<B, 1>(dev, [6], 94, 0, 5);
    let m = bools::<B, 2>(dev, [3, 4], 95);
    vec![
        labels.clone().one_hot::<2>(5).into_data(),
        fr::<B, 1>(dev, [4], 96, 0.0, 3.0)
            .floor()
            .one_hot::<2>(3)
            .into_data(),
        // Data-dependent output shape: a sync point in the middle of the graph.
        m.clone().argwhere().into_data(),
        (fl::<B, 2>(dev, [3, 4], 97) * 2.0)
            .greater_elem(0.0)
            .argwhere()
            .into_data(),
        m.int().sum().into_data(),
    ]
}

fn int_and_bool_indexing<B: Backend>(dev: &B::Device) -> Out {
    let i = int::<B, 3>(dev, [2, 3, 4], 98, -9, 9);
    let p = bools::<B, 3>(dev, [2, 3, 4], 99);
    vec![
        i.clone().slice([0..2, 1..3]).into_data(),
        i.clone().permute([2, 0, 1]).into_data(),
        i.clone().flip([1]).into_data(),
        i.clone().reshape([6, 4]).into_data(),
        i.clone().repeat_dim(2, 2).into_data(),
        i.clone()
            .slice([0..1, 0..3, 0..1])
            .expand([2, 3, 4])
            .into_data(),
        i.clone()
            .select(2, int::<B, 1>(dev, [5], 100, 0, 4))
            .into_data(),
        p.clone().slice([1..2]).into_data(),
        p.clone().permute([1, 2, 0]).into_data(),
        p.clone().reshape([4, 6]).into_data(),
        p.clone().flip([0, 2]).into_data(),
        p.clone()
            .select(1, int::<B, 1>(dev, [4], 101, 0, 3))
            .into_data(),
        p.clone().repeat_dim(0, 2).into_data(),
        p.clone()
            .slice([0..1, 0..1, 0..4])
            .expand([2, 3, 4])
            .into_data(),
        p.mask_fill(bools::<B, 3>(dev, [2, 3, 4], 102), true)
            .into_data(),
        i.clone().transpose().into_data(),
        i.unsqueeze_dim::<4>(0).into_data(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Linear algebra.
// ---------------------------------------------------------------------------------------------

fn matmul_2d<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 2>(dev, [5, 7], 103);
    let b = fl::<B, 2>(dev, [7, 3], 104);
    let c = fl::<B, 2>(dev, [3, 4], 105);
    vec![
        a.clone().matmul(b.clone()).into_data(),
        a.matmul(b).tanh().matmul(c).into_data(),
        // Matrix-vector and vector-matrix shaped products.
        fl::<B, 2>(dev, [1, 6], 106)
            .matmul(fl::<B, 2>(dev, [6, 1], 107))
            .into_data(),
        fl::<B, 2>(dev, [6, 1], 108)
            .matmul(fl::<B, 2>(dev, [1, 6], 109))
            .into_data(),
    ]
}

fn matmul_batched_3d<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 3>(dev, [3, 4, 6], 110);
    let b = fl::<B, 3>(dev, [3, 6, 5], 111);
    let shared = fl::<B, 3>(dev, [1, 6, 2], 112);
    vec![
        a.clone().matmul(b.clone()).into_data(),
        a.clone().matmul(shared).into_data(),
        a.matmul(b).sum_dim(0).into_data(),
    ]
}

fn matmul_broadcast_4d<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 4>(dev, [2, 1, 4, 6], 113);
    let b = fl::<B, 4>(dev, [1, 3, 6, 5], 114);
    vec![a.matmul(b).into_data()]
}

fn matmul_transposed_operands<B: Backend>(dev: &B::Device) -> Out {
    let a = fl::<B, 2>(dev, [7, 5], 115);
    let b = fl::<B, 2>(dev, [3, 7], 116);
    let x = fl::<B, 3>(dev, [2, 6, 4], 117);
    vec![
        a.clone()
            .transpose()
            .matmul(b.clone().transpose())
            .into_data(),
        b.matmul(a).into_data(),
        x.clone().swap_dims(1, 2).matmul(x).into_data(),
    ]
}

fn linear_and_embedding<B: Backend>(dev: &B::Device) -> Out {
    let x = fl::<B, 3>(dev, [2, 5, 8], 118);
    let w = fl::<B, 2>(dev, [8, 6], 119);
    let bias = fl::<B, 1>(dev, [6], 120);
    let table = fl::<B, 2>(dev, [10, 4], 121);
    let tokens = int::<B, 2>(dev, [3, 5], 122, 0, 10);
    vec![
        module::linear(x.clone(), w.clone(), Some(bias)).into_data(),
        module::linear(x, w, None).into_data(),
        module::embedding(table, tokens).into_data(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Convolutions, pooling, interpolation.
// ---------------------------------------------------------------------------------------------

fn conv1d_ops<B: Backend>(dev: &B::Device) -> Out {
    let x = fl::<B, 3>(dev, [2, 4, 11], 123);
    let w = fl::<B, 3>(dev, [6, 4, 3], 124);
    let b = fl::<B, 1>(dev, [6], 125);
    let wg = fl::<B, 3>(dev, [4, 2, 3], 126);
    vec![
        module::conv1d(
            x.clone(),
            w.clone(),
            Some(b.clone()),
            ConvOptions::new([1], [1], [1], 1),
        )
        .into_data(),
        module::conv1d(x.clone(), w, Some(b), ConvOptions::new([2], [2], [2], 1)).into_data(),
        module::conv1d(x, wg, None, ConvOptions::new([1], [0], [1], 2)).into_data(),
    ]
}

fn conv2d_ops<B: Backend>(dev: &B::Device) -> Out {
    let x = fl::<B, 4>(dev, [2, 4, 9, 8], 127);
    let w = fl::<B, 4>(dev, [6, 4, 3, 3], 128);
    let b = fl::<B, 1>(dev, [6], 129);
    let wg = fl::<B, 4>(dev, [6, 2, 3, 2], 130);
    vec![
        module::conv2d(
            x.clone(),
            w.clone(),
            Some(b.clone()),
            ConvOptions::new([1, 1], [1, 1], [1, 1], 1),
        )
        .into_data(),
        module::conv2d(
            x.clone(),
            w,
            Some(b),
            ConvOptions::new([2, 1], [0, 2], [1, 2], 1),
        )
        .into_data(),
        // Grouped conv followed by compute.
        activation::relu(module::conv2d(
            x,
            wg,
            None,
            ConvOptions::new([1, 2], [1, 0], [1, 1], 2),
        ))
        .mean_dim(1)
        .into_data(),
    ]
}

fn conv3d_op<B: Backend>(dev: &B::Device) -> Out {
    let x = fl::<B, 5>(dev, [1, 2, 5, 6, 4], 131);
    let w = fl::<B, 5>(dev, [3, 2, 3, 3, 2], 132);
    let b = fl::<B, 1>(dev, [3], 133);
    vec![
        module::conv3d(
            x,
            w,
            Some(b),
            ConvOptions::new([1, 2, 1], [1, 1, 0], [1, 1, 1], 1),
        )
        .into_data(),
    ]
}

fn conv_transpose_ops<B: Backend>(dev: &B::Device) -> Out {
    let x2 = fl::<B, 4>(dev, [2, 4, 5, 4], 134);
    let w2 = fl::<B, 4>(dev, [4, 3, 3, 3], 135);
    let b2 = fl::<B, 1>(dev, [3], 136);
    let wg = fl::<B, 4>(dev, [4, 1, 2, 3], 137);
    let x1 = fl::<B, 3>(dev, [2, 3, 7], 138);
    let w1 = fl::<B, 3>(dev, [3, 2, 4], 139);
    vec![
        module::conv_transpose2d(
            x2.clone(),
            w2.clone(),
            Some(b2.clone()),
            ConvTransposeOptions::new([1, 1], [0, 0], [0, 0], [1, 1], 1),
        )
        .into_data(),
        module::conv_transpose2d(
            x2.clone(),
            w2,
            Some(b2),
            ConvTransposeOptions::new([2, 2], [1, 1], [1, 0], [1, 1], 1),
        )
        .into_data(),
        module::conv_transpose2d(
            x2,
            wg,
            None,
            ConvTransposeOptions::new([2, 1], [0, 1], [1, 0], [1, 2], 2),
        )
        .into_data(),
        module::conv_transpose1d(
            x1,
            w1,
            None,
            ConvTransposeOptions::new([2], [1], [1], [1], 1),
        )
        .into_data(),
    ]
}

fn unfold4d_op<B: Backend>(dev: &B::Device) -> Out {
    let x = fl::<B, 4>(dev, [2, 3, 6, 5], 140);
    vec![
        module::unfold4d(
            x.clone(),
            [3, 3],
            UnfoldOptions::new([1, 1], [1, 1], [1, 1]),
        )
        .into_data(),
        module::unfold4d(x, [2, 3], UnfoldOptions::new([2, 1], [0, 1], [1, 2])).into_data(),
    ]
}

fn pool2d_ops<B: Backend>(dev: &B::Device) -> Out {
    let x = fl::<B, 4>(dev, [2, 3, 9, 8], 141);
    let (pooled, indices) =
        module::max_pool2d_with_indices(x.clone(), [3, 3], [2, 2], [1, 1], [1, 1], false);
    vec![
        module::max_pool2d(x.clone(), [2, 2], [2, 2], [0, 0], [1, 1], false).into_data(),
        module::max_pool2d(x.clone(), [3, 2], [2, 1], [1, 1], [1, 2], true).into_data(),
        pooled.into_data(),
        indices.into_data(),
        module::avg_pool2d(x.clone(), [3, 3], [2, 2], [1, 1], true, false).into_data(),
        module::avg_pool2d(x.clone(), [3, 3], [2, 2], [1, 1], false, true).into_data(),
        module::adaptive_avg_pool2d(x.clone(), [4, 3]).into_data(),
        module::adaptive_avg_pool2d(x, [1, 1]).into_data(),
    ]
}

fn pool1d_ops<B: Backend>(dev: &B::Device) -> Out {
    let x = fl::<B, 3>(dev, [2, 3, 11], 142);
    vec![
        module::max_pool1d(x.clone(), 3, 2, 1, 1, false).into_data(),
        module::avg_pool1d(x.clone(), 3, 2, 1, false, false).into_data(),
        module::adaptive_avg_pool1d(x, 4).into_data(),
    ]
}

fn interpolate_ops<B: Backend>(dev: &B::Device) -> Out {
    let x = fl::<B, 4>(dev, [2, 3, 5, 6], 143);
    vec![
        module::interpolate(
            x.clone(),
            [10, 12],
            InterpolateOptions::new(InterpolateMode::Nearest),
        )
        .into_data(),
        module::interpolate(
            x.clone(),
            [7, 4],
            InterpolateOptions::new(InterpolateMode::Bilinear),
        )
        .into_data(),
        module::interpolate(
            x.clone(),
            [8, 9],
            InterpolateOptions::new(InterpolateMode::Bilinear).with_align_corners(false),
        )
        .into_data(),
        module::interpolate(x, [9, 7], InterpolateOptions::new(InterpolateMode::Bicubic))
            .into_data(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Activations.
// ---------------------------------------------------------------------------------------------

fn activations<B: Backend>(dev: &B::Device) -> Out {
    let x = fr::<B, 2>(dev, [4, 6], 144, -4.0, 4.0);
    vec![
        activation::relu(x.clone()).into_data(),
        activation::gelu(x.clone()).into_data(),
        activation::gelu_approximate(x.clone()).into_data(),
        activation::sigmoid(x.clone()).into_data(),
        activation::silu(x.clone()).into_data(),
        activation::tanh(x.clone()).into_data(),
        activation::leaky_relu(x.clone(), 0.05).into_data(),
        activation::softplus(x.clone(), 1.5).into_data(),
        activation::mish(x.clone()).into_data(),
        activation::log_sigmoid(x.clone()).into_data(),
        activation::hard_sigmoid(x.clone(), 0.2, 0.5).into_data(),
        activation::elu(x.clone(), 1.0).into_data(),
        activation::selu(x.clone()).into_data(),
        activation::glu(x, 1).into_data(),
    ]
}

fn softmax_family<B: Backend>(dev: &B::Device) -> Out {
    let x = fr::<B, 3>(dev, [2, 4, 7], 145, -5.0, 5.0);
    let targets = activation::softmax(fl::<B, 2>(dev, [4, 7], 146), 1);
    vec![
        activation::softmax(x.clone(), 2).into_data(),
        activation::softmax(x.clone(), 0).into_data(),
        activation::log_softmax(x.clone(), 2).into_data(),
        activation::log_softmax(x.clone(), 1).into_data(),
        activation::softmin(x.clone(), 2).into_data(),
        activation::quiet_softmax(x.clone(), 2).into_data(),
        loss::cross_entropy_with_logits(x.slice([0..1]).squeeze_dim::<2>(0), targets).into_data(),
    ]
}

fn attention_op<B: Backend>(dev: &B::Device) -> Out {
    let q = fl::<B, 4>(dev, [2, 2, 5, 8], 147);
    let k = fl::<B, 4>(dev, [2, 2, 6, 8], 148);
    let v = fl::<B, 4>(dev, [2, 2, 6, 8], 149);
    let mask = bools::<B, 4>(dev, [2, 2, 5, 6], 150);
    let causal = AttentionModuleOptions {
        is_causal: true,
        ..Default::default()
    };
    vec![
        module::attention(
            q.clone(),
            k.clone(),
            v.clone(),
            None,
            None,
            AttentionModuleOptions::default(),
        )
        .into_data(),
        module::attention(
            q.clone(),
            k.clone(),
            v.clone(),
            Some(mask),
            None,
            AttentionModuleOptions::default(),
        )
        .into_data(),
        module::attention(q.clone(), q.clone(), q, None, None, causal).into_data(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Casts.
// ---------------------------------------------------------------------------------------------

fn casts_between_kinds<B: Backend>(dev: &B::Device) -> Out {
    let x = fr::<B, 2>(dev, [4, 5], 151, -20.0, 20.0);
    let i = int::<B, 2>(dev, [4, 5], 152, -50, 50);
    let p = bools::<B, 2>(dev, [4, 5], 153);
    vec![
        // float -> int truncates toward zero.
        x.clone().int().into_data(),
        x.clone().round().int().into_data(),
        i.clone().float().into_data(),
        (i.clone().float() / 3.0).into_data(),
        p.clone().int().into_data(),
        p.clone().float().into_data(),
        i.clone().bool().into_data(),
        x.clone().bool().into_data(),
        // Round trips inside one graph.
        x.int().float().into_data(),
        (i.float() * 2.5).int().into_data(),
        (p.int() + 1).into_data(),
    ]
}

fn cast_float_f64<B: Backend>(dev: &B::Device) -> Out {
    let x = fl::<B, 2>(dev, [4, 5], 154);
    let wide = x.clone().cast(FloatDType::F64);
    assert_eq!(wide.dtype(), DType::F64);
    let computed = (wide.clone().exp() * 3.0).sum_dim(1);
    assert_eq!(computed.dtype(), DType::F64);
    vec![
        wide.clone().into_data(),
        computed.clone().into_data(),
        computed.cast(FloatDType::F32).into_data(),
        (wide.cast(FloatDType::F32) - x).into_data(),
    ]
}

fn cast_int_dtypes<B: Backend>(dev: &B::Device) -> Out {
    // Casts that produce ints of a non-default dtype from floats, and floats from ints.
    let i = int::<B, 2>(dev, [3, 6], 155, -100, 100);
    let x = fl::<B, 2>(dev, [2, 3], 156).mul_scalar(50.0);
    let narrow = x.clone().cast(IntDType::I16);
    assert_eq!(narrow.dtype(), DType::I16);
    vec![
        narrow.clone().into_data(),
        (narrow.clone() + narrow.clone()).into_data(),
        narrow.float().into_data(),
        x.cast(IntDType::I64).into_data(),
        i.clone().cast(FloatDType::F32).into_data(),
        i.cast(FloatDType::F64).into_data(),
    ]
}

fn cast_int_to_int<B: Backend>(dev: &B::Device) -> Out {
    let i = int::<B, 2>(dev, [3, 6], 183, -60, 60); // i8 + i8 must not overflow
    let narrow = i.clone().cast(IntDType::I8);
    assert_eq!(narrow.dtype(), DType::I8);
    let wide = i.clone().cast(IntDType::I64);
    vec![
        narrow.clone().into_data(),
        (narrow.clone() + narrow.clone()).into_data(),
        narrow.cast(IntDType::I32).into_data(),
        wide.clone().into_data(),
        (wide * 1000).into_data(),
        i.cast(IntDType::I16).into_data(),
    ]
}

/// Unsigned ints: uploaded, cast to, computed on and read back in their own dtype.
fn unsigned_ints<B: Backend>(dev: &B::Device) -> Out {
    let u = Tensor::<B, 2, Int>::from_data(
        TensorData::new(vec![0u32, 1, 7, 200, 65535, 3], [2, 3]),
        (dev, DType::U32),
    );
    assert_eq!(u.dtype(), DType::U32);
    let i = int::<B, 2>(dev, [3, 4], 191, 0, 100); // u8 + u8 must not overflow
    let small = i.cast(IntDType::U8);
    assert_eq!(small.dtype(), DType::U8);
    vec![
        u.clone().into_data(),
        (u.clone() * 2 + 1).into_data(),
        u.sum_dim(1).into_data(),
        small.clone().into_data(),
        (small.clone() + small).into_data(),
    ]
}

/// f32 -> half, compute in half, read. The compiled side reads the half tensors back as f32
/// (burn-router `float_into_data` converts to the default float element): `compare` converts
/// both sides to f32 before comparing, with the half tolerance.
fn half_case<B: Backend>(dev: &B::Device, dtype: FloatDType, expected: DType) -> Out {
    assert!(
        !B::dtype_usage(dev, expected).is_empty(),
        "backend must support {expected:?}"
    );
    let x = fl::<B, 2>(dev, [4, 6], 157);
    let w = fl::<B, 2>(dev, [6, 3], 158);
    let h = x.clone().cast(dtype);
    assert_eq!(h.dtype(), expected);
    let y = (h.clone() * 2.0 + 0.5).exp();
    assert_eq!(y.dtype(), expected);
    let mm = h.clone().matmul(w.cast(dtype));
    let sm = activation::softmax(mm.clone(), 1);
    assert_eq!(sm.dtype(), expected);
    vec![
        h.clone().into_data(),
        y.clone().into_data(),
        mm.into_data(),
        // Half results stay half here, so they are compared with the half tolerance. (Fused
        // kernels compute half values in f32 and round once, eager rounds after every op.)
        y.clone().sum_dim(1).into_data(),
        sm.into_data(),
        // A cast to f32 of half values, read back as half: its value has half precision.
        y.sum_dim(1).cast(FloatDType::F32).cast(dtype).into_data(),
        (h.cast(FloatDType::F32) - x).into_data(),
    ]
}

/// The softmax of half inputs, as eager `Flex` computes it: one fused kernel (f32 accumulation,
/// one rounding to half). `Compiled<Flex>` runs its own C row kernel, also one rounding; the
/// two differ in the last f32 bits (`e / Σ` against `e · (1/Σ)`), so by at most one half ULP:
/// compared at the half tolerance. (`cpu_kernels::half_softmax_rounds_once` checks the one
/// rounding against an f64 reference.)
fn half_softmax<B: Backend>(dev: &B::Device) -> Out {
    let x = fr::<B, 2>(dev, [4, 9], 184, -2.0, 2.0);
    let mut out = Vec::new();
    for dtype in [FloatDType::BF16, FloatDType::F16] {
        out.push(activation::softmax(x.clone().cast(dtype), 1).into_data());
    }
    out
}

fn cast_float_f16<B: Backend>(dev: &B::Device) -> Out {
    half_case::<B>(dev, FloatDType::F16, DType::F16)
}

fn cast_float_bf16<B: Backend>(dev: &B::Device) -> Out {
    half_case::<B>(dev, FloatDType::BF16, DType::BF16)
}

// ---------------------------------------------------------------------------------------------
// Random ops with seed semantics.
//
// The inner backends keep their RNG in a process-wide static (Compiled<Flex> and Flex share
// Flex's), so a random case holds `rng_lock` from its seed to its last read: other tests of
// this module run in parallel threads and would otherwise reseed in between.
// ---------------------------------------------------------------------------------------------

static RNG: Mutex<()> = Mutex::new(());

fn rng_lock() -> MutexGuard<'static, ()> {
    RNG.lock().unwrap_or_else(|e| e.into_inner())
}

fn random_distributions<B: Backend>(dev: &B::Device) -> Out {
    let _guard = rng_lock();
    B::seed(dev, 2024);
    let a = Tensor::<B, 2>::random([4, 5], Distribution::Default, dev);
    let b = Tensor::<B, 2>::random([3, 3], Distribution::Uniform(-2.0, 3.0), dev);
    let c = Tensor::<B, 2>::random([5, 4], Distribution::Normal(1.0, 0.5), dev);
    let d = Tensor::<B, 2>::random([4, 6], Distribution::Bernoulli(0.3), dev);
    // Used in a computation, not only read.
    let e = Tensor::<B, 1>::random([7], Distribution::Default, dev) * 10.0;
    vec![
        a.into_data(),
        b.into_data(),
        c.into_data(),
        d.into_data(),
        e.into_data(),
    ]
}

fn random_interleaved_with_drops_and_reseeds<B: Backend>(dev: &B::Device) -> Out {
    let _guard = rng_lock();
    B::seed(dev, 11);
    let x = fl::<B, 2>(dev, [3, 3], 159);
    let a = Tensor::<B, 2>::random([3, 3], Distribution::Default, dev);
    // Drawn then dropped unused: the draw still advances the generator, as in eager.
    let skipped = Tensor::<B, 2>::random([8, 8], Distribution::Normal(0.0, 1.0), dev);
    drop(skipped);
    let unused = (x.clone() + a.clone()).exp(); // dead computation between draws
    drop(unused);
    let b = Tensor::<B, 2>::random([3, 3], Distribution::Default, dev) + x.clone();
    // A host read between draws: a graph break while the generator state matters.
    let mid = b.clone().sum().into_data();
    let c = Tensor::<B, 2>::random([2, 4], Distribution::Uniform(0.0, 5.0), dev);
    // Reseed mid-stream: later draws restart from the new seed.
    B::seed(dev, 12);
    let d = Tensor::<B, 2>::random([3, 3], Distribution::Default, dev);
    B::seed(dev, 11);
    let e = Tensor::<B, 2>::random([3, 3], Distribution::Default, dev);
    vec![
        a.clone().into_data(),
        b.into_data(),
        mid,
        c.into_data(),
        d.into_data(),
        e.clone().into_data(),
        // Same seed, same first draw.
        a.equal(e).all().into_data(),
    ]
}

fn random_int_and_like<B: Backend>(dev: &B::Device) -> Out {
    let _guard = rng_lock();
    B::seed(dev, 99);
    let i = Tensor::<B, 2, Int>::random([4, 4], Distribution::Uniform(0.0, 10.0), dev);
    let x = fl::<B, 2>(dev, [3, 5], 160);
    let like = x.random_like(Distribution::Normal(0.0, 2.0));
    let cats = activation::softmax(fl::<B, 2>(dev, [3, 6], 161), 1).categorical(4);
    vec![i.into_data(), like.into_data(), cats.into_data()]
}

// ---------------------------------------------------------------------------------------------
// In-place patterns: a tensor consumed by its last use while a clone stays alive.
// ---------------------------------------------------------------------------------------------

fn inplace_loop_with_live_clone<B: Backend>(dev: &B::Device) -> Out {
    let x0 = fl::<B, 2>(dev, [4, 5], 162);
    let keep = x0.clone();
    let mut x = x0;
    let mut snapshots = Vec::new();
    for step in 0..6 {
        x = x + 1.0;
        x = x * 0.5;
        if step % 2 == 0 {
            snapshots.push(x.clone());
        }
    }
    let mut out = vec![x.into_data(), keep.clone().into_data()];
    out.extend(snapshots.into_iter().map(|t| t.into_data()));
    // `keep` is read again after everything above: still the input.
    out.push(keep.into_data());
    out
}

fn inplace_ops_keep_live_clones<B: Backend>(dev: &B::Device) -> Out {
    let base = fl::<B, 2>(dev, [4, 6], 163);
    let (k1, k2, k3, k4, k5, k6) = (
        base.clone(),
        base.clone(),
        base.clone(),
        base.clone(),
        base.clone(),
        base.clone(),
    );
    // Each of these ops could run in place on a uniquely-owned input; `base` is shared.
    let assigned = k1.slice_assign([1..3, 0..2], fl::<B, 2>(dev, [2, 2], 164));
    let filled = k2.mask_fill(bools::<B, 2>(dev, [4, 6], 165), 0.0);
    let scattered = k3.scatter(
        1,
        int::<B, 2>(dev, [4, 2], 166, 0, 6),
        fl::<B, 2>(dev, [4, 2], 167),
        IndexingUpdateOp::Add,
    );
    let selected = k4.select_assign(
        0,
        int::<B, 1>(dev, [2], 168, 0, 4),
        fl::<B, 2>(dev, [2, 6], 169),
        IndexingUpdateOp::Add,
    );
    let mut y = k5;
    y.inplace(|t| t.exp());
    let neg = -k6;
    vec![
        assigned.into_data(),
        filled.into_data(),
        scattered.into_data(),
        selected.into_data(),
        y.into_data(),
        neg.into_data(),
        base.into_data(),
    ]
}

fn inplace_across_breaks<B: Backend>(dev: &B::Device) -> Out {
    // The clone is made in one graph, the in-place candidate consumed in the next one.
    let x = fl::<B, 2>(dev, [3, 4], 170);
    let keep = x.clone();
    let first = x.clone().into_data(); // break
    let mut y = x;
    let mut reads = vec![first];
    for _ in 0..3 {
        y = y * 2.0 - 1.0;
        reads.push(y.clone().into_data()); // break every iteration
    }
    y = y.exp();
    reads.push(y.into_data());
    reads.push(keep.clone().into_data());
    reads.push((keep + 1.0).into_data());
    reads
}

fn inplace_int_and_bool<B: Backend>(dev: &B::Device) -> Out {
    let i0 = int::<B, 2>(dev, [3, 4], 171, -9, 9);
    let keep_i = i0.clone();
    let mut i = i0;
    for _ in 0..4 {
        i = i + 1;
        i = i * 2;
    }
    let p0 = bools::<B, 2>(dev, [3, 4], 172);
    let keep_p = p0.clone();
    let mut p = p0;
    for _ in 0..3 {
        p = p.bool_not();
    }
    vec![
        i.into_data(),
        keep_i.into_data(),
        p.into_data(),
        keep_p.into_data(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Empty and zero-size tensors.
// ---------------------------------------------------------------------------------------------

fn empty_float<B: Backend>(dev: &B::Device) -> Out {
    let e = Tensor::<B, 2>::from_data(TensorData::new(Vec::<f32>::new(), [0, 3]), dev);
    let z = Tensor::<B, 2>::zeros([0, 3], dev);
    let x = fl::<B, 2>(dev, [2, 3], 173);
    vec![
        (e.clone() + 1.0).into_data(),
        (e.clone() + z.clone()).into_data(),
        e.clone().exp().into_data(),
        // Sums over an empty dimension are zero.
        e.clone().sum().into_data(),
        e.clone().sum_dim(0).into_data(),
        e.clone().sum_dim(1).into_data(),
        Tensor::cat(vec![e.clone(), x.clone()], 0).into_data(),
        Tensor::cat(vec![x.clone(), z.clone(), x.clone()], 0).into_data(),
        e.clone().unsqueeze_dim::<3>(1).into_data(),
        e.clone().reshape([0, 1, 3]).swap_dims(0, 2).into_data(),
        e.clone().transpose().into_data(),
        x.clone().slice([1..1, 0..3]).into_data(),
        (x.clone().slice([0..2, 2..2]) * 2.0).into_data(),
        x.slice([0..0]).sum_dim(0).into_data(),
        e.clone()
            .mask_fill(Tensor::<B, 2, Bool>::empty([0, 3], dev), 1.0)
            .into_data(),
        dims_data(e.dims()),
    ]
}

fn empty_int_and_bool<B: Backend>(dev: &B::Device) -> Out {
    let i = Tensor::<B, 2, Int>::from_data(TensorData::new(Vec::<i64>::new(), [0, 3]), dev);
    let p = Tensor::<B, 2, Bool>::from_data(TensorData::new(Vec::<bool>::new(), [4, 0]), dev);
    vec![
        (i.clone() * 2).into_data(),
        i.clone().sum().into_data(),
        i.clone().sum_dim(0).into_data(),
        i.float().into_data(),
        p.clone().bool_not().into_data(),
        p.clone().any().into_data(),
        p.clone().all().into_data(),
        p.int().into_data(),
        Tensor::<B, 1, Int>::arange(5..5, dev).into_data(),
    ]
}

fn empty_matmul<B: Backend>(dev: &B::Device) -> Out {
    vec![
        // [0, 3] x [3, 4] = [0, 4]
        Tensor::<B, 2>::zeros([0, 3], dev)
            .matmul(fl::<B, 2>(dev, [3, 4], 174))
            .into_data(),
        // [2, 0] x [0, 4] = zeros [2, 4]
        Tensor::<B, 2>::zeros([2, 0], dev)
            .matmul(Tensor::<B, 2>::zeros([0, 4], dev))
            .into_data(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Creation ops.
// ---------------------------------------------------------------------------------------------

fn creation_float<B: Backend>(dev: &B::Device) -> Out {
    let x = fl::<B, 2>(dev, [3, 4], 175);
    let empty = Tensor::<B, 3>::empty([2, 3, 4], dev);
    vec![
        Tensor::<B, 2>::zeros([3, 4], dev).into_data(),
        Tensor::<B, 3>::ones([2, 1, 3], dev).into_data(),
        Tensor::<B, 2>::full([2, 5], -1.25, dev).into_data(),
        Tensor::<B, 2>::from_data(float_data(&[3, 3], 176, -3.0, 3.0), dev).into_data(),
        Tensor::<B, 1>::from_floats([1.0, -2.5, 3.25], dev).into_data(),
        Tensor::<B, 2>::eye(4, dev).into_data(),
        x.zeros_like().into_data(),
        x.ones_like().into_data(),
        x.full_like(2.5).into_data(),
        // `empty` has unspecified values: only its shape is compared.
        dims_data(empty.dims()),
    ]
}

fn creation_int<B: Backend>(dev: &B::Device) -> Out {
    let i = int::<B, 2>(dev, [2, 3], 177, -9, 9);
    vec![
        Tensor::<B, 1, Int>::arange(0..10, dev).into_data(),
        Tensor::<B, 1, Int>::arange(-4..7, dev).into_data(),
        Tensor::<B, 1, Int>::arange_step(1..20, 3, dev).into_data(),
        Tensor::<B, 2, Int>::zeros([2, 3], dev).into_data(),
        Tensor::<B, 2, Int>::ones([3, 2], dev).into_data(),
        Tensor::<B, 2, Int>::full([2, 2], 7, dev).into_data(),
        Tensor::<B, 2, Int>::from_data(int_data(&[3, 4], 178, -1000, 1000), dev).into_data(),
        Tensor::<B, 1, Int>::from_ints([4, -5, 6], dev).into_data(),
        i.zeros_like().into_data(),
        i.full_like(-3).into_data(),
        (Tensor::<B, 1, Int>::arange(0..6, dev).reshape([2, 3]) * i).into_data(),
    ]
}

fn creation_bool<B: Backend>(dev: &B::Device) -> Out {
    vec![
        Tensor::<B, 2, Bool>::from_data(bool_data(&[3, 4], 179), dev).into_data(),
        Tensor::<B, 2, Bool>::from_bool(bool_data(&[2, 2], 180), dev).into_data(),
        Tensor::<B, 2, Bool>::full([2, 3], true, dev).into_data(),
        Tensor::<B, 2, Bool>::zeros([2, 3], dev).into_data(),
        Tensor::<B, 2, Bool>::ones([3, 2], dev).into_data(),
        Tensor::<B, 2, Bool>::tril_mask([4, 5], 0, dev).into_data(),
        Tensor::<B, 2, Bool>::triu_mask([4, 5], 1, dev).into_data(),
        Tensor::<B, 2, Bool>::diag_mask([4, 4], 0, dev).into_data(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Breaks inside a computation: host reads feed back into the graph.
// ---------------------------------------------------------------------------------------------

fn host_reads_mid_computation<B: Backend>(dev: &B::Device) -> Out {
    let x = fl::<B, 2>(dev, [4, 4], 181);
    let w = fl::<B, 2>(dev, [4, 4], 182);
    let h = x.clone().matmul(w.clone()).tanh();
    let s: f32 = h.clone().sum().into_scalar().elem();
    let y = h.clone() * s + x.clone();
    let m: f32 = y.clone().max().into_scalar().elem();
    let z = (y.clone() - m).exp();
    let n = z.clone().argmax(1);
    let picked = z.clone().gather(1, n.clone().reshape([4, 1]));
    vec![
        TensorData::new(vec![s, m], [2]),
        h.into_data(),
        y.into_data(),
        z.into_data(),
        n.into_data(),
        picked.into_data(),
        Tensor::<B, 2>::from_data(x.to_data(), dev)
            .matmul(w)
            .into_data(),
    ]
}
