//! The ops burn-router leaves out, on `Compiled<Flex>`: reads in the tensor's
//! own dtype, quantized tensors, rfft/irfft, argwhere/nonzero and sorts. Every value is compared
//! with eager `Flex` on the same inputs, and every eager op's break is checked in `explain`.

use burn::tensor::quantization::{
    Calibration, QTensorPrimitive, QuantLevel, QuantScheme, QuantStore, QuantValue,
    compute_q_params, compute_range,
};
use burn::tensor::signal::{irfft, rfft};
use burn::tensor::{Bool, DType, Int, Tensor, TensorData, Tolerance, bf16, f16};
use burn_compile::{BreakReason, Compiled, explain};
use burn_flex::Flex;

type C = Compiled<Flex>;

use crate::support;

use support::matrix as data;

fn scheme() -> QuantScheme {
    QuantScheme::default()
        .with_value(QuantValue::Q8S)
        .with_store(QuantStore::Native)
}

/// Every test here checks the breaks of its graphs, and most run eager ops, which close the
/// pending graphs of every thread on the device (an eager op may read any of them). Another
/// test's eager op would cut this test's graph in two (both reported to its `explain`, with
/// one break more than it counts): the tests of this file run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static DEVICE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    DEVICE.lock().unwrap_or_else(|e| e.into_inner())
}

fn reasons(report: &burn_compile::Explanation) -> Vec<BreakReason> {
    report.break_reasons.iter().map(|b| b.reason).collect()
}

#[test]
fn a_bf16_tensor_reads_back_as_bf16() {
    crate::own_process!(a_bf16_tensor_reads_back_as_bf16);
    let _serial = serial();
    let device = Default::default();
    let input = data([3, 4], 1);
    let compiled = (Tensor::<C, 2>::from_data(input.clone(), (&device, DType::BF16)) * 2.0)
        .exp()
        .into_data();
    let eager = (Tensor::<Flex, 2>::from_data(input, (&device, DType::BF16)) * 2.0)
        .exp()
        .into_data();
    assert_eq!(compiled.dtype, DType::BF16);
    assert_eq!(eager.dtype, DType::BF16);
    compiled.assert_eq(&eager, true);
    let _: Vec<bf16> = compiled.to_vec().unwrap();
}

#[test]
fn an_f16_tensor_and_an_int_tensor_keep_their_dtype() {
    crate::own_process!(an_f16_tensor_and_an_int_tensor_keep_their_dtype);
    let _serial = serial();
    let device = Default::default();
    let input = data([2, 5], 2);
    let compiled = Tensor::<C, 2>::from_data(input.clone(), (&device, DType::F16)).abs();
    let eager = Tensor::<Flex, 2>::from_data(input, (&device, DType::F16)).abs();
    let compiled = compiled.into_data();
    assert_eq!(compiled.dtype, DType::F16);
    compiled.assert_eq(&eager.into_data(), true);
    let _: Vec<f16> = compiled.to_vec().unwrap();

    let ints = TensorData::new(vec![3i32, -1, 4, 1, -5, 9], [2, 3]);
    let compiled =
        (Tensor::<C, 2, Int>::from_data(ints.clone(), (&device, DType::I32)) * 2).into_data();
    let eager = (Tensor::<Flex, 2, Int>::from_data(ints, (&device, DType::I32)) * 2).into_data();
    assert_eq!(compiled.dtype, DType::I32);
    compiled.assert_eq(&eager, true);
}

/// `B`'s default quantization scheme, as a user reaches it.
fn default_scheme<B: burn::tensor::backend::Backend>() -> QuantScheme {
    <B::QuantizedTensorPrimitive as QTensorPrimitive>::default_scheme()
}

