//! Column sums on hand-built graphs: a bias gradient, a chain of broadcast-gradient sums and a
//! batch norm's statistics each become one column-sum step; a chain stops where its result is
//! read elsewhere, where its dimensions stop having the kernel's form, or where its input is
//! freed before the last sum.

use TensorStatus::*;
use burn_backend::DType;
use burn_compile_schedule::{ColumnGroup, Plan, Slot, Step, column_layout};
use burn_ir::{OperationIr, TensorIr, TensorStatus};

mod support;
use support::{
    drop, exp, linear_bias_backward, mean_dim, plan, plan_with_columns, reshape, sum_dim, swap_dims,
};

fn t(id: u64, shape: &[usize], status: TensorStatus) -> TensorIr {
    support::tensor(id, shape, status, DType::F32)
}

fn columns(plan: &Plan) -> Vec<Step> {
    plan.steps
        .iter()
        .filter(|s| matches!(s, Step::Column { .. }))
        .cloned()
        .collect()
}

/// A linear layer's bias gradient: the output gradient `[2, 8, 16]` summed over its 16 rows of
/// 16 features, one kernel reading it as `[1, 16, 16]`, freeing it after (its last use).
#[test]
fn a_bias_gradient_is_one_column_sum() {
    let ops = vec![linear_bias_backward(t(1, &[2, 8, 16], ReadWrite), 2)];
    let plan = plan_with_columns(&ops);
    assert_eq!(plan.steps, vec![Step::Column { group: 0 }]);
    assert_eq!(
        plan.column,
        vec![ColumnGroup {
            ops: vec![0],
            drops: vec![],
            reshape: None,
            input: Slot { op: 0, pos: 0 },
            consumed: true,
            frees_input: false,
            output: Slot { op: 0, pos: 0 },
            dims: [1, 16, 16, 1],
            divisor: 1,
            dtype: DType::F32,
        }]
    );
}

/// Burn's autodiff sums a layer norm's γ gradient over the two dimensions γ was broadcast
/// along, one at a time: `[4, 6, 8]` → `[1, 6, 8]` → `[1, 1, 8]`. The second sum is the first
/// one's only reader, the dimensions are adjacent: one kernel over `[1, 24, 8]`, the
/// intermediate never written.
#[test]
fn a_chain_of_broadcast_sums_is_one_column_sum() {
    let ops = vec![
        sum_dim(t(1, &[4, 6, 8], ReadOnly), 0, 2),
        sum_dim(t(2, &[1, 6, 8], ReadWrite), 1, 3),
    ];
    let plan = plan_with_columns(&ops);
    assert_eq!(plan.steps, vec![Step::Column { group: 0 }]);
    let g = &plan.column[0];
    assert_eq!(
        (g.ops.clone(), g.dims, g.consumed),
        (vec![0, 1], [1, 24, 8, 1], false)
    );
    assert_eq!(g.output, Slot { op: 1, pos: 0 });
    assert!(g.summary().contains("[1, 24, 8, 1]"), "{}", g.summary());
}

/// A layer norm's γ: the gradient summed back to `[1, 1, 8]`, then, later, reshaped to γ's
/// `[8]`, the sum's last use. The reshape is part of the kernel, which writes its output (the
/// same elements as `[8]`) where the sums were: the step stays at the last sum, and no step
/// reads the sum's result in between. Read by another operation too, the reshape stays a step
/// of its own.
#[test]
fn a_reshape_that_ends_the_result_is_the_kernels_output() {
    let ops = vec![
        sum_dim(t(1, &[4, 6, 8], ReadWrite), 0, 2),
        sum_dim(t(2, &[1, 6, 8], ReadWrite), 1, 3),
        exp(t(9, &[8], ReadOnly), 10),
        reshape(t(3, &[1, 1, 8], ReadWrite), &[8], 4),
    ];
    let plan = plan_with_columns(&ops);
    assert_eq!(columns(&plan), vec![Step::Column { group: 0 }]);
    assert_eq!(plan.steps[0], Step::Column { group: 0 });
    let g = &plan.column[0];
    assert_eq!((g.ops.clone(), g.reshape), (vec![0, 1], Some(3)));
    assert_eq!((g.output, g.dims), (Slot { op: 3, pos: 0 }, [1, 24, 8, 1]));
    assert_eq!(g.at(), 1);
    assert_eq!(g.all_ops().collect::<Vec<_>>(), vec![0, 1, 3]);

    let mut read_twice = ops.clone();
    read_twice[3] = reshape(t(3, &[1, 1, 8], ReadOnly), &[8], 4);
    read_twice.push(exp(t(3, &[1, 1, 8], ReadWrite), 5));
    let plan = plan_with_columns(&read_twice);
    let g = &plan.column[0];
    assert_eq!((g.reshape, g.output), (None, Slot { op: 1, pos: 0 }));
}

