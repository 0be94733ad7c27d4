//! Library matmul steps on hand-built graphs: graph in, exactly these steps out.

use TensorStatus::*;
use burn_backend::DType;
use burn_compile_schedule::{MatmulGroup, MatmulKind, Residual, ScheduleOptions, Step, schedule};
use burn_ir::{
    FloatOperationIr, LinearWeightBackwardOpIr, LinearXBackwardOpIr, MatmulOpIr, ModuleOperationIr,
    OperationIr, TensorIr, TensorStatus,
};

mod support;
use support::relu;
use support::{add, div_scalar, linear, matmul, mul_scalar, plan, sum_dim};

fn t(id: u64, shape: &[usize], status: TensorStatus) -> TensorIr {
    support::tensor(id, shape, status, DType::BF16)
}

fn out(id: u64, shape: &[usize]) -> TensorIr {
    t(id, shape, NotInit)
}

/// The feed-forward block: 3 = relu(linear(x1, w1, b1)); 5 = linear(3, w2, b2); 6 = 5 + x1.
fn feed_forward(relu_consumes: bool) -> Vec<OperationIr> {
    let (x, h) = (&[2, 16, 32][..], &[2, 16, 64][..]);
    let mut ops = vec![
        linear(
            t(1, x, ReadOnly),
            t(10, &[32, 64], ReadOnly),
            Some(t(11, &[64], ReadOnly)),
            2,
        ),
        relu(t(2, h, if relu_consumes { ReadWrite } else { ReadOnly }), 3),
        linear(
            t(3, h, ReadWrite),
            t(12, &[64, 32], ReadOnly),
            Some(t(13, &[32], ReadOnly)),
            5,
        ),
        add(t(5, x, ReadWrite), t(1, x, ReadWrite), 6),
    ];
    if !relu_consumes {
        // The pre-activation is read again after the ReLU (as autodiff would keep it).
        ops.push(add(t(2, h, ReadWrite), t(2, h, ReadOnly), 7));
    }
    ops
}

#[test]
fn the_feed_forward_block_is_two_library_matmuls_with_bias_relu_and_bias_residual_epilogues() {
    let p = plan(&feed_forward(true), true, false);
    // The second product's residual add is its C: no kernel of its own.
    assert_eq!(
        p.steps,
        vec![Step::Matmul { group: 0 }, Step::Matmul { group: 1 }]
    );
    assert_eq!(p.matmul[0].kind, MatmulKind::Linear);
    assert_eq!(p.matmul[0].relu, Some(1));
    assert!(p.matmul[0].bias);
    assert_eq!(p.matmul[0].residual, None);
    assert_eq!(p.matmul[1].relu, None);
    // `5 + x1`: the residual is the add's rhs.
    assert_eq!(p.matmul[1].residual, Some(Residual { op: 3, input: 1 }));
    assert_eq!(p.matmul[1].output_op(), 3);
    assert_eq!(p.library_matmuls(), (2, 2));
    assert_eq!(p.launches(), 2);
    assert_eq!(
        p.kernel_summaries(),
        vec![
            "library matmul: linear, epilogue bias + relu, BF16".to_string(),
            "library matmul: linear, epilogue bias + residual, BF16".to_string(),
        ]
    );
    // The hidden activation, consumed by the second call, is planned; the second step's
    // output is the add's, the graph's output, allocated on its own.
    assert_eq!(p.memory.matmul, vec![Some(0), None]);
}

#[test]
fn a_scaled_product_plus_a_residual_then_relu_is_one_call() {
    // 4 = relu(r + (a @ b) / 8): α = 1/8, C = r, ReLU last — the order cuBLASLt applies them.
    let (a, b, o) = (&[4, 16, 32][..], &[4, 32, 8][..], &[4, 16, 8][..]);
    let ops = vec![
        matmul(t(1, a, ReadOnly), t(2, b, ReadOnly), 3),
        div_scalar(t(3, o, ReadWrite), 8.0, 4),
        add(t(9, o, ReadOnly), t(4, o, ReadWrite), 5),
        relu(t(5, o, ReadWrite), 6),
    ];
    let p = plan(&ops, true, false);
    assert_eq!(p.steps, vec![Step::Matmul { group: 0 }]);
    let g = &p.matmul[0];
    assert_eq!(
        (g.scale, g.residual, g.relu),
        (Some(1), Some(Residual { op: 2, input: 0 }), Some(3))
    );
    assert_eq!(
        burn_compile_schedule::scale_alpha(&ops[1]),
        Some(0.125),
        "a division is α = 1/s"
    );
    assert_eq!(
        p.kernel_summaries(),
        vec!["library matmul: matmul, epilogue scale + residual + relu, BF16".to_string()]
    );
}

