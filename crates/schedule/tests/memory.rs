//! Memory planning on hand-built graphs: which intermediates share the replay's buffer, in
//! which slots.

use TensorStatus::*;
use burn_backend::DType;
use burn_compile_schedule::Step;
use burn_ir::{TensorIr, TensorStatus};

mod support;
use support::{add, exp, linear, mul, plan, reshape};

fn t(id: u64, shape: &[usize], status: TensorStatus) -> TensorIr {
    support::tensor(id, shape, status, DType::BF16)
}

/// bf16 bytes of a shape.
fn bytes(shape: &[usize]) -> u64 {
    shape.iter().product::<usize>() as u64 * 2
}

#[test]
fn a_chain_of_products_reuses_a_slot_once_its_value_is_consumed() {
    // h1 = x @ w1 [4, 16]; h2 = h1 @ w2 [4, 8]; h3 = h2 @ w3 [4, 16]; y = h3 @ w4 (the output).
    let ops = vec![
        linear(t(1, &[4, 8], ReadOnly), t(2, &[8, 16], ReadOnly), None, 10),
        linear(
            t(10, &[4, 16], ReadWrite),
            t(3, &[16, 8], ReadOnly),
            None,
            11,
        ),
        linear(
            t(11, &[4, 8], ReadWrite),
            t(4, &[8, 16], ReadOnly),
            None,
            12,
        ),
        linear(
            t(12, &[4, 16], ReadWrite),
            t(5, &[16, 4], ReadOnly),
            None,
            13,
        ),
    ];
    let plan = plan(&ops, true, false);
    assert!(plan.steps.iter().all(|s| matches!(s, Step::Matmul { .. })));
    let memory = &plan.memory;
    // h1 is consumed at step 1, so h3 (written at step 2) takes its slot; h2 overlaps both.
    assert_eq!(memory.matmul, vec![Some(0), Some(1), Some(0), None]);
    assert_eq!(memory.slots, vec![bytes(&[4, 16]), bytes(&[4, 8])]);
    assert_eq!(memory.planned(), 3);
    assert_eq!(memory.unplanned_bytes, 2 * bytes(&[4, 16]) + bytes(&[4, 8]));
}

#[test]
fn a_value_an_inner_operation_reads_keeps_its_own_allocation() {
    // The reshape may return a view of h1 whose uses the plan does not follow.
    let ops = vec![
        linear(t(1, &[4, 8], ReadOnly), t(2, &[8, 16], ReadOnly), None, 10),
        reshape(t(10, &[4, 16], ReadWrite), &[2, 32], 11),
        linear(
            t(11, &[2, 32], ReadWrite),
            t(3, &[32, 4], ReadOnly),
            None,
            12,
        ),
    ];
    let plan = plan(&ops, true, false);
    assert_eq!(plan.memory.matmul, vec![None, None]);
    assert!(plan.memory.slots.is_empty());
}

#[test]
fn a_graph_output_is_never_planned() {
    // h1 is read by the second product but never consumed: it outlives the graph.
    let ops = vec![
        linear(t(1, &[4, 8], ReadOnly), t(2, &[8, 16], ReadOnly), None, 10),
        linear(
            t(10, &[4, 16], ReadOnly),
            t(3, &[16, 4], ReadOnly),
            None,
            11,
        ),
    ];
    let plan = plan(&ops, true, false);
    assert_eq!(plan.memory.matmul, vec![None, None]);
}

#[test]
fn kernel_outputs_and_product_outputs_share_slots_by_liveness() {
    // h1 = x @ w1, h2 = x @ w2, e = exp(h1 · h2) (one kernel), f = e @ w3, y = f @ w4.
    let ops = vec![
        linear(t(1, &[4, 8], ReadOnly), t(2, &[8, 16], ReadOnly), None, 10),
        linear(t(1, &[4, 8], ReadOnly), t(3, &[8, 16], ReadOnly), None, 11),
        mul(t(10, &[4, 16], ReadWrite), t(11, &[4, 16], ReadWrite), 12),
        exp(t(12, &[4, 16], ReadWrite), 13),
        linear(
            t(13, &[4, 16], ReadWrite),
            t(4, &[16, 16], ReadOnly),
            None,
            14,
        ),
        linear(
            t(14, &[4, 16], ReadWrite),
            t(5, &[16, 4], ReadOnly),
            None,
            15,
        ),
    ];
    let plan = plan(&ops, true, false);
    assert_eq!(plan.fused.len(), 1, "{:?}", plan.steps);
    let memory = &plan.memory;
    // The kernel reads h1 and h2 while writing e: three slots; f (after the kernel) reuses the
    // first free one of the same size.
    assert_eq!(memory.fused, vec![vec![Some(2)]]);
    assert_eq!(memory.matmul, vec![Some(0), Some(1), Some(0), None]);
    assert_eq!(memory.slots, vec![bytes(&[4, 16]); 3]);
}

#[test]
fn a_fused_residual_is_freed_by_its_call_whose_output_takes_another_slot() {
    // h1 = x @ w1; y = x @ w2 + h1 (h1 is the call's C); z = y @ w3.
    let ops = vec![
        linear(t(1, &[4, 8], ReadOnly), t(2, &[8, 16], ReadOnly), None, 10),
        linear(t(1, &[4, 8], ReadOnly), t(3, &[8, 16], ReadOnly), None, 11),
        add(t(11, &[4, 16], ReadWrite), t(10, &[4, 16], ReadWrite), 12),
        linear(
            t(12, &[4, 16], ReadWrite),
            t(4, &[16, 4], ReadOnly),
            None,
            13,
        ),
    ];
    let plan = plan(&ops, true, false);
    assert_eq!(plan.matmul[1].residual.map(|r| r.op), Some(2));
    assert_eq!(plan.launches(), 3);
    // y is written while the call reads h1: a slot of its own; z is the graph's output.
    assert_eq!(plan.memory.matmul, vec![Some(0), Some(1), None]);
}

#[test]
fn a_slot_grows_for_a_larger_value_when_none_fits() {
    // h1 [4, 8] is consumed before h3 [4, 32] is written: h3 takes h1's slot, grown.
    let ops = vec![
        linear(t(1, &[4, 8], ReadOnly), t(2, &[8, 8], ReadOnly), None, 10),
        linear(
            t(10, &[4, 8], ReadWrite),
            t(3, &[8, 16], ReadOnly),
            None,
            11,
        ),
        linear(
            t(11, &[4, 16], ReadWrite),
            t(4, &[16, 32], ReadOnly),
            None,
            12,
        ),
        linear(
            t(12, &[4, 32], ReadWrite),
            t(5, &[32, 4], ReadOnly),
            None,
            13,
        ),
    ];
    let memory = plan(&ops, true, false).memory;
    assert_eq!(memory.matmul, vec![Some(0), Some(1), Some(0), None]);
    assert_eq!(memory.slots, vec![bytes(&[4, 32]), bytes(&[4, 16])]);
}
