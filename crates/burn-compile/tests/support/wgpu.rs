//! The wgpu adapter probe shared by the wgpu test binaries.

use burn::tensor::{Tensor, backend::Backend};
use std::io::Write;

/// True when a wgpu adapter runs a kernel on `B`'s default device. Without one: panics under
/// `CI=true` (the tests are mandatory there), says loudly that the tests were skipped elsewhere.
pub fn adapter_available<B: Backend>(tests: &str) -> bool {
    let probe = std::panic::catch_unwind(|| {
        let device = Default::default();
        Tensor::<B, 1>::from_floats([1.0, 2.0], &device)
            .sum()
            .into_scalar()
    });
    match probe {
        Ok(v) if (burn::tensor::ElementConversion::elem::<f32>(v) - 3.0).abs() < 1e-6 => true,
        outcome => {
            let why = match outcome {
                Ok(_) => "the probe kernel returned a wrong sum".to_string(),
                Err(_) => "no wgpu adapter could be created".to_string(),
            };
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{tests} tests are mandatory under CI=true, but {why}");
            }
            // Written to stderr directly, past the test harness's capture, so it is seen.
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED: {tests} tests: {why}. Install a Vulkan driver \
                 (apt-get install -y mesa-vulkan-drivers gives a CPU one) to run them. ***\n"
            );
            false
        }
    }
}
