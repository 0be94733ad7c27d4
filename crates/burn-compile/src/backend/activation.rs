//! [`ActivationOps`] of [`Compiled`]: each activation is recorded whole, as one custom op naming
//! an [`Activation`], and runs with the inner backend's own `ActivationOps` (see
//! `burn_compile_graph::Activation` for why the decomposition is not recorded).

use super::{Compiled, Primitive};
use burn_backend::ops::ActivationOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Scalar, TensorMetadata};
use burn_compile_graph::Activation;
use burn_ir::{BackendIr, CustomOpIr, OperationIr, TensorIr, TensorStatus};
use burn_router::RunnerClient;

/// Records `kind` over `inputs`; the output has the shape and dtype of the first input.
fn record<B: BackendIr, const N: usize>(
    kind: Activation,
    inputs: [Primitive<B>; N],
) -> Primitive<B> {
    debug_assert_eq!(kind.arity(), N);
    let client = inputs[0].client.clone();
    let out = TensorIr {
        id: client.create_empty_handle(),
        shape: inputs[0].shape(),
        status: TensorStatus::NotInit,
        dtype: inputs[0].dtype(),
    };
    let op = OperationIr::Custom(CustomOpIr {
        id: kind.op_id(),
        inputs: inputs.into_iter().map(|t| t.into_ir()).collect(),
        outputs: vec![out],
    });
    client.register(op).pop().expect("one output registered")
}

fn float(s: Scalar) -> f64 {
    s.elem::<f64>()
}

impl<B: BackendIr> ActivationOps<Self> for Compiled<B> {
    fn leaky_relu(tensor: FloatTensor<Self>, negative_slope: Scalar) -> FloatTensor<Self> {
        let negative_slope = float(negative_slope);
        record(Activation::LeakyRelu { negative_slope }, [tensor])
    }

    fn relu(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        record(Activation::Relu, [tensor])
    }

    fn relu_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        record(Activation::ReluBackward, [output, grad])
    }

    fn gelu(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        record(Activation::Gelu, [tensor])
    }

    fn prelu(tensor: FloatTensor<Self>, alpha: FloatTensor<Self>) -> FloatTensor<Self> {
        record(Activation::Prelu, [tensor, alpha])
    }

    fn gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        record(Activation::GeluBackward, [x, grad])
    }

    fn sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        record(Activation::Sigmoid, [tensor])
    }

    fn sigmoid_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        record(Activation::SigmoidBackward, [output, grad])
    }

    fn hard_sigmoid(tensor: FloatTensor<Self>, alpha: Scalar, beta: Scalar) -> FloatTensor<Self> {
        let (alpha, beta) = (float(alpha), float(beta));
        record(Activation::HardSigmoid { alpha, beta }, [tensor])
    }

    fn log_sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        record(Activation::LogSigmoid, [tensor])
    }

    fn softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        record(Activation::Softmax { dim }, [tensor])
    }

    fn log_softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        record(Activation::LogSoftmax { dim }, [tensor])
    }

    fn softmin(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        record(Activation::Softmin { dim }, [tensor])
    }

    fn log_sigmoid_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        record(Activation::LogSigmoidBackward, [x, grad])
    }
}
