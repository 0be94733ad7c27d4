//! Generated code of every pointwise kernel kind, CUDA C++ and WGSL, produced offline (no GPU).
//! Review changes with `cargo insta review`; the files live in `snapshots/codegen/`.

mod support;

use burn_backend::DType;
use burn_compile_codegen::{CodegenError, cuda_source, wgsl_source};
use burn_compile_schedule::{BinaryOp, Instr, PointwiseKernel, UnaryOp};
use support::kernel;

fn load(input: u16) -> Instr {
    Instr::Load { input }
}
fn un(op: UnaryOp, a: u16) -> Instr {
    Instr::Unary { op, a }
}
fn bin(op: BinaryOp, a: u16, b: u16) -> Instr {
    Instr::Binary { op, a, b }
}
fn store(output: u16, value: u16) -> Instr {
    Instr::Store { output, value }
}

/// Snapshots both targets' code of `kernel` under `name`.
fn snapshot(name: &str, kernel: &PointwiseKernel) {
    let cuda = cuda_source(kernel).expect("CUDA source");
    let wgsl = wgsl_source(kernel).expect("WGSL source");
    insta::with_settings!({ snapshot_path => "../../../snapshots/codegen", description => format!("{kernel:?}") }, {
        insta::assert_snapshot!(format!("{name}.cuda"), cuda);
        insta::assert_snapshot!(format!("{name}.wgsl"), wgsl);
    });
}

#[test]
fn pointwise_chain() {
    // out = exp(x) * s0 + x
    snapshot(
        "pointwise_chain",
        &kernel(
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
        ),
    );
}

#[test]
fn pointwise_broadcast_bias_relu() {
    // out = relu(x + bias[1, n]): the bias skips dimension 0.
    snapshot(
        "pointwise_broadcast_bias_relu",
        &kernel(
            2,
            vec![vec![false, false], vec![true, false]],
            1,
            0,
            vec![
                load(0),
                load(1),
                bin(BinaryOp::Add, 0, 1),
                un(UnaryOp::Relu, 2),
                store(0, 3),
            ],
        ),
    );
}

#[test]
fn pointwise_two_outputs_and_activations() {
    // y = gelu(x); z = sigmoid(y) / (tanh(x) + y): y is written and reused.
    snapshot(
        "pointwise_two_outputs_activations",
        &kernel(
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
        ),
    );
}

#[test]
fn every_unary_and_binary_op_compiles_on_both_targets() {
    use BinaryOp::*;
    use UnaryOp::*;
    let unary = [
        Exp, Log, Sqrt, Tanh, Erf, Recip, Abs, Cos, Sin, Relu, Sigmoid, Gelu,
    ];
    let binary = [Add, Sub, Mul, Div, Powf];
    for op in unary {
        let k = kernel(
            1,
            vec![vec![false]],
            1,
            0,
            vec![load(0), un(op, 0), store(0, 1)],
        );
        cuda_source(&k).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        wgsl_source(&k).unwrap_or_else(|e| panic!("{op:?}: {e}"));
    }
    for op in binary {
        let k = kernel(
            1,
            vec![vec![false], vec![false]],
            1,
            0,
            vec![load(0), load(1), bin(op, 0, 1), store(0, 2)],
        );
        let cuda = cuda_source(&k).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        wgsl_source(&k).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        assert!(cuda.contains("__global__"), "{cuda}");
    }
}

#[test]
fn half_precision_is_cuda_only() {
    let mut k = kernel(
        1,
        vec![vec![false]],
        1,
        0,
        vec![load(0), un(UnaryOp::Exp, 0), store(0, 1)],
    );
    k.dtype = DType::BF16;
    let cuda = cuda_source(&k).expect("bf16 on CUDA");
    assert!(cuda.contains("bfloat16"), "{cuda}");
    assert_eq!(
        wgsl_source(&k),
        Err(CodegenError::UnsupportedDType {
            dtype: DType::BF16,
            target: "WGSL"
        })
    );
}

#[test]
fn generated_code_is_deterministic() {
    let k = kernel(
        1,
        vec![vec![false]],
        1,
        0,
        vec![load(0), un(UnaryOp::Exp, 0), store(0, 1)],
    );
    let first = (cuda_source(&k), wgsl_source(&k));
    let again = std::thread::spawn(move || (cuda_source(&k), wgsl_source(&k)))
        .join()
        .unwrap();
    assert_eq!(first, again);
}
