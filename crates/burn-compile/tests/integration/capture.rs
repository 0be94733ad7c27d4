//! Capture semantics on `Compiled<Flex>`: breaks, explain, cache hits, dead code, strict mode.
//! Every value is compared with eager `Flex` on the same inputs.

use burn::tensor::{Distribution, Tensor, Tolerance};
use burn_compile::{BreakReason, Compiled, explain, fullgraph, mark_step};
use burn_flex::Flex;
use burn_ndarray::NdArray;

type C = Compiled<Flex>;

use crate::support;

use support::matrix as data;
include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../snapshots/assert.rs"
));

fn step<B: burn::tensor::backend::Backend>(x: Tensor<B, 2>, w: Tensor<B, 2>) -> Tensor<B, 2> {
    let h = x.matmul(w.clone()).tanh();
    (h.clone() * 0.5 + h.exp()).matmul(w.transpose())
}

#[test]
fn second_identical_step_hits_the_cache() {
    crate::own_process!(second_identical_step_hits_the_cache);
    let device = Default::default();
    // The plan cache is shared by this module's tests, which run at once: no other test here
    // records this graph, so its first step is a miss whatever ran before.
    let (x, w) = (data([4, 8], 1), data([8, 8], 2));
    let run = || {
        let x = Tensor::<C, 2>::from_data(x.clone(), &device);
        let w = Tensor::<C, 2>::from_data(w.clone(), &device);
        step(x, w).into_data()
    };
    let (first, cold) = explain(run);
    let (second, warm) = explain(run);
    assert!(cold.cache_misses >= 1, "{cold}");
    assert_eq!(warm.cache_misses, 0, "second step compiled again:\n{warm}");
    assert_eq!(warm.cache_hits, warm.graph_count);
    assert_eq!(
        warm.compile_times.iter().sum::<std::time::Duration>(),
        std::time::Duration::ZERO
    );

    let eager = step(
        Tensor::<Flex, 2>::from_data(x.clone(), &device),
        Tensor::<Flex, 2>::from_data(w.clone(), &device),
    )
    .into_data();
    // The first run's ops ran on Flex; the second ran the graph's C kernel (vector libm: the
    // last bits may differ).
    first.assert_approx_eq::<f32>(&eager, Tolerance::default());
    second.assert_approx_eq::<f32>(&eager, Tolerance::default());
}

#[test]
fn host_read_is_a_break_with_the_user_location() {
    crate::own_process!(host_read_is_a_break_with_the_user_location);
    let device = Default::default();
    let x = Tensor::<C, 2>::from_data(data([3, 3], 3), &device);
    let (total, report) = explain(|| {
        let s = (x.clone() * 2.0).sum().into_scalar();
        let y = x.clone() + s;
        y.sum().into_scalar()
    });
    assert_eq!(report.graph_break_count, 2, "{report}");
    assert!(
        report
            .break_reasons
            .iter()
            .all(|b| b.reason == BreakReason::HostRead)
    );
    let text = report.to_string();
    assert!(text.contains("2 break(s)"), "{text}");
    assert!(
        text.contains("NumericFloat.MulScalar"),
        "listing missing:\n{text}"
    );
    let location = report.break_reasons[0].location.as_deref().unwrap_or("");
    assert!(location.contains("capture.rs"), "location was {location:?}");
    let xs = data([3, 3], 3).to_vec::<f32>().unwrap();
    let s: f32 = xs.iter().sum::<f32>() * 2.0;
    let expected: f32 = xs.iter().map(|v| v + s).sum();
    assert!((total - expected).abs() < 1e-3, "{total} vs {expected}");
}

#[test]
fn an_activation_is_one_op_run_by_the_inner_backend() {
    crate::own_process!(an_activation_is_one_op_run_by_the_inner_backend);
    let device = Default::default();
    let x = Tensor::<C, 2>::from_data(data([3, 5], 5), &device);
    let (out, report) = explain(|| burn::tensor::activation::softmax(x.clone(), 1).into_data());
    let text = report.to_string();
    assert!(
        text.contains("Custom.burn_compile.softmax(dim=1)"),
        "softmax should be recorded whole:\n{text}"
    );
    assert_eq!(report.ops_per_graph.iter().sum::<usize>(), 1, "{report}");
    let eager = burn::tensor::activation::softmax(
        Tensor::<Flex, 2>::from_data(data([3, 5], 5), &device),
        1,
    );
    // The same kernel as eager: bit-identical.
    out.assert_eq(&eager.into_data(), true);
}

