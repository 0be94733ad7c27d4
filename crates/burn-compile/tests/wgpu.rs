//! `Compiled<Wgpu>` against eager `Wgpu` (raw CubeBackend): kernels really execute, on a GPU or
//! on lavapipe's CPU Vulkan (`apt-get install -y mesa-vulkan-drivers`).
//!
//! Without a Vulkan adapter these tests fail when `CI=true` and elsewhere say loudly that they
//! were skipped and how to enable them. Shapes are small and kernels few: lavapipe is slow.
#![cfg(all(feature = "wgpu", not(feature = "wgpu-fusion")))]

use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData, backend::Backend};
use burn_compile::{BreakReason, Compiled, Wgpu, explain};
use burn_wgpu::WgpuDevice;
use std::io::Write;

type C = Compiled<Wgpu>;

mod support;

fn adapter_available() -> bool {
    support::wgpu::adapter_available::<Wgpu>("Compiled<Wgpu>")
}

fn data(shape: [usize; 2], seed: u64) -> TensorData {
    TensorData::new(support::values(shape[0] * shape[1], seed), shape)
}

#[test]
fn wgpu_forward_matches_eager_and_replays_from_cache() {
    if !adapter_available() {
        return;
    }
    let (x, w, b) = (data([8, 16], 1), data([16, 16], 2), data([1, 16], 3));
    support::wgpu::check_forward::<C, Wgpu>(x, w, b);
}

#[test]
fn wgpu_gradients_match_eager() {
    if !adapter_available() {
        return;
    }
    support::wgpu::check_gradients::<Autodiff<C>, Autodiff<Wgpu>>(data([4, 8], 4), data([8, 8], 5));
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
    cy.assert_approx_eq::<f32>(&ey, support::wgpu::tol());
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
    moved.assert_approx_eq::<f32>(&TensorData::new(expected, [4, 4]), support::wgpu::tol());
}
