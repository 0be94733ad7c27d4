//! Shapes, under the default automatic dynamic shapes: a family's first plan is specialized on
//! every size, guarded by the exact graph key. A graph whose sizes changed compiles again, as a
//! *recompile* of its family (the same program over other sizes), which `explain` and the
//! `burn_compile::recompiles` log describe by tensor and dimension; that recompile makes the
//! sizes that changed symbolic, so later values of them reuse its plan with no compile.
//! Declared dimensions (`mark_dynamic`) are symbolic from the first compile and range-checked.
//! Every result is compared with eager Flex on the same inputs and weights.
//!
//! The recompile limit, its eager fallback, the fail-on-recompile stance and the other shape
//! modes change process-wide or device-wide state: they are in `recompile_limit.rs`, whose
//! process is its own (`own_process!`).
//!
//! Tolerance (f32): relative 1e-4, absolute 1e-5 (the C kernels' `libm` and Flex's own
//! functions differ in the last bits, and fused reductions sum in another order).

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_compile::{Compiled, Dim, DimError, explain, mark_dynamic, mark_step, take_error};
use burn_flex::Flex;

type C = Compiled<Flex>;

/// W1 at a small size: 2 layers, d_model 32, 4 heads, ReLU, no dropout.
fn w1_small() -> TransformerEncoderConfig {
    TransformerEncoderConfig::new(32, 64, 4, 2)
        .with_dropout(0.0)
        .with_activation(burn::nn::activation::ActivationConfig::Relu)
}

struct Collect(Vec<TensorData>);

impl<B: Backend> ModuleVisitor<B> for Collect {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.push(param.val().into_data());
    }
}

struct Load<B: Backend> {
    weights: std::vec::IntoIter<TensorData>,
    device: B::Device,
}

impl<B: Backend> ModuleMapper<B> for Load<B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let tensor = Tensor::<B, D>::from_data(self.weights.next().unwrap(), &self.device);
        let id = param.id;
        param.transform_for_load(tensor, id)
    }
}

fn model<B: Backend>(weights: Vec<TensorData>) -> TransformerEncoder<B> {
    let device = Default::default();
    let mut load = Load::<B> {
        weights: weights.into_iter(),
        device,
    };
    w1_small().init::<B>(&Default::default()).map(&mut load)
}

/// Fresh random weights (Flex's generator, then shared by both models).
fn weights(seed: u64) -> Vec<TensorData> {
    Flex::seed(&Default::default(), seed);
    let eager = w1_small().init::<Flex>(&Default::default());
    let mut collect = Collect(Vec::new());
    eager.visit(&mut collect);
    collect.0
}

/// Reproducible values in [-1, 1).
fn input(shape: [usize; 3], seed: u64) -> TensorData {
    let mut state = seed.wrapping_mul(6364136223846793005) ^ 0x9E37_79B9_7F4A_7C15;
    let values: Vec<f32> = (0..shape.iter().product::<usize>())
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
        })
        .collect();
    TensorData::new(values, shape)
}

fn forward<B: Backend>(model: &TransformerEncoder<B>, x: TensorData) -> TensorData {
    let x = Tensor::<B, 3>::from_data(x, &Default::default());
    model.forward(TransformerEncoderInput::new(x)).into_data()
}

fn assert_close(what: &str, got: TensorData, want: TensorData) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        got.assert_approx_eq::<f32>(&want, Tolerance::rel_abs(1e-4, 1e-5));
    })) {
        let message = e.downcast_ref::<String>().cloned().unwrap_or_default();
        panic!("{what}: {message}");
    }
}

