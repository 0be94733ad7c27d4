//! The generated C of every kernel kind, reviewed as snapshots (`snapshots/codegen/*.c.snap`,
//! beside the same kernels' CUDA and WGSL): the kernels the GPU code generator snapshots, over
//! the same shapes, inputs contiguous.

mod support;

use burn_compile_codegen_c::{c_function, c_symbolic_function, symbolic_layout};
use burn_compile_schedule::FusedKernel;
include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../snapshots/assert.rs"
));

fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1] as isize;
    }
    s
}

fn source(k: &FusedKernel, shape: &[usize], strides: Vec<Vec<isize>>) -> String {
    c_function("kernel", k, shape, &strides)
        .expect("C source")
        .source
}

fn snapshot(name: &str, k: &FusedKernel) {
    let shape = support::snapshot_shape(k);
    let strides = vec![contiguous_strides(&shape); k.inputs.len()];
    let c = source(k, &shape, strides);
    assert_stage_snapshot!(
        "codegen",
        format!("{name}.c"),
        c,
        format!("{k:?} over {shape:?}")
    );
}

#[test]
fn c_pointwise_chain() {
    snapshot("pointwise_chain", &support::chain());
}

#[test]
fn c_pointwise_broadcast_bias_relu() {
    snapshot("pointwise_broadcast_bias_relu", &support::bias_relu());
}

#[test]
fn c_pointwise_constants_and_fill() {
    snapshot("pointwise_constants", &support::constants());
    snapshot("pointwise_fill", &support::fill());
}

#[test]
fn c_pointwise_two_outputs_activations() {
    snapshot("pointwise_two_outputs_activations", &support::two_outputs());
}

/// An input read through a transposed view: its strides are constants of the source.
#[test]
fn c_pointwise_transposed_input() {
    let k = support::chain();
    let c = source(&k, &[64, 128], vec![vec![1, 64]]);
    assert_stage_snapshot!("codegen", "pointwise_transposed_input.c", c);
}

/// A large rank-1 kernel (one row): its tasks are blocks of its columns, for the threads.
#[test]
fn c_pointwise_columns_split() {
    let k = support::unary(burn_compile_schedule::UnaryOp::Gelu);
    let f = c_function("kernel", &k, &[1 << 16], &[vec![1]]).expect("C source");
    assert_eq!(f.tasks, (1 << 16) / burn_compile_codegen_c::COLUMN_BLOCK);
    assert!(f.parallel);
    let c = f.source;
    assert_stage_snapshot!("codegen", "pointwise_columns_split.c", c);
}

/// An input broadcast along the row: read once per row, outside the column loop.
#[test]
fn c_pointwise_row_broadcast() {
    snapshot("pointwise_row_broadcast", &support::row_broadcast());
}

/// Layer norm: the mean, then the variance (which needs the mean) — two loops over the row,
/// γ and β read along it, the output written in a third.
#[test]
fn c_row_layer_norm() {
    snapshot("row_layer_norm", &support::layer_norm(4096, 512));
}

/// Softmax with its row sums as a row output (one value per row).
#[test]
fn c_row_softmax_row_output() {
    snapshot(
        "row_softmax_row_output",
        &support::softmax_rows([32, 8, 128]),
    );
}

#[test]
fn c_row_log_softmax() {
    snapshot("row_log_softmax", &support::log_softmax_rows([32, 8, 128]));
}

/// Half types: stored as such, computed in float, converted at the loads and the store (bf16
/// by its bits, with the unit's helpers).
#[test]
fn c_half_types() {
    for (dtype, name) in [
        (burn_backend::DType::F16, "pointwise_bias_gelu_f16"),
        (burn_backend::DType::BF16, "row_layer_norm_bf16"),
    ] {
        let mut k = match dtype {
            burn_backend::DType::F16 => {
                support::bias_activation(burn_compile_schedule::UnaryOp::Gelu)
            }
            _ => support::layer_norm(64, 256),
        };
        k.dtype = dtype;
        let shape = support::snapshot_shape(&k);
        let strides = vec![contiguous_strides(&shape); k.inputs.len()];
        let f = c_function("kernel", &k, &shape, &strides).expect("C source");
        let unit = burn_compile_codegen_c::c_unit(&[f]);
        assert_stage_snapshot!(
            "codegen",
            format!("{name}.c"),
            unit,
            format!("{k:?} over {shape:?}")
        );
    }
}

#[test]
fn integer_kernels_have_no_c_kernel() {
    let mut k = support::chain();
    k.dtype = burn_backend::DType::I32;
    let err = c_function("kernel", &k, &[64, 128], &[vec![128, 1]]).unwrap_err();
    assert_eq!(err.to_string(), "no C kernels for I32");
}

/// Symbolic C (every dimension runtime: sizes and strides read from `s` after the scalars, the
/// tasks blocks of columns within rows) of a pointwise kernel and of a row kernel (its mean
/// divides by the runtime row length).
#[test]
fn c_symbolic_kernels() {
    for (name, k) in [
        ("pointwise_symbolic_bias_relu", support::bias_relu()),
        ("row_symbolic_layer_norm", support::layer_norm(64, 256)),
    ] {
        let shape = support::snapshot_shape(&k);
        let strides = vec![contiguous_strides(&shape); k.inputs.len()];
        let strides: Vec<Vec<isize>> = strides
            .into_iter()
            .enumerate()
            .map(|(i, own)| {
                own.into_iter()
                    .enumerate()
                    .map(|(d, s)| {
                        if k.inputs[i][d] || shape[d] == 1 {
                            0
                        } else {
                            s
                        }
                    })
                    .collect()
            })
            .collect();
        let dynamic = vec![true; shape.len()];
        let layout = symbolic_layout(&k, &dynamic, &shape, &strides);
        let c = c_symbolic_function("kernel", &k, &dynamic, &layout)
            .expect("C source")
            .source;
        assert_stage_snapshot!(
            "codegen",
            format!("{name}.c"),
            c,
            format!("{k:?} symbolic over {layout:?}")
        );
    }
}
