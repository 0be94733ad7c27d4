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