#[test]
fn epilogues_cublaslt_cannot_apply_in_that_order_are_left_out() {
    let (x, o) = (&[2, 16, 32][..], &[2, 16, 64][..]);
    let w = || t(10, &[32, 64], ReadOnly);
    let b = || Some(t(11, &[64], ReadOnly));
    // A scale after a bias: α would not scale the bias. It fuses with the pointwise add
    // after it instead.
    let scaled_bias = vec![
        linear(t(1, x, ReadOnly), w(), b(), 2),
        mul_scalar(t(2, o, ReadWrite), 0.5, 3),
        add(t(3, o, ReadWrite), t(9, o, ReadOnly), 4),
    ];
    let p = plan(&scaled_bias, true, false);
    assert_eq!(p.matmul[0].scale, None);
    assert_eq!(p.matmul[0].residual, None);
    assert_eq!(
        p.steps,
        vec![Step::Matmul { group: 0 }, Step::Fused { group: 0 }]
    );
    // A ReLU before the residual add: cuBLASLt's ReLU comes after C. The ReLU fuses, the add
    // runs on its own.
    let relu_first = vec![
        linear(t(1, x, ReadOnly), w(), b(), 2),
        relu(t(2, o, ReadWrite), 3),
        add(t(3, o, ReadWrite), t(9, o, ReadOnly), 4),
    ];
    let p = plan(&relu_first, true, false);
    assert_eq!((p.matmul[0].relu, p.matmul[0].residual), (Some(1), None));
    assert_eq!(
        p.steps,
        vec![Step::Matmul { group: 0 }, Step::Eager { op: 2 }]
    );
    // A broadcast residual (a bias-like [64] row), a product added to itself, and a product
    // read again after the add are not C.
    let not_c = |second: TensorIr, again: bool| {
        let mut ops = vec![
            linear(t(1, x, ReadOnly), w(), None, 2),
            add(t(2, o, if again { ReadOnly } else { ReadWrite }), second, 4),
        ];
        if again {
            ops.push(add(t(2, o, ReadWrite), t(4, o, ReadWrite), 5));
        }
        ops
    };
    for (what, ops) in [
        ("broadcast", not_c(t(9, &[1, 1, 64], ReadOnly), false)),
        ("itself", not_c(t(2, o, ReadWrite), false)),
        ("read again", not_c(t(9, o, ReadOnly), true)),
    ] {
        let p = plan(&ops, true, false);
        assert_eq!(p.matmul[0].residual, None, "{what}");
    }
}

#[test]
fn a_sum_of_two_products_is_the_second_calls_residual_only() {
    // 4 = x @ w1 + x @ w2: the first call runs before the second product exists.
    let (x, o) = (&[2, 16, 32][..], &[2, 16, 64][..]);
    let ops = vec![
        linear(t(1, x, ReadOnly), t(10, &[32, 64], ReadOnly), None, 2),
        linear(t(1, x, ReadOnly), t(11, &[32, 64], ReadOnly), None, 3),
        add(t(2, o, ReadWrite), t(3, o, ReadWrite), 4),
    ];
    let p = plan(&ops, true, false);
    assert_eq!(p.matmul[0].residual, None);
    assert_eq!(p.matmul[1].residual, Some(Residual { op: 2, input: 0 }));
    assert_eq!(
        p.steps,
        vec![Step::Matmul { group: 0 }, Step::Matmul { group: 1 }]
    );
}

#[test]
fn a_gradient_accumulated_onto_a_product_is_its_residual() {
    // Autodiff sums the gradients of a tensor read twice: dx = dy @ Wᵀ + other.
    let ops = vec![
        OperationIr::Module(ModuleOperationIr::LinearXBackward(LinearXBackwardOpIr {
            weight: t(4, &[16, 8], ReadOnly),
            output_grad: t(3, &[2, 4, 8, 8], ReadOnly),
            out: out(5, &[2, 4, 8, 16]),
        })),
        add(
            t(5, &[2, 4, 8, 16], ReadWrite),
            t(6, &[2, 4, 8, 16], ReadWrite),
            7,
        ),
    ];
    let p = plan(&ops, true, false);
    assert_eq!(p.steps, vec![Step::Matmul { group: 0 }]);
    assert_eq!(p.matmul[0].residual, Some(Residual { op: 1, input: 1 }));
    assert_eq!(
        p.kernel_summaries(),
        vec!["library matmul: linear dx (dy @ Wᵀ), epilogue residual, BF16".to_string()]
    );
}

#[test]
fn a_relu_whose_input_is_read_again_is_not_fused() {
    let p = plan(&feed_forward(false), true, false);
    assert_eq!(p.matmul[0].relu, None);
    assert_eq!(p.steps[0], Step::Matmul { group: 0 });
    // The ReLU is a generated kernel of its own, writing the activation beside the kept
    // pre-activation: one launch where Burn's default ReLU (a comparison, then a masked fill)
    // takes two. Found on W1's training step: 12 launches of the inner backend per step.
    assert_eq!(p.steps[1], Step::Fused { group: 0 });
    assert_eq!(p.fused[0].ops, vec![1]);
}

/// The feed-forward layer of a training step as autodiff records it: 2 = linear(x1, w1, b1);
/// 3 = relu(2); 5 = linear(3, w2, b2); then the backward: dW2 = Σ 3ᵀ @ dy (the ReLU output's
/// last use), g = dy @ W2ᵀ, and the ReLU backward of the kept pre-activation, relu_backward(2!, g).
fn feed_forward_with_backward() -> Vec<OperationIr> {
    let (x, h) = (&[2, 16, 32][..], &[2, 16, 64][..]);
    // The forward of `feed_forward`, the second product no longer the ReLU output's last use.
    let mut ops = feed_forward(false);
    ops.truncate(3);
    ops[2].mark_read_only(&[burn_ir::TensorId::new(3)]);
    ops.extend([
        OperationIr::Module(ModuleOperationIr::LinearWeightBackward(
            LinearWeightBackwardOpIr {
                x: t(3, h, ReadWrite),
                output_grad: t(20, x, ReadOnly),
                out: out(21, &[64, 32]),
            },
        )),
        OperationIr::Module(ModuleOperationIr::LinearXBackward(LinearXBackwardOpIr {
            weight: t(12, &[64, 32], ReadOnly),
            output_grad: t(20, x, ReadOnly),
            out: out(22, h),
        })),
        support::relu_backward(t(2, h, ReadWrite), t(22, h, ReadWrite), 23),
    ]);
    ops
}

