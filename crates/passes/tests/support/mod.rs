//! Hand-built graph pieces shared by the pass tests: 2×2 f32 tensors by id.

#![allow(dead_code)]

use burn_backend::{DType, Distribution, Shape};
use burn_ir::{
    BinaryOpIr, FloatOperationIr, NumericOperationIr, OperationIr, RandomOpIr, TensorId, TensorIr,
    TensorStatus, UnaryOpIr,
};

pub fn t(id: u64, status: TensorStatus) -> TensorIr {
    TensorIr {
        id: TensorId::new(id),
        shape: Shape::new([2, 2]),
        status,
        dtype: DType::F32,
    }
}

pub fn exp(input: TensorIr, out: u64) -> OperationIr {
    OperationIr::Float(
        DType::F32,
        FloatOperationIr::Exp(UnaryOpIr {
            input,
            out: t(out, TensorStatus::NotInit),
        }),
    )
}

fn binary(
    op: fn(BinaryOpIr) -> NumericOperationIr,
    lhs: TensorIr,
    rhs: TensorIr,
    out: u64,
) -> OperationIr {
    OperationIr::NumericFloat(
        DType::F32,
        op(BinaryOpIr {
            lhs,
            rhs,
            out: t(out, TensorStatus::NotInit),
        }),
    )
}

pub fn add(lhs: TensorIr, rhs: TensorIr, out: u64) -> OperationIr {
    binary(NumericOperationIr::Add, lhs, rhs, out)
}

pub fn sub(lhs: TensorIr, rhs: TensorIr, out: u64) -> OperationIr {
    binary(NumericOperationIr::Sub, lhs, rhs, out)
}

pub fn random(out: u64) -> OperationIr {
    OperationIr::Float(
        DType::F32,
        FloatOperationIr::Random(RandomOpIr {
            out: t(out, TensorStatus::NotInit),
            distribution: Distribution::Default,
        }),
    )
}

pub fn drop_op(id: u64) -> OperationIr {
    OperationIr::Drop(t(id, TensorStatus::ReadWrite))
}

fn activation(
    kind: burn_compile_graph::Activation,
    inputs: Vec<TensorIr>,
    out: u64,
) -> OperationIr {
    OperationIr::Custom(burn_ir::CustomOpIr {
        id: kind.op_id(),
        inputs,
        outputs: vec![t(out, TensorStatus::NotInit)],
    })
}

/// `out = relu(x)`, recorded whole as a captured activation.
pub fn relu(x: TensorIr, out: u64) -> OperationIr {
    activation(burn_compile_graph::Activation::Relu, vec![x], out)
}

/// `out = relu_backward(x, grad)`, recorded whole as a captured activation.
pub fn relu_backward(x: TensorIr, grad: TensorIr, out: u64) -> OperationIr {
    activation(
        burn_compile_graph::Activation::ReluBackward,
        vec![x, grad],
        out,
    )
}
