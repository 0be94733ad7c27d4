//! Horizontal fusion on hand-built graphs: independent kernels of one program become one
//! launch; a kernel is never moved past what reads its outputs or frees its inputs.

use TensorStatus::*;
use burn_backend::DType;
use burn_compile_schedule::{HorizontalGroup, Plan, Step};
use burn_ir::{OperationIr, TensorIr, TensorStatus};

mod support;
use support::{add, exp, matmul, mul, mul_scalar, plan_with, reshape};

fn t(id: u64, shape: &[usize], status: TensorStatus) -> TensorIr {
    support::tensor(id, shape, status, DType::F32)
}

/// An SGD-with-momentum-like update of one parameter, as an optimizer records it:
/// `out = grad · 0.1 + param · 0.9` (ids `base..base + 5`: grad, param, then three results).
fn update(base: u64, shape: &[usize]) -> Vec<OperationIr> {
    update_of(
        t(base, shape, ReadWrite),
        t(base + 1, shape, ReadOnly),
        base,
    )
}

fn update_of(grad: TensorIr, param: TensorIr, base: u64) -> Vec<OperationIr> {
    let shape = grad.shape.to_vec();
    vec![
        mul_scalar(grad, 0.1, base + 2),
        mul_scalar(param, 0.9, base + 3),
        add(
            t(base + 2, &shape, ReadWrite),
            t(base + 3, &shape, ReadWrite),
            base + 4,
        ),
    ]
}

/// Update 1 (of a `[4, 8]` parameter), then a matmul reading its output (id 14) into id 51.
fn update_then_its_reader() -> Vec<OperationIr> {
    let mut ops = update(10, &[4, 8]);
    ops.push(matmul(
        t(14, &[4, 8], ReadOnly),
        t(50, &[8, 2], ReadOnly),
        51,
    ));
    ops
}

fn horizontal(ops: &[OperationIr]) -> Plan {
    plan_with(ops, false, false, true, usize::MAX)
}

fn members(plan: &Plan) -> Vec<Vec<u32>> {
    plan.horizontal.iter().map(|h| h.members.clone()).collect()
}

/// Three parameters of three shapes (so no two updates are one vertical kernel): three
/// kernels of one program, launched as one at the last one's place.
#[test]
fn updates_of_three_parameters_launch_as_one_kernel() {
    let ops: Vec<OperationIr> = [(10, &[4, 8][..]), (20, &[8][..]), (30, &[3, 5][..])]
        .into_iter()
        .flat_map(|(base, shape)| update(base, shape))
        .collect();
    let separate = plan_with(&ops, false, false, false, usize::MAX);
    assert_eq!(separate.fused.len(), 3);
    assert_eq!(separate.launches(), 3);

    let plan = horizontal(&ops);
    assert_eq!(
        plan.fused, separate.fused,
        "the members keep their own kernels"
    );
    assert_eq!(
        plan.horizontal,
        vec![HorizontalGroup {
            members: vec![0, 1, 2]
        }]
    );
    assert_eq!(plan.steps, vec![Step::Horizontal { group: 0 }]);
    assert_eq!(plan.launches(), 1);
    assert_eq!(plan.horizontal_kernels(), (1, 3));
    assert!(
        plan.kernel_summaries()
            .iter()
            .any(|s| s.starts_with("horizontal kernel of 3 pointwise kernels")),
        "{:?}",
        plan.kernel_summaries()
    );
}

/// Update 2 reads what update 1 wrote (through a reshape the inner backend runs): update 1
/// cannot run at update 2's place.
#[test]
fn a_kernel_feeding_another_through_an_op_stays_apart() {
    let mut ops = update(10, &[4, 8]);
    ops.push(reshape(t(14, &[4, 8], ReadWrite), &[32], 40));
    ops.extend(update_of(
        t(40, &[32], ReadWrite),
        t(21, &[32], ReadOnly),
        20,
    ));
    let plan = horizontal(&ops);
    assert_eq!(plan.fused.len(), 2);
    assert!(plan.horizontal.is_empty(), "{:?}", members(&plan));
}