#[test]
fn a_relu_whose_backward_reads_its_output_fuses_into_the_product() {
    use support::plan_with_relu_masks;
    // As recorded, the pre-activation lives until the backward: the ReLU is a kernel of its own.
    let recorded = plan_with_relu_masks(&feed_forward_with_backward(), false);
    assert_eq!(recorded.matmul[0].relu, None);
    assert!(recorded.rewrites.is_empty());
    assert_eq!(
        recorded.fused_kernels(),
        2,
        "{:?}",
        recorded.kernel_summaries()
    );
    // The backward reads the ReLU's output: the pre-activation is the ReLU's alone, which the
    // first call applies as its epilogue. The ReLU backward remains the one generated kernel.
    let masked = plan_with_relu_masks(&feed_forward_with_backward(), true);
    assert_eq!(masked.matmul[0].relu, Some(1));
    assert_eq!(masked.rewrites.len(), 3);
    assert_eq!(masked.fused_kernels(), 1, "{:?}", masked.kernel_summaries());
    assert_eq!(masked.launches(), recorded.launches() - 1);
    // The pre-activation is never written: the memory plan holds one value less.
    assert_eq!(masked.memory.planned(), recorded.memory.planned() - 1);
    let mut ops = feed_forward_with_backward();
    assert!(!masked.is_rewritten(&ops));
    masked.rewrite(&mut ops);
    assert!(masked.is_rewritten(&ops));
    assert_eq!(
        ops[5]
            .inputs()
            .map(|t| (t.id.value(), t.status))
            .collect::<Vec<_>>(),
        vec![(3, ReadWrite), (22, ReadWrite)]
    );
}

#[test]
fn without_a_library_matmul_the_inner_backend_runs_the_products() {
    let p = plan(&feed_forward(true), false, false);
    assert!(p.matmul.is_empty());
    assert_eq!(p.steps[0], Step::Eager { op: 0 });
    assert_eq!(p.steps[2], Step::Eager { op: 2 });
}

#[test]
fn every_matmul_kind_is_recognised_and_refusals_are_kept_eager() {
    let ops = vec![
        OperationIr::Float(
            DType::BF16,
            FloatOperationIr::Matmul(MatmulOpIr {
                lhs: t(1, &[2, 4, 8, 16], ReadOnly),
                rhs: t(2, &[2, 4, 16, 8], ReadOnly),
                out: out(3, &[2, 4, 8, 8]),
            }),
        ),
        OperationIr::Module(ModuleOperationIr::LinearXBackward(LinearXBackwardOpIr {
            weight: t(4, &[16, 8], ReadOnly),
            output_grad: t(3, &[2, 4, 8, 8], ReadOnly),
            out: out(5, &[2, 4, 8, 16]),
        })),
        OperationIr::Module(ModuleOperationIr::LinearWeightBackward(
            LinearWeightBackwardOpIr {
                x: t(5, &[2, 4, 8, 16], ReadOnly),
                output_grad: t(3, &[2, 4, 8, 8], ReadWrite),
                out: out(6, &[16, 8]),
            },
        )),
    ];
    let kinds: Vec<MatmulKind> = plan(&ops, true, false)
        .matmul
        .iter()
        .map(|g| g.kind)
        .collect();
    assert_eq!(
        kinds,
        vec![
            MatmulKind::Matmul,
            MatmulKind::LinearXBackward,
            MatmulKind::LinearWeightBackward
        ]
    );
    // A target that refuses the weight gradient keeps it on the inner backend.
    let refuse: &dyn Fn(&MatmulGroup) -> bool = &|g| g.kind != MatmulKind::LinearWeightBackward;
    let p = schedule(
        &ops,
        ScheduleOptions {
            relu_masks: true,
            dead_code_elimination: false,
            common_subexpressions: true,
            fused: None,
            max_kernel_buffers: usize::MAX,
            horizontal: false,
            matmul: Some(refuse),
            attention: None,
            column: None,
            horizontal_columns: None,
            view_copies: None,
            memory_planning: true,
            symbolic_sizes: &[],
        },
    );
    assert_eq!(
        p.steps,
        vec![
            Step::Matmul { group: 0 },
            Step::Matmul { group: 1 },
            Step::Eager { op: 2 },
        ]
    );
}

