//! Kernel construction shared by the codegen tests.

use burn_backend::DType;
use burn_compile_schedule::{Instr, PointwiseKernel};

/// An f32 pointwise kernel.
pub fn kernel(
    rank: u8,
    inputs: Vec<Vec<bool>>,
    outputs: u16,
    scalars: u16,
    program: Vec<Instr>,
) -> PointwiseKernel {
    PointwiseKernel {
        dtype: DType::F32,
        rank,
        inputs,
        outputs,
        scalars,
        program,
    }
}