#[test]
fn ops_dropped_unused_are_not_executed() {
    crate::own_process!(ops_dropped_unused_are_not_executed);
    let device = Default::default();
    let x = Tensor::<C, 2>::from_data(data([4, 4], 4), &device);
    let (out, report) = explain(|| {
        let unused = x.clone().exp().matmul(x.clone()); // dropped below, never read
        drop(unused);
        (x.clone() + 1.0).into_data()
    });
    let dead: usize = report.graphs.iter().map(|g| g.dead).sum();
    assert!(dead >= 2, "exp and matmul should be dead:\n{report}");
    let eager = (Tensor::<Flex, 2>::from_data(data([4, 4], 4), &device) + 1.0).into_data();
    out.assert_eq(&eager, true);
}

#[test]
fn random_ops_are_never_dead_so_draws_match_eager() {
    crate::own_process!(random_ops_are_never_dead_so_draws_match_eager);
    let device = Default::default();
    <C as burn::tensor::backend::Backend>::seed(&device, 7);
    let compiled = {
        let skipped = Tensor::<C, 2>::random([5, 5], Distribution::Default, &device);
        drop(skipped);
        Tensor::<C, 2>::random([5, 5], Distribution::Default, &device).into_data()
    };
    <Flex as burn::tensor::backend::Backend>::seed(&device, 7);
    let eager = {
        let skipped = Tensor::<Flex, 2>::random([5, 5], Distribution::Default, &device);
        drop(skipped);
        Tensor::<Flex, 2>::random([5, 5], Distribution::Default, &device).into_data()
    };
    compiled.assert_eq(&eager, true);
}

#[test]
fn fullgraph_names_the_break() {
    crate::own_process!(fullgraph_names_the_break);
    let device = Default::default();
    let x = Tensor::<C, 2>::from_data(data([2, 2], 5), &device);
    let err = fullgraph(|| {
        let s = x.clone().sum().into_scalar();
        x.clone() * s
    })
    .unwrap_err();
    assert_eq!(err.breaks[0].reason, BreakReason::HostRead);
    assert!(err.to_string().contains("host_read"), "{err}");
    assert!(err.to_string().contains("capture.rs"), "{err}");

    let ok = fullgraph(|| (x.clone() * 3.0).exp());
    assert!(ok.is_ok());
}

#[test]
fn a_users_tensor_is_never_clobbered() {
    crate::own_process!(a_users_tensor_is_never_clobbered);
    let device = Default::default();
    let a = Tensor::<C, 2>::from_data(data([3, 4], 6), &device);
    let keep = a.clone();
    // `a` is consumed (its last use) by an op that could run in place; `keep` must not change.
    let b = a + 1.0;
    let c = b.clone() * 2.0;
    mark_step();
    keep.into_data().assert_eq(&data([3, 4], 6), true);
    let expected = (Tensor::<Flex, 2>::from_data(data([3, 4], 6), &device) + 1.0) * 2.0;
    c.into_data().assert_eq(&expected.into_data(), true);
    b.into_data().assert_eq(
        &(Tensor::<Flex, 2>::from_data(data([3, 4], 6), &device) + 1.0).into_data(),
        true,
    );
}

#[test]
fn sync_and_mark_step_are_breaks() {
    crate::own_process!(sync_and_mark_step_are_breaks);
    let device = Default::default();
    let x = Tensor::<C, 2>::from_data(data([2, 3], 7), &device);
    let (_, report) = explain(|| {
        let y = x.clone() * 2.0;
        <C as burn::tensor::backend::Backend>::sync(&device).unwrap();
        let z = y.clone() + 1.0;
        mark_step();
        (y, z)
    });
    let reasons: Vec<BreakReason> = report.break_reasons.iter().map(|b| b.reason).collect();
    assert_eq!(
        reasons,
        vec![BreakReason::Sync, BreakReason::MarkStep],
        "{report}"
    );
}

#[test]
fn threads_capture_separate_streams() {
    crate::own_process!(threads_capture_separate_streams);
    let handles: Vec<_> = (0..2u64)
        .map(|t| {
            std::thread::spawn(move || {
                let device = Default::default();
                let (x, w) = (data([4, 8], 10 + t), data([8, 8], 20 + t));
                let mut reports = Vec::new();
                for _ in 0..3 {
                    let (out, report) = explain(|| {
                        let x = Tensor::<C, 2>::from_data(x.clone(), &device);
                        let w = Tensor::<C, 2>::from_data(w.clone(), &device);
                        // Not `step` alone: that graph is `second_identical_step_hits_the_cache`'s,
                        // whose first step must compile.
                        step(x, w).neg().into_data()
                    });
                    let eager = step(
                        Tensor::<Flex, 2>::from_data(x.clone(), &device),
                        Tensor::<Flex, 2>::from_data(w.clone(), &device),
                    )
                    .neg()
                    .into_data();
                    out.assert_approx_eq::<f32>(&eager, Tolerance::default());
                    reports.push(report);
                }
                reports
            })
        })
        .collect();
    for handle in handles {
        let reports = handle.join().unwrap();
        for warm in &reports[1..] {
            assert_eq!(warm.cache_misses, 0, "{warm}");
            assert!(
                warm.break_reasons
                    .iter()
                    .all(|b| b.reason != BreakReason::CrossThread)
            );
        }
    }
}

