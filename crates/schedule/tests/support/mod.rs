//! Graph builders shared by the schedule tests and the runtime's executable tests (included
//! there by path): each op's output takes its first input's dtype, and its shape from the op.
#![allow(dead_code)] // each test binary uses a part

use burn_backend::{DType, Shape};
use burn_compile_graph::Activation;
use burn_compile_schedule::{
    AttentionGroup, ColumnGroup, FusedKernel, MatmulGroup, Plan, ScheduleOptions, schedule,
};
use burn_ir::{
    BaseOperationIr, BinaryOpIr, CustomOpIr, FloatOperationIr, LinearBiasBackwardOpIr, LinearOpIr,
    MatmulOpIr, ModuleOperationIr, NumericOperationIr, OperationIr, ReduceDimOpIr, ScalarIr,
    ScalarOpIr, ShapeOpIr, SwapDimsOpIr, TensorId, TensorIr, TensorStatus, UnaryOpIr,
};

pub fn tensor(id: u64, shape: &[usize], status: TensorStatus, dtype: DType) -> TensorIr {
    TensorIr {
        id: TensorId::new(id),
        shape: Shape::from(shape.to_vec()),
        status,
        dtype,
    }
}

/// `o = relu(input)`, recorded whole as a captured activation.
pub fn relu(input: TensorIr, o: u64) -> OperationIr {
    let shape = input.shape.to_vec();
    let out = tensor(o, &shape, TensorStatus::NotInit, input.dtype);
    OperationIr::Custom(CustomOpIr {
        id: Activation::Relu.op_id(),
        inputs: vec![input],
        outputs: vec![out],
    })
}

/// `o = relu_backward(output, grad)`, recorded whole as a captured activation.
pub fn relu_backward(output: TensorIr, grad: TensorIr, o: u64) -> OperationIr {
    let shape = grad.shape.to_vec();
    let out = tensor(o, &shape, TensorStatus::NotInit, grad.dtype);
    OperationIr::Custom(CustomOpIr {
        id: Activation::ReluBackward.op_id(),
        inputs: vec![output, grad],
        outputs: vec![out],
    })
}

/// A new tensor (`NotInit`) of `input`'s dtype.
fn out_like(input: &TensorIr, id: u64, shape: &[usize]) -> TensorIr {
    tensor(id, shape, TensorStatus::NotInit, input.dtype)
}

/// The shape two operands broadcast to, aligned on their last dimension (a graph may hold
/// operands of two ranks, which no pass may fuse).
fn broadcast(lhs: &[usize], rhs: &[usize]) -> Vec<usize> {
    let rank = lhs.len().max(rhs.len());
    let at = |s: &[usize], i: usize| (i + s.len()).checked_sub(rank).map_or(1, |j| s[j]);
    (0..rank).map(|i| at(lhs, i).max(at(rhs, i))).collect()
}

fn binary(
    lhs: TensorIr,
    rhs: TensorIr,
    id: u64,
    op: fn(BinaryOpIr) -> NumericOperationIr,
) -> OperationIr {
    let shape = broadcast(&lhs.shape, &rhs.shape);
    let (dtype, out) = (lhs.dtype, out_like(&lhs, id, &shape));
    OperationIr::NumericFloat(dtype, op(BinaryOpIr { lhs, rhs, out }))
}

/// `id = lhs + rhs` (broadcast), in `lhs`'s dtype.
pub fn add(lhs: TensorIr, rhs: TensorIr, id: u64) -> OperationIr {
    binary(lhs, rhs, id, NumericOperationIr::Add)
}

/// `id = lhs * rhs` (broadcast), in `lhs`'s dtype.
pub fn mul(lhs: TensorIr, rhs: TensorIr, id: u64) -> OperationIr {
    binary(lhs, rhs, id, NumericOperationIr::Mul)
}

fn scalar(
    lhs: TensorIr,
    value: f64,
    id: u64,
    op: fn(ScalarOpIr) -> NumericOperationIr,
) -> OperationIr {
    let out = out_like(&lhs, id, &lhs.shape.to_vec());
    let dtype = lhs.dtype;
    OperationIr::NumericFloat(
        dtype,
        op(ScalarOpIr {
            lhs,
            rhs: ScalarIr::Float(value),
            out,
        }),
    )
}

