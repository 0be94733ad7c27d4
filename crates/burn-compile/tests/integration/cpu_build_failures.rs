//! The CPU path without a working C compiler: no compiler, a compiler that rejects the build,
//! strict mode. The results are eager Flex's, after one warning per distinct failure; strict
//! mode makes a failed build an error. (A process of its own: it configures the one Flex device.)

use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_compile::{CompileConfig, Compiled, configure, explain, metrics};
use burn_flex::{Flex, FlexDevice};
use std::io::Write;
use std::sync::{Arc, Mutex};

use crate::support;

/// The log lines written by `burn-compile`, captured.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn chain<B: burn::tensor::backend::Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
    ((x.clone() * 2.0).exp() - x).tanh()
}

fn run<B: burn::tensor::backend::Backend>(shape: [usize; 2]) -> TensorData {
    let x = Tensor::<B, 2>::from_data(
        support::float_data(&shape, 7, -1.0, 1.0),
        &Default::default(),
    );
    chain(x).into_data()
}

fn check(shape: [usize; 2]) {
    run::<Compiled<Flex>>(shape).assert_approx_eq::<f32>(&run::<Flex>(shape), Tolerance::default());
}

#[test]
fn without_a_working_compiler_the_ops_run_on_flex_after_one_warning() {
    crate::own_process!(without_a_working_compiler_the_ops_run_on_flex_after_one_warning);
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .init();
    let device = FlexDevice;
    let cache = std::env::temp_dir().join(format!("burn-compile-failures-{}", std::process::id()));
    let base = CompileConfig {
        cache_dir: Some(cache.clone()),
        ..Default::default()
    };

    // No compiler: each graph's first replay runs on Flex, its build fails, and so do the
    // later replays' (silently). One warning for all graphs.
    configure(
        &device,
        CompileConfig {
            c_compiler: Some("/nonexistent/burn-compile-cc".into()),
            ..base.clone()
        },
    );
    let before = metrics();
    let (_, report) = explain(|| run::<Compiled<Flex>>([16, 24]));
    let build = report.graphs[0]
        .kernel_build
        .clone()
        .expect("a build was tried");
    let error = build.error.expect("it failed");
    assert!(error.contains("no C compiler"), "{error}");
    assert!(
        error.contains("BURN_COMPILE_CC"),
        "says how to fix it: {error}"
    );
    assert!(report.to_string().contains("failed to build"), "{report}");
    for shape in [[16, 24], [16, 24], [8, 9], [8, 9]] {
        check(shape);
    }
    assert!(metrics().since(&before).kernel_fallbacks >= 2);
    let warnings = logs
        .text()
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("no C compiler"))
        .count();
    assert_eq!(warnings, 1, "one warning for every graph:\n{}", logs.text());

    // Strict mode turned on over those failed builds (same compiler): a replay of a kernel
    // whose build failed is an error, not a silent fallback.
    configure(
        &device,
        CompileConfig {
            c_compiler: Some("/nonexistent/burn-compile-cc".into()),
            strict: true,
            ..base.clone()
        },
    );
    let strict = std::panic::catch_unwind(|| run::<Compiled<Flex>>([16, 24]));
    let message = strict.expect_err("strict: a kernel whose build failed is an error");
    let message = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("strict mode") && message.contains("no C compiler"),
        "{message}"
    );

    // A compiler that rejects the build (an unknown flag): its diagnostics in the warning.
    configure(
        &device,
        CompileConfig {
            c_flags: Some("-O2 --no-such-flag-for-burn-compile".into()),
            ..base.clone()
        },
    );
    let (_, report) = explain(|| run::<Compiled<Flex>>([5, 7]));
    let error = report.graphs[0]
        .kernel_build
        .clone()
        .and_then(|b| b.error)
        .expect("the build failed");
    assert!(error.contains("rejected the generated C"), "{error}");
    check([5, 7]);
    assert!(logs.text().contains("no-such-flag-for-burn-compile"));

    // Strict: the failed build is an error, raised at the read.
    configure(
        &device,
        CompileConfig {
            c_compiler: Some("/nonexistent/burn-compile-cc".into()),
            strict: true,
            ..base.clone()
        },
    );
    let strict = std::panic::catch_unwind(|| run::<Compiled<Flex>>([3, 31]));
    let message = strict.expect_err("strict: the failed build is an error");
    let message = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("strict mode") && message.contains("no C compiler"),
        "{message}"
    );

    // With the compiler back, the next graphs build and run their kernels.
    configure(&device, base);
    let (_, report) = explain(|| run::<Compiled<Flex>>([12, 13]));
    let build = report.graphs[0].kernel_build.clone().expect("built");
    assert_eq!(build.error, None);
    check([12, 13]);
    let _ = std::fs::remove_dir_all(&cache);
}