#[test]
fn a_tensor_shared_across_threads_is_synchronized() {
    crate::own_process!(a_tensor_shared_across_threads_is_synchronized);
    let device = Default::default();
    let x = Tensor::<C, 2>::from_data(data([3, 3], 30), &device);
    let y = x.clone().exp(); // pending in this thread's graph
    let y2 = y.clone();
    let from_thread = std::thread::spawn(move || (y2 * 2.0).into_data())
        .join()
        .unwrap();
    let eager = Tensor::<Flex, 2>::from_data(data([3, 3], 30), &device).exp() * 2.0;
    from_thread.assert_approx_eq::<f32>(&eager.into_data(), Tolerance::default());
    drop(y);
}

#[test]
fn a_tensor_made_by_a_finished_thread_is_usable() {
    crate::own_process!(a_tensor_made_by_a_finished_thread_is_usable);
    let device = Default::default();
    let x = Tensor::<C, 2>::from_data(data([2, 5], 31), &device);
    // The worker's graph is still pending when it returns its result and exits.
    let y = std::thread::spawn(move || (x * 3.0).exp()).join().unwrap();
    let eager = (Tensor::<Flex, 2>::from_data(data([2, 5], 31), &device) * 3.0).exp();
    (y + 1.0)
        .into_data()
        .assert_approx_eq::<f32>(&(eager + 1.0).into_data(), Tolerance::default());
}

#[test]
fn a_thread_exiting_with_a_pending_matmul_does_not_abort() {
    crate::own_process!(a_thread_exiting_with_a_pending_matmul_does_not_abort);
    // Regression: the exiting thread's graph used to run inside a thread-local destructor, where
    // the inner backend's own thread-locals (gemm's) were already gone: the process aborted.
    let device = Default::default();
    let a = Tensor::<C, 2>::from_data(data([4, 8], 32), &device);
    let w = Tensor::<C, 2>::from_data(data([8, 8], 33), &device);
    let b = std::thread::spawn(move || {
        let _ = a.clone().matmul(w.clone()).sum().into_scalar(); // the thread runs a matmul
        a.matmul(w) // still pending when the thread exits
    })
    .join()
    .unwrap();
    let eager = Tensor::<Flex, 2>::from_data(data([4, 8], 32), &device)
        .matmul(Tensor::<Flex, 2>::from_data(data([8, 8], 33), &device));
    b.into_data()
        .assert_approx_eq::<f32>(&eager.into_data(), Tolerance::default());
}

#[test]
fn a_repeated_op_runs_once_and_its_repeat_shares_the_result() {
    crate::own_process!(a_repeated_op_runs_once_and_its_repeat_shares_the_result);
    // Burn's LayerNorm centres twice (`x - mean` in var_mean_bias, then to normalize). The
    // repeat shares the first result; the first is then consumed by an op that could run in
    // place (`a + 1`, its last use): the shared buffer has two owners, so the repeat's value
    // must survive it. On NdArray with fusion off (a device of its own in this module's process): fused,
    // the whole function is one C kernel, and the sharing happens inside it.
    burn_compile::configure(
        &burn_ndarray::NdArrayDevice::default(),
        burn_compile::CompileConfig {
            fusion: false,
            ..Default::default()
        },
    );
    fn centred<B: burn::tensor::backend::Backend>(
        x: Tensor<B, 2>,
    ) -> (Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 2>) {
        let mean = x.clone().mean_dim(1);
        let a = x.clone() - mean.clone();
        let b = x.clone() - mean;
        let e = x.clone().exp() * x.exp();
        (a + 1.0, b, e)
    }
    let device = Default::default();
    let x = Tensor::<Compiled<NdArray>, 2>::from_data(data([4, 6], 8), &device);
    let ((a, b, e), report) = explain(|| {
        let out = centred(x.clone());
        mark_step();
        out
    });
    let merged: usize = report.graphs.iter().map(|g| g.merged).sum();
    assert_eq!(
        merged, 2,
        "the second centring and the second exp:\n{report}"
    );
    let (ea, eb, ee) = centred(Tensor::<NdArray, 2>::from_data(data([4, 6], 8), &device));
    a.into_data().assert_eq(&ea.into_data(), true);
    b.into_data().assert_eq(&eb.into_data(), true);
    e.into_data().assert_eq(&ee.into_data(), true);
    x.into_data().assert_eq(&data([4, 6], 8), true);
}

