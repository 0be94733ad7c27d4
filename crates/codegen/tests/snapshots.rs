//! Generated code of every pointwise kernel kind, CUDA C++ and WGSL, produced offline (no GPU).
//! Review changes with `cargo insta review`; the files live in `snapshots/codegen/`. The same
//! kernels run on wgpu in `wgpu_exec.rs`.

mod support;

use burn_backend::DType;
use burn_compile_codegen::{CodegenError, LaunchLayout};
use burn_compile_schedule::{FusedKernel, UnaryOp};
use support::{BINARY_OPS, UNARY_OPS, binary, unary};
include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../snapshots/assert.rs"
));

/// The CUDA source of `kernel` over its snapshot layout ([`support::layout`]).
fn cuda_source(kernel: &FusedKernel) -> Result<String, CodegenError> {
    burn_compile_codegen::cuda_source(kernel, &support::layout(kernel))
}

/// The WGSL source of `kernel` over its snapshot layout.
fn wgsl_source(kernel: &FusedKernel) -> Result<String, CodegenError> {
    burn_compile_codegen::wgsl_source(kernel, &support::layout(kernel))
}

/// Snapshots both targets' code of `kernel` under `name`, over its snapshot layout.
fn snapshot(name: &str, kernel: &FusedKernel) {
    snapshot_over(name, kernel, &support::layout(kernel));
}

