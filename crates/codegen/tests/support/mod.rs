//! The kernels the codegen tests share: the snapshotted ones are the ones executed on wgpu.
#![allow(dead_code)] // each test binary uses its own subset

use burn_backend::DType;
use burn_compile_schedule::{BinaryOp, Instr, PointwiseKernel, UnaryOp};

pub const UNARY_OPS: [UnaryOp; 12] = [
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Tanh,
    UnaryOp::Erf,
    UnaryOp::Recip,
    UnaryOp::Abs,
    UnaryOp::Cos,
    UnaryOp::Sin,
    UnaryOp::Relu,
    UnaryOp::Sigmoid,
    UnaryOp::Gelu,
];

pub const BINARY_OPS: [BinaryOp; 5] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Powf,
];

pub fn load(input: u16) -> Instr {
    Instr::Load { input }
}
pub fn un(op: UnaryOp, a: u16) -> Instr {
    Instr::Unary { op, a }
}
pub fn bin(op: BinaryOp, a: u16, b: u16) -> Instr {
    Instr::Binary { op, a, b }
}
pub fn store(output: u16, value: u16) -> Instr {
    Instr::Store { output, value }
}

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

/// `out = exp(x) * s0 + x`, rank 2, one runtime scalar.
pub fn chain() -> PointwiseKernel {
    kernel(
        2,
        vec![vec![false, false]],
        1,
        1,
        vec![
            load(0),
            un(UnaryOp::Exp, 0),
            Instr::Scalar { index: 0 },
            bin(BinaryOp::Mul, 1, 2),
            bin(BinaryOp::Add, 3, 0),
            store(0, 4),
        ],
    )
}

/// `out = relu(x + bias[1, n])`: the bias skips dimension 0.
pub fn bias_relu() -> PointwiseKernel {
    kernel(
        2,
        vec![vec![false, false], vec![true, false]],
        1,
        0,
        vec![
            load(0),
            load(1),
            bin(BinaryOp::Add, 0, 1),
            un(UnaryOp::Relu, 2),
            store(0, 3),
        ],
    )
}

/// `y = gelu(x); z = sigmoid(y) / (tanh(x) + y)`, rank 3: `y` is written and reused.
pub fn two_outputs() -> PointwiseKernel {
    kernel(
        3,
        vec![vec![false, false, false]],
        2,
        0,
        vec![
            load(0),
            un(UnaryOp::Gelu, 0),
            un(UnaryOp::Sigmoid, 1),
            un(UnaryOp::Tanh, 0),
            bin(BinaryOp::Add, 3, 1),
            bin(BinaryOp::Div, 2, 4),
            store(0, 1),
            store(1, 5),
        ],
    )
}

/// `out = op(x)`, rank 1.
pub fn unary(op: UnaryOp) -> PointwiseKernel {
    kernel(
        1,
        vec![vec![false]],
        1,
        0,
        vec![load(0), un(op, 0), store(0, 1)],
    )
}

/// `out = op(x, y)`, rank 1.
pub fn binary(op: BinaryOp) -> PointwiseKernel {
    kernel(
        1,
        vec![vec![false], vec![false]],
        1,
        0,
        vec![load(0), load(1), bin(op, 0, 1), store(0, 2)],
    )
}