/// The gradient of a broadcast right-hand side as autodiff records it (a tied head's, `x @
/// Eᵀ.unsqueeze()`): `xᵀ @ dy` per batch entry, then summed over the batch by `SumDim`s.
/// `batch` is the product's batch shape; each of its dimensions is summed in turn.
fn broadcast_rhs_gradient(batch: &[usize], sum_reader: TensorStatus) -> Vec<OperationIr> {
    let shape =
        |m: usize, n: usize| -> Vec<usize> { batch.iter().copied().chain([m, n]).collect() };
    let mut ops = vec![matmul(
        t(1, &shape(32, 16), ReadWrite),
        t(2, &shape(16, 64), ReadWrite),
        3,
    )];
    let mut summed = shape(32, 64);
    for axis in 0..batch.len() {
        let status = if axis == 0 { sum_reader } else { ReadWrite };
        let input = 3 + axis as u64;
        ops.push(sum_dim(t(input, &summed, status), axis, input + 1));
        summed[axis] = 1;
    }
    ops
}

#[test]
fn a_products_sum_over_its_batch_is_folded_into_the_call() {
    use support::plan_with_matmul_and_columns;
    // One batch dimension, then two: the sums are the call's, not column sums.
    for batch in [&[4][..], &[2, 3]] {
        let ops = broadcast_rhs_gradient(batch, ReadWrite);
        let p = plan_with_matmul_and_columns(&ops);
        assert_eq!(p.steps, vec![Step::Matmul { group: 0 }], "{batch:?}");
        let g = &p.matmul[0];
        assert_eq!(g.batch_sums, (1..=batch.len() as u32).collect::<Vec<_>>());
        assert_eq!(g.output_op(), batch.len() as u32);
        assert!(p.column.is_empty());
        assert_eq!(
            p.kernel_summaries(),
            vec!["library matmul: matmul, batch sum folded into k, BF16".to_string()]
        );
    }
}

#[test]
fn batch_sums_the_call_cannot_fold_stay_column_sums() {
    use support::plan_with_matmul_and_columns;
    // The product is read again after its sum: it must exist.
    let mut ops = broadcast_rhs_gradient(&[4], ReadOnly);
    ops.push(add(
        t(3, &[4, 32, 64], ReadWrite),
        t(3, &[4, 32, 64], ReadOnly),
        9,
    ));
    // Only part of the batch summed.
    let partial = broadcast_rhs_gradient(&[2, 3], ReadWrite)[..2].to_vec();
    // A sum over the rows of each product (not its batch).
    let rows = vec![
        matmul(
            t(1, &[4, 32, 16], ReadWrite),
            t(2, &[4, 16, 64], ReadWrite),
            3,
        ),
        sum_dim(t(3, &[4, 32, 64], ReadWrite), 1, 4),
    ];
    // A broadcast operand (`x @ W`, W `[1, k, n]`): the sum is not the product's reduction.
    let broadcast = vec![
        matmul(
            t(1, &[4, 32, 16], ReadWrite),
            t(2, &[1, 16, 64], ReadWrite),
            3,
        ),
        sum_dim(t(3, &[4, 32, 64], ReadWrite), 0, 4),
    ];
    for (what, ops) in [
        ("read again", ops),
        ("partial", partial),
        ("rows", rows),
        ("broadcast", broadcast),
    ] {
        let p = plan_with_matmul_and_columns(&ops);
        assert!(p.matmul[0].batch_sums.is_empty(), "{what}");
        assert_eq!(p.steps[0], Step::Matmul { group: 0 }, "{what}");
        assert_eq!(p.column.len(), 1, "{what}: the sum is a column sum");
    }
}

// The library call of a step, from the tensors' shapes and strides (column-major terms: A is
// the row-major right-hand side, B the left-hand side, D the output read as n columns of m).

use burn_compile_schedule::{Gemm, GemmOperand, gemm};
include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../snapshots/assert.rs"
));

fn operand(input: usize, trans: bool, rows: u64, cols: u64, ld: i64, bs: i64) -> GemmOperand {
    GemmOperand {
        input,
        trans,
        rows,
        cols,
        ld,
        batch_stride: bs,
    }
}

#[test]
fn linear_folds_the_batch_into_rows_and_takes_the_bias() {
    // x [2, 16, 32] contiguous, W [32, 64], b [64].
    let g = gemm(
        MatmulKind::Linear,
        &[&[2, 16, 32], &[32, 64], &[64]],
        &[&[512, 32, 1], &[64, 1], &[1]],
        &[2, 16, 64],
    );
    assert_eq!(
        g,
        Some(Gemm {
            m: 64,
            n: 32,
            k: 32,
            batch: 1,
            a: operand(1, false, 64, 32, 64, 0),
            b: operand(0, false, 32, 32, 32, 0),
            bias: Some(2),
            d_batch_stride: 0,
        })
    );
}

#[test]
fn attention_scores_read_the_swapped_keys_transposed() {
    // q [2, 4, 8, 16] contiguous; kᵀ = swap_dims(k [2, 4, 8, 16]) has strides [512, 128, 1, 16].
    let g = gemm(
        MatmulKind::Matmul,
        &[&[2, 4, 8, 16], &[2, 4, 16, 8]],
        &[&[512, 128, 16, 1], &[512, 128, 1, 16]],
        &[2, 4, 8, 8],
    )
    .expect("one batched call");
    assert_eq!((g.m, g.n, g.k, g.batch), (8, 8, 16, 8));
    assert_eq!(g.a, operand(1, true, 16, 8, 16, 128));
    assert_eq!(g.b, operand(0, false, 16, 8, 16, 128));
    assert_eq!(g.d_batch_stride, 64);
}

