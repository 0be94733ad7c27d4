//! Generated kernels (elementwise runs and row reductions) on hand-built graphs: graph in, exactly
//! these kernels out.

use TensorStatus::*;
use burn_backend::DType;
use burn_compile_graph::Activation;
use burn_compile_schedule::{
    BinaryOp, Constant, FusedGroup, Instr, ReduceOp, RowLayout, Slot, UnaryOp, fused_groups,
};
use burn_ir::{
    BinaryOpIr, CustomOpIr, FloatOperationIr, NumericOperationIr, OperationIr, ScalarIr,
    ScalarOpIr, TensorIr, TensorStatus, UnaryOpIr,
};

mod support;
use support::{add, exp, matmul, mul, mul_scalar, reshape};
use support::{relu, relu_backward};

fn t(id: u64, shape: &[usize], status: TensorStatus) -> TensorIr {
    support::tensor(id, shape, status, DType::F32)
}

fn out(id: u64, shape: &[usize]) -> TensorIr {
    t(id, shape, NotInit)
}

fn drop_op(id: u64, shape: &[usize]) -> OperationIr {
    OperationIr::Drop(t(id, shape, ReadWrite))
}

fn groups(ops: &[OperationIr]) -> Vec<FusedGroup> {
    fused_groups(ops, &vec![true; ops.len()], usize::MAX)
}

/// 3 = x(1) @ w(2); 5 = 3! + bias(4)[1, 8]; (drop 4;) 6 = relu(5!); 7 = 6 @ w2(2)
fn linear_bias_relu(drop_bias: bool) -> Vec<OperationIr> {
    let (m, n) = (&[4, 8][..], &[1, 8][..]);
    let mut ops = vec![
        matmul(t(1, &[4, 16], ReadOnly), t(2, &[16, 8], ReadOnly), 3),
        add(t(3, m, ReadWrite), t(4, n, ReadOnly), 5),
        relu(t(5, m, ReadWrite), 6),
        matmul(t(6, m, ReadWrite), t(2, &[8, 8], ReadOnly), 7),
    ];
    if drop_bias {
        ops.insert(2, drop_op(4, n));
    }
    ops
}

#[test]
fn linear_bias_relu_is_one_kernel_writing_only_the_activation() {
    let ops = linear_bias_relu(false);
    let g = groups(&ops);
    assert_eq!(g.len(), 1, "{g:#?}");
    let g = &g[0];
    assert_eq!(g.ops, vec![1, 2]);
    assert_eq!(
        g.inputs,
        vec![Slot { op: 1, pos: 0 }, Slot { op: 1, pos: 1 }]
    );
    assert_eq!(
        g.consumed,
        vec![true, false],
        "the matmul output dies in the kernel"
    );
    assert_eq!(g.outputs, vec![Slot { op: 2, pos: 0 }]);
    assert_eq!(g.kernel.inputs, vec![vec![false, false], vec![true, false]]);
    assert_eq!(
        g.kernel.program,
        vec![
            Instr::Load { input: 0 },
            Instr::Load { input: 1 },
            Instr::Binary {
                op: BinaryOp::Add,
                a: 0,
                b: 1
            },
            Instr::Unary {
                op: UnaryOp::Relu,
                a: 2
            },
            Instr::Store {
                output: 0,
                value: 3
            },
        ]
    );
}

#[test]
fn a_chain_with_dropped_intermediates_stores_only_its_result() {
    // 2 = exp(1); 3 = 2 * s; drop 2; 4 = 3! + 1; 4 escapes.
    let s = &[3, 5][..];
    let ops = vec![
        exp(t(1, s, ReadOnly), 2),
        mul_scalar(t(2, s, ReadOnly), 0.5, 3),
        drop_op(2, s),
        add(t(3, s, ReadWrite), t(1, s, ReadOnly), 4),
    ];
    let g = groups(&ops);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].ops, vec![0, 1, 3]);
    assert_eq!(g[0].drops, vec![2]);
    assert_eq!(
        g[0].scalars,
        vec![1],
        "the scalar is read from op 1 at replay"
    );
    assert_eq!(g[0].inputs.len(), 1, "input 1 is loaded once");
    assert_eq!(g[0].outputs, vec![Slot { op: 3, pos: 0 }]);
    assert_eq!(g[0].kernel.scalars, 1);
}

#[test]
fn an_intermediate_read_after_the_run_is_written_too() {
    // 2 = exp(1); 3 = 2 * s; 4 = 2! @ w — 2 is needed by the matmul, 3 escapes.
    let s = &[4, 4][..];
    let ops = vec![
        exp(t(1, s, ReadOnly), 2),
        mul_scalar(t(2, s, ReadOnly), 2.0, 3),
        matmul(t(2, s, ReadWrite), t(9, s, ReadOnly), 4),
    ];
    let g = groups(&ops);
    assert_eq!(g.len(), 1);
    assert_eq!(
        g[0].outputs,
        vec![Slot { op: 0, pos: 0 }, Slot { op: 1, pos: 0 }]
    );
}

#[test]
fn a_shape_change_or_a_non_fusible_op_ends_the_run() {
    let (a, b) = (&[2, 3][..], &[3, 2][..]);
    let ops = vec![
        exp(t(1, a, ReadOnly), 2),
        exp(t(2, a, ReadWrite), 3),
        // another iteration space: a new run
        exp(t(10, b, ReadOnly), 11),
        exp(t(11, b, ReadWrite), 12),
        // a matmul in between: two runs of one op each, no kernel
        exp(t(20, a, ReadOnly), 21),
        matmul(t(21, a, ReadOnly), t(22, b, ReadOnly), 23),
        exp(t(21, a, ReadWrite), 24),
    ];
    let g = groups(&ops);
    assert_eq!(g.len(), 2, "{g:#?}");
    assert_eq!(g[0].ops, vec![0, 1]);
    assert_eq!(g[1].ops, vec![2, 3]);
}

