//! Burn's own `Fusion<CubeBackend>` (wgpu) as the inner backend: correct, if slow (both layers
//! queue every op). Compared with eager `Fusion<CubeBackend>` on the same inputs.
//!
//! Its own build: `cargo test -p burn-compile --features wgpu-fusion --test wgpu_fusion` (with
//! burn-cubecl's `fusion` feature on, the raw CubeBackend is not `BackendIr`, so this cannot
//! share a build with tests/gpu.rs). Same adapter rules as tests/gpu.rs.
#![cfg(feature = "wgpu-fusion")]

use burn::backend::Autodiff;
use burn_compile::{Compiled, WgpuFusion};

mod support;

type C = Compiled<WgpuFusion>;

fn adapter_available() -> bool {
    support::wgpu::adapter_available::<WgpuFusion>("Compiled<WgpuFusion>")
}

use support::matrix as data;

#[test]
fn fusion_inner_forward_and_gradients_match_eager_fusion() {
    if !adapter_available() {
        return;
    }
    let (x, w, b) = (data([8, 16], 1), data([16, 16], 2), data([1, 16], 3));
    support::wgpu::check_forward::<C, WgpuFusion>(x, w, b);
    let (x, w) = (data([4, 8], 4), data([8, 8], 5));
    support::wgpu::check_gradients::<Autodiff<C>, Autodiff<WgpuFusion>>(x, w);
}