/// `explain` prints each graph's executable, one line per launch: on Flex, the matmuls run
/// eagerly and the pointwise ops between them as one generated kernel whose scalar is read from
/// the replay's ops.
#[test]
fn explain_prints_the_executable() {
    crate::own_process!(explain_prints_the_executable);
    let device = Default::default();
    let x = Tensor::<C, 2>::from_data(data([2, 3], 40), &device);
    let w = Tensor::<C, 2>::from_data(data([3, 3], 41), &device);
    let (_, report) = explain(|| {
        let h = x.clone().matmul(w.clone());
        ((h * 0.25).exp() + 1.0).matmul(w.clone()).into_data()
    });
    let graph = &report.graphs[0];
    let executable = graph
        .executable
        .as_deref()
        .expect("diagnostics are on in explain");
    assert!(report.to_string().contains("executable:"), "{report}");
    assert_stage_snapshot!(
        "runtime",
        "explain_flex_matmul_chain",
        executable,
        "explain: x.matmul(w), * 0.25, exp, + 1, matmul(w) on Compiled<Flex>"
    );
}

/// Three matrices of `B` from their data (the two tests below run one program on `Compiled`
/// and on Flex).
fn tensors<B: burn::tensor::backend::Backend>(
    ds: [&burn::tensor::TensorData; 3],
) -> [Tensor<B, 2>; 3] {
    ds.map(|d| Tensor::from_data(d.clone(), &Default::default()))
}

#[test]
fn explain_names_the_ops_left_to_the_inner_backend() {
    crate::own_process!(explain_names_the_ops_left_to_the_inner_backend);
    use burn::tensor::{TensorData, backend::Backend};
    let (x, w1, w2) = (data([3, 4], 5), data([4, 6], 6), data([4, 6], 7));
    fn run<B: Backend>([x, w1, w2]: [Tensor<B, 2>; 3]) -> TensorData {
        ((x.clone().matmul(w1) + x.matmul(w2)) * 2.0).into_data()
    }
    let inputs = tensors::<C>([&x, &w1, &w2]);
    burn_compile::mark_step();
    let (out, report) = explain(|| run(inputs));
    // The CPU target has no library matmul: both products run on Flex; the sum and the scaling
    // are one generated kernel.
    let [(name, 2)] = report.eager_ops.as_slice() else {
        panic!("two products on the inner backend, nothing else:\n{report}");
    };
    assert!(name.contains("Matmul"), "{report}");
    assert_eq!(report.graphs[0].eager_ops, report.eager_ops, "{report}");
    assert_eq!(report.fused_kernels, 1, "{report}");
    let text = report.to_string();
    assert!(
        text.contains(&format!("on the inner backend: {name} ×2")),
        "{text}"
    );
    out.assert_approx_eq::<f32>(
        &run(tensors::<Flex>([&x, &w1, &w2])),
        burn::tensor::Tolerance::rel_abs(1e-5, 1e-6),
    );
}

/// A run of elementwise ops goes on across an operation it does not take and that reads
/// nothing of the run (a product the CPU target leaves to Flex, as autodiff puts a
/// convolution of another branch between a backward's elementwise ops): one generated kernel,
/// the product run before it; values equal to eager's.
#[test]
fn a_run_of_elementwise_ops_crosses_an_independent_product() {
    crate::own_process!(a_run_of_elementwise_ops_crosses_an_independent_product);
    use burn::tensor::{TensorData, backend::Backend};
    let (x, y, w) = (data([3, 4], 11), data([3, 4], 12), data([4, 4], 13));
    fn run<B: Backend>([x, y, w]: [Tensor<B, 2>; 3]) -> TensorData {
        let a = x.exp() * 0.5;
        let p = y.matmul(w);
        (a + p).tanh().into_data()
    }
    let inputs = tensors::<C>([&x, &y, &w]);
    burn_compile::mark_step();
    let (out, report) = explain(|| run(inputs));
    assert_eq!(
        report.fused_kernels, 1,
        "exp, × 0.5, + and tanh in one kernel:\n{report}"
    );
    let [(name, 1)] = report.eager_ops.as_slice() else {
        panic!("the product alone on the inner backend:\n{report}");
    };
    assert!(name.contains("Matmul"), "{report}");
    assert!(report.to_string().contains("1 op(s) hoisted"), "{report}");
    out.assert_approx_eq::<f32>(
        &run(tensors::<Flex>([&x, &y, &w])),
        Tolerance::rel_abs(1e-5, 1e-6),
    );
}