#[test]
fn single_ops_int_ops_and_dead_ops_are_not_fused() {
    let s = &[8][..];
    // One op alone: the inner backend's kernel.
    assert!(groups(&[exp(t(1, s, ReadOnly), 2)]).is_empty());
    // Int arithmetic is not fused (float kernels only, for now).
    let int = |id| TensorIr {
        dtype: DType::I32,
        ..t(id, s, ReadOnly)
    };
    let int_add = |l, r, o| {
        OperationIr::NumericInt(
            DType::I32,
            NumericOperationIr::Add(BinaryOpIr {
                lhs: int(l),
                rhs: int(r),
                out: TensorIr {
                    dtype: DType::I32,
                    ..out(o, s)
                },
            }),
        )
    };
    assert!(groups(&[int_add(1, 2, 3), int_add(3, 2, 4)]).is_empty());
    // A dead op ends the run.
    let ops = vec![
        exp(t(1, s, ReadOnly), 2),
        exp(t(1, s, ReadOnly), 3),
        exp(t(1, s, ReadOnly), 4),
    ];
    assert!(fused_groups(&ops, &[true, false, true], usize::MAX).is_empty());
}

#[test]
fn inputs_of_another_rank_are_not_broadcast() {
    // Burn broadcasts same-rank tensors only; a rank mismatch is not a fusible elementwise op.
    let ops = vec![
        add(t(1, &[4, 8], ReadOnly), t(2, &[8], ReadOnly), 3),
        exp(t(3, &[4, 8], ReadWrite), 4),
    ];
    assert!(groups(&ops).is_empty());
}

#[test]
fn an_input_whose_last_use_is_a_later_read_in_the_run_is_consumed() {
    // 2 = exp(1); 3 = 2! + 1! — input 1 is loaded at op 0 (read-only) and dies at op 1.
    let s = &[6][..];
    let ops = vec![
        exp(t(1, s, ReadOnly), 2),
        add(t(2, s, ReadWrite), t(1, s, ReadWrite), 3),
    ];
    let g = groups(&ops);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].inputs, vec![Slot { op: 0, pos: 0 }]);
    assert_eq!(g[0].consumed, vec![true]);
}

// Plans: the fused group's step replaces its operations and drops.

use burn_compile_schedule::{FusedKernel, ScheduleOptions, Step, schedule};

fn plan_of(
    ops: &[OperationIr],
    fused: Option<&dyn Fn(&FusedKernel) -> bool>,
) -> burn_compile_schedule::Plan {
    let options = ScheduleOptions {
        relu_masks: true,
        dead_code_elimination: true,
        common_subexpressions: true,
        fused,
        max_kernel_buffers: usize::MAX,
        horizontal: false,
        matmul: None,
        attention: None,
        column: None,
        horizontal_columns: None,
        view_copies: None,
        memory_planning: true,
        symbolic_sizes: &[],
    };
    schedule(ops, options)
}

fn plan_with(ops: &[OperationIr], accepts: &dyn Fn(&FusedKernel) -> bool) -> Vec<Step> {
    plan_of(ops, Some(accepts)).steps
}

#[test]
fn a_plan_launches_one_kernel_for_a_fused_run() {
    // The bias is dropped between the add and the ReLU.
    let ops = linear_bias_relu(true);
    let plan = plan_of(&ops, Some(&|_| true));
    assert_eq!(
        plan.steps,
        vec![
            Step::Eager { op: 0 },
            Step::Fused { group: 0 },
            Step::Eager { op: 4 },
        ]
    );
    assert_eq!(plan.fused[0].drops, vec![2], "the drop runs with the group");
    assert_eq!(
        (plan.launches(), plan.fused_kernels(), plan.fused_ops()),
        (3, 1, 2)
    );
}

#[test]
fn a_kernel_the_target_refuses_runs_op_by_op() {
    let s = &[3, 5][..];
    let ops = vec![
        exp(t(1, s, ReadOnly), 2),
        mul_scalar(t(2, s, ReadWrite), 0.5, 3),
    ];
    // e.g. a dtype without a kernel on this target.
    let refused = plan_with(&ops, &|_| false);
    assert_eq!(refused, vec![Step::Eager { op: 0 }, Step::Eager { op: 1 }]);
    // No target, or fusion off.
    let off = plan_of(&ops, None);
    assert_eq!(off.steps, refused);
    assert!(off.fused.is_empty());
    assert_eq!(plan_with(&ops, &|_| true), vec![Step::Fused { group: 0 }]);
}

#[test]
fn a_view_of_an_outside_tensor_is_hoisted_and_the_run_goes_on() {
    // Burn's layer norm tail: 3 = 1! * 1; 5 = reshape(γ(4)) [1, 8]; 6 = 3! * 5!; 7 = 6! + 2.
    let (m, r) = (&[4, 8][..], &[1, 8][..]);
    let ops = vec![
        mul(t(1, m, ReadOnly), t(1, m, ReadWrite), 3),
        reshape(t(4, &[8], ReadOnly), r, 5),
        mul(t(3, m, ReadWrite), t(5, r, ReadWrite), 6),
        add(t(6, m, ReadWrite), t(2, m, ReadOnly), 7),
    ];
    let plan = plan_of(&ops, Some(&|_| true));
    assert_eq!(plan.fused.len(), 1, "{plan:#?}");
    assert_eq!(plan.fused[0].ops, vec![0, 2, 3]);
    assert_eq!(plan.fused[0].hoisted, vec![1]);
    assert_eq!(
        plan.steps,
        vec![Step::Eager { op: 1 }, Step::Fused { group: 0 }],
        "the reshape runs before the kernel"
    );
    assert_eq!(plan.fused[0].consumed, vec![true, true, false]);
}

