//! Copies of swapped views that products read (`view_copies`) on hand-built graphs shaped like
//! Burn 0.21's `MultiHeadAttention` and its backward: graph in, exactly these copies out.

use TensorStatus::*;
use burn_backend::DType;
use burn_compile_schedule::{OperandCopies, Plan, Step, operand_copies};
use burn_ir::{OperationIr, TensorIr, TensorStatus};

mod support;
use support::{drop, exp, linear, matmul, plan_with_view_copies, reshape, swap_dims, tensor};
include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../snapshots/assert.rs"
));

const B: usize = 2;
const S: usize = 8;
const H: usize = 4;
const D: usize = 16;

fn t(id: u64, shape: &[usize], status: TensorStatus) -> TensorIr {
    tensor(id, shape, status, DType::F32)
}

/// The heads of `x` (`[B, S, H·D]`, id `x`): reshaped to `[B, S, H, D]` (id `x + 10`), swapped
/// to `[B, H, S, D]` (id `x + 20`).
fn split_heads(x: u64) -> Vec<OperationIr> {
    vec![
        reshape(t(x, &[B, S, H * D], ReadWrite), &[B, S, H, D], x + 10),
        swap_dims(t(x + 10, &[B, S, H, D], ReadWrite), 1, 2, x + 20),
    ]
}

/// MHA's forward over the projections q = 1, k = 2, v = 3: their heads 21, 22, 23; kᵀ = 24;
/// scores 25 = q @ kᵀ; context 26 = scores @ v; heads merged back: 27 (swap), 28 (reshape), and
/// the output projection 30 = 28 @ W(29).
fn attention_forward() -> Vec<OperationIr> {
    let heads = [B, H, S, D];
    let mut ops = Vec::new();
    for x in [1, 2, 3] {
        ops.extend(split_heads(x));
    }
    ops.extend([
        swap_dims(t(22, &heads, ReadWrite), 2, 3, 24),
        matmul(
            t(21, &heads, ReadWrite),
            t(24, &[B, H, D, S], ReadWrite),
            25,
        ),
        matmul(
            t(25, &[B, H, S, S], ReadWrite),
            t(23, &heads, ReadWrite),
            26,
        ),
        swap_dims(t(26, &heads, ReadWrite), 1, 2, 27),
        reshape(t(27, &[B, S, H, D], ReadWrite), &[B, S, H * D], 28),
        linear(
            t(28, &[B, S, H * D], ReadWrite),
            t(29, &[H * D, H * D], ReadOnly),
            None,
            30,
        ),
    ]);
    ops
}

/// A copy: the swap it copies, and its inputs read through a swap (`(input, dim1, dim2)`).
type ViewCopy = (u32, Vec<(u16, u8, u8)>);

/// The copies of `plan`.
fn copies(plan: &Plan) -> Vec<ViewCopy> {
    plan.fused
        .iter()
        .filter(|g| !g.swapped_inputs.is_empty())
        .map(|g| (g.ops[0], g.swapped_inputs.clone()))
        .collect()
}

#[test]
fn attention_heads_read_by_products_are_copied_once_and_launch_together() {
    let ops = attention_forward();
    let plan = plan_with_view_copies(&ops, true, true);
    // q, k and v's heads (ops 1, 3, 5) and the context swapped back (op 9): each copied by a
    // kernel reading the swap's input through the swap; kᵀ (op 6) stays a transposed view.
    assert_eq!(
        copies(&plan),
        vec![
            (1, vec![(0, 1, 2)]),
            (3, vec![(0, 1, 2)]),
            (5, vec![(0, 1, 2)]),
            (9, vec![(0, 1, 2)]),
        ]
    );
    // The three heads' copies are one launch, at v's place, before the scores' product.
    assert_eq!(plan.horizontal.len(), 1);
    assert_eq!(plan.horizontal[0].members, vec![0, 1, 2]);
    let at = |step: &Step| plan.steps.iter().position(|s| s == step).unwrap();
    assert!(at(&Step::Horizontal { group: 0 }) < at(&Step::Matmul { group: 0 }));
    assert!(
        plan.steps.contains(&Step::Eager { op: 6 }),
        "kᵀ stays a view"
    );
    // Each copy's kernel writes its swap's output contiguous, freeing the swap's input (its
    // last use).
    for g in plan.fused.iter().filter(|g| !g.swapped_inputs.is_empty()) {
        assert_eq!(g.consumed, vec![true]);
        assert_eq!(g.outputs.len(), 1);
        assert_eq!(g.outputs[0].op, g.ops[0]);
    }
    let summaries = plan_summaries(&plan);
    assert_stage_snapshot!(
        "schedule",
        "view_copies_attention_forward",
        summaries,
        "MHA's forward (q, k, v heads split from [2, 8, 64], context merged back): its plan"
    );
}

/// The plan's steps and kernels, one line each, for review.
fn plan_summaries(plan: &Plan) -> String {
    let mut lines: Vec<String> = plan.steps.iter().map(|s| format!("{s:?}")).collect();
    lines.extend(plan.kernel_summaries());
    lines.join("\n")
}