#[test]
fn linear_gradients_transpose_the_weight_and_fold_the_batch_into_k() {
    // dx = dy [2, 16, 64] @ Wᵀ, W [32, 64].
    let dx = gemm(
        MatmulKind::LinearXBackward,
        &[&[32, 64], &[2, 16, 64]],
        &[&[64, 1], &[1024, 64, 1]],
        &[2, 16, 32],
    )
    .expect("dx");
    assert_eq!((dx.m, dx.n, dx.k, dx.batch), (32, 32, 64, 1));
    assert_eq!(dx.a, operand(0, true, 64, 32, 64, 0));
    // dW = Σ xᵀ dy over the 32 rows of x [2, 16, 32] and dy [2, 16, 64].
    let dw = gemm(
        MatmulKind::LinearWeightBackward,
        &[&[2, 16, 32], &[2, 16, 64]],
        &[&[512, 32, 1], &[1024, 64, 1]],
        &[32, 64],
    )
    .expect("dW");
    assert_eq!((dw.m, dw.n, dw.k, dw.batch), (64, 32, 32, 1));
    assert_eq!(dw.a, operand(1, false, 64, 32, 64, 0));
    assert_eq!(dw.b, operand(0, true, 32, 32, 32, 0));
}

#[test]
fn layouts_one_call_cannot_express_are_refused() {
    // Rows that do not fold (a sliced batch), a gathered operand, a partly broadcast batch.
    assert_eq!(
        gemm(
            MatmulKind::Linear,
            &[&[2, 16, 32], &[32, 64]],
            &[&[1024, 32, 1], &[64, 1]],
            &[2, 16, 64]
        )
        .map(|g| g.batch),
        None
    );
    assert_eq!(
        gemm(
            MatmulKind::Matmul,
            &[&[8, 16], &[16, 8]],
            &[&[32, 2], &[8, 1]],
            &[8, 8]
        ),
        None
    );
    assert_eq!(
        gemm(
            MatmulKind::Matmul,
            &[&[2, 4, 8, 16], &[1, 4, 16, 8]],
            &[&[512, 128, 16, 1], &[512, 128, 8, 1]],
            &[2, 4, 8, 8]
        ),
        None
    );
}

#[test]
fn a_shared_right_hand_side_is_one_call_or_a_zero_stride_batch() {
    // x [4, 8, 16] @ W [1, 16, 8]: the batch folds into the rows.
    let folded = gemm(
        MatmulKind::Matmul,
        &[&[4, 8, 16], &[1, 16, 8]],
        &[&[128, 16, 1], &[128, 8, 1]],
        &[4, 8, 8],
    )
    .expect("folded");
    assert_eq!((folded.n, folded.batch), (32, 1));
    // Rows that do not fold (every other row of a larger tensor): a zero-stride batch.
    let strided = gemm(
        MatmulKind::Matmul,
        &[&[4, 8, 16], &[1, 16, 8]],
        &[&[512, 32, 1], &[128, 8, 1]],
        &[4, 8, 8],
    )
    .expect("strided");
    assert_eq!((strided.n, strided.batch), (8, 4));
    assert_eq!(strided.a.batch_stride, 0);
    assert_eq!(strided.b, operand(0, false, 16, 8, 32, 512));
}

#[test]
fn a_batch_sum_folds_into_k_where_the_lhs_batch_and_reduction_are_one_stride() {
    use burn_compile_schedule::batch_summed_gemm;
    // xᵀ = swap_dims(x [2, 16, 32]) has strides [512, 1, 32]: its batch and reduction (16)
    // step as one dimension of 32 elements per step. dy [2, 16, 64] contiguous.
    let g = batch_summed_gemm(
        &[&[2, 32, 16], &[2, 16, 64]],
        &[&[512, 1, 32], &[1024, 64, 1]],
        &[1, 32, 64],
    )
    .expect("one call over k = 2 · 16");
    assert_eq!((g.m, g.n, g.k, g.batch), (64, 32, 32, 1));
    assert_eq!(g.a, operand(1, false, 64, 32, 64, 0));
    // xᵀ [32, 32] is column-contiguous: x's rows [32, 32] (ld 32), used transposed.
    assert_eq!(g.b, operand(0, true, 32, 32, 32, 0));
    assert_eq!(g.d_batch_stride, 0);
    // Two batch dimensions fold the same way.
    let two = batch_summed_gemm(
        &[&[2, 3, 32, 16], &[2, 3, 16, 64]],
        &[&[1536, 512, 1, 32], &[3072, 1024, 64, 1]],
        &[1, 1, 32, 64],
    )
    .expect("k = 6 · 16");
    assert_eq!((two.m, two.n, two.k, two.batch), (64, 32, 96, 1));
    // A contiguous lhs steps through k innermost and its batch outermost: no one stride.
    assert_eq!(
        batch_summed_gemm(
            &[&[2, 32, 16], &[2, 16, 64]],
            &[&[512, 16, 1], &[1024, 64, 1]],
            &[1, 32, 64],
        ),
        None
    );
    // The output must be the whole sum; the batches must match.
    assert_eq!(
        batch_summed_gemm(
            &[&[2, 32, 16], &[2, 16, 64]],
            &[&[512, 1, 32], &[1024, 64, 1]],
            &[2, 32, 64],
        ),
        None
    );
    assert_eq!(
        batch_summed_gemm(
            &[&[2, 32, 16], &[1, 16, 64]],
            &[&[512, 1, 32], &[1024, 64, 1]],
            &[1, 32, 64],
        ),
        None
    );
}