#[test]
fn an_independent_operation_inside_a_run_is_hoisted_and_the_run_goes_on() {
    // 2 = exp(1); 12 = 10 @ 11 (reads nothing of the run); 13 = 12 @ 11; 3 = 2! + 13!;
    // 4 = exp(3!). Autodiff interleaves independent branches so: a convolution or a product
    // between the elementwise ops of another branch.
    let s = &[4, 4][..];
    let ops = vec![
        exp(t(1, s, ReadOnly), 2),
        matmul(t(10, s, ReadOnly), t(11, s, ReadOnly), 12),
        matmul(t(12, s, ReadWrite), t(11, s, ReadOnly), 13),
        add(t(2, s, ReadWrite), t(13, s, ReadWrite), 3),
        exp(t(3, s, ReadWrite), 4),
    ];
    let plan = plan_of(&ops, Some(&|_| true));
    assert_eq!(plan.fused.len(), 1, "{plan:#?}");
    assert_eq!(plan.fused[0].ops, vec![0, 3, 4]);
    assert_eq!(plan.fused[0].hoisted, vec![1, 2]);
    assert_eq!(
        plan.steps,
        vec![
            Step::Eager { op: 1 },
            Step::Eager { op: 2 },
            Step::Fused { group: 0 }
        ],
        "the products run first, in their order, then the kernel that reads them"
    );
    assert!(plan.fused[0].summary().contains("2 op(s) hoisted"));
}

#[test]
fn an_operation_reading_what_the_run_read_is_not_hoisted() {
    // 2 = exp(1); 3 = exp(2!); 12 = 1! @ 11 — the product is input 1's last use (the inner
    // backend may write its result over it), so it may not run before the kernel that reads
    // input 1: the run ends there. 4 = exp(3!) alone is no kernel.
    let s = &[4, 4][..];
    let ops = vec![
        exp(t(1, s, ReadOnly), 2),
        exp(t(2, s, ReadWrite), 3),
        matmul(t(1, s, ReadWrite), t(11, s, ReadOnly), 12),
        exp(t(3, s, ReadWrite), 4),
    ];
    let plan = plan_of(&ops, Some(&|_| true));
    assert_eq!(plan.fused.len(), 1, "{plan:#?}");
    assert_eq!(plan.fused[0].ops, vec![0, 1]);
    assert!(plan.fused[0].hoisted.is_empty());
    assert_eq!(
        plan.steps,
        vec![
            Step::Fused { group: 0 },
            Step::Eager { op: 2 },
            Step::Eager { op: 3 }
        ]
    );
}

#[test]
fn a_view_of_a_tensor_of_the_run_ends_it() {
    // 2 = exp(1); 3 = exp(2); 4 = reshape(3) — reads the run's result: not hoisted.
    let s = &[4, 8][..];
    let ops = vec![
        exp(t(1, s, ReadOnly), 2),
        exp(t(2, s, ReadWrite), 3),
        reshape(t(3, s, ReadWrite), &[8, 4], 4),
        exp(t(4, &[8, 4], ReadWrite), 5),
    ];
    let plan = plan_of(&ops, Some(&|_| true));
    assert_eq!(plan.fused.len(), 1);
    assert!(plan.fused[0].hoisted.is_empty());
    assert_eq!(
        plan.steps,
        vec![
            Step::Fused { group: 0 },
            Step::Eager { op: 2 },
            Step::Eager { op: 3 }
        ]
    );
}

// Row kernels: reductions over the last dimension with their prologue and epilogue.

fn numeric(
    op: fn(BinaryOpIr) -> NumericOperationIr,
    l: TensorIr,
    r: TensorIr,
    o: &[usize],
    id: u64,
) -> OperationIr {
    OperationIr::NumericFloat(
        DType::F32,
        op(BinaryOpIr {
            lhs: l,
            rhs: r,
            out: out(id, o),
        }),
    )
}

fn mean_dim(input: TensorIr, id: u64) -> OperationIr {
    let mut shape = input.shape.to_vec();
    let axis = shape.len() - 1;
    shape[axis] = 1;
    OperationIr::NumericFloat(
        DType::F32,
        NumericOperationIr::MeanDim(burn_ir::ReduceDimOpIr {
            input,
            out: out(id, &shape),
            axis,
            accumulator_len: 1,
        }),
    )
}

fn float_unary(op: fn(UnaryOpIr) -> FloatOperationIr, input: TensorIr, id: u64) -> OperationIr {
    let shape = input.shape.to_vec();
    OperationIr::Float(
        DType::F32,
        op(UnaryOpIr {
            input,
            out: out(id, &shape),
        }),
    )
}

/// Burn 0.21's `LayerNorm` forward after a residual add, as `Compiled<B>` records it.
fn residual_layer_norm() -> Vec<OperationIr> {
    let (s, r, p) = (&[4, 16, 64][..], &[4, 16, 1][..], &[1, 1, 64][..]);
    let add_scalar = OperationIr::NumericFloat(
        DType::F32,
        NumericOperationIr::AddScalar(ScalarOpIr {
            lhs: t(7, r, ReadWrite),
            rhs: ScalarIr::Float(1e-5),
            out: out(8, r),
        }),
    );
    vec![
        add(t(1, s, ReadOnly), t(2, s, ReadWrite), 3),
        mean_dim(t(3, s, ReadOnly), 4),
        numeric(
            NumericOperationIr::Sub,
            t(3, s, ReadWrite),
            t(4, r, ReadWrite),
            s,
            5,
        ),
        mul(t(5, s, ReadOnly), t(5, s, ReadOnly), 6),
        mean_dim(t(6, s, ReadWrite), 7),
        add_scalar,
        float_unary(FloatOperationIr::Sqrt, t(8, r, ReadWrite), 9),
        numeric(
            NumericOperationIr::Div,
            t(5, s, ReadWrite),
            t(9, r, ReadWrite),
            s,
            10,
        ),
        reshape(t(11, &[64], ReadOnly), p, 12),
        mul(t(10, s, ReadWrite), t(12, p, ReadWrite), 13),
        reshape(t(14, &[64], ReadOnly), p, 15),
        add(t(13, s, ReadWrite), t(15, p, ReadWrite), 16),
    ]
}