/// `id = lhs * value`.
pub fn mul_scalar(lhs: TensorIr, value: f64, id: u64) -> OperationIr {
    scalar(lhs, value, id, NumericOperationIr::MulScalar)
}

/// `id = lhs + value`.
pub fn add_scalar(lhs: TensorIr, value: f64, id: u64) -> OperationIr {
    scalar(lhs, value, id, NumericOperationIr::AddScalar)
}

/// `id = lhs / value`.
pub fn div_scalar(lhs: TensorIr, value: f64, id: u64) -> OperationIr {
    scalar(lhs, value, id, NumericOperationIr::DivScalar)
}

/// `id = exp(input)`.
pub fn exp(input: TensorIr, id: u64) -> OperationIr {
    let out = out_like(&input, id, &input.shape.to_vec());
    OperationIr::Float(input.dtype, FloatOperationIr::Exp(UnaryOpIr { input, out }))
}

/// `id = lhs @ rhs`: `[.., m, k] @ [.., k, n]`, batch dimensions broadcast.
pub fn matmul(lhs: TensorIr, rhs: TensorIr, id: u64) -> OperationIr {
    let (l, r) = (lhs.shape.to_vec(), rhs.shape.to_vec());
    let rank = l.len();
    let mut shape = broadcast(&l[..rank - 2], &r[..rank - 2]);
    shape.extend([l[rank - 2], r[rank - 1]]);
    let out = out_like(&lhs, id, &shape);
    OperationIr::Float(
        lhs.dtype,
        FloatOperationIr::Matmul(MatmulOpIr { lhs, rhs, out }),
    )
}

/// `id = x @ w (+ b)`: `[.., k] @ [k, n]`.
pub fn linear(x: TensorIr, w: TensorIr, b: Option<TensorIr>, id: u64) -> OperationIr {
    let mut shape = x.shape.to_vec();
    *shape.last_mut().unwrap() = w.shape[1];
    let out = out_like(&x, id, &shape);
    OperationIr::Module(ModuleOperationIr::Linear(LinearOpIr {
        x,
        weight: w,
        bias: b,
        out,
    }))
}

/// `id = reshape(input)` to `shape`.
pub fn reshape(input: TensorIr, shape: &[usize], id: u64) -> OperationIr {
    let out = out_like(&input, id, shape);
    OperationIr::BaseFloat(BaseOperationIr::Reshape(ShapeOpIr { input, out }))
}

fn every<T>(_: &T) -> bool {
    true
}

fn reduce_dim(
    input: TensorIr,
    axis: usize,
    id: u64,
    op: fn(ReduceDimOpIr) -> NumericOperationIr,
) -> OperationIr {
    let mut shape = input.shape.to_vec();
    shape[axis] = 1;
    let (dtype, out) = (input.dtype, out_like(&input, id, &shape));
    OperationIr::NumericFloat(
        dtype,
        op(ReduceDimOpIr {
            input,
            out,
            axis,
            accumulator_len: 1,
        }),
    )
}

/// `id = sum_dim(input, axis)` (the axis kept, of size 1).
pub fn sum_dim(input: TensorIr, axis: usize, id: u64) -> OperationIr {
    reduce_dim(input, axis, id, NumericOperationIr::SumDim)
}

/// `id = mean_dim(input, axis)` (the axis kept, of size 1).
pub fn mean_dim(input: TensorIr, axis: usize, id: u64) -> OperationIr {
    reduce_dim(input, axis, id, NumericOperationIr::MeanDim)
}

/// `id = input.swap_dims(dim1, dim2)`.
pub fn swap_dims(input: TensorIr, dim1: usize, dim2: usize, id: u64) -> OperationIr {
    let mut shape = input.shape.to_vec();
    shape.swap(dim1, dim2);
    let out = out_like(&input, id, &shape);
    OperationIr::BaseFloat(BaseOperationIr::SwapDims(SwapDimsOpIr {
        input,
        out,
        dim1,
        dim2,
    }))
}

