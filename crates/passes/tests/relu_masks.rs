//! ReLU masks on hand-built graphs: when a ReLU backward reads the forward's output instead of
//! its input, and how the liveness of both moves.

use TensorStatus::*;
use burn_compile_passes::{InputRewrite, apply_rewrites, relu_backward_reads_output};
use burn_ir::{OperationIr, TensorStatus};

mod support;

use support::{add, drop_op, exp, relu, relu_backward, t};

/// The shape of a feed-forward layer's ReLU in a training step: 2 = exp(1) (the product making
/// the pre-activation), 3 = relu(2), 4 = exp(3) (the next layer), 6 = 3! + 5 (its weight
/// gradient, the output's last use), 7 = relu_backward(2!, 6).
fn layer(grad_before_backward: bool) -> Vec<OperationIr> {
    let mut ops = vec![
        exp(t(1, ReadOnly), 2),
        relu(t(2, ReadOnly), 3),
        exp(t(3, ReadOnly), 4),
    ];
    if grad_before_backward {
        ops.push(add(t(3, ReadWrite), t(5, ReadOnly), 6));
    } else {
        ops.push(add(t(5, ReadOnly), t(5, ReadOnly), 6));
    }
    ops.push(relu_backward(t(2, ReadWrite), t(6, ReadOnly), 7));
    ops
}

fn status(op: &OperationIr, input: usize) -> (u64, TensorStatus) {
    let t = op.inputs().nth(input).expect("input exists");
    (t.id.value(), t.status)
}

#[test]
fn the_backward_reads_the_relu_output_which_it_now_consumes() {
    let mut ops = layer(true);
    let rewrites = relu_backward_reads_output(&ops);
    assert_eq!(
        rewrites,
        vec![
            InputRewrite::Consumes { op: 1, input: 0 },
            InputRewrite::Reads {
                op: 4,
                input: 0,
                from: 1,
                output: 0,
                status: ReadWrite,
            },
            InputRewrite::KeepsAlive { op: 3, input: 0 },
        ]
    );
    apply_rewrites(&mut ops, &rewrites);
    // The ReLU is the pre-activation's last use; the weight gradient no longer ends the
    // output, the backward does.
    assert_eq!(status(&ops[1], 0), (2, ReadWrite));
    assert_eq!(status(&ops[3], 0), (3, ReadOnly));
    assert_eq!(status(&ops[4], 0), (3, ReadWrite));
    assert_eq!(status(&ops[4], 1), (6, ReadOnly));
    // Nothing reads the pre-activation after the ReLU any more.
    assert!(
        ops[2..]
            .iter()
            .all(|op| op.inputs().all(|t| t.id.value() != 2))
    );
}

#[test]
fn an_output_still_alive_after_the_backward_is_read_without_being_consumed() {
    let mut ops = layer(false);
    let rewrites = relu_backward_reads_output(&ops);
    assert_eq!(rewrites.len(), 2, "{rewrites:?}");
    apply_rewrites(&mut ops, &rewrites);
    assert_eq!(status(&ops[1], 0), (2, ReadWrite));
    assert_eq!(status(&ops[4], 0), (3, ReadOnly));
}

#[test]
fn applying_the_rewrites_twice_changes_nothing_more() {
    let mut once = layer(true);
    let rewrites = relu_backward_reads_output(&once);
    apply_rewrites(&mut once, &rewrites);
    let mut twice = once.clone();
    apply_rewrites(&mut twice, &rewrites);
    assert_eq!(once, twice);
    // And the rewritten graph has nothing left to rewrite.
    assert!(relu_backward_reads_output(&once).is_empty());
}

#[test]
fn an_output_dropped_before_the_backward_leaves_the_graph_as_recorded() {
    let mut ops = layer(false);
    ops.insert(4, drop_op(3));
    assert!(relu_backward_reads_output(&ops).is_empty());
}

#[test]
fn a_pre_activation_read_between_them_leaves_the_graph_as_recorded() {
    let mut ops = layer(true);
    ops.insert(3, exp(t(2, ReadOnly), 8));
    assert!(relu_backward_reads_output(&ops).is_empty());
}

#[test]
fn a_backward_that_is_not_the_pre_activations_last_use_is_left_alone() {
    // 8 = exp(2!) after the backward: the pre-activation outlives it.
    let mut ops = layer(true);
    let last = ops.len() - 1;
    ops[last] = relu_backward(t(2, ReadOnly), t(6, ReadOnly), 7);
    ops.push(exp(t(2, ReadWrite), 8));
    assert!(relu_backward_reads_output(&ops).is_empty());
}

#[test]
fn a_pre_activation_from_outside_the_graph_is_left_alone() {
    // The ReLU's input is a graph input (the user's tensor): its last use stays where it was.
    let ops = vec![
        relu(t(2, ReadOnly), 3),
        exp(t(3, ReadOnly), 4),
        relu_backward(t(2, ReadWrite), t(4, ReadOnly), 7),
    ];
    assert!(relu_backward_reads_output(&ops).is_empty());
}

#[test]
fn a_relu_that_consumes_its_input_has_no_backward_reading_it() {
    // Inference: 3 = relu(2!) — nothing to rewrite, and a backward of another tensor is not
    // matched to it.
    let ops = vec![
        exp(t(1, ReadOnly), 2),
        relu(t(2, ReadWrite), 3),
        exp(t(1, ReadOnly), 5),
        relu_backward(t(5, ReadWrite), t(3, ReadOnly), 7),
    ];
    assert!(relu_backward_reads_output(&ops).is_empty());
}