/// An op between the two updates frees a tensor update 1 reads (its last use, `ReadWrite`):
/// update 1 cannot be moved past it, and update 2 reads its result, so update 2 cannot run
/// before it either. The same op reading it without freeing it is no obstacle.
#[test]
fn a_kernel_is_not_moved_past_an_op_that_frees_its_input() {
    let graph = |status| {
        let mut ops = update(10, &[4, 8]);
        // The parameter of update 1 (id 11) read by a matmul: its last use when `ReadWrite`.
        ops.push(matmul(t(11, &[4, 8], status), t(50, &[8, 2], ReadOnly), 51));
        ops.extend(update_of(
            t(20, &[4, 2], ReadWrite),
            t(51, &[4, 2], ReadOnly),
            20,
        ));
        ops
    };
    assert!(horizontal(&graph(ReadWrite)).horizontal.is_empty());
    assert_eq!(members(&horizontal(&graph(ReadOnly))), vec![vec![0, 1]]);
}

/// An op between the two updates reads update 1's output, and update 2 reads that op's
/// result: neither update can run at the other's place.
#[test]
fn a_kernel_is_not_moved_past_a_reader_of_its_output() {
    let mut ops = update_then_its_reader();
    ops.extend(update_of(
        t(20, &[4, 2], ReadWrite),
        t(51, &[4, 2], ReadOnly),
        20,
    ));
    assert!(horizontal(&ops).horizontal.is_empty());
}

/// The same graph with update 2 reading only the step's inputs: update 1 still cannot wait
/// past the reader of its output, but update 2 can run early, at update 1's place.
#[test]
fn a_kernel_that_cannot_wait_is_joined_by_a_later_one_at_its_place() {
    let mut ops = update_then_its_reader();
    ops.extend(update(20, &[8]));
    let plan = horizontal(&ops);
    assert_eq!(members(&plan), vec![vec![0, 1]]);
    assert_eq!(
        plan.steps,
        vec![Step::Horizontal { group: 0 }, Step::Eager { op: 3 }],
        "the group runs where update 1 ran, before the matmul reading its output"
    );
}

/// An Adam-like step over two parameters: each parameter's one-element bias correction
/// (`c = exp(s · 0.9)` from its own state `s`) is read by that parameter's update right after
/// it. The updates wait for the last one; the corrections cannot, so they run together at the
/// first one's place: four kernels, two launches.
#[test]
fn per_parameter_corrections_run_together_at_the_first_ones_place() {
    let step = |base: u64, shape: &[usize]| {
        let one = vec![1; shape.len()];
        vec![
            mul_scalar(t(base, &one, ReadWrite), 0.9, base + 1),
            exp(t(base + 1, &one, ReadWrite), base + 2),
            mul(
                t(base + 3, shape, ReadWrite),
                t(base + 2, &one, ReadWrite),
                base + 4,
            ),
            add(
                t(base + 4, shape, ReadWrite),
                t(base + 5, shape, ReadOnly),
                base + 6,
            ),
        ]
    };
    let mut ops = step(10, &[4, 8]);
    ops.extend(step(20, &[8]));
    let separate = plan_with(&ops, false, false, false, usize::MAX);
    assert_eq!(separate.fused.len(), 4, "{:#?}", separate.fused);
    let plan = horizontal(&ops);
    assert_eq!(members(&plan), vec![vec![1, 3], vec![0, 2]]);
    assert_eq!(plan.launches(), 2);
    assert_eq!(
        plan.steps,
        vec![Step::Horizontal { group: 1 }, Step::Horizontal { group: 0 }]
    );
}