/// `id = linear_bias_backward(output_grad)`: the gradient summed over every dimension but the
/// last, of shape `[features]`.
pub fn linear_bias_backward(output_grad: TensorIr, id: u64) -> OperationIr {
    let features = *output_grad.shape.last().expect("a rank of at least 1");
    let out = out_like(&output_grad, id, &[features]);
    OperationIr::Module(ModuleOperationIr::LinearBiasBackward(
        LinearBiasBackwardOpIr { output_grad, out },
    ))
}

/// The graph's plan with every pass and generated kernel on, library matmuls and attention as
/// asked (the target accepting every call), no horizontal fusion, no column sums.
pub fn plan(ops: &[OperationIr], matmul: bool, attention: bool) -> Plan {
    plan_with(ops, matmul, attention, false, usize::MAX)
}

/// [`plan`] with column sums (the target accepting every one).
pub fn plan_with_columns(ops: &[OperationIr]) -> Plan {
    plan_of(ops, false, false, false, usize::MAX, true, false, true)
}

/// [`plan`] with column sums, those of one shape launched together (the target accepting
/// every one and every group).
pub fn plan_with_horizontal_columns(ops: &[OperationIr]) -> Plan {
    plan_of(ops, false, false, true, usize::MAX, true, false, true)
}

/// [`plan`] with library matmuls and column sums (each kind accepted).
pub fn plan_with_matmul_and_columns(ops: &[OperationIr]) -> Plan {
    plan_of(ops, true, false, false, usize::MAX, true, false, true)
}

/// [`plan`] with horizontal fusion as asked, within `max_kernel_buffers` per kernel.
pub fn plan_with(
    ops: &[OperationIr],
    matmul: bool,
    attention: bool,
    horizontal: bool,
    max_kernel_buffers: usize,
) -> Plan {
    plan_of(
        ops,
        matmul,
        attention,
        horizontal,
        max_kernel_buffers,
        false,
        false,
        true,
    )
}

#[allow(clippy::too_many_arguments)]
fn plan_of(
    ops: &[OperationIr],
    matmul: bool,
    attention: bool,
    horizontal: bool,
    max_kernel_buffers: usize,
    column: bool,
    view_copies: bool,
    relu_masks: bool,
) -> Plan {
    schedule(
        ops,
        ScheduleOptions {
            relu_masks,
            dead_code_elimination: true,
            common_subexpressions: true,
            fused: Some(&every::<FusedKernel>),
            max_kernel_buffers,
            horizontal,
            matmul: matmul.then_some(&every::<MatmulGroup>),
            attention: attention.then_some(&every::<AttentionGroup>),
            column: column.then_some(&every::<ColumnGroup>),
            horizontal_columns: (column && horizontal).then_some(&every::<ColumnGroup>),
            view_copies: view_copies.then_some(&every::<FusedKernel>),
            memory_planning: true,
            symbolic_sizes: &[],
        },
    )
}

/// The graph's plan as a CUDA-like target builds it: generated kernels, library matmuls,
/// copies of swapped views that products read (`view_copies`), horizontal fusion as asked.
pub fn plan_with_view_copies(ops: &[OperationIr], view_copies: bool, horizontal: bool) -> Plan {
    plan_of(
        ops,
        true,
        false,
        horizontal,
        usize::MAX,
        false,
        view_copies,
        true,
    )
}

/// [`plan`] with library matmuls, ReLU masks as asked ([`ScheduleOptions::relu_masks`]).
pub fn plan_with_relu_masks(ops: &[OperationIr], relu_masks: bool) -> Plan {
    plan_of(
        ops,
        true,
        false,
        false,
        usize::MAX,
        false,
        false,
        relu_masks,
    )
}

/// The drop of `t` (`t`'s status as the drop reads it: `ReadWrite`).
pub fn drop(t: TensorIr) -> OperationIr {
    OperationIr::Drop(t)
}
