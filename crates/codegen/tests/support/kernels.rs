//! The kernels the code generators' tests share (GPU and C): the snapshotted ones are the ones
//! executed (on wgpu, and compiled as C).
#![allow(dead_code)] // each test binary uses its own subset

use burn_backend::DType;
use burn_compile_schedule::{BinaryOp, Constant, FusedKernel, Instr, ReduceOp, RowLayout, UnaryOp};

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

pub const BINARY_OPS: [BinaryOp; 6] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Powf,
    BinaryOp::ReluBackward,
];

/// The range of a binary op's first operand in the execution tests: ReLU's backward must see
/// outputs on both sides of 0 (and 0 itself is below the range's resolution: it is tested by
/// the differential tests), the others positive values (`powf`).
pub fn binary_lhs_range(op: BinaryOp) -> (f32, f32) {
    if op == BinaryOp::ReluBackward {
        (-2.0, 2.0)
    } else {
        (0.5, 2.0)
    }
}

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

/// The shape the snapshots run `kernel` over: a row kernel's own shape, for a pointwise kernel
/// a shape of its rank (`[1024]`, `[64, 128]`, `[4, 16, 32]`).
pub fn snapshot_shape(kernel: &FusedKernel) -> Vec<usize> {
    match &kernel.row {
        Some(row) => row.shape.clone(),
        None => [vec![1024], vec![64, 128], vec![4, 16, 32]][kernel.rank as usize - 1].clone(),
    }
}

/// An f32 pointwise kernel.
pub fn kernel(
    rank: u8,
    inputs: Vec<Vec<bool>>,
    outputs: u16,
    scalars: u16,
    program: Vec<Instr>,
) -> FusedKernel {
    FusedKernel {
        dtype: DType::F32,
        rank,
        inputs,
        outputs,
        scalars,
        program,
        row: None,
    }
}

pub fn reduce(op: ReduceOp, a: u16) -> Instr {
    Instr::Reduce { op, a }
}

/// A row kernel over `shape` (`row_outputs` flags the outputs of shape `[R…, 1]`).
pub fn row_kernel(
    shape: &[usize],
    inputs: Vec<Vec<bool>>,
    row_outputs: Vec<bool>,
    scalars: u16,
    program: Vec<Instr>,
) -> FusedKernel {
    FusedKernel {
        row: Some(RowLayout::new(shape.to_vec(), row_outputs.clone())),
        ..kernel(
            shape.len() as u8,
            inputs,
            row_outputs.len() as u16,
            scalars,
            program,
        )
    }
}

/// Burn's layer norm over the last dimension of `[rows, n]`, as recorded (mean, centred
/// square, mean, `+ eps` (scalar 0), sqrt, divide), then `· γ[1, n] + β[1, n]`.
pub fn layer_norm(rows: usize, n: usize) -> FusedKernel {
    row_kernel(
        &[rows, n],
        vec![vec![false, false], vec![true, false], vec![true, false]],
        vec![false],
        1,
        vec![
            load(0),
            reduce(ReduceOp::Mean, 0),
            bin(BinaryOp::Sub, 0, 1),
            bin(BinaryOp::Mul, 2, 2),
            reduce(ReduceOp::Mean, 3),
            Instr::Scalar { index: 0 },
            bin(BinaryOp::Add, 4, 5),
            un(UnaryOp::Sqrt, 6),
            bin(BinaryOp::Div, 2, 7),
            load(1),
            bin(BinaryOp::Mul, 8, 9),
            load(2),
            bin(BinaryOp::Add, 10, 11),
            store(0, 12),
        ],
    )
}

/// Softmax over the last dimension of a rank-3 shape, as the scheduler expands it, also
/// writing the row sums (a row output).
pub fn softmax_rows(shape: [usize; 3]) -> FusedKernel {
    row_kernel(
        &shape,
        vec![vec![false, false, false]],
        vec![false, true],
        0,
        vec![
            load(0),
            reduce(ReduceOp::Max, 0),
            bin(BinaryOp::Sub, 0, 1),
            un(UnaryOp::Exp, 2),
            reduce(ReduceOp::Sum, 3),
            bin(BinaryOp::Div, 3, 4),
            store(0, 5),
            store(1, 4),
        ],
    )
}

