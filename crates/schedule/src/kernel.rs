//! The kernel IR: what a generated kernel computes, as both code generators (CubeCL for CUDA
//! and wgpu, C for the CPU) read it. A [`FusedKernel`] is a small SSA program over registers:
//! loads of its inputs, elementwise ops, constants, reductions over the last dimension (a row
//! kernel, [`RowLayout`]) and stores of its outputs. It holds nothing that changes between
//! graphs with the same key: no sizes (the launch's layout brings them), no scalar values
//! (runtime arguments), no tensor ids.

use burn_backend::DType;
use serde::{Deserialize, Serialize};

/// An elementwise function of one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnaryOp {
    Exp,
    Log,
    Sqrt,
    Tanh,
    Erf,
    Recip,
    Abs,
    Cos,
    Sin,
    Relu,
    Sigmoid,
    /// Burn's exact GELU: `x · (1 + erf(x / √2)) / 2`.
    Gelu,
}

/// An elementwise function of two values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Powf,
    /// ReLU's backward: gradient `b` where the forward output `a` is above 0, else 0 — as Burn
    /// computes it, `mask_fill(b, a <= 0, 0)` (a NaN output passes the gradient on).
    ReluBackward,
}

/// A reduction over the last dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
}

/// A constant a kernel computes instead of reading (Burn's `ones`, and `zeros`).
///
/// In the generated code only one is a literal: a shader compiler may fold `x + 0.0` to `x`
/// (Vulkan does not promise signed zeros for literals; −0 + 0 is +0), so a zero reaches the
/// kernel as a runtime scalar argument of value 0, which no compiler can fold. Every identity
/// a compiler may apply to a literal one (x·1, x/1) is exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Constant {
    One,
}

impl Constant {
    pub fn value(self) -> f64 {
        match self {
            Constant::One => 1.0,
        }
    }
}

/// One instruction of a kernel program. Each value-producing instruction defines the next
/// register (SSA: register `k` is the `k`-th value produced).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Instr {
    /// Kernel input `input`, read at the current position (broadcast as the input says).
    Load {
        input: u16,
    },
    /// Runtime scalar argument `index`.
    Scalar {
        index: u16,
    },
    /// A constant (folded from a `ones` tensor, which is then never filled; a `zeros` tensor
    /// becomes a [`Instr::Scalar`] of value 0, see [`Constant`]).
    Const {
        value: Constant,
    },
    Unary {
        op: UnaryOp,
        a: u16,
    },
    Binary {
        op: BinaryOp,
        a: u16,
        b: u16,
    },
    /// Writes register `value` to kernel output `output` (not a value).
    Store {
        output: u16,
        value: u16,
    },
    /// Reduction of register `a` over the row (row kernels only): a row value.
    Reduce {
        op: ReduceOp,
        a: u16,
    },
}

/// How a row kernel walks its iteration space `[R…, N]`: `units` units share a row, a cube
/// holds `rows_per_cube` rows (its units laid out `[rows_per_cube, units]`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RowLayout {
    /// The iteration shape (shapes are part of the graph key, so kernels specialize on them).
    pub shape: Vec<usize>,
    /// Units per row (a power of two): each takes every `units`-th column.
    pub units: u32,
    /// Rows per cube (a power of two that divides the number of rows, so no cube holds a
    /// partial set of rows and every unit of a cube reaches the same barriers).
    pub rows_per_cube: u32,
    /// Per output: a row value (shape `[R…, 1]`) rather than a full tensor.
    pub row_outputs: Vec<bool>,
}

impl RowLayout {
    /// Units per cube the layout aims for: enough to hide latency, within wgpu's default
    /// limit of 256 invocations per workgroup.
    pub const CUBE: u32 = 256;
    /// Rows of up to this many columns are taken by one plane-sized group of 32 units (a
    /// warp on CUDA: the reduction needs no shared memory there); longer rows get more units.
    pub const PLANE_ROW: usize = 1024;

    /// The layout of a row kernel over `shape`.
    ///
    /// Short rows (W1's softmax has 128 columns, its layer norms 512) are where a cube per row
    /// wastes the GPU: most units idle and every reduction step waits at a cube-wide barrier.
    /// So a row of up to [`Self::PLANE_ROW`] columns gets 32 units (a plane on NVIDIA GPUs)
    /// and a cube packs several rows; a longer row gets up to 256 units, at least 8 columns
    /// each, and a cube of its own.
    pub fn new(shape: Vec<usize>, row_outputs: Vec<bool>) -> RowLayout {
        let rank = shape.len();
        let columns = shape[rank - 1].max(1);
        let rows: usize = shape[..rank - 1].iter().product();
        let units = if columns <= Self::PLANE_ROW {
            32
        } else {
            (columns / 8).next_power_of_two().min(Self::CUBE as usize) as u32
        };
        // The largest power of two that divides the rows, up to a full cube.
        let most = (Self::CUBE / units).max(1);
        let divides = if rows == 0 {
            1
        } else {
            1u32 << rows.trailing_zeros().min(31)
        };
        RowLayout {
            shape,
            units,
            rows_per_cube: most.min(divides),
            row_outputs,
        }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.shape[..self.shape.len() - 1].iter().product()
    }

    /// Number of columns (the reduced dimension).
    pub fn columns(&self) -> usize {
        self.shape[self.shape.len() - 1]
    }
}

/// A fused elementwise kernel: what code generation needs, and nothing that changes between
/// graphs with the same key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FusedKernel {
    /// Element type of every input, output and register.
    pub dtype: DType,
    /// Rank of the iteration space (the output shape).
    pub rank: u8,
    /// Per input, per dimension: broadcast (size 1 where the output's is larger).
    pub inputs: Vec<Vec<bool>>,
    /// Number of outputs.
    pub outputs: u16,
    /// Number of scalar arguments.
    pub scalars: u16,
    pub program: Vec<Instr>,
    /// `Some` for a row kernel (reductions over the last dimension, or row values).
    #[serde(default)]
    pub row: Option<RowLayout>,
}