/// Quantized data made by `B` with its own default scheme (symmetric int8, per tensor and per
/// block of 4), read back after a `from_data` on `B` and on `Compiled<B>`: the compiled backend
/// reports `B`'s default scheme, quantizes with it as `B` does, and returns `B`'s data, scheme
/// and bytes alike (a regression: it reported Burn's generic default, values packed in `u32`).
fn quantized_round_trip_keeps_the_scheme<B: burn_ir::BackendIr>() {
    let device = Default::default();
    for level in [QuantLevel::Tensor, QuantLevel::block([4])] {
        let scheme = default_scheme::<B>()
            .with_value(QuantValue::Q8S)
            .with_level(level);
        let made = Tensor::<B, 2>::from_data(data([4, 8], 6), &device)
            .quantize_dynamic(&scheme)
            .into_data();
        // Quantized on the compiled backend with its own default scheme: the same data.
        let compiled_scheme = default_scheme::<Compiled<B>>()
            .with_value(QuantValue::Q8S)
            .with_level(level);
        let compiled = Tensor::<Compiled<B>, 2>::from_data(data([4, 8], 6), &device)
            .quantize_dynamic(&compiled_scheme)
            .into_data();
        assert_eq!(compiled.dtype, made.dtype, "{level:?}");
        assert_eq!(compiled.as_bytes(), made.as_bytes(), "{level:?}");
        let eager = Tensor::<B, 2>::from_data(made.clone(), &device).into_data();
        let compiled = Tensor::<Compiled<B>, 2>::from_data(made.clone(), &device).into_data();
        assert_eq!(compiled.dtype, eager.dtype, "{level:?}");
        assert_eq!(compiled.shape, eager.shape, "{level:?}");
        assert_eq!(compiled.as_bytes(), eager.as_bytes(), "{level:?}");
        // And dequantized, through a captured op.
        let eager =
            (Tensor::<B, 2>::from_data(made.clone(), &device).dequantize() * 2.0).into_data();
        let compiled =
            (Tensor::<Compiled<B>, 2>::from_data(made, &device).dequantize() * 2.0).into_data();
        compiled.assert_eq(&eager, true);
    }
    assert_eq!(default_scheme::<Compiled<B>>(), default_scheme::<B>());
}

#[test]
fn quantized_data_keeps_the_inner_backends_scheme_on_flex() {
    crate::own_process!(quantized_data_keeps_the_inner_backends_scheme_on_flex);
    let _serial = serial();
    quantized_round_trip_keeps_the_scheme::<Flex>();
}

#[test]
fn quantized_data_keeps_the_inner_backends_scheme_on_ndarray() {
    crate::own_process!(quantized_data_keeps_the_inner_backends_scheme_on_ndarray);
    let _serial = serial();
    quantized_round_trip_keeps_the_scheme::<burn_ndarray::NdArray>();
}

#[test]
fn quantize_dequantize_round_trip_matches_eager() {
    crate::own_process!(quantize_dequantize_round_trip_matches_eager);
    let _serial = serial();
    let device = Default::default();
    let input = data([4, 8], 3);
    let (compiled, report) = explain(|| {
        let x = Tensor::<C, 2>::from_data(input.clone(), &device) * 3.0;
        let q = x.quantize_dynamic(&scheme());
        let back = q.clone().dequantize();
        (q.into_data(), (back + 1.0).into_data())
    });
    let x = Tensor::<Flex, 2>::from_data(input.clone(), &device) * 3.0;
    let q = x.quantize_dynamic(&scheme());
    let back = q.clone().dequantize();
    let eager = (q.into_data(), (back + 1.0).into_data());

    assert!(
        matches!(compiled.0.dtype, DType::QFloat(_)),
        "{:?}",
        compiled.0.dtype
    );
    compiled.0.assert_eq(&eager.0, true);
    compiled.1.assert_eq(&eager.1, true);
    assert_eq!(
        reasons(&report),
        vec![BreakReason::Unsupported, BreakReason::HostRead],
        "{report}"
    );
    assert_eq!(
        report.break_reasons[0].detail.as_deref(),
        Some("quantize_dynamic")
    );
}