#[test]
fn a_residual_add_and_layer_norm_are_one_row_kernel() {
    let ops = residual_layer_norm();
    let plan = plan_of(&ops, Some(&|_| true));
    assert_eq!(
        plan.steps,
        vec![
            Step::Eager { op: 8 },
            Step::Eager { op: 10 },
            Step::Fused { group: 0 }
        ],
        "{plan:#?}"
    );
    let g = &plan.fused[0];
    assert_eq!(g.ops, vec![0, 1, 2, 3, 4, 5, 6, 7, 9, 11]);
    let row = g.kernel.row.as_ref().expect("a row kernel");
    assert_eq!(row.shape, vec![4, 16, 64]);
    // 64 columns: one plane-sized group of 32 units per row, 8 rows per cube (64 rows).
    assert_eq!((row.units, row.rows_per_cube), (32, 8));
    assert_eq!(
        row.row_outputs,
        vec![false],
        "only the normalized tensor is written"
    );
    let reductions = g
        .kernel
        .program
        .iter()
        .filter(|i| {
            matches!(
                i,
                Instr::Reduce {
                    op: burn_compile_schedule::ReduceOp::Mean,
                    ..
                }
            )
        })
        .count();
    assert_eq!(reductions, 2);
    assert_eq!(
        g.scalars,
        vec![5],
        "ε is read from the recorded op at replay"
    );
    // x, the residual, γ and β; γ and β broadcast over the rows.
    assert_eq!(g.kernel.inputs.len(), 4);
    assert_eq!(g.kernel.inputs[2], vec![true, true, false]);
}

/// A layer norm's backward as Burn's autodiff records it starts with the reciprocal of the
/// forward's standard deviation (one value per row), then the row-wide ops that read it: one
/// row kernel, the reciprocal among its row values, where it was a launch of its own (found on
/// W1's training step: 18 of them, Burn's own unary kernel).
#[test]
fn a_per_row_op_before_a_row_kernel_is_one_of_its_row_values() {
    let (s, r) = (&[4, 16, 64][..], &[4, 16, 1][..]);
    let ops = vec![
        // 2 = 1 / std(1); 4 = g(3) * 2; 5 = sum(4 * x(6)) per row; 7 = 4 - 5
        float_unary(FloatOperationIr::Recip, t(1, r, ReadOnly), 2),
        mul(t(3, s, ReadWrite), t(2, r, ReadWrite), 4),
        mul(t(4, s, ReadOnly), t(6, s, ReadOnly), 8),
        support::sum_dim(t(8, s, ReadWrite), 2, 5),
        numeric(
            NumericOperationIr::Sub,
            t(4, s, ReadWrite),
            t(5, r, ReadWrite),
            s,
            7,
        ),
    ];
    let g = groups(&ops);
    assert_eq!(g.len(), 1, "{g:#?}");
    assert_eq!(g[0].ops, vec![0, 1, 2, 3, 4]);
    let row = g[0].kernel.row.as_ref().expect("a row kernel");
    assert_eq!(row.shape, vec![4, 16, 64]);
    assert!(
        g[0].kernel.program.iter().any(|i| matches!(
            i,
            Instr::Unary {
                op: UnaryOp::Recip,
                ..
            }
        )),
        "{:#?}",
        g[0].kernel.program
    );
    // Its only output is the last op's: the reciprocal stays in registers.
    assert_eq!(g[0].outputs, vec![Slot { op: 4, pos: 0 }]);
}

/// One value (a single row) is no row kernel: an optimizer's one-element state computed before
/// a rank-1 parameter's update stays its own kernel (the updates fuse across parameters).
#[test]
fn a_single_value_before_a_rank_one_run_stays_apart() {
    let (p, one) = (&[64][..], &[1][..]);
    let ops = vec![
        mul_scalar(t(1, one, ReadWrite), 0.9, 2),
        support::add_scalar(t(2, one, ReadOnly), 1.0, 3),
        mul(t(4, p, ReadWrite), t(3, one, ReadWrite), 5),
        support::add_scalar(t(5, p, ReadWrite), 1.0, 6),
    ];
    let g = groups(&ops);
    assert_eq!(g.len(), 2, "{g:#?}");
    assert_eq!(
        (g[0].ops.clone(), g[1].ops.clone()),
        (vec![0, 1], vec![2, 3])
    );
    assert!(g[0].kernel.row.is_none() && g[1].kernel.row.is_none());
}