/// An intermediate dropped rather than consumed by the next sum still ends inside the chain:
/// its drop runs inside the step.
#[test]
fn a_dropped_intermediate_is_inside_the_chain() {
    let ops = vec![
        sum_dim(t(1, &[4, 6, 8], ReadWrite), 0, 2),
        sum_dim(t(2, &[1, 6, 8], ReadOnly), 1, 3),
        drop(t(2, &[1, 6, 8], ReadWrite)),
    ];
    let plan = plan_with_columns(&ops);
    assert_eq!(plan.steps, vec![Step::Column { group: 0 }]);
    let g = &plan.column[0];
    assert_eq!((g.ops.clone(), g.drops.clone()), (vec![0, 1], vec![2]));
    assert!(g.consumed);
}

/// The first sum's result is also read by another operation: it must exist, so the chain stops
/// there — two column sums, the other reader between them.
#[test]
fn a_chain_stops_at_a_result_read_elsewhere() {
    let ops = vec![
        sum_dim(t(1, &[4, 6, 8], ReadWrite), 0, 2),
        exp(t(2, &[1, 6, 8], ReadOnly), 3),
        sum_dim(t(2, &[1, 6, 8], ReadWrite), 1, 4),
    ];
    let plan = plan_with_columns(&ops);
    assert_eq!(columns(&plan).len(), 2, "{:?}", plan.steps);
    assert_eq!(plan.column[0].dims, [1, 4, 48, 1]);
    assert_eq!(plan.column[1].dims, [1, 6, 8, 1]);
    assert_eq!(plan.steps[1], Step::Eager { op: 1 });
}

/// Sums over dimensions 0 and 2 of `[2, 3, 4, 5]` are not one column sum (dimension 1 lies
/// between them): two kernels.
#[test]
fn sums_over_dimensions_apart_are_separate_column_sums() {
    let ops = vec![
        sum_dim(t(1, &[2, 3, 4, 5], ReadWrite), 0, 2),
        sum_dim(t(2, &[1, 3, 4, 5], ReadWrite), 2, 3),
    ];
    let plan = plan_with_columns(&ops);
    let dims: Vec<[usize; 4]> = plan.column.iter().map(|g| g.dims).collect();
    assert_eq!(dims, vec![[1, 2, 60, 1], [3, 4, 5, 1]]);
}

/// The kernel reads the first sum's input at the last sum: an operation between them that
/// frees that input (its last use, in place) stops the chain.
#[test]
fn a_chain_stops_where_its_input_is_freed_before_its_last_sum() {
    let ops = vec![
        sum_dim(t(1, &[4, 6, 8], ReadOnly), 0, 2),
        exp(t(1, &[4, 6, 8], ReadWrite), 5),
        sum_dim(t(2, &[1, 6, 8], ReadWrite), 1, 3),
    ];
    let plan = plan_with_columns(&ops);
    let groups: Vec<Vec<u32>> = plan.column.iter().map(|g| g.ops.clone()).collect();
    assert_eq!(groups, vec![vec![0], vec![2]]);
}

/// A sum over the last dimension is a row kernel's, a sum over a dimension of size 1 an
/// identity: neither is a column sum. Without the option, nothing is.
#[test]
fn row_sums_and_disabled_column_sums_are_not_column_sums() {
    let row = vec![
        sum_dim(t(1, &[4, 8], ReadWrite), 1, 2),
        sum_dim(t(3, &[1, 8], ReadWrite), 0, 4),
    ];
    assert!(plan_with_columns(&row).column.is_empty());
    let bias = vec![linear_bias_backward(t(1, &[4, 8], ReadWrite), 2)];
    let off = plan(&bias, false, false);
    assert!(off.column.is_empty());
    assert_eq!(off.steps, vec![Step::Eager { op: 0 }]);
}

/// The intermediates of a chain never get a step of their own, and the step sits at the last
/// sum, after everything the chain's first sum came before.
#[test]
fn the_step_runs_at_the_last_sum() {
    let ops: Vec<OperationIr> = vec![
        sum_dim(t(1, &[4, 6, 8], ReadWrite), 0, 2),
        exp(t(7, &[3, 3], ReadWrite), 8),
        sum_dim(t(2, &[1, 6, 8], ReadWrite), 1, 3),
    ];
    let plan = plan_with_columns(&ops);
    assert_eq!(plan.column[0].ops, vec![0, 2]);
    assert_eq!(
        plan.steps,
        vec![Step::Eager { op: 1 }, Step::Column { group: 0 }]
    );
}

/// Burn's autodiff sums a batch norm's γ gradient (γ broadcast as `[1, C, 1, 1]` against
/// `[N, C, H, W]`) over 0, then 2, then 3: after the first two the summed dimensions are not
/// of the kernel's form (C lies between them, W after), after the third they are — one kernel
/// over `[1, N, C, H·W]`, nothing left to the inner backend.
#[test]
fn a_batch_norm_gradient_summed_over_batch_and_space_is_one_column_sum() {
    let ops = vec![
        sum_dim(t(1, &[2, 3, 4, 5], ReadWrite), 0, 2),
        sum_dim(t(2, &[1, 3, 4, 5], ReadWrite), 2, 3),
        sum_dim(t(3, &[1, 3, 1, 5], ReadWrite), 3, 4),
    ];
    let plan = plan_with_columns(&ops);
    assert_eq!(plan.steps, vec![Step::Column { group: 0 }]);
    let g = &plan.column[0];
    assert_eq!(
        (g.ops.clone(), g.dims, g.divisor, g.consumed),
        (vec![0, 1, 2], [1, 2, 3, 20], 1, true)
    );
    assert_eq!(g.output, Slot { op: 2, pos: 0 });
}

