//! Activation functions captured whole.
//!
//! burn-ir has no activation operations: a router-style capture would record Burn's default
//! decomposition (softmax as max/sub/exp/sum/div, gelu through erf, …) and never run the inner
//! backend's own kernel. Eager Burn calls that kernel, so a decomposed capture differs from it
//! (Flex's exact gelu derivative against the default's tanh approximation; a fused softmax
//! rounds differently in bf16) and runs more ops. `Compiled<B>` records each activation as one
//! `OperationIr::Custom` whose id names an [`Activation`]; the runtime calls the inner backend's
//! `ActivationOps` for it, and passes may rewrite it like any other op (it is pure).

use burn_ir::{CustomOpIr, OperationIr};
use serde::{Deserialize, Serialize};

/// Prefix of the custom-op ids that burn-compile records.
const CUSTOM_PREFIX: &str = "burn_compile.";

/// An activation function of Burn's `ActivationOps`, with its parameters.
///
/// Scalars are kept as `f64` and written into the op id bit-exactly, so two graphs that differ
/// only by a slope have different keys (the slope is compiled into the plan, like a shape).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Activation {
    Relu,
    /// Inputs: the forward output, the gradient.
    ReluBackward,
    LeakyRelu {
        negative_slope: f64,
    },
    /// Inputs: the tensor, alpha.
    Prelu,
    Gelu,
    /// Inputs: the forward input, the gradient.
    GeluBackward,
    Sigmoid,
    /// Inputs: the forward output, the gradient.
    SigmoidBackward,
    HardSigmoid {
        alpha: f64,
        beta: f64,
    },
    LogSigmoid,
    /// Inputs: the forward input, the gradient.
    LogSigmoidBackward,
    Softmax {
        dim: usize,
    },
    LogSoftmax {
        dim: usize,
    },
    Softmin {
        dim: usize,
    },
}

impl Activation {
    /// The name in op ids and listings.
    pub fn name(&self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::ReluBackward => "relu_backward",
            Activation::LeakyRelu { .. } => "leaky_relu",
            Activation::Prelu => "prelu",
            Activation::Gelu => "gelu",
            Activation::GeluBackward => "gelu_backward",
            Activation::Sigmoid => "sigmoid",
            Activation::SigmoidBackward => "sigmoid_backward",
            Activation::HardSigmoid { .. } => "hard_sigmoid",
            Activation::LogSigmoid => "log_sigmoid",
            Activation::LogSigmoidBackward => "log_sigmoid_backward",
            Activation::Softmax { .. } => "softmax",
            Activation::LogSoftmax { .. } => "log_softmax",
            Activation::Softmin { .. } => "softmin",
        }
    }

    /// Number of tensor inputs.
    pub fn arity(&self) -> usize {
        match self {
            Activation::ReluBackward
            | Activation::Prelu
            | Activation::GeluBackward
            | Activation::SigmoidBackward
            | Activation::LogSigmoidBackward => 2,
            _ => 1,
        }
    }

    /// The id of the custom op that records this activation, such as
    /// `burn_compile.softmax(dim=3)` or `burn_compile.leaky_relu(0x3f847ae147ae147b)`.
    pub fn op_id(&self) -> String {
        let name = self.name();
        match self {
            Activation::LeakyRelu { negative_slope } => {
                format!("{CUSTOM_PREFIX}{name}({:#x})", negative_slope.to_bits())
            }
            Activation::HardSigmoid { alpha, beta } => format!(
                "{CUSTOM_PREFIX}{name}({:#x},{:#x})",
                alpha.to_bits(),
                beta.to_bits()
            ),
            Activation::Softmax { dim }
            | Activation::LogSoftmax { dim }
            | Activation::Softmin { dim } => format!("{CUSTOM_PREFIX}{name}(dim={dim})"),
            _ => format!("{CUSTOM_PREFIX}{name}"),
        }
    }

    /// Reads an id written by [`Activation::op_id`]; `None` for any other id.
    pub fn parse(id: &str) -> Option<Self> {
        let rest = id.strip_prefix(CUSTOM_PREFIX)?;
        let (name, args) = match rest.split_once('(') {
            Some((name, args)) => (name, Some(args.strip_suffix(')')?)),
            None => (rest, None),
        };
        let float = |s: &str| {
            u64::from_str_radix(s.strip_prefix("0x")?, 16)
                .ok()
                .map(f64::from_bits)
        };
        let dim = || args?.strip_prefix("dim=")?.parse::<usize>().ok();
        let plain = |a: Activation| args.is_none().then_some(a);
        match name {
            "relu" => plain(Activation::Relu),
            "relu_backward" => plain(Activation::ReluBackward),
            "leaky_relu" => Some(Activation::LeakyRelu {
                negative_slope: float(args?)?,
            }),
            "prelu" => plain(Activation::Prelu),
            "gelu" => plain(Activation::Gelu),
            "gelu_backward" => plain(Activation::GeluBackward),
            "sigmoid" => plain(Activation::Sigmoid),
            "sigmoid_backward" => plain(Activation::SigmoidBackward),
            "hard_sigmoid" => {
                let (alpha, beta) = args?.split_once(',')?;
                Some(Activation::HardSigmoid {
                    alpha: float(alpha)?,
                    beta: float(beta)?,
                })
            }
            "log_sigmoid" => plain(Activation::LogSigmoid),
            "log_sigmoid_backward" => plain(Activation::LogSigmoidBackward),
            "softmax" => Some(Activation::Softmax { dim: dim()? }),
            "log_softmax" => Some(Activation::LogSoftmax { dim: dim()? }),
            "softmin" => Some(Activation::Softmin { dim: dim()? }),
            _ => None,
        }
    }

    /// The activation recorded by `op`, if it is one of ours with the right number of tensors.
    pub fn of(op: &OperationIr) -> Option<Self> {
        match op {
            OperationIr::Custom(CustomOpIr {
                id,
                inputs,
                outputs,
            }) => Self::parse(id).filter(|a| inputs.len() == a.arity() && outputs.len() == 1),
            _ => None,
        }
    }
}