/// Nor after: a rank-1 update followed by the next parameter's one-element state and update
/// stays three kernels (they fuse across parameters), not one row kernel of a single row
/// (found on W1's jit training step: six such kernels of one cube each, 95 µs).
#[test]
fn a_single_value_after_a_rank_one_run_stays_apart() {
    let (p, one) = (&[64][..], &[1][..]);
    let ops = vec![
        mul_scalar(t(1, p, ReadWrite), 0.9, 2),
        support::add_scalar(t(2, p, ReadWrite), 1.0, 3),
        mul_scalar(t(4, one, ReadWrite), 0.9, 5),
        support::add_scalar(t(5, one, ReadOnly), 1.0, 6),
        mul(t(7, p, ReadWrite), t(6, one, ReadWrite), 8),
        support::add_scalar(t(8, p, ReadWrite), 1.0, 9),
    ];
    let g = groups(&ops);
    let runs: Vec<Vec<u32>> = g.iter().map(|g| g.ops.clone()).collect();
    assert_eq!(runs, vec![vec![0, 1], vec![2, 3], vec![4, 5]], "{g:#?}");
    assert!(g.iter().all(|g| g.kernel.row.is_none()));
    // After a reduction the single value is the row's: one row kernel (a vector's softmax).
    let softmax_like = vec![
        support::sum_dim(t(1, p, ReadOnly), 0, 2),
        mul_scalar(t(2, one, ReadWrite), 0.5, 3),
        mul(t(1, p, ReadWrite), t(3, one, ReadWrite), 4),
    ];
    let g = groups(&softmax_like);
    assert_eq!(g.len(), 1, "{g:#?}");
    assert!(g[0].kernel.row.is_some());
}

#[test]
fn a_captured_softmax_over_the_last_dimension_is_one_row_kernel() {
    let s = &[2, 4, 8, 8][..];
    let softmax = |input: TensorIr, id| {
        OperationIr::Custom(CustomOpIr {
            id: Activation::Softmax { dim: 3 }.op_id(),
            inputs: vec![input],
            outputs: vec![out(id, s)],
        })
    };
    // Alone, and after the attention scale.
    let alone = plan_of(&[softmax(t(1, s, ReadWrite), 2)], Some(&|_| true));
    assert_eq!(alone.steps, vec![Step::Fused { group: 0 }]);
    assert!(alone.fused[0].kernel.row.is_some());
    let scaled = plan_of(
        &[
            mul_scalar(t(1, s, ReadWrite), 0.125, 2),
            softmax(t(2, s, ReadWrite), 3),
        ],
        Some(&|_| true),
    );
    assert_eq!(scaled.steps, vec![Step::Fused { group: 0 }]);
    assert_eq!(scaled.fused_ops(), 2);
    // Over another dimension: the inner backend's own softmax.
    let other = OperationIr::Custom(CustomOpIr {
        id: Activation::Softmax { dim: 1 }.op_id(),
        inputs: vec![t(1, s, ReadWrite)],
        outputs: vec![out(2, s)],
    });
    assert_eq!(
        plan_of(&[other], Some(&|_| true)).steps,
        vec![Step::Activation {
            op: 0,
            kind: Activation::Softmax { dim: 1 }
        }]
    );
}

#[test]
fn a_captured_gelu_fuses_with_the_bias_add_before_it() {
    // 3 = x + b[1, 8]; 4 = gelu(3): one kernel, Burn's exact GELU as one instruction. Its
    // backward (`GeluBackward`) runs on the inner backend, whose derivative (the tanh
    // approximation's, on CubeCL backends) the kernel would otherwise have to reproduce.
    let m = &[4, 8][..];
    let gelu = |input: TensorIr, id| {
        OperationIr::Custom(CustomOpIr {
            id: Activation::Gelu.op_id(),
            inputs: vec![input],
            outputs: vec![out(id, m)],
        })
    };
    let ops = vec![
        add(t(1, m, ReadOnly), t(2, &[1, 8], ReadOnly), 3),
        gelu(t(3, m, ReadWrite), 4),
    ];
    let p = plan_of(&ops, Some(&|_| true));
    assert_eq!(p.steps, vec![Step::Fused { group: 0 }]);
    assert!(p.fused[0].kernel.program.contains(&Instr::Unary {
        op: UnaryOp::Gelu,
        a: 2
    }));
}

#[test]
fn a_captured_log_softmax_is_one_row_kernel_computing_d_minus_log_sum_exp_d() {
    let s = &[4, 8, 10][..];
    let log_softmax = OperationIr::Custom(CustomOpIr {
        id: Activation::LogSoftmax { dim: 2 }.op_id(),
        inputs: vec![t(1, s, ReadWrite)],
        outputs: vec![out(2, s)],
    });
    let p = plan_of(&[log_softmax], Some(&|_| true));
    assert_eq!(p.steps, vec![Step::Fused { group: 0 }]);
    let k = &p.fused[0].kernel;
    assert!(k.row.is_some());
    // As Burn's log_softmax: d = x - max(x); d - log(sum(exp(d))).
    assert_eq!(
        k.program,
        vec![
            Instr::Load { input: 0 },
            Instr::Reduce {
                op: ReduceOp::Max,
                a: 0
            },
            Instr::Binary {
                op: BinaryOp::Sub,
                a: 0,
                b: 1
            },
            Instr::Unary {
                op: UnaryOp::Exp,
                a: 2
            },
            Instr::Reduce {
                op: ReduceOp::Sum,
                a: 3
            },
            Instr::Unary {
                op: UnaryOp::Log,
                a: 4
            },
            Instr::Binary {
                op: BinaryOp::Sub,
                a: 2,
                b: 5
            },
            Instr::Store {
                output: 0,
                value: 6
            },
        ]
    );
    // Over another dimension: the inner backend's own log-softmax.
    let other = OperationIr::Custom(CustomOpIr {
        id: Activation::LogSoftmax { dim: 0 }.op_id(),
        inputs: vec![t(1, s, ReadWrite)],
        outputs: vec![out(2, s)],
    });
    assert_eq!(
        plan_of(&[other], Some(&|_| true)).steps,
        vec![Step::Activation {
            op: 0,
            kind: Activation::LogSoftmax { dim: 0 }
        }]
    );
}

