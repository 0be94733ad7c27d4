//! Graph builders shared by the schedule tests.
#![allow(dead_code)] // each test binary uses a part

use burn_backend::{DType, Shape};
use burn_compile_graph::Activation;
use burn_ir::{CustomOpIr, OperationIr, TensorId, TensorIr, TensorStatus};

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
