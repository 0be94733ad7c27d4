//! The CubeCL kernel of a [`PointwiseKernel`]: one kernel body, specialized at compile time on
//! the kernel's program (CubeCL expands the comptime `#[unroll]` loops and `match`es into
//! straight-line code, so each distinct program is its own kernel).
//!
//! Each unit computes one element of the iteration space (the outputs are contiguous in it,
//! allocated by the plan); each input is read through its own strides (so views need no copy),
//! skipping the dimensions it broadcasts. Shape and strides are the launch's [`LaunchLayout`],
//! constants of the generated code.

use crate::KernelSpec;
use burn_compile_schedule::{BinaryOp, Constant, Instr, UnaryOp};
use cubecl::ScalarArgType;
use cubecl::prelude::*;

// Index loops: CubeCL expands `for i in 0..n` with comptime bounds, not iterators.
#[allow(clippy::needless_range_loop)]
#[cube(launch_unchecked)]
pub fn pointwise<F: Float + ScalarArgType>(
    inputs: &Sequence<Array<F>>,
    scalars: &Sequence<F>,
    outputs: &mut Sequence<Array<F>>,
    #[comptime] spec: &KernelSpec,
) {
    let kernel = comptime![spec.kernel()];
    let layout = comptime![spec.layout()];
    let pos = ABSOLUTE_POS;
    let rank = comptime![kernel.rank as usize];
    if pos >= comptime![layout.len()] {
        terminate!();
    }
    // Coordinates of `pos` in the iteration space (row-major).
    let mut coords = Sequence::<usize>::new();
    #[unroll]
    for d in 0..rank {
        let inner = comptime![layout.shape[d + 1..].iter().product::<usize>()];
        let size = comptime![layout.shape[d]];
        coords.push((pos / inner) % size);
    }
    // Register k holds the k-th value produced by the program.
    let mut regs = Sequence::<F>::new();

    #[unroll]
    for i in 0..kernel.program.len() {
        let instr = comptime![kernel.program[i].clone()];
        match instr {
            Instr::Load { input } => {
                let broadcast = comptime![kernel.inputs[input as usize].clone()];
                let t = inputs.index(comptime![input as usize]);
                let mut offset: usize = 0;
                #[unroll]
                for d in 0..rank {
                    let stride = comptime![layout.strides[input as usize][d]];
                    if comptime![!broadcast[d]] {
                        offset += *coords.index(d) * stride;
                    }
                }
                regs.push(t[offset]);
            }
            Instr::Scalar { .. }
            | Instr::Const { .. }
            | Instr::Unary { .. }
            | Instr::Binary { .. } => {
                regs.push(compute::<F>(&regs, scalars, instr));
            }
            Instr::Store { output, value } => {
                let v = *regs.index(comptime![value as usize]);
                let out = outputs.index_mut(comptime![output as usize]);
                out[pos] = v;
            }
            // Row kernels only (`crate::row`): the scheduler never puts one here.
            Instr::Reduce { .. } => {}
        }
    }
}

/// The value of a scalar, unary or binary instruction (shared by every kernel kind).
#[cube]
pub(crate) fn compute<F: Float + ScalarArgType>(
    regs: &Sequence<F>,
    scalars: &Sequence<F>,
    #[comptime] instr: Instr,
) -> F {
    match instr {
        Instr::Scalar { index } => *scalars.index(comptime![index as usize]),
        Instr::Const { value } => constant::<F>(value),
        Instr::Unary { op, a } => unary::<F>(*regs.index(comptime![a as usize]), op),
        Instr::Binary { op, a, b } => binary::<F>(
            *regs.index(comptime![a as usize]),
            *regs.index(comptime![b as usize]),
            op,
        ),
        _ => panic!("not a value computed from registers: {instr:?}"),
    }
}

#[cube]
fn constant<F: Float>(#[comptime] value: Constant) -> F {
    match comptime![value] {
        Constant::One => F::new(1.0),
    }
}

#[cube]
fn unary<F: Float>(x: F, #[comptime] op: UnaryOp) -> F {
    match comptime![op] {
        UnaryOp::Exp => F::exp(x),
        UnaryOp::Log => F::ln(x),
        UnaryOp::Sqrt => F::sqrt(x),
        UnaryOp::Tanh => F::tanh(x),
        UnaryOp::Erf => F::erf(x),
        UnaryOp::Recip => F::recip(x),
        UnaryOp::Abs => F::abs(x),
        UnaryOp::Cos => F::cos(x),
        UnaryOp::Sin => F::sin(x),
        UnaryOp::Relu => F::max(x, F::new(0.0)),
        UnaryOp::Sigmoid => F::new(1.0) / (F::new(1.0) + F::exp(-x)),
        // Burn's GELU: x · (1 + erf(x / √2)) / 2.
        UnaryOp::Gelu => {
            x * (F::new(1.0) + F::erf(x * F::new(core::f32::consts::FRAC_1_SQRT_2))) * F::new(0.5)
        }
    }
}

#[cube]
fn binary<F: Float>(x: F, y: F, #[comptime] op: BinaryOp) -> F {
    match comptime![op] {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Powf => F::powf(x, y),
    }
}