/// Log-softmax over the last dimension, as the schedule expands Burn's:
/// `d = x - max(x)`, `d - log(sum(exp(d)))`.
pub fn log_softmax_rows(shape: [usize; 3]) -> FusedKernel {
    row_kernel(
        &shape,
        vec![vec![false, false, false]],
        vec![false],
        0,
        vec![
            load(0),
            reduce(ReduceOp::Max, 0),
            bin(BinaryOp::Sub, 0, 1),
            un(UnaryOp::Exp, 2),
            reduce(ReduceOp::Sum, 3),
            un(UnaryOp::Log, 4),
            bin(BinaryOp::Sub, 2, 5),
            store(0, 6),
        ],
    )
}

/// `x·s[r, 1] - Σ x·s` over `[8, 256]`: a row kernel reading an input broadcast along the row.
pub fn row_scaled_minus_sum() -> FusedKernel {
    row_kernel(
        &[8, 256],
        vec![vec![false, false], vec![false, true]],
        vec![false],
        0,
        vec![
            load(0),
            load(1),
            bin(BinaryOp::Mul, 0, 1),
            reduce(ReduceOp::Sum, 2),
            bin(BinaryOp::Sub, 2, 3),
            store(0, 4),
        ],
    )
}

/// `(x - m[r, 1]) * s0`: an input broadcast along the last dimension (a row statistic).
pub fn row_broadcast() -> FusedKernel {
    kernel(
        2,
        vec![vec![false, false], vec![false, true]],
        1,
        1,
        vec![
            load(0),
            load(1),
            bin(BinaryOp::Sub, 0, 1),
            Instr::Scalar { index: 0 },
            bin(BinaryOp::Mul, 2, 3),
            store(0, 4),
        ],
    )
}

/// `out = exp(x) * s0 + x`, rank 2, one runtime scalar.
pub fn chain() -> FusedKernel {
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

/// Folded `ones` and `zeros`: `y = (1 − x) · s1`, `z = x + s0` — the one a literal, the
/// zero a scalar argument (of value 0 at replay), as the schedule emits them.
pub fn constants() -> FusedKernel {
    kernel(
        2,
        vec![vec![false, false]],
        2,
        2,
        vec![
            Instr::Const {
                value: Constant::One,
            },
            load(0),
            bin(BinaryOp::Sub, 0, 1),
            Instr::Scalar { index: 0 },
            bin(BinaryOp::Add, 1, 3),
            Instr::Scalar { index: 1 },
            bin(BinaryOp::Mul, 2, 5),
            store(0, 6),
            store(1, 4),
        ],
    )
}

/// A kernel that reads no tensor: `exp(s0)` everywhere (a `full` folded with what follows).
pub fn fill() -> FusedKernel {
    kernel(
        2,
        vec![],
        1,
        1,
        vec![Instr::Scalar { index: 0 }, un(UnaryOp::Exp, 0), store(0, 1)],
    )
}

/// `out = relu(x + bias[1, n])`: the bias skips dimension 0.
pub fn bias_relu() -> FusedKernel {
    bias_activation(UnaryOp::Relu)
}

/// `out = op(x + bias[1, n])`.
pub fn bias_activation(op: UnaryOp) -> FusedKernel {
    kernel(
        2,
        vec![vec![false, false], vec![true, false]],
        1,
        0,
        vec![
            load(0),
            load(1),
            bin(BinaryOp::Add, 0, 1),
            un(op, 2),
            store(0, 3),
        ],
    )
}

/// `out = x - y`, rank 2, both read with their own strides (the strided-input cases).
pub fn difference() -> FusedKernel {
    kernel(
        2,
        vec![vec![false, false], vec![false, false]],
        1,
        0,
        vec![load(0), load(1), bin(BinaryOp::Sub, 0, 1), store(0, 2)],
    )
}

/// `out = x`, rank 4: a view copy (`view_copies`), its input read through the view's strides.
pub fn view_copy() -> FusedKernel {
    kernel(4, vec![vec![false; 4]], 1, 0, vec![load(0), store(0, 0)])
}

/// `y = gelu(x); z = sigmoid(y) / (tanh(x) + y)`, rank 3: `y` is written and reused.
pub fn two_outputs() -> FusedKernel {
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
pub fn unary(op: UnaryOp) -> FusedKernel {
    kernel(
        1,
        vec![vec![false]],
        1,
        0,
        vec![load(0), un(op, 0), store(0, 1)],
    )
}

/// `out = op(x, y)`, rank 1.
pub fn binary(op: BinaryOp) -> FusedKernel {
    kernel(
        1,
        vec![vec![false], vec![false]],
        1,
        0,
        vec![load(0), load(1), bin(op, 0, 1), store(0, 2)],
    )
}
