//! A graph whose compile fails runs eagerly: correct results, counted and logged once per
//! graph; in strict mode the failure is an error at the read. (Fault injection:
//! `Faults::compile_failure`. A process of its own: it configures the one Flex device.)

use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_compile::{CompileConfig, Compiled, Faults, configure, metrics};
use burn_flex::{Flex, FlexDevice};

use crate::support;

fn program<B: burn::tensor::backend::Backend>(shape: [usize; 2]) -> TensorData {
    let x = Tensor::<B, 2>::from_data(
        support::float_data(&shape, 11, -1.0, 1.0),
        &Default::default(),
    );
    (x.clone().exp() * x).tanh().into_data()
}

#[test]
fn a_failed_compile_runs_eagerly_or_is_a_strict_error() {
    crate::own_process!(a_failed_compile_runs_eagerly_or_is_a_strict_error);
    configure(
        &FlexDevice,
        CompileConfig {
            faults: Faults {
                compile_failure: true,
                ..Default::default()
            },
            ..Default::default()
        },
    );
    let before = metrics();
    for shape in [[4, 9], [4, 9], [7, 3]] {
        program::<Compiled<Flex>>(shape)
            .assert_approx_eq::<f32>(&program::<Flex>(shape), Tolerance::default());
    }
    let m = metrics().since(&before);
    // Two graphs compiled (the second [4, 9] reuses the first's eager plan).
    assert_eq!(m.compile_fallbacks, 2, "{m:?}");
    assert_eq!(m.kernels_launched, 0);

    configure(
        &FlexDevice,
        CompileConfig {
            faults: Faults {
                compile_failure: true,
                ..Default::default()
            },
            strict: true,
            ..Default::default()
        },
    );
    let err = std::panic::catch_unwind(|| program::<Compiled<Flex>>([5, 5]))
        .expect_err("strict: a failed compile is an error");
    let message = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("strict mode") && message.contains("compile failure injected"),
        "{message}"
    );

    // Without the fault, the next graphs compile and launch their kernels.
    configure(&FlexDevice, CompileConfig::default());
    // (The C kernels are built at the end of the graph's first replay and run from its second.)
    let before = metrics();
    for _ in 0..2 {
        program::<Compiled<Flex>>([6, 6])
            .assert_approx_eq::<f32>(&program::<Flex>([6, 6]), Tolerance::default());
    }
    assert!(metrics().since(&before).kernels_launched >= 1);
}