#[test]
fn without_view_copies_the_swaps_stay_views() {
    let plan = plan_with_view_copies(&attention_forward(), false, true);
    assert!(copies(&plan).is_empty());
    for op in [1, 3, 5, 6, 9] {
        assert!(
            plan.steps.contains(&Step::Eager { op }),
            "swap {op} runs as a view"
        );
    }
}

#[test]
fn the_copies_replace_those_the_products_and_reshapes_would_make() {
    let ops = attention_forward();
    // Without them: the scores' product copies q and kᵀ, the context's v, and the reshape
    // merging the context's heads copies it.
    let plain = plan_with_view_copies(&ops, false, true);
    assert_eq!(
        operand_copies(&ops, &plain),
        OperandCopies {
            matmuls: 2,
            reshapes: 1
        }
    );
    // With them every product and reshape reads a layout it takes in place.
    let plan = plan_with_view_copies(&ops, true, true);
    assert_eq!(operand_copies(&ops, &plan), OperandCopies::default());
}

#[test]
fn without_horizontal_fusion_each_copy_is_its_own_launch() {
    let plan = plan_with_view_copies(&attention_forward(), true, false);
    assert_eq!(copies(&plan).len(), 4);
    assert!(plan.horizontal.is_empty());
    for g in 0..4 {
        assert!(plan.steps.contains(&Step::Fused { group: g }));
    }
}

#[test]
fn a_swapped_view_only_elementwise_operations_read_is_not_copied() {
    // exp reads the heads in place (a generated kernel reads any layout).
    let mut ops = split_heads(1);
    ops.push(exp(t(21, &[B, H, S, D], ReadWrite), 22));
    let plan = plan_with_view_copies(&ops, true, true);
    assert!(copies(&plan).is_empty());
}

#[test]
fn a_swap_of_a_copied_view_that_a_product_cannot_read_is_copied_too() {
    // The heads' copy is contiguous; swapped again to `[H, B, S, D]` its batch does not fold.
    let heads = [B, H, S, D];
    let mut ops = split_heads(1);
    ops.extend([
        swap_dims(t(21, &heads, ReadWrite), 0, 1, 30),
        matmul(
            t(30, &[H, B, S, D], ReadOnly),
            t(31, &[H, B, D, S], ReadOnly),
            32,
        ),
        drop(t(30, &[H, B, S, D], ReadWrite)),
    ]);
    let plan = plan_with_view_copies(&ops, true, true);
    assert_eq!(
        copies(&plan),
        vec![(1, vec![(0, 1, 2)]), (2, vec![(0, 0, 1)])]
    );
}

#[test]
fn a_swap_a_later_swap_undoes_is_not_copied() {
    // `[B, S, H, D]` swapped to `[B, H, S, D]` and back: the product reads the input's own
    // layout, in place.
    let ops = vec![
        swap_dims(t(1, &[B, S, H, D], ReadWrite), 1, 2, 2),
        swap_dims(t(2, &[B, H, S, D], ReadWrite), 1, 2, 3),
        matmul(
            t(3, &[B, S, H, D], ReadWrite),
            t(4, &[B, S, D, H], ReadOnly),
            5,
        ),
    ];
    let plan = plan_with_view_copies(&ops, true, true);
    assert!(copies(&plan).is_empty());
}

#[test]
fn heads_merged_back_through_a_transposed_view_are_copied() {
    // dK comes out of its product transposed (`(q ᵀ @ dS)ᵀ`, a view), then its heads are
    // merged back for the key projection's backward: one copy, read through both swaps.
    let heads = [B, H, S, D];
    let ops = vec![
        matmul(
            t(1, &[B, H, D, S], ReadOnly),
            t(2, &[B, H, S, S], ReadOnly),
            3,
        ),
        swap_dims(t(3, &[B, H, D, S], ReadWrite), 2, 3, 4),
        swap_dims(t(4, &heads, ReadWrite), 1, 2, 5),
        reshape(t(5, &[B, S, H, D], ReadWrite), &[B, S, H * D], 6),
        linear(
            t(6, &[B, S, H * D], ReadWrite),
            t(7, &[H * D, H * D], ReadOnly),
            None,
            8,
        ),
    ];
    let plan = plan_with_view_copies(&ops, true, true);
    assert_eq!(copies(&plan), vec![(2, vec![(0, 1, 2)])]);
}

#[test]
fn a_swap_of_a_dimension_of_one_element_moves_nothing_and_is_not_copied() {
    let ops = vec![
        reshape(t(1, &[1, S, H * D], ReadWrite), &[1, S, H, D], 11),
        swap_dims(t(11, &[1, S, H, D], ReadWrite), 0, 1, 21),
        matmul(
            t(21, &[S, 1, H, D], ReadWrite),
            t(22, &[S, 1, D, H], ReadOnly),
            23,
        ),
    ];
    let plan = plan_with_view_copies(&ops, true, true);
    assert!(copies(&plan).is_empty());
}
