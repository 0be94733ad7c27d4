//! Dead-code elimination on hand-built graphs: what dies, what must live, what is released.

use TensorStatus::*;
use burn_compile_passes::dead_code;
use burn_ir::{OperationIr, TensorIr, TensorStatus};

mod support;

use support::{add, drop_op, exp, random, t};

#[test]
fn an_output_dropped_unused_is_dead_with_its_drop() {
    // 2 = exp(1) dropped; 3 = exp(1) escapes.
    let ops = vec![exp(t(1, ReadOnly), 2), drop_op(2), exp(t(1, ReadOnly), 3)];
    let live = dead_code(&ops);
    assert_eq!(live.dead, vec![true, true, false]);
    assert!(live.releases.is_empty());
}

#[test]
fn chains_of_dead_ops_die_together() {
    // 2 = exp(1); 3 = exp(2!) consumes 2 in place; 3 dropped: both dead, nothing to release
    // (2 never exists).
    let ops = vec![exp(t(1, ReadOnly), 2), exp(t(2, ReadWrite), 3), drop_op(3)];
    let live = dead_code(&ops);
    assert_eq!(live.dead, vec![true, true, true]);
    assert!(live.releases.is_empty(), "{:?}", live.releases);
}

#[test]
fn a_dead_op_consuming_an_outside_tensor_releases_it() {
    // 3 = 1! + 2 where 1 came from an earlier graph and dies here; 3 dropped unused.
    let ops = vec![add(t(1, ReadWrite), t(2, ReadOnly), 3), drop_op(3)];
    let live = dead_code(&ops);
    assert_eq!(live.dead, vec![true, true]);
    assert_eq!(live.releases, vec![(0, vec![0])]);
}

#[test]
fn a_used_output_keeps_its_producer_alive() {
    let ops = vec![
        exp(t(1, ReadOnly), 2),
        add(t(2, ReadWrite), t(1, ReadOnly), 3),
        // 3 escapes the graph.
    ];
    assert_eq!(dead_code(&ops).dead, vec![false, false]);
}

#[test]
fn random_draws_are_never_dead() {
    let ops = vec![random(5), drop_op(5)];
    assert_eq!(dead_code(&ops).dead, vec![false, false]);
}

fn custom(id: &str, input: TensorIr, out: u64) -> OperationIr {
    OperationIr::Custom(burn_ir::CustomOpIr {
        id: id.to_string(),
        inputs: vec![input],
        outputs: vec![t(out, NotInit)],
    })
}

#[test]
fn captured_activations_are_pure_so_unused_ones_die() {
    let softmax = burn_compile_graph::Activation::Softmax { dim: 1 }.op_id();
    let ops = vec![custom(&softmax, t(1, ReadOnly), 2), drop_op(2)];
    assert_eq!(dead_code(&ops).dead, vec![true, true]);
}

#[test]
fn foreign_custom_ops_are_never_dead() {
    let ops = vec![custom("someone_else.op", t(1, ReadOnly), 2), drop_op(2)];
    assert_eq!(dead_code(&ops).dead, vec![false, false]);
}
