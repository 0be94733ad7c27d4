//! The codegen tests' shared kernels ([`kernels`], also the C generator's fixtures) and the
//! GPU launch layout of the snapshots.
#![allow(dead_code)] // each test binary uses its own subset

mod kernels;
pub mod reference;
pub use kernels::*;

use burn_compile_schedule::FusedKernel;

/// The layout the snapshots launch `kernel` over: [`snapshot_shape`], inputs contiguous.
pub fn layout(kernel: &FusedKernel) -> burn_compile_codegen::LaunchLayout {
    burn_compile_codegen::LaunchLayout::contiguous(kernel, &snapshot_shape(kernel))
}