#[test]
fn quantized_ops_match_eager() {
    crate::own_process!(quantized_ops_match_eager);
    let _serial = serial();
    let device = Default::default();
    let (a, b) = (data([4, 6], 4), data([6, 3], 5));
    let indices = TensorData::new(vec![2i64, 0, 3], [3]);
    fn run<B: burn::tensor::backend::Backend>(
        a: TensorData,
        b: TensorData,
        indices: TensorData,
        device: &B::Device,
    ) -> Vec<TensorData> {
        let a = Tensor::<B, 2>::from_data(a, device);
        let b = Tensor::<B, 2>::from_data(b, device);
        let range = compute_range(&scheme(), &a, &Calibration::MinMax);
        let qparams = compute_q_params(&scheme(), range);
        let qa = a.quantize(&scheme(), qparams);
        let qb = b.quantize_dynamic(&scheme());
        let indices = Tensor::<B, 1, Int>::from_data(indices, device);
        vec![
            qa.clone().reshape([6, 4]).into_data(),
            qa.clone().transpose().dequantize().into_data(),
            qa.clone().slice([1..3, 0..4]).dequantize().into_data(),
            qa.clone().select(0, indices).dequantize().into_data(),
            qa.clone().matmul(qb).into_data(),
            (qa.clone() + qa.clone()).into_data(),
            qa.argmax(1).into_data(),
        ]
    }
    let compiled = run::<C>(a.clone(), b.clone(), indices.clone(), &device);
    let eager = run::<Flex>(a, b, indices, &device);
    for (i, (c, e)) in compiled.iter().zip(&eager).enumerate() {
        assert_eq!(c.dtype, e.dtype, "output {i}");
        c.assert_approx_eq::<f32>(e, Tolerance::default());
    }
}

#[test]
fn quantized_data_uploads_and_reads_back() {
    crate::own_process!(quantized_data_uploads_and_reads_back);
    let _serial = serial();
    let device = Default::default();
    let q = Tensor::<Flex, 2>::from_data(data([3, 4], 6), &device)
        .quantize_dynamic(&scheme())
        .into_data();
    let compiled = Tensor::<C, 2>::from_data(q.clone(), &device);
    let dequantized = compiled.clone().dequantize().into_data();
    compiled.into_data().assert_eq(&q, true);
    let eager = Tensor::<Flex, 2>::from_data(q, &device)
        .dequantize()
        .into_data();
    dequantized.assert_eq(&eager, true);
}

#[test]
fn rfft_and_irfft_match_eager() {
    crate::own_process!(rfft_and_irfft_match_eager);
    let _serial = serial();
    let device = Default::default();
    let input = data([2, 8], 7);
    let (compiled, report) = explain(|| {
        let x = Tensor::<C, 2>::from_data(input.clone(), &device) * 2.0;
        let (re, im) = rfft(x, 1, None);
        let back = irfft(re.clone() + 0.0, im.clone(), 1, None);
        (re.into_data(), im.into_data(), back.into_data())
    });
    let x = Tensor::<Flex, 2>::from_data(input.clone(), &device) * 2.0;
    let (re, im) = rfft(x, 1, None);
    let back = irfft(re.clone() + 0.0, im.clone(), 1, None);
    let eager = (re.into_data(), im.into_data(), back.into_data());

    compiled.0.assert_eq(&eager.0, true);
    compiled.1.assert_eq(&eager.1, true);
    compiled.2.assert_eq(&eager.2, true);
    // The round trip gives the signal back.
    compiled.2.assert_approx_eq::<f32>(
        &(Tensor::<Flex, 2>::from_data(input, &device) * 2.0).into_data(),
        Tolerance::default(),
    );
    let breaks = reasons(&report);
    assert_eq!(
        &breaks[..2],
        &[BreakReason::Unsupported, BreakReason::Unsupported],
        "{report}"
    );
    let details: Vec<_> = report.break_reasons[..2]
        .iter()
        .map(|b| b.detail.as_deref())
        .collect();
    assert_eq!(details, vec![Some("rfft"), Some("irfft")], "{report}");
    // The break points at the user's call, not at the backend.
    let location = report.break_reasons[0].location.as_deref().unwrap_or("");
    assert!(
        location.contains("backend_gaps.rs"),
        "location was {location:?}"
    );
}

