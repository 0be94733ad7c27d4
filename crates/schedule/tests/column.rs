//! Column sums on hand-built graphs: a bias gradient and a chain of broadcast-gradient sums
//! each become one column-sum step; a chain stops where its result is read elsewhere, where its
//! dimensions stop being adjacent, or where its input is freed before the last sum.

use TensorStatus::*;
use burn_backend::DType;
use burn_compile_schedule::{ColumnGroup, Plan, Slot, Step};
use burn_ir::{OperationIr, TensorIr, TensorStatus};

mod support;
use support::{drop, exp, linear_bias_backward, plan, plan_with_columns, sum_dim};

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
            input: Slot { op: 0, pos: 0 },
            consumed: true,
            output: Slot { op: 0, pos: 0 },
            dims: [1, 16, 16],
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
        (vec![0, 1], [1, 24, 8], false)
    );
    assert_eq!(g.output, Slot { op: 1, pos: 0 });
    assert!(g.summary().contains("[1, 24, 8]"), "{}", g.summary());
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
    assert_eq!(plan.column[0].dims, [1, 4, 48]);
    assert_eq!(plan.column[1].dims, [1, 6, 8]);
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
    let dims: Vec<[usize; 3]> = plan.column.iter().map(|g| g.dims).collect();
    assert_eq!(dims, vec![[1, 2, 60], [3, 4, 5]]);
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