/// Snapshots both targets' code of `kernel` over `layout` under `name`.
fn snapshot_over(name: &str, kernel: &FusedKernel, layout: &LaunchLayout) {
    let cuda = burn_compile_codegen::cuda_source(kernel, layout).expect("CUDA source");
    let wgsl = burn_compile_codegen::wgsl_source(kernel, layout).expect("WGSL source");
    assert_stage_snapshot!(
        "codegen",
        format!("{name}.cuda"),
        cuda,
        format!("{kernel:?} over {layout:?}")
    );
    assert_stage_snapshot!(
        "codegen",
        format!("{name}.wgsl"),
        wgsl,
        format!("{kernel:?} over {layout:?}")
    );
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

/// A view copy (`view_copies`): attention's heads, `[2, 8, 4, 16]` swapped to `[2, 4, 8, 16]`,
/// loaded through the swapped strides and stored contiguous, four elements a load (the head
/// dimension stays the unit-stride one).
#[test]
fn view_copy_of_swapped_heads() {
    let k = support::view_copy();
    let layout = LaunchLayout::new(&k, &[2, 4, 8, 16], &[&[512, 16, 64, 1]]).vectorize(&k, 4);
    assert_eq!(layout.vector, 4);
    snapshot_over("view_copy_of_swapped_heads", &k, &layout);
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

/// The widest vector each layout allows (a target allowing 4).
#[test]
fn vector_width_follows_the_layout() {
    let width = |k: &FusedKernel, shape: &[usize], strides: &[&[usize]]| {
        LaunchLayout::new(k, shape, strides).vectorize(k, 4).vector
    };
    let bias = support::bias_relu();
    // Contiguous, and a bias broadcast along rows: vectors of 4.
    assert_eq!(width(&bias, &[64, 128], &[&[128, 1], &[0, 1]]), 4);
    // A last dimension of 6 takes pairs; of 7, nothing.
    assert_eq!(width(&bias, &[64, 6], &[&[6, 1], &[0, 1]]), 2);
    assert_eq!(width(&bias, &[64, 7], &[&[7, 1], &[0, 1]]), 1);
    // A row stride that is not a multiple of the vector (a slice of a wider tensor): pairs.
    assert_eq!(width(&bias, &[64, 128], &[&[130, 1], &[0, 1]]), 2);
    // Strided along the last dimension (a transposed view): scalar code.
    assert_eq!(width(&bias, &[64, 128], &[&[1, 64], &[0, 1]]), 1);
    // An input broadcast along the last dimension is read once per vector (narrow).
    let centre = support::row_broadcast();
    let layout =
        LaunchLayout::new(&centre, &[64, 128], &[&[128, 1], &[1, 0]]).vectorize(&centre, 4);
    assert_eq!(layout.vector, 4);
    assert!(!layout.narrow_input(&centre, 0) && layout.narrow_input(&centre, 1));
    assert_eq!(
        (layout.input_slot(&centre, 0), layout.input_slot(&centre, 1)),
        (0, 0)
    );
    // In scalar code nothing is narrow.
    assert!(
        !LaunchLayout::new(&centre, &[64, 128], &[&[128, 1], &[1, 0]]).narrow_input(&centre, 1)
    );
    // A row kernel keeps at least one vector per unit of a row (32 units): 128 columns take
    // 4, 64 take 2, 40 none; its row outputs are narrow.
    let softmax = |n: usize| support::softmax_rows([2, 4, n]);
    for (n, v) in [(128, 4), (64, 2), (40, 1)] {
        let k = softmax(n);
        let layout = LaunchLayout::contiguous(&k, &[2, 4, n]).vectorize(&k, 4);
        assert_eq!(layout.vector, v, "{n} columns");
        assert_eq!(layout.narrow_output(&k, 1), v > 1);
        assert!(!layout.narrow_output(&k, 0));
    }
    // The target's widest access, narrowed by the buffers' alignment.
    assert_eq!(burn_compile_codegen::widest_aligned(8, [0, 64, 4]), 4);
    assert_eq!(burn_compile_codegen::widest_aligned(8, [0, 3]), 1);
    assert_eq!(burn_compile_codegen::widest_aligned(4, []), 4);
}

/// Vectors of 4 × f32: a bias read in vectors (broadcast along rows only), `float_4` loads
/// and stores on CUDA, `vec4<f32>` in WGSL.
#[test]
fn pointwise_vectorized_bias_relu() {
    let k = support::bias_relu();
    let layout = support::layout(&k).vectorize(&k, 4);
    assert_eq!(layout.vector, 4);
    snapshot_over("pointwise_vectorized_bias_relu", &k, &layout);
}

/// Vectors of 4 with an input broadcast along the last dimension: read once per vector and
/// splatted.
#[test]
fn pointwise_vectorized_row_broadcast() {
    let k = support::row_broadcast();
    let layout = LaunchLayout::new(&k, &[64, 128], &[&[128, 1], &[1, 0]]).vectorize(&k, 4);
    assert_eq!(layout.vector, 4);
    snapshot_over("pointwise_vectorized_row_broadcast", &k, &layout);
}

/// W1's residual-free layer norm over 512 columns in vectors of 4: 128 vectors, 4 per unit;
/// each reduction first combines a vector's elements, then the row's units.
#[test]
fn row_layer_norm_vectorized() {
    let k = support::layer_norm(4096, 512);
    let layout = support::layout(&k).vectorize(&k, 4);
    assert_eq!(layout.vector, 4);
    snapshot_over("row_layer_norm_vectorized", &k, &layout);
}

/// Softmax in vectors of 4 with its row sums: a narrow output written once per row.
#[test]
fn row_softmax_vectorized() {
    let k = support::softmax_rows([32, 8, 128]);
    let layout = support::layout(&k).vectorize(&k, 4);
    assert_eq!(layout.vector, 4);
    snapshot_over("row_softmax_vectorized", &k, &layout);
}

/// The layer norm of W1 in bf16 as CUDA runs it: vectors of 8 (16 bytes), accumulated in f32.
#[test]
fn row_layer_norm_bf16_vectorized_cuda() {
    let mut k = support::layer_norm(4096, 512);
    k.dtype = DType::BF16;
    let layout = support::layout(&k).vectorize(&k, 8);
    assert_eq!(layout.vector, 8);
    let cuda = burn_compile_codegen::cuda_source(&k, &layout).expect("CUDA source");
    assert_stage_snapshot!(
        "codegen",
        "row_layer_norm_bf16_vectorized.cuda",
        cuda,
        format!("{k:?} over {layout:?}")
    );
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

/// Log-softmax in vectors of 4: the row's log-sum-exp is a row value, subtracted along the row.
#[test]
fn row_log_softmax_vectorized() {
    let k = support::log_softmax_rows([32, 8, 128]);
    let layout = support::layout(&k).vectorize(&k, 4);
    assert_eq!(layout.vector, 4);
    snapshot_over("row_log_softmax_vectorized", &k, &layout);
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

/// Every op in vectors (4 × f32, 8 × bf16, 8 × f16) generates code on CUDA, and none of it
/// negates a vector: CubeCL's C++ vector types (`float_4`) have no unary minus, which NVRTC
/// refuses (regression: the vectorized sigmoid, `1 / (1 + exp(-x))`, failed to compile on the
/// H200; it now computes `0 - x`).
#[test]
fn vectorized_ops_compile_for_cuda_without_negating_a_vector() {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let kernels = UNARY_OPS
            .into_iter()
            .map(unary)
            .chain(BINARY_OPS.into_iter().map(binary));
        for mut k in kernels {
            k.dtype = dtype;
            let layout = LaunchLayout::contiguous(&k, &[1024]).vectorize(&k, 16 / dtype.size());
            assert!(layout.vector > 1);
            let cuda = burn_compile_codegen::cuda_source(&k, &layout)
                .unwrap_or_else(|e| panic!("{dtype:?} {:?}: {e}", k.program));
            assert!(
                !cuda.contains("= -l_"),
                "{dtype:?} {:?} negates a value:\n{cuda}",
                k.program
            );
        }
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
    // bf16 vectors use two vector types (pairs and octets), which CubeCL prints in hash order.
    let mut bf16 = support::layer_norm(64, 512);
    bf16.dtype = DType::BF16;
    let kernels = [
        (unary(UnaryOp::Exp), 1),
        (support::layer_norm(64, 512), 1),
        (support::layer_norm(64, 512), 4),
        (bf16, 8),
    ];
    for (k, vector) in kernels {
        let layout = support::layout(&k).vectorize(&k, vector);
        let source = move |k: &FusedKernel| {
            let wgsl = match k.dtype {
                DType::F32 => Some(burn_compile_codegen::wgsl_source(k, &layout)),
                _ => None,
            };
            (burn_compile_codegen::cuda_source(k, &layout), wgsl)
        };
        let first = source(&k);
        for _ in 0..8 {
            let (kernel, source) = (k.clone(), source.clone());
            let again = std::thread::spawn(move || source(&kernel)).join().unwrap();
            assert_eq!(first, again, "{k:?}");
        }
    }
}

/// A symbolic kernel (`dynamic = [true, false]`): the rows are a runtime argument, so the
/// units, the row coordinate and the row stride come from `meta`; the 128 columns stay
/// constants (one kernel for every number of rows). The bias, broadcast along the rows, still
/// reads its row in consecutive vectors.
#[test]
fn pointwise_symbolic_rows_bias_relu() {
    let k = support::bias_relu();
    let real = support::layout(&k).vectorize(&k, 4);
    let (layout, meta) = real.symbolic(&k, &[true, false]);
    assert_eq!(layout.shape, vec![0, 128]);
    assert_eq!(meta.len(), layout.meta_entries(&k).len());
    snapshot_over("pointwise_symbolic_rows_bias_relu", &k, &layout);
}

/// Every dimension symbolic, one input transposed: sizes and strides all runtime arguments.
#[test]
fn pointwise_symbolic_every_dimension_transposed_input() {
    let k = support::chain();
    let real = LaunchLayout::new(&k, &[64, 128], &[&[1, 64]]);
    let (layout, meta) = real.symbolic(&k, &[true, true]);
    assert_eq!(layout.shape, vec![0, 0]);
    // Units, the row's vectors per step, both sizes, both strides.
    use burn_compile_codegen::Meta;
    assert_eq!(
        layout.meta_entries(&k),
        vec![
            Meta::Len,
            Meta::Inner(0),
            Meta::Size(0),
            Meta::Size(1),
            Meta::Stride(0, 0),
            Meta::Stride(0, 1)
        ]
    );
    assert_eq!(meta, vec![64 * 128, 128, 64, 128, 1, 64]);
    snapshot_over(
        "pointwise_symbolic_every_dimension_transposed_input",
        &k,
        &layout,
    );
}

/// Two launches of one symbolic kernel over different sizes are one kernel (equal layouts),
/// with their own runtime arguments.
#[test]
fn a_symbolic_layout_is_one_kernel_for_every_size() {
    let k = support::bias_relu();
    let of = |rows: usize| {
        LaunchLayout::new(&k, &[rows, 128], &[&[128, 1], &[0, 1]])
            .vectorize(&k, 4)
            .symbolic(&k, &[true, false])
    };
    let (a, meta_a) = of(6);
    let (b, meta_b) = of(50);
    assert_eq!(a, b);
    assert_ne!(meta_a, meta_b);
    assert_eq!(meta_a[0], 6 * 128 / 4, "units: the rows' vectors");
}

/// W1's layer norm symbolic in its rows (`[rows, 512]`, a batch × sequence): the row count and
/// the row stride are runtime arguments, a cube holds one row (of 32 units), the 512 columns
/// stay constants (kept in registers, vectors of 4).
#[test]
fn row_symbolic_rows_layer_norm() {
    let k = support::layer_norm(4096, 512);
    let real = support::layout(&k).vectorize(&k, 4);
    let dynamic = [true, false];
    let symbolic = burn_compile_codegen::symbolic_kernel(&k, &dynamic);
    let row = symbolic.row.as_ref().expect("a row kernel");
    assert_eq!((row.shape.clone(), row.rows_per_cube), (vec![0, 512], 1));
    let (layout, _) = real.symbolic(&symbolic, &dynamic);
    snapshot_over("row_symbolic_rows_layer_norm", &symbolic, &layout);
}

/// W1's attention softmax symbolic in every size (`[batch·heads, seq, seq]`): rows, the row
/// length and the strides are runtime arguments; the row is streamed, its mean-free max and sum
/// over the runtime length.
#[test]
fn row_symbolic_softmax() {
    let k = support::softmax_rows([32, 8, 128]);
    let real = support::layout(&k).vectorize(&k, 4);
    let dynamic = [true, true, true];
    let symbolic = burn_compile_codegen::symbolic_kernel(&k, &dynamic);
    let (layout, meta) = real.symbolic(&symbolic, &dynamic);
    assert_eq!(meta.len(), layout.meta_entries(&symbolic).len());
    snapshot_over("row_symbolic_softmax", &symbolic, &layout);
}

/// A horizontal kernel: two members of one program over their own shapes (the second with a
/// transposed input), each its own range of units, buffers and scalars.
#[test]
fn horizontal_two_members() {
    let k = support::chain();
    let a = LaunchLayout::contiguous(&k, &[4, 8]);
    let b = LaunchLayout::new(&k, &[16, 2], &[&[1, 16]]);
    let members = [(&k, &a), (&k, &b)];
    let description = format!("{k:?} over {a:?}, then over {b:?}");
    let cuda = burn_compile_codegen::cuda_horizontal_source(&members).expect("CUDA source");
    let wgsl = burn_compile_codegen::wgsl_horizontal_source(&members).expect("WGSL source");
    assert_stage_snapshot!(
        "codegen",
        "horizontal_two_members.cuda",
        cuda,
        description.clone()
    );
    assert_stage_snapshot!("codegen", "horizontal_two_members.wgsl", wgsl, description);
}

/// A horizontal kernel's members each start on a plane of their own (a warp on CUDA), so no
/// plane runs two members' programs one after the other; the last ends the launch.
#[test]
fn horizontal_members_start_on_planes_of_their_own() {
    use burn_compile_codegen::{HorizontalSpec, MEMBER_ALIGNMENT};
    let k = support::chain();
    let one = LaunchLayout::contiguous(&k, &[1, 1]);
    let wide = LaunchLayout::contiguous(&k, &[5, 7]);
    let members = [(&k, &one), (&k, &wide), (&k, &one), (&k, &one)];
    let spec = HorizontalSpec::new(&members);
    let starts: Vec<usize> = (0..4).map(|m| spec.start(m)).collect();
    let ends: Vec<usize> = (0..4).map(|m| spec.end(m)).collect();
    assert_eq!(MEMBER_ALIGNMENT, 32);
    assert_eq!(starts, vec![0, 32, 96, 128]);
    assert_eq!(ends, vec![1, 67, 97, 129]);
    assert_eq!(spec.units(), 129);
}

/// The column sum of a bias gradient: `[1, 4096, 512]` summed over its 4096 rows (W1's shape),
/// in bf16 on CUDA (f32 accumulation) and f32 on WGSL.
#[test]
fn column_sum_bias_gradient() {
    let dims = burn_compile_codegen::ColumnDims {
        outer: 1,
        reduced: 4096,
        inner: 512,
        trailing: 1,
        divisor: 1,
    };
    let description = format!("column sum over {dims:?}");
    let cuda = burn_compile_codegen::cuda_column_source(DType::BF16, dims).expect("CUDA source");
    let wgsl = burn_compile_codegen::wgsl_column_source(DType::F32, dims).expect("WGSL source");
    assert_stage_snapshot!(
        "codegen",
        "column_sum_bias_gradient.cuda",
        cuda,
        description.clone()
    );
    assert_stage_snapshot!(
        "codegen",
        "column_sum_bias_gradient.wgsl",
        wgsl,
        description
    );
}

/// Three column sums of W1's bias-gradient shape (`[1, 4096, 512]` over its rows) launched
/// together: 64 cubes each, the cube's member picked from its position, each member's tile as
/// [`column_sum_bias_gradient`]'s — in bf16 on CUDA and f32 on WGSL.
#[test]
fn column_sums_launched_together() {
    let dims = burn_compile_codegen::ColumnDims {
        outer: 1,
        reduced: 4096,
        inner: 512,
        trailing: 1,
        divisor: 1,
    };
    let description = format!("3 column sums over {dims:?} in one launch");
    let cuda =
        burn_compile_codegen::cuda_column_sums_source(DType::BF16, dims, 3).expect("CUDA source");
    let wgsl =
        burn_compile_codegen::wgsl_column_sums_source(DType::F32, dims, 3).expect("WGSL source");
    assert_stage_snapshot!(
        "codegen",
        "column_sums_launched_together.cuda",
        cuda,
        description.clone()
    );
    assert_stage_snapshot!(
        "codegen",
        "column_sums_launched_together.wgsl",
        wgsl,
        description
    );
}

/// A batch norm's statistics: the mean over batch and space of `[64, 256, 56, 56]` per
/// channel (W3's), read as `[1, 64, 256, 3136]` — 256 channels of 200,704 elements each, so
/// split: 13 cubes per channel summing chunks of 15,439 elements (adjacent units reading
/// adjacent elements), then one unit per channel adding its 13 partial sums in order and
/// dividing — in bf16 on CUDA and f32 on WGSL.
#[test]
fn column_mean_batch_norm_statistics() {
    let dims = burn_compile_codegen::ColumnDims {
        outer: 1,
        reduced: 64,
        inner: 256,
        trailing: 3136,
        divisor: 64 * 3136,
    };
    let description = format!("strided column mean over {dims:?}");
    let cuda = burn_compile_codegen::cuda_column_source(DType::BF16, dims).expect("CUDA source");
    let wgsl = burn_compile_codegen::wgsl_column_source(DType::F32, dims).expect("WGSL source");
    assert_stage_snapshot!(
        "codegen",
        "column_mean_batch_norm_statistics.cuda",
        cuda,
        description.clone()
    );
    assert_stage_snapshot!(
        "codegen",
        "column_mean_batch_norm_statistics.wgsl",
        wgsl,
        description
    );
}

/// A batch norm's gradient sum on a late layer: `[256, 2048, 7, 7]` per channel (W3's last
/// stage), read as `[1, 256, 2048, 49]` — 2048 channels, enough cubes: one cube per channel
/// walking its 256 runs of 49 adjacent elements, no split — in bf16 on CUDA and f32 on WGSL.
#[test]
fn column_sum_batch_norm_late_layer() {
    let dims = burn_compile_codegen::ColumnDims {
        outer: 1,
        reduced: 256,
        inner: 2048,
        trailing: 49,
        divisor: 1,
    };
    let description = format!("strided column sum over {dims:?}");
    let cuda = burn_compile_codegen::cuda_column_source(DType::BF16, dims).expect("CUDA source");
    let wgsl = burn_compile_codegen::wgsl_column_source(DType::F32, dims).expect("WGSL source");
    assert_stage_snapshot!(
        "codegen",
        "column_sum_batch_norm_late_layer.cuda",
        cuda,
        description.clone()
    );
    assert_stage_snapshot!(
        "codegen",
        "column_sum_batch_norm_late_layer.wgsl",
        wgsl,
        description
    );
}
