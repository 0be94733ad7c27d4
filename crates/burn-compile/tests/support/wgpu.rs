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

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{TensorData, Tolerance, activation::softmax};
use burn_compile::{BreakReason, explain};

/// f32 on GPU kernels: reductions and exp reorder sums, so 1e-4 relative, and 1e-7 absolute
/// for values near zero (gradients of ~1e-5 differ in their 4th digit from summation order).
#[cfg(not(feature = "cuda"))]
pub fn tol() -> Tolerance<f32> {
    Tolerance::relative(1e-4)
        .set_absolute(1e-7)
        .set_half_precision_absolute(1e-5)
}

/// On CUDA, compiled f32 matmuls run on cuBLASLt with TF32 tensor cores (inputs rounded to a
/// 10-bit mantissa, ~5e-4 relative each), as Burn's own matmul does, but with another rounding
/// and summation order: 1e-2 relative and 2e-3 absolute. A wrong layout or epilogue is off by
/// O(1).
#[cfg(feature = "cuda")]
pub fn tol() -> Tolerance<f32> {
    Tolerance::relative(1e-2)
        .set_absolute(2e-3)
        .set_half_precision_absolute(2e-3)
}

fn layer<B: Backend>(x: Tensor<B, 2>, w: Tensor<B, 2>, b: Tensor<B, 2>) -> Tensor<B, 2> {
    let h = (x.matmul(w) + b).tanh();
    softmax(h.clone() * 2.0, 1) + h.exp().mean_dim(1)
}

/// A small layer (matmul, bias, tanh, softmax, mean) on the compiled backend `C`, twice (the
/// second run must come from the plan cache), against the eager backend `E`.
pub fn check_forward<C: Backend, E: Backend<Device = C::Device>>(
    x: TensorData,
    w: TensorData,
    b: TensorData,
) {
    let device = Default::default();
    let on = |x: &TensorData| Tensor::<C, 2>::from_data(x.clone(), &device);
    let run = || layer(on(&x), on(&w), on(&b)).into_data();
    let (cold, first) = explain(run);
    let (warm, second) = explain(run);
    assert_eq!(second.cache_misses, 0, "{second}");
    assert_eq!(first.break_reasons[0].reason, BreakReason::HostRead);
    let eager_on = |x: &TensorData| Tensor::<E, 2>::from_data(x.clone(), &device);
    let eager = layer(eager_on(&x), eager_on(&w), eager_on(&b)).into_data();
    cold.assert_approx_eq::<f32>(&eager, tol());
    warm.assert_approx_eq::<f32>(&eager, tol());
}

fn grads<B: AutodiffBackend>(x: TensorData, w: TensorData) -> (TensorData, TensorData) {
    let device = Default::default();
    let x = Tensor::<B, 2>::from_data(x, &device).require_grad();
    let w = Tensor::<B, 2>::from_data(w, &device).require_grad();
    let loss = (x.clone().matmul(w.clone()).tanh() * 3.0)
        .powi_scalar(2)
        .mean();
    let g = loss.backward();
    (
        x.grad(&g).unwrap().into_data(),
        w.grad(&g).unwrap().into_data(),
    )
}

/// Gradients of a matmul-tanh-square loss on `Autodiff<compiled>` against `Autodiff<eager>`.
pub fn check_gradients<C: AutodiffBackend, E: AutodiffBackend>(x: TensorData, w: TensorData) {
    let (gx, gw) = grads::<C>(x.clone(), w.clone());
    let (ex, ew) = grads::<E>(x, w);
    gx.assert_approx_eq::<f32>(&ex, tol());
    gw.assert_approx_eq::<f32>(&ew, tol());
}