#[test]
fn w1_small_recompiles_once_per_new_batch_and_sequence_length() {
    crate::own_process!(w1_small_recompiles_once_per_new_batch_and_sequence_length);
    let weights = weights(7);
    let compiled = model::<C>(weights.clone());
    let eager = model::<Flex>(weights);
    mark_step(); // the weights' uploads are a graph of their own

    // (batch, sequence): the first pair compiles specialized; the first change of a size
    // recompiles, naming it, with the sizes that changed symbolic; later values of symbolic
    // sizes reuse that plan (no compile); a change of a size still constant recompiles again.
    // A pair compiled before is a hit at any time. (The batch never takes the value of a size
    // that stays constant, 4 heads, 8 per head, d_model 32, d_ff 64: a pattern the guards
    // would refuse.)
    let runs: [([usize; 2], &str); 10] = [
        ([2, 8], "first"),
        ([2, 8], "hit"),
        ([3, 8], "dim 0: 2 -> 3"),
        ([3, 8], "hit"),
        ([5, 8], "symbolic"),
        ([5, 12], "dim 1: 8 -> 12"),
        ([6, 20], "symbolic"),
        ([2, 8], "hit"),
        ([7, 16], "symbolic"),
        ([3, 12], "symbolic"),
    ];
    for (i, ([batch, seq], expect)) in runs.into_iter().enumerate() {
        let x = input([batch, seq, 32], 100 + i as u64);
        let want = forward(&eager, x.clone());
        let (got, report) = explain(|| forward(&compiled, x));
        assert_close(&format!("run {i} [{batch}, {seq}]"), got, want);
        let symbolic = report
            .graphs
            .iter()
            .any(|g| g.symbolic_sizes.contains(&(batch as u64)));
        match expect {
            "first" => {
                assert!(report.cache_misses >= 1, "{report}");
                assert_eq!(report.recompiles, 0, "a first compile: {report}");
                assert!(!symbolic, "a first compile is specialized: {report}");
            }
            "hit" => {
                assert_eq!(report.cache_misses, 0, "run {i}: {report}");
                assert_eq!(report.recompiles, 0, "run {i}: {report}");
            }
            "symbolic" => {
                assert_eq!(
                    report.cache_misses, 0,
                    "run {i}: the symbolic plan serves [{batch}, {seq}]: {report}"
                );
                assert!(symbolic, "run {i}: {report}");
            }
            change => {
                assert!(report.recompiles >= 1, "run {i}: {report}");
                assert_eq!(
                    report.recompiles, report.cache_misses,
                    "run {i}: every miss of a known family is a recompile: {report}"
                );
                let said: Vec<&String> = report
                    .graphs
                    .iter()
                    .filter_map(|g| g.recompile.as_ref())
                    .collect();
                assert!(
                    said.iter().any(|s| s.contains(change)),
                    "run {i}: the recompile names `{change}`: {said:?}"
                );
                assert!(symbolic, "run {i}: the recompile is symbolic: {report}");
                assert_eq!(report.past_recompile_limit, 0, "{report}");
            }
        }
    }
}

/// The program of the declared-dimension tests: a row softmax of `exp(x·2) + x`.
fn declared_program<B: Backend>(x: Tensor<B, 2>) -> TensorData {
    let y = (x.clone() * 2.0).exp() + x;
    burn::tensor::activation::softmax(y, 1).into_data()
}

fn rows_data(rows: usize, seed: usize) -> TensorData {
    let v: Vec<f32> = (0..rows * 6)
        .map(|i| ((i + seed) as f32 * 0.29).sin())
        .collect();
    TensorData::new(v, [rows, 6])
}

