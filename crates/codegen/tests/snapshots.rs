//! Generated code of every pointwise kernel kind, CUDA C++ and WGSL, produced offline (no GPU).
//! Review changes with `cargo insta review`; the files live in `snapshots/codegen/`. The same
//! kernels run on wgpu in `wgpu_exec.rs`.

mod support;

use burn_backend::DType;
use burn_compile_codegen::{CodegenError, LaunchLayout};
use burn_compile_schedule::{PointwiseKernel, UnaryOp};
use support::{BINARY_OPS, UNARY_OPS, binary, unary};

/// The CUDA source of `kernel` over its snapshot layout ([`support::layout`]).
fn cuda_source(kernel: &PointwiseKernel) -> Result<String, CodegenError> {
    burn_compile_codegen::cuda_source(kernel, &support::layout(kernel))
}

/// The WGSL source of `kernel` over its snapshot layout.
fn wgsl_source(kernel: &PointwiseKernel) -> Result<String, CodegenError> {
    burn_compile_codegen::wgsl_source(kernel, &support::layout(kernel))
}

/// Snapshots both targets' code of `kernel` under `name`, over its snapshot layout.
fn snapshot(name: &str, kernel: &PointwiseKernel) {
    snapshot_over(name, kernel, &support::layout(kernel));
}

/// Snapshots both targets' code of `kernel` over `layout` under `name`.
fn snapshot_over(name: &str, kernel: &PointwiseKernel, layout: &LaunchLayout) {
    let cuda = burn_compile_codegen::cuda_source(kernel, layout).expect("CUDA source");
    let wgsl = burn_compile_codegen::wgsl_source(kernel, layout).expect("WGSL source");
    insta::with_settings!({ snapshot_path => "../../../snapshots/codegen", description => format!("{kernel:?} over {layout:?}") }, {
        insta::assert_snapshot!(format!("{name}.cuda"), cuda);
        insta::assert_snapshot!(format!("{name}.wgsl"), wgsl);
    });
}

#[test]
fn pointwise_chain() {
    snapshot("pointwise_chain", &support::chain());
}

/// An input read through a transposed view (`[64, 128]` with strides `[1, 64]`): its strides
/// are constants of the generated code, no copy is made.
#[test]
fn pointwise_transposed_input() {
    let k = support::chain();
    snapshot_over(
        "pointwise_transposed_input",
        &k,
        &LaunchLayout::new(&k, &[64, 128], &[&[1, 64]]),
    );
}

/// Layouts that read the same elements are one kernel: a broadcast dimension's stride is not
/// part of it.
#[test]
fn a_broadcast_dimensions_stride_is_not_part_of_the_layout() {
    let k = support::bias_relu();
    let a = LaunchLayout::new(&k, &[64, 128], &[&[128, 1], &[128, 1]]);
    let b = LaunchLayout::new(&k, &[64, 128], &[&[128, 1], &[0, 1]]);
    assert_eq!(a, b);
    assert_eq!(a.strides[1], vec![0, 1]);
    assert_ne!(a, LaunchLayout::new(&k, &[64, 128], &[&[1, 64], &[0, 1]]));
}

#[test]
fn pointwise_constants() {
    snapshot("pointwise_constants", &support::constants());
}

#[test]
fn pointwise_fill_reads_no_tensor() {
    snapshot("pointwise_fill", &support::fill());
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

/// Rows too long for one plane: 256 units, 12 columns each (the last ones past the row),
/// reductions through shared memory on both targets.
#[test]
fn row_layer_norm_long_rows() {
    snapshot("row_layer_norm_long_rows", &support::layer_norm(8, 3000));
}

/// Rows too long to keep in registers (9000 columns, 36 per unit): each phase loops over the
/// unit's columns and re-reads them.
#[test]
fn row_layer_norm_streamed() {
    snapshot("row_layer_norm_streamed", &support::layer_norm(2, 9000));
}

/// Plane reductions only where a row's units are exactly one plane of a fixed size.
#[test]
fn row_reductions_use_planes_only_where_a_row_is_one_plane() {
    use burn_compile_codegen::Reduction;
    use burn_compile_codegen::offline::{CudaFlavor, Flavor, WgslFlavor};
    let layout = |columns: usize| support::layer_norm(64, columns).row.expect("a row kernel");
    let cuda = CudaFlavor::device_properties();
    assert_eq!(Reduction::for_device(&cuda, &layout(512)), Reduction::Plane);
    assert_eq!(
        Reduction::for_device(&cuda, &layout(3000)),
        Reduction::Shared
    );
    // No plane operations (wgpu on a CPU adapter), or a plane size known only as a range.
    let wgsl = WgslFlavor::device_properties();
    assert_eq!(
        Reduction::for_device(&wgsl, &layout(512)),
        Reduction::Shared
    );
    let mut ranged = cuda.clone();
    ranged.hardware.plane_size_min = 16;
    ranged.hardware.plane_size_max = 64;
    assert_eq!(
        Reduction::for_device(&ranged, &layout(512)),
        Reduction::Shared
    );
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
