//! `Compiled<Wgpu>` against eager `Wgpu` (raw CubeBackend): kernels really execute, on a GPU or
//! on lavapipe's CPU Vulkan (`apt-get install -y mesa-vulkan-drivers`).
//!
//! Without a Vulkan adapter these tests fail when `CI=true` and elsewhere say loudly that they
//! were skipped and how to enable them. Shapes are small and kernels few: lavapipe is slow.
#![cfg(all(feature = "wgpu", not(feature = "wgpu-fusion")))]

use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData, Tolerance, activation::softmax, backend::Backend};
use burn_compile::{BreakReason, Compiled, Wgpu, explain};
use burn_wgpu::WgpuDevice;
use std::io::Write;

type C = Compiled<Wgpu>;

mod support;

fn adapter_available() -> bool {
    support::wgpu::adapter_available::<Wgpu>("Compiled<Wgpu>")
}

fn data(shape: [usize; 2], seed: u32) -> TensorData {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(12345);
    let values: Vec<f32> = (0..shape[0] * shape[1])
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2000) as f32 / 1000.0 - 1.0
        })
        .collect();
    TensorData::new(values, shape)
}

fn layer<B: Backend>(x: Tensor<B, 2>, w: Tensor<B, 2>, b: Tensor<B, 2>) -> Tensor<B, 2> {
    let h = (x.matmul(w) + b).tanh();
    softmax(h.clone() * 2.0, 1) + h.exp().mean_dim(1)
}

// f32 on GPU kernels: reductions and exp reorder sums, so 1e-4 relative / 1e-5 absolute.
fn tol() -> Tolerance<f32> {
    Tolerance::relative(1e-4).set_half_precision_absolute(1e-5)
}

#[test]
fn wgpu_forward_matches_eager_and_replays_from_cache() {
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
    assert_eq!(second.cache_misses, 0, "{second}");
    assert_eq!(first.break_reasons[0].reason, BreakReason::HostRead);
    let eager = layer(
        Tensor::<Wgpu, 2>::from_data(x.clone(), &device),
        Tensor::<Wgpu, 2>::from_data(w.clone(), &device),
        Tensor::<Wgpu, 2>::from_data(b.clone(), &device),
    )
    .into_data();
    cold.assert_approx_eq::<f32>(&eager, tol());
    warm.assert_approx_eq::<f32>(&eager, tol());
}

#[test]
fn wgpu_gradients_match_eager() {
    if !adapter_available() {
        return;
    }
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
    let device = Default::default();
    let (x, w) = (data([4, 8], 4), data([8, 8], 5));
    let (gx, gw) = grads::<Autodiff<C>>(x.clone(), w.clone(), &device);
    let (ex, ew) = grads::<Autodiff<Wgpu>>(x, w, &device);
    gx.assert_approx_eq::<f32>(&ex, tol());
    gw.assert_approx_eq::<f32>(&ew, tol());
}

#[test]
fn wgpu_int_bool_and_indexing_match_eager() {
    if !adapter_available() {
        return;
    }
    fn case<B: Backend>(x: TensorData, device: &B::Device) -> (TensorData, TensorData) {
        let x = Tensor::<B, 2>::from_data(x, device);
        let idx = x.clone().argmax(1);
        let mask = x.clone().greater_elem(0.0);
        let picked = x.clone().gather(1, idx.clone());
        let y = x.mask_fill(mask, 0.0).slice([1..3, 0..4]) + picked.slice([1..3, 0..1]);
        (idx.into_data(), y.into_data())
    }
    let device = Default::default();
    let x = data([4, 6], 6);
    let (ci, cy) = case::<C>(x.clone(), &device);
    let (ei, ey) = case::<Wgpu>(x, &device);
    ci.assert_eq(&ei, true);
    cy.assert_approx_eq::<f32>(&ey, tol());
}

#[test]
fn wgpu_device_transfer_is_a_break_and_moves_the_data() {
    if !adapter_available() {
        return;
    }
    // Two Burn devices: the default adapter and the CPU-type adapter. On lavapipe (CI) both are
    // the same Vulkan driver, still two separate devices and clients.
    let (from, to) = (WgpuDevice::DefaultDevice, WgpuDevice::Cpu);
    let probe = std::panic::catch_unwind(|| {
        Tensor::<Wgpu, 1>::from_floats([1.0, 2.0], &WgpuDevice::Cpu)
            .sum()
            .into_scalar()
    });
    if probe.is_err() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "under CI=true lavapipe provides the CPU-type adapter this test needs"
        );
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED: wgpu_device_transfer: no CPU-type wgpu adapter (lavapipe) here. ***\n"
        );
        return;
    }
    let x = data([4, 4], 7);
    let (moved, report) = explain(|| {
        let t = Tensor::<C, 2>::from_data(x.clone(), &from) * 2.0;
        (t.to_device(&to) + 1.0).into_data()
    });
    assert!(
        report
            .break_reasons
            .iter()
            .any(|b| b.reason == BreakReason::DeviceTransfer),
        "{report}"
    );
    let expected: Vec<f32> = x
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v * 2.0 + 1.0)
        .collect();
    moved.assert_approx_eq::<f32>(&TensorData::new(expected, [4, 4]), tol());
}