/// `mark_dynamic`: the graphs reading the marked tensor are symbolic in its size from their
/// first compile (no specialized compile first), later sizes compile nothing and build no C,
/// and the declaration's errors are clear: a size outside the range, a range below 2, an axis
/// the tensor lacks; a later graph of the family whose size leaves the range (unmarked) runs
/// eagerly, correct, and hands the range error to the next read.
#[test]
fn declared_dimensions_are_symbolic_from_the_first_compile_and_range_checked() {
    crate::own_process!(declared_dimensions_are_symbolic_from_the_first_compile_and_range_checked);
    let device = Default::default();
    let rows = Dim::new("rows", 2, 64);
    let run = |n: usize, mark: bool| {
        let want = declared_program(Tensor::<Flex, 2>::from_data(rows_data(n, n), &device));
        let (got, report) = explain(|| {
            let x = Tensor::<C, 2>::from_data(rows_data(n, n), &device);
            if mark {
                mark_dynamic(&x, 0, rows.clone()).expect("in range");
            }
            declared_program(x)
        });
        assert_close(&format!("[{n}, 6]"), got, want);
        report
    };
    // The upload and the declaration come before the program's ops: its graph reads `x`.
    let first = run(9, true);
    assert!(first.cache_misses >= 1, "{first}");
    assert_eq!(first.recompiles, 0, "{first}");
    assert!(
        first.graphs.iter().any(|g| g.symbolic_sizes.contains(&9)),
        "symbolic from the first compile: {first}"
    );
    // Its C kernels are built at the end of its first replay, and built well: the later sizes
    // building nothing means they found these functions.
    let builds: Vec<_> = first
        .graphs
        .iter()
        .filter_map(|g| g.kernel_build.as_ref())
        .collect();
    assert!(
        !builds.is_empty() && builds.iter().all(|b| b.error.is_none()),
        "{first}"
    );
    run(10, true); // the C kernels built at the end of the first replay run from here on
    for n in [11, 40, 3, 64] {
        let r = run(n, true);
        assert_eq!(r.cache_misses, 0, "rows {n}: {r}");
        assert_eq!(r.recompiles, 0, "rows {n}: {r}");
        assert!(
            r.graphs.iter().all(|g| g.kernel_build.is_none()),
            "rows {n}: no C build: {r}"
        );
    }

    // Errors of the declaration itself.
    let x = Tensor::<C, 2>::from_data(rows_data(65, 0), &device);
    let err = mark_dynamic(&x, 0, rows.clone()).unwrap_err();
    assert!(
        matches!(err, DimError::OutOfRange { size: 65, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("`rows` (2..=64) is 65 on axis 0"),
        "{err}"
    );
    let err = mark_dynamic(&x, 0, Dim::new("rows", 1, 64)).unwrap_err();
    assert!(matches!(err, DimError::Range(_)), "{err}");
    let err = mark_dynamic(&x, 2, rows.clone()).unwrap_err();
    assert_eq!(err, DimError::Axis { axis: 2, rank: 2 });
    drop(x);

    // The family keeps the range: an unmarked graph of 80 rows is an error, not a recompile.
    let want = declared_program(Tensor::<Flex, 2>::from_data(rows_data(80, 1), &device));
    let (read, report) = explain(|| {
        let x = Tensor::<C, 2>::from_data(rows_data(80, 1), &device);
        declared_program_try(x)
    });
    let err = format!("{:?}", read.expect_err("80 rows is outside `rows`"));
    assert!(err.contains("outside its declared range 2..=64"), "{err}");
    assert_eq!(report.recompiles, 0, "{report}");
    assert_eq!(report.cache_misses, 0, "nothing compiled: {report}");
    assert_eq!(take_error(), None, "reported once");
    // It runs, eagerly and correctly: the graph closed and its error taken, the read has the
    // values.
    let x = Tensor::<C, 2>::from_data(rows_data(80, 1), &device);
    let y = (x.clone() * 2.0).exp() + x;
    let out = burn::tensor::activation::softmax(y, 1);
    mark_step();
    let err = take_error().expect("the range error, at the graph's close");
    assert!(err.contains("dimension `rows` is 80"), "{err}");
    assert_close("[80, 6] eager", out.into_data(), want);
}

/// [`declared_program`], its read's error returned.
fn declared_program_try<B: Backend>(
    x: Tensor<B, 2>,
) -> Result<TensorData, burn::tensor::backend::ExecutionError> {
    let y = (x.clone() * 2.0).exp() + x;
    burn::tensor::activation::softmax(y, 1).try_into_data()
}

/// Sizes 0 and 1 are sizes like any other: a graph over them is specialized on them (a size 1
/// is also a broadcast the schedule may use), compiled as a recompile of its family, and equal
/// to eager; an empty tensor runs no kernel work.
#[test]
fn sizes_zero_and_one_compile_and_equal_eager() {
    crate::own_process!(sizes_zero_and_one_compile_and_equal_eager);
    fn chain<B: Backend>(x: TensorData) -> TensorData {
        let x = Tensor::<B, 2>::from_data(x, &Default::default());
        let y = (x.clone() * 2.0).exp() + x.clone();
        let n = y.clone().sum_dim(1);
        (y / (n + 1.0)).into_data()
    }
    let data = |rows: usize, cols: usize| {
        let v: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.37).sin()).collect();
        TensorData::new(v, [rows, cols])
    };
    for (i, (rows, cols)) in [(4, 6), (1, 6), (4, 1), (1, 1), (0, 6), (4, 0), (4, 6)]
        .into_iter()
        .enumerate()
    {
        let want = chain::<Flex>(data(rows, cols));
        for run in 0..3 {
            // Three runs: the first replays on Flex while the C kernels build, the others
            // call them.
            let (got, report) = explain(|| chain::<C>(data(rows, cols)));
            assert_close(&format!("[{rows}, {cols}] run {run}"), got, want.clone());
            if run > 0 {
                assert_eq!(report.cache_misses, 0, "[{rows}, {cols}]: {report}");
            }
            if run == 0 && i > 0 && i < 6 {
                assert!(report.recompiles >= 1, "[{rows}, {cols}]: {report}");
            }
        }
    }
}

/// Shapes do not enter the family, but everything else does: another dtype or another op is
/// another family (its first compile is not a recompile).
#[test]
fn another_program_is_another_family() {
    crate::own_process!(another_program_is_another_family);
    fn run<B: Backend>(x: Tensor<B, 2>, double: bool) -> TensorData {
        let y = if double {
            x.clone() * 2.0
        } else {
            x.clone() + 2.0
        };
        y.tanh().sum_dim(0).into_data()
    }
    let x = || {
        Tensor::<C, 2>::from_data(
            TensorData::new(vec![0.5f32; 12], [3, 4]),
            &Default::default(),
        )
    };
    let (_, first) = explain(|| run(x(), true));
    assert_eq!(first.recompiles, 0, "{first}");
    let (_, other) = explain(|| run(x(), false));
    assert_eq!(other.recompiles, 0, "another op, another family: {other}");
    // Uploaded inside the region, as `x` is: the upload is the graph's first op.
    let wide = || {
        Tensor::<C, 2>::from_data(
            TensorData::new(vec![0.5f32; 15], [3, 5]),
            &Default::default(),
        )
    };
    let (out, again) = explain(|| run(wide(), false));
    assert!(again.recompiles >= 1, "{again}");
    let want = run(
        Tensor::<Flex, 2>::from_data(
            TensorData::new(vec![0.5f32; 15], [3, 5]),
            &Default::default(),
        ),
        false,
    );
    assert_close("[3, 5]", out, want);
}