#[test]
fn a_product_with_a_dimension_off_the_vector_is_padded_in_every_dimension() {
    // GPT-2's tied head: logits [8 · 1024, 50,257] = h [8192, 768] @ Eᵀ (E [50,257, 768]).
    let logits = gemm(
        MatmulKind::Matmul,
        &[&[8, 1024, 768], &[1, 768, 50257]],
        &[&[786432, 768, 1], &[38597376, 1, 768]],
        &[8, 1024, 50257],
    )
    .expect("the shared Eᵀ folds the batch into rows");
    assert_eq!((logits.m, logits.n, logits.k), (50257, 8192, 768));
    // bf16: vectors of 8 elements.
    let p = logits.padded(8).expect("m = 50,257 is off the vector");
    assert_eq!((p.m, p.n, p.k, p.batch), (50264, 8192, 768, 1));
    // Eᵀ read transposed: E's 50,257 rows of 768, padded to 50,264 rows.
    assert_eq!(p.a, operand(1, true, 768, 50264, 768, 0));
    assert_eq!(p.b, operand(0, false, 768, 8192, 768, 0));
    // The head's input gradient: dlogits [8192, 50,257] @ E, k = 50,257.
    let dx = gemm(
        MatmulKind::Matmul,
        &[&[8, 1024, 50257], &[1, 50257, 768]],
        &[&[51463168, 50257, 1], &[38597376, 768, 1]],
        &[8, 1024, 768],
    )
    .expect("dx");
    let p = dx.padded(8).expect("k = 50,257");
    assert_eq!((p.m, p.n, p.k), (768, 8192, 50264));
    assert_eq!(p.b, operand(0, false, 50264, 8192, 50264, 0));
    // Nothing to pad, a batch or a bias: no padded call.
    let aligned = gemm(
        MatmulKind::Matmul,
        &[&[64, 32], &[32, 16]],
        &[&[32, 1], &[16, 1]],
        &[64, 16],
    )
    .expect("aligned");
    assert_eq!(aligned.padded(8), None);
    let batched = gemm(
        MatmulKind::Matmul,
        &[&[2, 4, 8, 15], &[2, 4, 15, 8]],
        &[&[480, 120, 15, 1], &[480, 120, 8, 1]],
        &[2, 4, 8, 8],
    )
    .expect("batched");
    assert_eq!(batched.padded(8), None);
    let biased = gemm(
        MatmulKind::Linear,
        &[&[4, 15], &[15, 8], &[8]],
        &[&[15, 1], &[8, 1], &[1]],
        &[4, 8],
    )
    .expect("linear");
    assert_eq!(biased.padded(8), None);
}

/// A named product: (what, kind, epilogue, input shapes, input strides, output shape).
type Case = (
    &'static str,
    MatmulKind,
    &'static str,
    Vec<Vec<usize>>,
    Vec<Vec<usize>>,
    Vec<usize>,
);

/// W1's products (d_model 512, 8 heads, d_ff 2048, batch 32 × seq 128), forward and backward,
/// as the library receives them: reviewed as a snapshot.
#[test]
fn w1_library_calls_snapshot() {
    let contiguous = |shape: &[usize]| -> Vec<usize> {
        let mut s = vec![1; shape.len()];
        for i in (0..shape.len() - 1).rev() {
            s[i] = s[i + 1] * shape[i + 1];
        }
        s
    };
    let (b, s, d, h, ff) = (32, 128, 512, 8, 2048);
    let hd = d / h;
    // (what, kind, epilogue, shapes, strides, out)
    let x = [b, s, d];
    let heads = [b, h, s, hd];
    // The heads (a reshape and a swap of [b, s, d]) do not fold into one batch stride: the
    // runtime copies them contiguous first, as Burn's matmul does; kᵀ is then a swapped view.
    let split_heads = vec![s * d, hd, d, 1];
    assert_eq!(
        gemm(
            MatmulKind::Matmul,
            &[&heads, &[b, h, hd, s]],
            &[&split_heads, &[s * d, hd, 1, d]],
            &[b, h, s, s]
        ),
        None
    );
    let k_t = vec![h * s * hd, s * hd, 1, hd];
    let q_strides = contiguous(&heads);
    let cases: Vec<Case> = vec![
        (
            "feed-forward in: linear + bias + relu",
            MatmulKind::Linear,
            "bias + relu",
            vec![x.to_vec(), vec![d, ff], vec![ff]],
            vec![contiguous(&x), contiguous(&[d, ff]), vec![1]],
            vec![b, s, ff],
        ),
        (
            "attention projection: linear + bias",
            MatmulKind::Linear,
            "bias",
            vec![x.to_vec(), vec![d, d], vec![d]],
            vec![contiguous(&x), contiguous(&[d, d]), vec![1]],
            x.to_vec(),
        ),
        (
            "attention scores: q @ kᵀ (heads made contiguous, keys read transposed)",
            MatmulKind::Matmul,
            "",
            vec![heads.to_vec(), vec![b, h, hd, s]],
            vec![q_strides.clone(), k_t],
            vec![b, h, s, s],
        ),
        (
            "attention values: softmax @ v",
            MatmulKind::Matmul,
            "",
            vec![vec![b, h, s, s], heads.to_vec()],
            vec![contiguous(&[b, h, s, s]), q_strides],
            heads.to_vec(),
        ),
        (
            "feed-forward in, backward: dx = dy @ Wᵀ",
            MatmulKind::LinearXBackward,
            "",
            vec![vec![d, ff], vec![b, s, ff]],
            vec![contiguous(&[d, ff]), contiguous(&[b, s, ff])],
            x.to_vec(),
        ),
        (
            "feed-forward in, backward: dW = Σ xᵀ @ dy",
            MatmulKind::LinearWeightBackward,
            "",
            vec![x.to_vec(), vec![b, s, ff]],
            vec![contiguous(&x), contiguous(&[b, s, ff])],
            vec![d, ff],
        ),
    ];
    let mut text = String::new();
    for (what, kind, epilogue, shapes, strides, out) in &cases {
        let shapes: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        let strides: Vec<&[usize]> = strides.iter().map(|s| s.as_slice()).collect();
        let g = gemm(*kind, &shapes, &strides, out).expect(what);
        text.push_str(&format!(
            "{what} [{kind:?}], epilogue [{epilogue}]\n{g}\n\n"
        ));
    }
    assert_stage_snapshot!("schedule", "w1_library_calls", text);
}

