//! Column sums launched together on hand-built graphs: sums of one shape over independent
//! tensors become one step at the last one's place; a sum stays on its own where moving it
//! would let another step read its result before it is written or free its input before it is
//! read, where its shape differs, and where the inputs held together would pass the bound.

use TensorStatus::*;
use burn_backend::DType;
use burn_compile_schedule::{HorizontalColumnGroup, MAX_HELD_BYTES, Plan, Step};
use burn_ir::{TensorIr, TensorStatus};

mod support;
use support::{exp, linear_bias_backward, plan_with_columns, plan_with_horizontal_columns};

fn t(id: u64, shape: &[usize], status: TensorStatus) -> TensorIr {
    support::tensor(id, shape, status, DType::F32)
}

fn column_steps(plan: &Plan) -> Vec<Step> {
    plan.steps
        .iter()
        .filter(|s| matches!(s, Step::Column { .. } | Step::HorizontalColumns { .. }))
        .cloned()
        .collect()
}

/// Three bias gradients of `[16, 8]` with an unrelated operation between them: one launch at
/// the last one's place, after that operation; each sum keeps its own group. Without horizontal
/// fusion, three column sums.
#[test]
fn bias_gradients_of_one_shape_are_one_launch() {
    let ops = vec![
        linear_bias_backward(t(1, &[16, 8], ReadWrite), 4),
        exp(t(5, &[16, 8], ReadOnly), 6),
        linear_bias_backward(t(2, &[16, 8], ReadWrite), 7),
        linear_bias_backward(t(3, &[16, 8], ReadWrite), 8),
    ];
    let plan = plan_with_horizontal_columns(&ops);
    assert_eq!(
        plan.steps,
        vec![Step::Eager { op: 1 }, Step::HorizontalColumns { group: 0 }]
    );
    assert_eq!(
        plan.horizontal_columns,
        vec![HorizontalColumnGroup {
            members: vec![0, 1, 2]
        }]
    );
    assert_eq!(plan.column.len(), 3);
    assert_eq!(plan.horizontal_column_kernels(), (1, 3));
    let summary = plan.kernel_summaries().join("\n");
    assert!(
        summary.contains("horizontal column sums: 3 sums of [1, 16, 8, 1]"),
        "{summary}"
    );

    let apart = plan_with_columns(&ops);
    assert_eq!(column_steps(&apart).len(), 3);
    assert!(apart.horizontal_columns.is_empty());
}

/// Sums of different shapes are different kernels: each its own launch.
#[test]
fn sums_of_other_shapes_stay_apart() {
    let ops = vec![
        linear_bias_backward(t(1, &[16, 8], ReadWrite), 4),
        linear_bias_backward(t(2, &[16, 4], ReadWrite), 5),
        linear_bias_backward(t(3, &[32, 8], ReadWrite), 6),
    ];
    let plan = plan_with_horizontal_columns(&ops);
    assert!(plan.horizontal_columns.is_empty());
    assert_eq!(column_steps(&plan).len(), 3);
}

/// The first sum's result is read by another operation before the second sum: the first cannot wait
/// for the second, so each runs at its own place.
#[test]
fn a_sum_never_moves_past_a_reader_of_its_result() {
    let ops = vec![
        linear_bias_backward(t(1, &[16, 8], ReadWrite), 4),
        exp(t(4, &[8], ReadOnly), 5),
        linear_bias_backward(t(2, &[16, 8], ReadWrite), 6),
    ];
    let plan = plan_with_horizontal_columns(&ops);
    assert!(plan.horizontal_columns.is_empty());
    assert_eq!(
        plan.steps,
        vec![
            Step::Column { group: 0 },
            Step::Eager { op: 1 },
            Step::Column { group: 1 },
        ]
    );
}

/// The first sum's input is consumed by another operation before the second sum: moved after it, the
/// sum would read freed memory, so it stays.
#[test]
fn a_sum_never_moves_past_what_frees_its_input() {
    let ops = vec![
        linear_bias_backward(t(1, &[16, 8], ReadOnly), 4),
        exp(t(1, &[16, 8], ReadWrite), 5),
        linear_bias_backward(t(2, &[16, 8], ReadWrite), 6),
    ];
    let plan = plan_with_horizontal_columns(&ops);
    assert!(plan.horizontal_columns.is_empty());
    assert_eq!(column_steps(&plan).len(), 2);
}

/// The first sum's input is consumed by a generated kernel (two pointwise operations) before
/// the second sum, which sums that kernel's output — a layer norm's β and γ gradients: the
/// group takes the free over. The kernel no longer frees the input (`consumed` off for it) and
/// the first sum's group frees it after the launch (`frees_input`). Where a single eager
/// operation frees it (above), nothing is taken over.
#[test]
fn a_kernels_free_of_a_sums_input_is_taken_over_by_the_group() {
    let ops = vec![
        linear_bias_backward(t(1, &[16, 8], ReadOnly), 4),
        exp(t(1, &[16, 8], ReadWrite), 5),
        exp(t(5, &[16, 8], ReadWrite), 6),
        linear_bias_backward(t(6, &[16, 8], ReadWrite), 7),
    ];
    let plan = plan_with_horizontal_columns(&ops);
    assert_eq!(
        plan.horizontal_columns,
        vec![HorizontalColumnGroup {
            members: vec![0, 1]
        }],
        "{:?}",
        plan.steps
    );
    assert_eq!(plan.fused.len(), 1, "{:?}", plan.steps);
    let kernel = &plan.fused[0];
    let reads_input = |slot: &burn_compile_schedule::Slot| slot.op == 1 && slot.pos == 0;
    let (_, consumed) = kernel
        .inputs
        .iter()
        .zip(&kernel.consumed)
        .find(|(slot, _)| reads_input(slot))
        .expect("the kernel reads the sum's input");
    assert!(!consumed, "the kernel leaves the input alive");
    assert!(plan.column[0].frees_input && !plan.column[0].consumed);
    assert!(!plan.column[1].frees_input && plan.column[1].consumed);
    // Without horizontal fusion the kernel frees it, as the operation does.
    let apart = plan_with_columns(&ops);
    assert!(apart.fused[0].consumed.iter().all(|c| *c));
    assert!(!apart.column[0].frees_input);
}

/// Inputs of 64 MiB each: two held together would pass [`MAX_HELD_BYTES`], so the sums run
/// where they are and their inputs are freed there.
#[test]
fn grouping_holds_no_more_than_the_bound() {
    let rows = MAX_HELD_BYTES / 4 / 1024;
    let ops = vec![
        linear_bias_backward(t(1, &[rows, 1024], ReadWrite), 4),
        linear_bias_backward(t(2, &[rows, 1024], ReadWrite), 5),
    ];
    let plan = plan_with_horizontal_columns(&ops);
    assert!(plan.horizontal_columns.is_empty());
    let half = vec![
        linear_bias_backward(t(1, &[rows / 2, 1024], ReadWrite), 4),
        linear_bias_backward(t(2, &[rows / 2, 1024], ReadWrite), 5),
    ];
    assert_eq!(
        plan_with_horizontal_columns(&half).horizontal_column_kernels(),
        (1, 2)
    );
}
