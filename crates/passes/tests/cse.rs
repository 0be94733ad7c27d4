//! Common-subexpression elimination on hand-built graphs: what is merged, and every reason a
//! repeat is not.

use TensorStatus::*;
use burn_backend::DType;
use burn_compile_passes::{Duplicate, common_subexpressions};
use burn_ir::{NumericOperationIr, OperationIr, ScalarIr, ScalarOpIr, TensorIr, TensorStatus};

mod support;

use support::{drop_op, exp, random, sub, t};

fn mul_scalar(lhs: TensorIr, value: f64, out: u64) -> OperationIr {
    OperationIr::NumericFloat(
        DType::F32,
        NumericOperationIr::MulScalar(ScalarOpIr {
            lhs,
            rhs: ScalarIr::Float(value),
            out: t(out, NotInit),
        }),
    )
}

fn all(ops: &[OperationIr]) -> Vec<bool> {
    vec![true; ops.len()]
}

fn dup(op: u32, of: u32, releases: Vec<u8>) -> Duplicate {
    Duplicate { op, of, releases }
}

#[test]
fn layer_norm_centres_twice_and_the_second_is_merged() {
    // Burn's LayerNorm: 3 = x(1) - mean(2) inside var_mean_bias; later 5 = x - mean again, the
    // last use of both (ReadWrite): merged, its inputs released where it would have run.
    let ops = vec![
        sub(t(1, ReadOnly), t(2, ReadOnly), 3),
        exp(t(3, ReadOnly), 4),
        sub(t(1, ReadWrite), t(2, ReadWrite), 5),
        drop_op(3),
    ];
    assert_eq!(
        common_subexpressions(&ops, &all(&ops)),
        vec![dup(2, 0, vec![0, 1])]
    );
}

#[test]
fn an_original_whose_output_is_gone_is_not_reused() {
    // 3 = exp(1) dropped before 4 = exp(1): nothing to share. 5 = exp(1) then repeats 4.
    let ops = vec![
        exp(t(1, ReadOnly), 3),
        drop_op(3),
        exp(t(1, ReadOnly), 4),
        exp(t(1, ReadOnly), 5),
    ];
    assert_eq!(
        common_subexpressions(&ops, &all(&ops)),
        vec![dup(3, 2, vec![])]
    );
    // Consumed in place (3 read ReadWrite by a later op) counts as gone too.
    let ops = vec![
        exp(t(1, ReadOnly), 3),
        exp(t(3, ReadWrite), 6),
        exp(t(1, ReadOnly), 4),
    ];
    assert!(common_subexpressions(&ops, &all(&ops)).is_empty());
}

#[test]
fn other_inputs_other_order_or_other_op_are_not_repeats() {
    let ops = vec![
        sub(t(1, ReadOnly), t(2, ReadOnly), 3),
        sub(t(2, ReadOnly), t(1, ReadOnly), 4),
        sub(t(1, ReadOnly), t(7, ReadOnly), 5),
        exp(t(1, ReadOnly), 6),
    ];
    assert!(common_subexpressions(&ops, &all(&ops)).is_empty());
}

#[test]
fn ops_with_scalars_are_never_merged() {
    // The key holds scalar values as runtime arguments: equal values here may differ on the
    // next replay of the same plan, so even an exact repeat is left alone.
    let ops = vec![
        mul_scalar(t(1, ReadOnly), 2.0, 3),
        mul_scalar(t(1, ReadOnly), 2.0, 4),
    ];
    assert!(common_subexpressions(&ops, &all(&ops)).is_empty());
}

#[test]
fn random_draws_are_never_merged() {
    let ops = vec![random(3), random(4)];
    assert!(common_subexpressions(&ops, &all(&ops)).is_empty());
}

#[test]
fn only_eligible_ops_are_compared() {
    // The original runs inside a fused kernel (not eligible): its output may never be written.
    let ops = vec![exp(t(1, ReadOnly), 3), exp(t(1, ReadOnly), 4)];
    assert!(common_subexpressions(&ops, &[false, true]).is_empty());
    assert!(common_subexpressions(&ops, &[true, false]).is_empty());
}

#[test]
fn a_repeat_of_a_repeat_shares_the_first_original() {
    let ops = vec![
        exp(t(1, ReadOnly), 3),
        exp(t(1, ReadOnly), 4),
        exp(t(1, ReadWrite), 5),
    ];
    assert_eq!(
        common_subexpressions(&ops, &all(&ops)),
        vec![dup(1, 0, vec![]), dup(2, 0, vec![0])]
    );
}