#[test]
fn argwhere_and_nonzero_are_data_dependent_shape_breaks() {
    crate::own_process!(argwhere_and_nonzero_are_data_dependent_shape_breaks);
    let _serial = serial();
    let device = Default::default();
    let input = data([4, 5], 8);
    let (compiled, report) = explain(|| {
        let mask = Tensor::<C, 2>::from_data(input.clone(), &device).greater_elem(0.2);
        let indices = mask.clone().argwhere();
        let count = indices.dims()[0];
        let nonzero: Vec<TensorData> = mask.nonzero().into_iter().map(|t| t.into_data()).collect();
        (indices.into_data(), count, nonzero)
    });
    let mask: Tensor<Flex, 2, Bool> =
        Tensor::<Flex, 2>::from_data(input.clone(), &device).greater_elem(0.2);
    let indices = mask.clone().argwhere();
    let nonzero: Vec<TensorData> = mask.nonzero().into_iter().map(|t| t.into_data()).collect();

    assert_eq!(compiled.1, indices.dims()[0]);
    assert!(compiled.1 > 0);
    compiled.0.assert_eq(&indices.into_data(), true);
    assert_eq!(compiled.2.len(), nonzero.len());
    for (c, e) in compiled.2.iter().zip(&nonzero) {
        c.assert_eq(e, true);
    }
    // The graph with `greater_elem` ends at argwhere; nonzero's own argwhere has nothing
    // pending before it.
    assert_eq!(
        reasons(&report)[0],
        BreakReason::DataDependentShape,
        "{report}"
    );
    assert_eq!(
        report.break_reasons[0].detail.as_deref(),
        Some("bool_argwhere")
    );
}

#[test]
fn sorts_run_on_the_inner_backend() {
    crate::own_process!(sorts_run_on_the_inner_backend);
    let _serial = serial();
    let device = Default::default();
    let input = data([3, 6], 9);
    let ints = TensorData::new(vec![5i64, -2, 7, 0, 3, 3], [2, 3]);
    fn run<B: burn::tensor::backend::Backend>(
        input: TensorData,
        ints: TensorData,
        device: &B::Device,
    ) -> Vec<TensorData> {
        let x = Tensor::<B, 2>::from_data(input, device) * 2.0;
        let i = Tensor::<B, 2, Int>::from_data(ints, device) + 1;
        let (values, indices) = x.clone().sort_with_indices(1);
        vec![
            x.clone().sort(1).into_data(),
            x.clone().sort_descending(0).into_data(),
            x.argsort(1).into_data(),
            values.into_data(),
            indices.into_data(),
            i.clone().sort(1).into_data(),
            i.argsort_descending(1).into_data(),
        ]
    }
    let (compiled, report) = explain(|| run::<C>(input.clone(), ints.clone(), &device));
    let eager = run::<Flex>(input, ints, &device);
    for (i, (c, e)) in compiled.iter().zip(&eager).enumerate() {
        assert_eq!(c.dtype, e.dtype, "output {i}");
        c.assert_eq(e, true);
    }
    assert_eq!(reasons(&report)[0], BreakReason::Unsupported, "{report}");
}

#[test]
fn int_to_int_casts_are_captured() {
    crate::own_process!(int_to_int_casts_are_captured);
    let _serial = serial();
    // burn-router records the cast but its runner cannot execute it (`unreachable!`); our
    // dispatch runs the inner backend's `int_cast`, inside the graph.
    use burn::tensor::IntDType;
    let device = Default::default();
    let ints = TensorData::new(vec![5i32, -2, 7, 0, 100, -100], [2, 3]);
    fn run<B: burn::tensor::backend::Backend>(
        ints: TensorData,
        device: &B::Device,
    ) -> Vec<TensorData> {
        let i = Tensor::<B, 2, Int>::from_data(ints, (device, DType::I32)) + 1;
        let narrow = i.clone().cast(IntDType::I8);
        let wide = i.clone().cast(IntDType::I64);
        vec![
            narrow.clone().into_data(),
            (narrow.clone() + narrow.clone()).into_data(),
            narrow.cast(IntDType::I32).into_data(),
            (wide * 1000).into_data(),
            i.cast(IntDType::I32).into_data(),
        ]
    }
    let (compiled, report) = explain(|| run::<C>(ints.clone(), &device));
    let eager = run::<Flex>(ints, &device);
    for (i, (c, e)) in compiled.iter().zip(&eager).enumerate() {
        assert_eq!(c.dtype, e.dtype, "output {i}");
        c.assert_eq(e, true);
    }
    // The graphs end at reads only: four of the five (the last reads `i`, computed already).
    assert!(
        reasons(&report).iter().all(|r| *r == BreakReason::HostRead),
        "{report}"
    );
    assert_eq!(report.graph_break_count, 4, "{report}");
}
