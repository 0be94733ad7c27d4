//! Captured activations run with the inner backend's own `ActivationOps` (its fused kernels
//! where it has them, Burn's defaults where it has none): the same code eager Burn runs.

use crate::InnerDevice;
use burn_backend::Scalar;
use burn_compile_graph::Activation;
use burn_ir::{BackendIr, OperationIr, TensorHandle};

/// Runs the activation recorded by `op` (a custom op accepted by [`Activation::of`]).
pub(crate) fn run<B: BackendIr>(inner: &InnerDevice<B>, op: &OperationIr, kind: Activation) {
    let OperationIr::Custom(custom) = op else {
        unreachable!("the schedule makes activation steps of custom ops only")
    };
    // In input order: an input passed twice is ReadOnly first and ReadWrite (consumed) last.
    let mut inputs = custom.inputs.iter().map(|t| {
        B::float_tensor(TensorHandle {
            handle: inner.handle(t),
            shape: t.shape.clone(),
        })
    });
    let mut next = || inputs.next().expect("arity checked by Activation::of");
    let out = match kind {
        Activation::Relu => B::relu(next()),
        Activation::ReluBackward => B::relu_backward(next(), next()),
        Activation::LeakyRelu { negative_slope } => {
            B::leaky_relu(next(), Scalar::Float(negative_slope))
        }
        Activation::Prelu => B::prelu(next(), next()),
        Activation::Gelu => B::gelu(next()),
        Activation::GeluBackward => B::gelu_backward(next(), next()),
        Activation::Sigmoid => B::sigmoid(next()),
        Activation::SigmoidBackward => B::sigmoid_backward(next(), next()),
        Activation::HardSigmoid { alpha, beta } => {
            B::hard_sigmoid(next(), Scalar::Float(alpha), Scalar::Float(beta))
        }
        Activation::LogSigmoid => B::log_sigmoid(next()),
        Activation::LogSigmoidBackward => B::log_sigmoid_backward(next(), next()),
        Activation::Softmax { dim } => B::softmax(next(), dim),
        Activation::LogSoftmax { dim } => B::log_softmax(next(), dim),
        Activation::Softmin { dim } => B::softmin(next(), dim),
    };
    inner.register_handle(custom.outputs[0].id, B::float_tensor_handle(out));
}