#[test]
fn row_layouts_pack_short_rows_and_spread_long_ones() {
    let layout = |shape: &[usize]| {
        let l = RowLayout::new(shape.to_vec(), vec![false]);
        (l.units, l.rows_per_cube)
    };
    // W1: softmax over 32·8·128 rows of 128, layer norm over 4096 rows of 512: one plane-sized
    // group per row, 8 rows per cube of 256 units.
    assert_eq!(layout(&[32, 8, 128, 128]), (32, 8));
    assert_eq!(layout(&[4096, 512]), (32, 8));
    // Rows per cube divide the rows (no cube holds a partial set): 6 rows → 2, 15 → 1.
    assert_eq!(layout(&[6, 300]), (32, 2));
    assert_eq!(layout(&[3, 5, 40]), (32, 1));
    assert_eq!(layout(&[1024]), (32, 1));
    // Long rows: at least 8 columns per unit, at most 256 units, a cube each.
    assert_eq!(layout(&[4, 3000]), (256, 1));
    assert_eq!(layout(&[8, 2048]), (256, 1));
    assert_eq!(layout(&[8, 1536]), (256, 1));
    assert_eq!(layout(&[2, 9000]), (256, 1));
    // No rows at all (a size-0 dimension): a valid layout that launches nothing.
    assert_eq!(layout(&[0, 64]), (32, 1));
}

// Common subexpressions: a repeat of a step that runs alone shares its result.

#[test]
fn a_repeated_op_run_alone_shares_the_first_result() {
    let s = &[4, 8][..];
    // 2 = exp(x 1); 3 = 2 @ 2; 4 = exp(x 1!) repeats 2 (x's last use); 5 = 4 @ 4.
    let ops = vec![
        exp(t(1, s, ReadOnly), 2),
        matmul(t(2, s, ReadOnly), t(2, s, ReadOnly), 3),
        exp(t(1, s, ReadWrite), 4),
        matmul(t(4, s, ReadOnly), t(4, s, ReadOnly), 5),
    ];
    let plan = plan_of(&ops, None);
    assert_eq!(
        plan.steps,
        vec![
            Step::Eager { op: 0 },
            Step::Eager { op: 1 },
            Step::Alias {
                op: 2,
                of: 0,
                inputs: vec![0]
            },
            Step::Eager { op: 3 },
        ],
        "{plan:#?}"
    );
    assert_eq!((plan.merged(), plan.launches()), (1, 3));
    // Without the pass, the repeat runs.
    let options = ScheduleOptions {
        relu_masks: true,
        dead_code_elimination: true,
        common_subexpressions: false,
        fused: None,
        max_kernel_buffers: usize::MAX,
        horizontal: false,
        matmul: None,
        attention: None,
        column: None,
        horizontal_columns: None,
        view_copies: None,
        memory_planning: true,
        symbolic_sizes: &[],
    };
    assert_eq!(schedule(&ops, options).merged(), 0);
}

#[test]
fn a_repeat_inside_a_fused_kernel_is_left_to_the_kernel() {
    // exp(x) twice in one fusible run: one kernel computes both (its intermediates may never be
    // written, so nothing is shared across the kernel boundary).
    let s = &[4, 8][..];
    let ops = vec![
        exp(t(1, s, ReadOnly), 2),
        exp(t(1, s, ReadOnly), 3),
        add(t(2, s, ReadWrite), t(3, s, ReadWrite), 4),
    ];
    let plan = plan_of(&ops, Some(&|_| true));
    assert_eq!(plan.steps, vec![Step::Fused { group: 0 }], "{plan:#?}");
    assert_eq!(plan.merged(), 0);
}

fn plan_within(ops: &[OperationIr], max_kernel_buffers: usize) -> burn_compile_schedule::Plan {
    let accepts: &dyn Fn(&FusedKernel) -> bool = &|_| true;
    schedule(
        ops,
        ScheduleOptions {
            relu_masks: true,
            dead_code_elimination: true,
            common_subexpressions: true,
            fused: Some(accepts),
            max_kernel_buffers,
            horizontal: false,
            matmul: None,
            attention: None,
            column: None,
            horizontal_columns: None,
            view_copies: None,
            memory_planning: true,
            symbolic_sizes: &[],
        },
    )
}

/// Every kernel input is there when its kernel runs: a tensor no operation of the graph
/// produces, or the output of an operation run on its own, or of an earlier kernel; and every
/// kernel binds at most `max` buffers.
fn assert_kernels_fit_and_connect(
    ops: &[OperationIr],
    plan: &burn_compile_schedule::Plan,
    max: usize,
) {
    let produced: std::collections::HashSet<u64> = ops
        .iter()
        .flat_map(|op| op.outputs().map(|t| t.id.value()).collect::<Vec<_>>())
        .collect();
    let grouped: std::collections::HashSet<u32> =
        plan.fused.iter().flat_map(|g| g.ops.clone()).collect();
    let mut available: std::collections::HashSet<u64> = std::collections::HashSet::new();
    for step in &plan.steps {
        match step {
            Step::Eager { op } | Step::Activation { op, .. } => {
                assert!(!grouped.contains(op), "op {op} runs alone and in a kernel");
                available.extend(ops[*op as usize].outputs().map(|t| t.id.value()));
            }
            Step::Fused { group } => {
                let g = &plan.fused[*group as usize];
                assert!(g.inputs.len() + g.outputs.len() <= max, "{g:#?}");
                for slot in &g.inputs {
                    let t = ops[slot.op as usize]
                        .inputs()
                        .nth(slot.pos as usize)
                        .expect("input slot");
                    let id = t.id.value();
                    assert!(
                        !produced.contains(&id) || available.contains(&id),
                        "kernel {group} reads %{id} before it is written: {plan:#?}"
                    );
                }
                for slot in &g.outputs {
                    let t = ops[slot.op as usize]
                        .outputs()
                        .nth(slot.pos as usize)
                        .expect("output");
                    available.insert(t.id.value());
                }
            }
            _ => {}
        }
    }
}

