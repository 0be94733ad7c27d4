//! Generated code of every pointwise kernel kind, CUDA C++ and WGSL, produced offline (no GPU).
//! Review changes with `cargo insta review`; the files live in `snapshots/codegen/`. The same
//! kernels run on wgpu in `wgpu_exec.rs`.

mod support;

use burn_backend::DType;
use burn_compile_codegen::{CodegenError, cuda_source, wgsl_source};
use burn_compile_schedule::{PointwiseKernel, UnaryOp};
use support::{BINARY_OPS, UNARY_OPS, binary, unary};

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
    snapshot("pointwise_chain", &support::chain());
}

#[test]
fn pointwise_broadcast_bias_relu() {
    snapshot("pointwise_broadcast_bias_relu", &support::bias_relu());
}

#[test]
fn pointwise_two_outputs_and_activations() {
    snapshot("pointwise_two_outputs_activations", &support::two_outputs());
}

#[test]
fn row_layer_norm() {
    snapshot("row_layer_norm", &support::layer_norm(4096, 512));
}

#[test]
fn row_softmax_with_row_output() {
    snapshot(
        "row_softmax_row_output",
        &support::softmax_rows([32, 8, 128]),
    );
}

#[test]
fn every_unary_and_binary_op_compiles_on_both_targets() {
    for op in UNARY_OPS {
        let k = unary(op);
        cuda_source(&k).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        wgsl_source(&k).unwrap_or_else(|e| panic!("{op:?}: {e}"));
    }
    for op in BINARY_OPS {
        let k = binary(op);
        let cuda = cuda_source(&k).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        wgsl_source(&k).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        assert!(cuda.contains("__global__"), "{cuda}");
    }
}

#[test]
fn half_precision_is_cuda_only() {
    let mut k = unary(UnaryOp::Exp);
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
    // Hash maps inside the compilers are seeded per instance: generate several times, on
    // several threads, for each kernel kind.
    for k in [unary(UnaryOp::Exp), support::layer_norm(64, 512)] {
        let first = (cuda_source(&k), wgsl_source(&k));
        for _ in 0..4 {
            let kernel = k.clone();
            let again = std::thread::spawn(move || (cuda_source(&kernel), wgsl_source(&kernel)))
                .join()
                .unwrap();
            assert_eq!(first, again, "{k:?}");
        }
    }
}