/// A later kernel never runs before the op that writes what it reads, nor before an op that
/// reads what it consumes.
#[test]
fn a_kernel_is_not_run_early_before_its_input_or_a_reader_of_what_it_frees() {
    // Update 2's gradient is the matmul's result.
    let mut ops = update_then_its_reader();
    ops.extend(update_of(
        t(51, &[4, 2], ReadWrite),
        t(21, &[4, 2], ReadOnly),
        20,
    ));
    assert!(horizontal(&ops).horizontal.is_empty());

    // The matmul reads update 2's gradient, which update 2 consumes.
    let mut ops = update_then_its_reader();
    ops.push(matmul(
        t(20, &[8, 2], ReadOnly),
        t(52, &[2, 3], ReadOnly),
        53,
    ));
    ops.extend(update(20, &[8, 2]));
    assert!(horizontal(&ops).horizontal.is_empty());
}

/// Kernels of different programs are not grouped: one kernel runs one program per member.
#[test]
fn kernels_of_different_programs_are_not_grouped() {
    let mut ops = update(10, &[4, 8]);
    ops.extend([
        mul_scalar(t(20, &[8], ReadWrite), 0.1, 22),
        exp(t(22, &[8], ReadWrite), 23),
    ]);
    let plan = horizontal(&ops);
    assert_eq!(plan.fused.len(), 2);
    assert!(plan.horizontal.is_empty());
}

/// A kernel binds at most `max_kernel_buffers` buffers: four updates of three buffers each
/// within seven are two kernels of two members.
#[test]
fn the_buffer_limit_splits_a_horizontal_group() {
    let ops: Vec<OperationIr> = [
        (10, &[4, 8][..]),
        (20, &[8][..]),
        (30, &[3, 5][..]),
        (40, &[7][..]),
    ]
    .into_iter()
    .flat_map(|(base, shape)| update(base, shape))
    .collect();
    let plan = plan_with(&ops, false, false, true, 7);
    assert_eq!(members(&plan), vec![vec![0, 1], vec![2, 3]]);
    assert_eq!(plan.launches(), 2);
}

/// The members of one launch run together, so a member's output never takes the memory slot
/// of a value another member reads, even one freed there. Graph: kernel 0 writes t11 into the
/// replay's buffer; update A consumes it; update B writes t24 (same bytes), which kernel 3
/// consumes. Launched one by one, t24 reuses t11's slot; launched together, it must not.
#[test]
fn horizontal_members_never_share_a_slot_they_read_and_write() {
    let s = &[4, 8][..];
    let r = &[8, 4][..];
    // A product of a tensor the kernel before it read ends its run (an independent one would
    // be hoisted and the run would go on), and is no member's input or output.
    let unrelated = |read: TensorIr, id: u64| {
        let k = read.shape[1];
        matmul(read, t(id + 1, &[k, 2], ReadOnly), id + 2)
    };
    let mut ops = vec![
        mul_scalar(t(1, s, ReadOnly), 3.0, 10),
        exp(t(10, s, ReadWrite), 11),
        unrelated(t(1, s, ReadOnly), 60),
    ];
    ops.extend(update_of(t(11, s, ReadWrite), t(12, s, ReadOnly), 10 + 3));
    ops.push(unrelated(t(12, s, ReadOnly), 70));
    ops.extend(update(20, r));
    ops.push(unrelated(t(21, r, ReadOnly), 80));
    ops.extend([
        mul_scalar(t(24, r, ReadWrite), 5.0, 90),
        exp(t(90, r, ReadWrite), 91),
    ]);
    let separate = plan_with(&ops, false, false, false, usize::MAX);
    assert_eq!(separate.fused.len(), 4, "{:#?}", separate.fused);
    let slot = |plan: &Plan, group: usize| plan.memory.fused[group][0];
    assert!(slot(&separate, 0).is_some() && slot(&separate, 2).is_some());
    assert_eq!(
        slot(&separate, 0),
        slot(&separate, 2),
        "one by one, B's output reuses the slot A freed"
    );

    let together = horizontal(&ops);
    assert_eq!(members(&together), vec![vec![1, 2]]);
    assert!(slot(&together, 2).is_some());
    assert_ne!(slot(&together, 0), slot(&together, 2));
}
