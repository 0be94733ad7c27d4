//! `burn_compile::eager`: a scoped region whose ops run eagerly on the calling thread only,
//! a break of its own in `explain`, nesting. Values compared with eager Flex on the same inputs.

use burn::tensor::{ElementConversion, Tensor, TensorData};
use burn_compile::{BreakReason, Compiled, eager, explain, metrics};
use burn_flex::Flex;

type C = Compiled<Flex>;

fn input() -> TensorData {
    TensorData::new((0..12).map(|i| (i as f32 * 0.37).sin()).collect(), [3, 4])
}

/// `(x * 2 + 1).exp()` with the middle in `region`, then a sum read back.
fn program<B: burn::tensor::backend::Backend>(
    x: Tensor<B, 2>,
    region: impl Fn(Tensor<B, 2>) -> Tensor<B, 2>,
) -> f32 {
    let h = x * 2.0;
    let h = region(h);
    (h.exp() * 3.0).sum().into_scalar().elem()
}

#[test]
fn an_eager_region_runs_its_ops_eagerly_and_is_a_break_of_its_own() {
    crate::own_process!(an_eager_region_runs_its_ops_eagerly_and_is_a_break_of_its_own);
    let device = Default::default();
    let want = program(Tensor::<Flex, 2>::from_data(input(), &device), |h| h + 1.0);

    let x = Tensor::<C, 2>::from_data(input(), &device);
    let before = metrics();
    let (got, report) = explain(|| program(x.clone(), |h| eager(|| h + 1.0)));
    let during = metrics().since(&before);
    assert!((got - want).abs() <= 1e-5 * want.abs(), "{got} vs {want}");
    // `x * 2` was pending: the region closed it, at the call in this file; the add ran eagerly;
    // the rest is the next graph, ended by the read.
    let reasons: Vec<BreakReason> = report.break_reasons.iter().map(|b| b.reason).collect();
    assert_eq!(
        reasons,
        vec![BreakReason::EagerRegion, BreakReason::HostRead],
        "{report}"
    );
    let location = report.break_reasons[0].location.as_deref().unwrap_or("");
    assert!(location.contains("eager_region.rs"), "{location}\n{report}");
    assert!(report.to_string().contains("eager_region"), "{report}");
    // Process-wide counters (this module's other test runs at the same time): at least ours.
    assert!(
        during.breaks_of(BreakReason::EagerRegion) >= 1,
        "{during:?}"
    );
    assert!(during.eager_ops >= 1, "the add ran eagerly: {during:?}");

    // Nested regions break once, at the outermost; capture resumes after it.
    let (got, report) = explain(|| program(x.clone(), |h| eager(|| eager(|| h + 1.0) * 1.0)));
    assert!((got - want).abs() <= 1e-5 * want.abs(), "{got} vs {want}");
    let regions = report
        .break_reasons
        .iter()
        .filter(|b| b.reason == BreakReason::EagerRegion)
        .count();
    assert_eq!(regions, 1, "{report}");
    assert!(report.graph_count >= 2, "{report}");
}

/// The region is the calling thread's: a thread it spawns keeps compiling.
#[test]
fn an_eager_region_leaves_other_threads_compiling() {
    crate::own_process!(an_eager_region_leaves_other_threads_compiling);
    let (got, report) = eager(|| {
        std::thread::spawn(|| {
            let device = Default::default();
            let x = Tensor::<C, 2>::from_data(input(), &device);
            explain(|| program(x, |h| h + 1.0))
        })
        .join()
        .unwrap()
    });
    // The spawned thread's ops were captured: one graph whose pointwise run is one kernel, and
    // no region of its own.
    let reasons: Vec<BreakReason> = report.break_reasons.iter().map(|b| b.reason).collect();
    assert_eq!(reasons, vec![BreakReason::HostRead], "{report}");
    assert!(report.fused_kernels >= 1, "{report}");
    let device = Default::default();
    let want = program(Tensor::<Flex, 2>::from_data(input(), &device), |h| h + 1.0);
    assert!((got - want).abs() <= 1e-5 * want.abs(), "{got} vs {want}");
}