/// 12 tensors summed in a chain: `%200 = %100 + %101`, `%(200+k) = %(199+k)! + %(101+k)`.
fn sum_chain(n: u64) -> Vec<OperationIr> {
    let s = &[4, 8][..];
    (0..n - 1)
        .map(|k| {
            let acc = if k == 0 {
                t(100, s, ReadOnly)
            } else {
                t(199 + k, s, ReadWrite)
            };
            add(acc, t(101 + k, s, ReadOnly), 200 + k)
        })
        .collect()
}

#[test]
fn a_run_wider_than_the_device_binds_is_split_into_kernels_that_fit() {
    let ops = sum_chain(12);
    // Unlimited: one kernel of 12 inputs and 1 output.
    let whole = plan_within(&ops, usize::MAX);
    assert_eq!(whole.fused.len(), 1);
    assert_eq!(buffers(&whole.fused[0]), 13);
    // At most 5 buffers: consecutive parts, each passing its partial sum to the next.
    let plan = plan_within(&ops, 5);
    assert_kernels_fit_and_connect(&ops, &plan, 5);
    assert!(plan.fused.len() >= 3, "{plan:#?}");
    let fused: usize = plan.fused.iter().map(|g| g.ops.len()).sum();
    let alone = plan
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Eager { .. }))
        .count();
    assert_eq!(fused + alone, ops.len(), "every op runs once");
    // The last sum is written by the last kernel (or the op run alone).
    let last = plan.fused.last().expect("kernels");
    assert!(
        last.outputs.iter().any(|s| s.op == 10) || !last.ops.contains(&10),
        "{plan:#?}"
    );
    // Exactly at the limit: not split.
    assert_eq!(plan_within(&ops, 13).fused.len(), 1);
}

fn buffers(g: &FusedGroup) -> usize {
    g.inputs.len() + g.outputs.len()
}

#[test]
fn a_split_layer_norm_keeps_its_reductions_whole_and_its_row_values_in_a_row_shaped_kernel() {
    let ops = residual_layer_norm();
    // 4 inputs (x, residual, γ, β) and 1 output: 5 buffers. At most 4:
    let plan = plan_within(&ops, 4);
    assert_kernels_fit_and_connect(&ops, &plan, 4);
    let kernels: Vec<(Vec<u32>, Vec<usize>, bool)> = plan
        .fused
        .iter()
        .map(|g| (g.ops.clone(), g.shape.to_vec(), g.kernel.row.is_some()))
        .collect();
    assert_eq!(
        kernels,
        vec![
            // add, mean, sub, square, mean: both reductions in one row kernel, which writes
            // the centred x and the variance.
            (vec![0, 1, 2, 3, 4], vec![4, 16, 64], true),
            // + ε, sqrt: row values only, a plain kernel over the rows.
            (vec![5, 6], vec![4, 16, 1], false),
            // × γ, + β (the division, alone, runs on the inner backend).
            (vec![9, 11], vec![4, 16, 64], false),
        ],
        "{plan:#?}"
    );
    assert_eq!(plan.fused[0].outputs.len(), 2);
    // β's reshape still runs just before the kernel that reads it; γ's on its own.
    assert_eq!(plan.fused[2].hoisted, vec![10]);
    assert!(plan.steps.contains(&Step::Eager { op: 8 }));
    assert!(plan.steps.contains(&Step::Eager { op: 7 }));
}

fn ones(shape: &[usize], id: u64) -> OperationIr {
    OperationIr::BaseFloat(burn_ir::BaseOperationIr::Ones(burn_ir::CreationOpIr {
        out: out(id, shape),
    }))
}

fn zeros(shape: &[usize], id: u64) -> OperationIr {
    OperationIr::BaseFloat(burn_ir::BaseOperationIr::Zeros(burn_ir::CreationOpIr {
        out: out(id, shape),
    }))
}

fn full(shape: &[usize], value: f64, id: u64) -> OperationIr {
    OperationIr::NumericFloat(
        DType::F32,
        NumericOperationIr::Full(burn_ir::FullOpIr {
            out: out(id, shape),
            value: ScalarIr::Float(value),
        }),
    )
}

fn binaries(g: &FusedGroup) -> Vec<BinaryOp> {
    g.kernel
        .program
        .iter()
        .filter_map(|i| match i {
            Instr::Binary { op, .. } => Some(*op),
            _ => None,
        })
        .collect()
}

/// Autodiff's mean backward: `ones · (1/n)` times the incoming gradient.
#[test]
fn a_ones_tensor_is_a_constant_of_the_kernel_and_never_filled() {
    let s = &[4, 8][..];
    let ops = vec![
        ones(s, 1),
        mul_scalar(t(1, s, ReadWrite), 0.125, 2),
        mul(t(0, s, ReadOnly), t(2, s, ReadWrite), 3),
    ];
    let g = groups(&ops);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].ops, vec![0, 1, 2]);
    // Only the gradient is read; the ones are a constant, the 1/n the op's runtime scalar.
    assert_eq!(g[0].inputs, vec![Slot { op: 2, pos: 0 }]);
    assert_eq!(g[0].scalars, vec![1]);
    assert!(g[0].kernel.program.contains(&Instr::Const {
        value: Constant::One
    }));
    // 1 · s is s: one multiplication is left, the gradient's by s.
    assert_eq!(binaries(&g[0]), vec![BinaryOp::Mul]);
}