/// A chain whose last sums never reach the kernel's form is cut after its longest prefix that
/// does: the sums over 0 and 2 of `[2, 3, 4, 5]` without the one over 3 are a column sum over 0
/// and a second group for the sum over 2 (as before the chain was extended).
#[test]
fn a_chain_is_cut_after_its_longest_prefix_of_the_kernels_form() {
    let ops = vec![
        sum_dim(t(1, &[2, 3, 4, 5], ReadWrite), 0, 2),
        sum_dim(t(2, &[1, 3, 4, 5], ReadWrite), 2, 3),
        exp(t(3, &[1, 3, 1, 5], ReadWrite), 4),
    ];
    let plan = plan_with_columns(&ops);
    let groups: Vec<(Vec<u32>, [usize; 4])> = plan
        .column
        .iter()
        .map(|g| (g.ops.clone(), g.dims))
        .collect();
    assert_eq!(
        groups,
        vec![(vec![0], [1, 2, 60, 1]), (vec![1], [3, 4, 5, 1])]
    );
}

/// Burn's batch norm: `x.swap_dims(0, 1).reshape([C, N·H·W]).mean_dim(1)`. The swapped view,
/// its reshape (a copy on the inner backend) and the mean are one kernel reading `x` as
/// `[1, N, C, H·W]` and dividing by `N·H·W`; `x` is still read after, so it is not freed.
#[test]
fn a_mean_over_a_swapped_and_reshaped_view_is_one_column_mean() {
    let ops = vec![
        swap_dims(t(1, &[2, 3, 4, 5], ReadOnly), 0, 1, 2),
        reshape(t(2, &[3, 2, 4, 5], ReadWrite), &[3, 40], 3),
        mean_dim(t(3, &[3, 40], ReadWrite), 1, 4),
        exp(t(1, &[2, 3, 4, 5], ReadWrite), 5),
    ];
    let plan = plan_with_columns(&ops);
    assert_eq!(
        plan.steps,
        vec![Step::Column { group: 0 }, Step::Eager { op: 3 }]
    );
    let g = &plan.column[0];
    assert_eq!(
        (g.ops.clone(), g.dims, g.divisor, g.consumed),
        (vec![0, 1, 2], [1, 2, 3, 20], 40, false)
    );
    assert_eq!(
        (g.input, g.output),
        (Slot { op: 0, pos: 0 }, Slot { op: 2, pos: 0 })
    );
    assert!(g.summary().starts_with("column mean"), "{}", g.summary());
}

/// The swapped view read by something else besides the reshape, or a reshape to another shape,
/// is not a batch norm's statistic: nothing is taken (the view must exist).
#[test]
fn a_swapped_view_read_elsewhere_or_reshaped_otherwise_is_not_taken() {
    let shared = vec![
        swap_dims(t(1, &[2, 3, 4, 5], ReadWrite), 0, 1, 2),
        reshape(t(2, &[3, 2, 4, 5], ReadOnly), &[3, 40], 3),
        mean_dim(t(3, &[3, 40], ReadWrite), 1, 4),
        exp(t(2, &[3, 2, 4, 5], ReadWrite), 5),
    ];
    assert!(plan_with_columns(&shared).column.is_empty());
    let other = vec![
        swap_dims(t(1, &[2, 3, 4, 5], ReadWrite), 0, 1, 2),
        reshape(t(2, &[3, 2, 4, 5], ReadWrite), &[6, 20], 3),
        mean_dim(t(3, &[6, 20], ReadWrite), 1, 4),
    ];
    assert!(plan_with_columns(&other).column.is_empty());
}

/// A batch norm's `[2, 3, 4, 5]` read contiguous keeps its dimensions; in channels-last order
/// (strides of `[2, 4, 5, 3]` permuted back) it is a plain column sum over the 40 positions of
/// each channel; any other order is refused, and so is a transposed bias gradient.
#[test]
fn channels_last_inputs_are_read_as_plain_column_sums() {
    let dims = [1, 2, 3, 20];
    let shape = [2, 3, 4, 5];
    assert_eq!(column_layout(dims, &shape, &[60, 20, 5, 1]), Some(dims));
    assert_eq!(
        column_layout(dims, &shape, &[60, 1, 15, 3]),
        Some([1, 40, 3, 1])
    );
    assert_eq!(column_layout(dims, &shape, &[3, 1, 30, 6]), None);
    assert_eq!(column_layout([1, 4, 8, 1], &[4, 8], &[1, 4]), None);
}
