//! `Compiled<Wgpu>` against eager `Wgpu` (raw CubeBackend): kernels really execute, on a GPU or
//! on lavapipe's CPU Vulkan (`apt-get install -y mesa-vulkan-drivers`).
//!
//! Without a Vulkan adapter these tests fail when `CI=true` and elsewhere say loudly that they
//! were skipped and how to enable them. Shapes are small and kernels few: lavapipe is slow.
#![cfg(all(feature = "wgpu", not(feature = "wgpu-fusion")))]

use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData, backend::Backend};
use burn_compile::{Compiled, Wgpu};

type C = Compiled<Wgpu>;

mod support;

fn adapter_available() -> bool {
    support::wgpu::adapter_available::<Wgpu>("Compiled<Wgpu>")
}

use support::matrix as data;

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
