//! Burn's own `Fusion<CubeBackend>` (wgpu) as the inner backend: correct, if slow (both layers
//! queue every op). Compared with eager `Fusion<CubeBackend>` on the same inputs.
//!
//! Its own build: `cargo test -p burn-compile --features wgpu-fusion --test wgpu_fusion` (with
//! burn-cubecl's `fusion` feature on, the raw CubeBackend is not `BackendIr`, so this cannot
//! share a build with tests/wgpu.rs). Same adapter rules as tests/wgpu.rs.
#![cfg(feature = "wgpu-fusion")]

use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData, Tolerance, activation::softmax, backend::Backend};
use burn_compile::{BreakReason, Compiled, WgpuFusion, explain};

mod support;

type C = Compiled<WgpuFusion>;

fn adapter_available() -> bool {
    support::wgpu::adapter_available::<WgpuFusion>("Compiled<WgpuFusion>")
}

fn data(shape: [usize; 2], seed: u64) -> TensorData {
    TensorData::new(support::values(shape[0] * shape[1], seed), shape)
}

// f32 GPU kernels (Burn's fusion may reorder elementwise work): 1e-4 relative, 1e-5 absolute.
fn tol() -> Tolerance<f32> {
    Tolerance::relative(1e-4).set_half_precision_absolute(1e-5)
}

fn layer<B: Backend>(x: Tensor<B, 2>, w: Tensor<B, 2>, b: Tensor<B, 2>) -> Tensor<B, 2> {
    let h = (x.matmul(w) + b).tanh();
    softmax(h.clone() * 2.0, 1) + h.exp().mean_dim(1)
}

#[test]
fn fusion_inner_forward_and_gradients_match_eager_fusion() {
    if !adapter_available() {
        return;
    }
    let device = Default::default();
    let (x, w, b) = (data([8, 16], 1), data([16, 16], 2), data([1, 16], 3));
    let run = || {
        layer(
            Tensor::<C, 2>::from_data(x.clone(), &device),
            Tensor::<C, 2>::from_data(w.clone(), &device),
            Tensor::<C, 2>::from_data(b.clone(), &device),
        )
        .into_data()
    };
    let (cold, first) = explain(run);
    let (warm, second) = explain(run);
    assert_eq!(first.break_reasons[0].reason, BreakReason::HostRead);
    assert_eq!(second.cache_misses, 0, "{second}");
    let eager = layer(
        Tensor::<WgpuFusion, 2>::from_data(x.clone(), &device),
        Tensor::<WgpuFusion, 2>::from_data(w.clone(), &device),
        Tensor::<WgpuFusion, 2>::from_data(b.clone(), &device),
    )
    .into_data();
    cold.assert_approx_eq::<f32>(&eager, tol());
    warm.assert_approx_eq::<f32>(&eager, tol());

    fn grads<B: burn::tensor::backend::AutodiffBackend>(
        x: TensorData,
        w: TensorData,
        device: &B::Device,
    ) -> (TensorData, TensorData) {
        let x = Tensor::<B, 2>::from_data(x, device).require_grad();
        let w = Tensor::<B, 2>::from_data(w, device).require_grad();
        let loss = (x.clone().matmul(w.clone()).tanh() * 3.0)
            .powi_scalar(2)
            .mean();
        let g = loss.backward();
        (
            x.grad(&g).unwrap().into_data(),
            w.grad(&g).unwrap().into_data(),
        )
    }
    let (gx, gw) = grads::<Autodiff<C>>(x.clone(), w.clone(), &device);
    let (ex, ew) = grads::<Autodiff<WgpuFusion>>(x, w, &device);
    gx.assert_approx_eq::<f32>(&ex, tol());
    gw.assert_approx_eq::<f32>(&ew, tol());
}
