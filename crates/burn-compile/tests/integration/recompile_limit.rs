//! The recompile limit, the fail-on-recompile stance and the shape modes (`dynamic`): device-wide
//! config and a process-wide stance, so one test walks through them in order, in a process
//! of its own.
//!
//! Tolerance (f32): relative 1e-4, absolute 1e-5.

use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_compile::{
    CompileConfig, Compiled, DynamicShapes, Stance, configure, explain, metrics, set_stance,
    take_error,
};
use burn_flex::Flex;

type C = Compiled<Flex>;

fn data(len: usize) -> TensorData {
    let v: Vec<f32> = (0..len * 3).map(|i| (i as f32 * 0.71).cos()).collect();
    TensorData::new(v, [len, 3])
}

/// A small program; `scaled` picks one of two (two families).
fn program<B: burn::tensor::backend::Backend>(x: TensorData, scaled: bool) -> Tensor<B, 2> {
    let x = Tensor::<B, 2>::from_data(x, &Default::default());
    let y = if scaled {
        (x.clone() * 3.0).tanh() + x.exp()
    } else {
        x.clone().tanh() + x.exp()
    };
    burn::tensor::activation::softmax(y, 1)
}

fn check(len: usize) -> burn_compile::Explanation {
    check_program(len, true)
}

fn check_program(len: usize, scaled: bool) -> burn_compile::Explanation {
    let want = program::<Flex>(data(len), scaled).into_data();
    let (got, report) = explain(|| program::<C>(data(len), scaled).into_data());
    got.assert_approx_eq::<f32>(&want, Tolerance::rel_abs(1e-4, 1e-5));
    report
}

#[test]
fn limit_then_eager_fallback_and_fail_on_recompile() {
    crate::own_process!(limit_then_eager_fallback_and_fail_on_recompile);
    let device = Default::default();
    configure::<burn_flex::FlexDevice>(
        &device,
        CompileConfig {
            recompile_limit: 2,
            // Specialized plans only: every new size is a recompile.
            dynamic: DynamicShapes::Never,
            ..CompileConfig::default()
        },
    );

    // Fail on recompile: a new size of a known program is an error at the next read, naming
    // the change; the graph still ran, and correctly.
    program::<C>(data(5), false).into_data();
    set_stance(Stance::FailOnRecompile);
    let read = program::<C>(data(6), false).try_into_data();
    set_stance(Stance::Default);
    let err = format!(
        "{:?}",
        read.expect_err("a recompile under fail-on-recompile")
    );
    assert!(err.contains("fail-on-recompile"), "{err}");
    assert!(
        err.contains("a recompile") && err.contains("dim 0: 5 -> 6"),
        "{err}"
    );
    assert_eq!(take_error(), None, "reported once");
    let want = program::<Flex>(data(6), false).into_data();
    program::<C>(data(6), false)
        .into_data()
        .assert_approx_eq::<f32>(&want, Tolerance::rel_abs(1e-4, 1e-5));

    // Another family: first compile, then two recompiles within the limit, then the family runs eagerly: no compile, results equal.
    let first = check(7);
    assert_eq!(first.recompiles, 0, "{first}");
    let before = metrics();
    for len in [8, 9] {
        let r = check(len);
        assert!(r.recompiles >= 1, "len {len}: {r}");
        assert_eq!(r.past_recompile_limit, 0, "len {len}: {r}");
    }
    for len in [10, 11, 12, 8, 13] {
        let r = check(len);
        if len == 8 {
            // Compiled before the limit: its plan is still cached.
            assert_eq!(r.past_recompile_limit, 0, "len {len}: {r}");
            assert_eq!(r.cache_misses, 0, "len {len}: {r}");
            continue;
        }
        assert_eq!(r.recompiles, 0, "len {len}: past the limit: {r}");
        assert!(r.past_recompile_limit >= 1, "len {len}: {r}");
        assert_eq!(r.cache_misses, 0, "len {len}: nothing compiled: {r}");
        assert!(format!("{r}").contains("past recompile_limit"), "{r}");
    }
    let delta = metrics().since(&before);
    assert!(delta.recompiles >= 2, "{delta:?}");
    assert!(delta.past_recompile_limit >= 4, "{delta:?}");

    // Past the limit, fail-on-recompile has nothing to report: nothing compiles.
    set_stance(Stance::FailOnRecompile);
    check(14);
    set_stance(Stance::Default);
    assert_eq!(take_error(), None);

    // `dynamic = true`: the first compile is symbolic (every size of 2 or more a runtime
    // value), and every later size reuses its plan and its C kernels: no compile, no build.
    configure::<burn_flex::FlexDevice>(
        &device,
        CompileConfig {
            dynamic: DynamicShapes::Always,
            ..CompileConfig::default()
        },
    );
    let first = check(20);
    assert!(first.cache_misses >= 1, "{first}");
    assert!(
        first.graphs.iter().any(|g| g.symbolic_sizes.contains(&20)),
        "the first compile is symbolic in the rows: {first}"
    );
    assert!(format!("{first}").contains("symbolic: sizes"), "{first}");
    let builds: Vec<_> = first
        .graphs
        .iter()
        .filter_map(|g| g.kernel_build.as_ref())
        .collect();
    assert!(
        !builds.is_empty() && builds.iter().all(|b| b.error.is_none()),
        "the symbolic C kernels build: {first}"
    );
    check(21); // the C kernels were built at the end of the first replay; now they run
    let before = metrics();
    for len in [22, 5, 40, 21, 64] {
        let r = check(len);
        assert_eq!(
            r.cache_misses, 0,
            "len {len}: the symbolic plan serves it: {r}"
        );
        assert!(
            r.graphs
                .iter()
                .any(|g| g.symbolic_sizes.contains(&(len as u64))),
            "len {len}: {r}"
        );
    }
    let delta = metrics().since(&before);
    assert_eq!(
        delta.kernel_builds, 0,
        "one C function per kernel: {delta:?}"
    );
    assert!(delta.symbolic_graphs >= 5, "{delta:?}");
    // Sizes 0 and 1 are never symbolic: they compile specialized plans, equal to eager.
    for len in [1, 0] {
        let r = check(len);
        assert!(r.recompiles >= 1, "len {len}: {r}");
    }

    // Automatic dynamic (the default): specialized first, symbolic after the first change,
    // then no compile for the later sizes.
    configure::<burn_flex::FlexDevice>(&device, CompileConfig::default());
    let first = check_program(30, false);
    assert!(first.cache_misses >= 1, "{first}");
    assert!(
        first.graphs.iter().all(|g| g.symbolic_sizes.is_empty()),
        "{first}"
    );
    let second = check_program(31, false);
    assert!(second.recompiles >= 1, "{second}");
    assert!(
        second.graphs.iter().any(|g| g.symbolic_sizes.contains(&31)),
        "the recompile makes the rows symbolic: {second}"
    );
    check_program(32, false); // its C kernels run from here on
    let before = metrics();
    for len in [33, 7, 50, 31] {
        let r = check_program(len, false);
        assert_eq!(r.cache_misses, 0, "len {len}: {r}");
    }
    assert_eq!(metrics().since(&before).kernel_builds, 0);
    // Back to the first size: its specialized plan is still cached.
    assert_eq!(check_program(30, false).cache_misses, 0);
}
