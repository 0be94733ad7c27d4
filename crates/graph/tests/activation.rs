//! Captured activations: op ids round-trip exactly, and foreign ids are not taken for ours.

use burn_compile_graph::Activation;

#[test]
fn every_activation_round_trips_through_its_op_id() {
    let all = [
        Activation::Relu,
        Activation::ReluBackward,
        Activation::LeakyRelu {
            negative_slope: 0.01,
        },
        Activation::Prelu,
        Activation::Gelu,
        Activation::GeluBackward,
        Activation::Sigmoid,
        Activation::SigmoidBackward,
        Activation::HardSigmoid {
            alpha: 0.2,
            beta: -0.5,
        },
        Activation::LogSigmoid,
        Activation::LogSigmoidBackward,
        Activation::Softmax { dim: 3 },
        Activation::LogSoftmax { dim: 0 },
        Activation::Softmin { dim: 12 },
    ];
    for a in all {
        let id = a.op_id();
        assert_eq!(Activation::parse(&id), Some(a), "{id}");
    }
    // Scalars are kept bit-exactly (not rounded through a decimal form).
    let slope = 0.1f64 + 0.2f64;
    let id = Activation::LeakyRelu {
        negative_slope: slope,
    }
    .op_id();
    assert_eq!(
        Activation::parse(&id),
        Some(Activation::LeakyRelu {
            negative_slope: slope
        })
    );
}

#[test]
fn other_ids_are_not_activations() {
    for id in [
        "softmax(dim=1)",
        "burn_compile.softmax",
        "burn_compile.softmax(dim=x)",
        "burn_compile.relu(1)",
        "burn_compile.leaky_relu(0.01)",
        "burn_compile.hard_sigmoid(0x0)",
        "burn_compile.unknown",
        "other.relu",
    ] {
        assert_eq!(Activation::parse(id), None, "{id}");
    }
}