#[test]
fn multiplying_or_dividing_by_one_and_subtracting_zero_are_folded_adding_zero_is_not() {
    let s = &[4, 8][..];
    let ops = vec![
        ones(s, 1),
        zeros(s, 2),
        mul(t(0, s, ReadOnly), t(1, s, ReadOnly), 3),
        numeric(
            NumericOperationIr::Div,
            t(3, s, ReadWrite),
            t(1, s, ReadWrite),
            s,
            4,
        ),
        numeric(
            NumericOperationIr::Sub,
            t(4, s, ReadWrite),
            t(2, s, ReadOnly),
            s,
            5,
        ),
        // −0 + 0 is +0: kept.
        add(t(5, s, ReadWrite), t(2, s, ReadWrite), 6),
    ];
    let g = groups(&ops);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].inputs.len(), 1, "only x is read");
    assert_eq!(binaries(&g[0]), vec![BinaryOp::Add]);
    // Multiplying by zero is not folded either (∞ · 0 is NaN).
    let ops = vec![zeros(s, 1), mul(t(0, s, ReadOnly), t(1, s, ReadWrite), 2)];
    assert_eq!(binaries(&groups(&ops)[0]), vec![BinaryOp::Mul]);
}

#[test]
fn a_full_tensor_is_the_kernels_runtime_scalar() {
    let s = &[4, 8][..];
    let ops = vec![
        full(s, 2.5, 1),
        add(t(0, s, ReadOnly), t(1, s, ReadWrite), 2),
    ];
    let g = groups(&ops);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].inputs.len(), 1);
    assert_eq!(g[0].scalars, vec![0]);
    // The value is read from the recorded op at replay, as every scalar is.
    assert_eq!(burn_compile_schedule::scalar_operand(&ops[0]), Some(2.5));
}

#[test]
fn a_reduction_over_a_dimension_of_size_one_is_its_input() {
    // Layer norm's backward sums `[R, 1]` row values over their last dimension.
    let r = &[4, 1][..];
    let ops = vec![
        mean_dim(t(0, r, ReadOnly), 1),
        float_unary(FloatOperationIr::Exp, t(1, r, ReadWrite), 2),
    ];
    let g = groups(&ops);
    assert_eq!(g.len(), 1);
    assert!(
        g[0].kernel.row.is_none(),
        "no reduction left: a plain kernel"
    );
    assert!(
        !g[0]
            .kernel
            .program
            .iter()
            .any(|i| matches!(i, Instr::Reduce { .. })),
        "{:?}",
        g[0].kernel.program
    );
    assert_eq!(g[0].inputs.len(), 1);
}

/// A symbolic plan (`symbolic_sizes`): a group's dimensions of those sizes are dynamic (its
/// kernel takes them at run time), the others stay constants; the plan has no memory slab, and
/// its summary names the symbolic dimensions.
#[test]
fn symbolic_sizes_make_a_groups_dimensions_dynamic() {
    let s = &[6, 5][..];
    let ops = vec![
        exp(t(1, s, ReadOnly), 2),
        mul_scalar(t(2, s, ReadOnly), 0.5, 3),
        drop_op(2, s),
        add(t(3, s, ReadWrite), t(1, s, ReadOnly), 4),
    ];
    let accept = |_: &FusedKernel| true;
    let options = |symbolic: &'static [u64]| ScheduleOptions {
        relu_masks: true,
        dead_code_elimination: true,
        common_subexpressions: true,
        fused: Some(&accept),
        max_kernel_buffers: usize::MAX,
        horizontal: false,
        matmul: None,
        attention: None,
        column: None,
        horizontal_columns: None,
        view_copies: None,
        memory_planning: false,
        symbolic_sizes: symbolic,
    };
    let specialized = schedule(&ops, options(&[]));
    assert!(!specialized.symbolic);
    assert!(!specialized.fused[0].symbolic());
    let symbolic = schedule(&ops, options(&[6]));
    assert!(symbolic.symbolic);
    let g = &symbolic.fused[0];
    assert_eq!(
        g.dynamic,
        vec![true, false],
        "rows 6 symbolic, columns 5 constant"
    );
    assert!(g.summary().contains("[s6, 5]"), "{}", g.summary());
    assert_eq!(
        g.kernel, specialized.fused[0].kernel,
        "the same kernel program"
    );
    assert_eq!(symbolic.memory.slots.len(), 0);
}

/// ReLU's backward (captured whole: the inner backend runs a comparison and a masked fill) is
/// one instruction of a kernel: alone it is still worth a kernel (one launch for two), and it
/// fuses with the elementwise ops around it.
#[test]
fn relu_backward_is_a_kernel_alone_and_fuses_with_its_neighbours() {
    let s = &[4, 8][..];
    let alone = vec![
        matmul(t(1, &[4, 16], ReadOnly), t(2, &[16, 8], ReadOnly), 3),
        relu_backward(t(4, s, ReadOnly), t(3, s, ReadWrite), 5),
        matmul(t(5, s, ReadWrite), t(6, &[8, 8], ReadOnly), 7),
    ];
    let g = groups(&alone);
    assert_eq!(g.len(), 1, "{g:#?}");
    assert_eq!(g[0].ops, vec![1]);
    assert_eq!(
        g[0].kernel.program,
        vec![
            Instr::Load { input: 0 },
            Instr::Load { input: 1 },
            Instr::Binary {
                op: BinaryOp::ReluBackward,
                a: 0,
                b: 1
            },
            Instr::Store {
                output: 0,
                value: 2
            },
        ]
    );
    let chained = vec![
        mul_scalar(t(1, s, ReadWrite), 0.5, 2),
        relu_backward(t(4, s, ReadOnly), t(2, s, ReadWrite), 5),
        exp(t(5, s, ReadWrite), 6),
    ];
    let g = groups(&chained);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].ops, vec![0, 1, 2]);
    assert!(
        g[0].kernel.program.iter().any(|i| matches!(
            i,
            Instr::Binary {
                op: BinaryOp::ReluBackward,
                ..
            }
        )),
        "{:?}",
        g[0].kernel.program
    );
}