/// A linear layer's backward as autodiff records it: `dx = dy @ Wᵀ`, `dW = Σ xᵀ @ dy`, then
/// `db = Σ_rows dy` (consuming `dy`), with `between` placed before the bias gradient.
fn linear_backward(between: Vec<OperationIr>) -> Vec<OperationIr> {
    let (x, dy) = (&[2, 16, 32][..], &[2, 16, 64][..]);
    let mut ops = vec![
        OperationIr::Module(ModuleOperationIr::LinearXBackward(LinearXBackwardOpIr {
            weight: t(2, &[32, 64], ReadOnly),
            output_grad: t(3, dy, ReadOnly),
            out: out(4, x),
        })),
        OperationIr::Module(ModuleOperationIr::LinearWeightBackward(
            LinearWeightBackwardOpIr {
                x: t(1, x, ReadWrite),
                output_grad: t(3, dy, ReadOnly),
                out: out(5, &[32, 64]),
            },
        )),
    ];
    ops.extend(between);
    ops.push(support::linear_bias_backward(t(3, dy, ReadWrite), 6));
    ops
}

#[test]
fn a_weight_gradients_call_computes_the_bias_gradient_of_its_dy() {
    use support::plan_with_matmul_and_columns;
    let p = plan_with_matmul_and_columns(&linear_backward(Vec::new()));
    // Two calls, no column sum: the bias gradient is the weight gradient's second output.
    assert_eq!(
        p.steps,
        vec![Step::Matmul { group: 0 }, Step::Matmul { group: 1 }]
    );
    assert_eq!(p.column_kernels(), 0);
    let g = &p.matmul[1];
    assert_eq!(g.kind, MatmulKind::LinearWeightBackward);
    assert_eq!(g.bias_grad, Some(2));
    // The weight gradient stays the step's (first) output.
    assert_eq!(g.output_op(), 1);
    assert_eq!(g.ops().collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(
        p.kernel_summaries()[1],
        "library matmul: linear dW (xᵀ @ dy, batch folded into k), epilogue bias gradient, BF16"
    );
    assert_eq!(p.launches(), 2);
}

#[test]
fn a_bias_gradient_after_another_reader_of_dy_stays_a_column_sum() {
    use support::plan_with_matmul_and_columns;
    // `dy · 2` read between the weight gradient and the bias gradient: consuming `dy` at the
    // weight gradient's place would free what it still reads.
    let scaled = mul_scalar(t(3, &[2, 16, 64], ReadOnly), 2.0, 7);
    let p = plan_with_matmul_and_columns(&linear_backward(vec![scaled]));
    assert_eq!(p.matmul[1].bias_grad, None);
    assert_eq!(p.column_kernels(), 1);
}

#[test]
fn a_target_without_the_bias_gradient_epilogue_keeps_the_product_and_a_column_sum() {
    let no_bias_grad: &dyn Fn(&MatmulGroup) -> bool = &|g| g.bias_grad.is_none();
    let every_column: &dyn Fn(&burn_compile_schedule::ColumnGroup) -> bool = &|_| true;
    let p = schedule(
        &linear_backward(Vec::new()),
        ScheduleOptions {
            relu_masks: true,
            dead_code_elimination: true,
            common_subexpressions: true,
            fused: None,
            max_kernel_buffers: usize::MAX,
            horizontal: false,
            matmul: Some(no_bias_grad),
            attention: None,
            column: Some(every_column),
            horizontal_columns: None,
            view_copies: None,
            memory_planning: true,
            symbolic_sizes: &[],
        },
    );
    assert_eq!(p.library_matmuls().0, 2);
    assert_eq!(p.matmul[1].bias_grad, None);
    assert_eq!(p.column_kernels(), 1);
}

/// `D` of a call as cuBLASLt computes it, on the host: column-major `op(A) · op(B)`, `m × n`,
/// each operand read from its input's elements at `i + j · ld + batch · batch_stride`.
fn run_gemm(g: &Gemm, inputs: &[&[f64]]) -> Vec<f64> {
    let at = |o: &GemmOperand, b: u64, r: u64, c: u64| -> f64 {
        // Element (r, c) of op(operand): stored (r, c), or (c, r) when used transposed.
        let (i, j) = if o.trans { (c, r) } else { (r, c) };
        inputs[o.input][(i as i64 + j as i64 * o.ld + b as i64 * o.batch_stride) as usize]
    };
    let mut d = vec![0.0; (g.m * g.n) as usize * g.batch as usize];
    for b in 0..g.batch as u64 {
        for j in 0..g.n {
            for i in 0..g.m {
                let sum: f64 = (0..g.k)
                    .map(|p| at(&g.a, b, i, p) * at(&g.b, b, p, j))
                    .sum();
                d[(b as i64 * g.d_batch_stride) as usize + (i + j * g.m) as usize] = sum;
            }
        }
    }
    d
}

/// Attention's gradient of `kᵀ` as autodiff records it: `qᵀ @ dS` (q swapped, a view), then
/// swapped back; the swap is the call's output, written transposed (`dSᵀ @ q`).
#[test]
fn a_swapped_product_is_written_transposed_and_equals_the_swap_of_the_product() {
    let (b, h, s, d) = (2, 3, 5, 4);
    let ops = vec![
        support::swap_dims(t(1, &[b, h, s, d], ReadOnly), 2, 3, 2),
        matmul(
            t(2, &[b, h, d, s], ReadWrite),
            t(3, &[b, h, s, s], ReadOnly),
            4,
        ),
        support::swap_dims(t(4, &[b, h, d, s], ReadWrite), 2, 3, 5),
    ];
    let p = plan(&ops, true, false);
    assert_eq!(p.matmul.len(), 1);
    assert_eq!(p.matmul[0].transposed_output, Some(2));
    assert_eq!(p.matmul[0].output_op(), 2);
    assert_eq!(
        p.kernel_summaries(),
        vec!["library matmul: matmul written transposed (rhsᵀ @ lhsᵀ), BF16".to_string()]
    );
    // The first swap stays a view the call reads; the second is the call's.
    assert_eq!(p.steps[1], Step::Matmul { group: 0 });
    assert_eq!(p.steps.len(), 2, "{:?}", p.steps);

    // The call over q's swapped view and a contiguous dS, into the swap's contiguous output.
    let q: Vec<f64> = (0..b * h * s * d).map(|i| (i % 7) as f64 - 3.0).collect();
    let ds: Vec<f64> = (0..b * h * s * s)
        .map(|i| (i % 5) as f64 * 0.5 - 1.0)
        .collect();
    let q_t_strides = [h * s * d, s * d, 1, d];
    let g = p.matmul[0]
        .gemm(
            &[&[b, h, d, s], &[b, h, s, s]],
            &[&q_t_strides, &[h * s * s, s * s, s, 1]],
            &[b, h, s, d],
        )
        .expect("one call");
    let got = run_gemm(&g, &[&q, &ds]);
    // The reference: out[bh, j, i] = Σ_p qᵀ[bh, i, p] · dS[bh, p, j] = Σ_p q[bh, p, i] · dS[bh, p, j].
    let mut want = vec![0.0; b * h * s * d];
    for bh in 0..b * h {
        for i in 0..d {
            for j in 0..s {
                let sum: f64 = (0..s)
                    .map(|p| q[bh * s * d + p * d + i] * ds[bh * s * s + p * s + j])
                    .sum();
                want[bh * s * d + j * d + i] = sum;
            }
        }
    }
    assert_eq!(got, want);
    // The evaluator itself, on the product as recorded: `qᵀ @ dS` into `[b, h, d, s]`.
    let plain = gemm(
        MatmulKind::Matmul,
        &[&[b, h, d, s], &[b, h, s, s]],
        &[&q_t_strides, &[h * s * s, s * s, s, 1]],
        &[b, h, d, s],
    )
    .expect("one call");
    let product = run_gemm(&plain, &[&q, &ds]);
    for bh in 0..b * h {
        for i in 0..d {
            for j in 0..s {
                assert_eq!(
                    product[bh * d * s + i * s + j],
                    want[bh * s * d + j * d + i]
                );
            }
        }
    }
}

#[test]
fn a_product_read_by_more_than_its_swap_keeps_its_own_layout() {
    let (b, h, s, d) = (2, 3, 5, 4);
    let ops = vec![
        matmul(
            t(1, &[b, h, d, s], ReadOnly),
            t(3, &[b, h, s, s], ReadOnly),
            4,
        ),
        support::swap_dims(t(4, &[b, h, d, s], ReadOnly), 2, 3, 5),
        support::exp(t(4, &[b, h, d, s], ReadWrite), 6),
    ];
    let p = plan(&ops, true, false);
    assert_eq!(p.matmul[0].transposed_output, None);
    // A swap of other dimensions is not a transposed product either.
    let ops = vec![
        matmul(
            t(1, &[b, h, d, s], ReadOnly),
            t(3, &[b, h, s, s], ReadOnly),
            4,
        ),
        support::swap_dims(t(4, &[b, h, d, s], ReadWrite), 1, 2, 5),
    ];
    assert_eq!(plan(&ops, true, false).matmul[0].transposed_output, None);
}
