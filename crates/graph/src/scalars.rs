//! The scalar operands of an op, by position: what a compiled step (burn-compile's `jit`)
//! reads to find which scalars follow its per-call values, and rewrites before a replay.

use burn_ir::{BaseOperationIr, FloatOperationIr, NumericOperationIr, OperationIr, ScalarIr};

/// The scalar operands of `op` in a fixed order, `None` for an op whose scalars this does not
/// know how to reach (their values are then constants of a recorded step).
pub fn scalar_operands(op: &OperationIr) -> Option<Vec<ScalarIr>> {
    // The same walk as the rewrite: an op is only read where it can be written.
    let mut op = op.clone();
    scalar_operands_mut(&mut op).map(|s| s.into_iter().map(|v| *v).collect())
}

/// The scalar operands of `op`, writable, in the order of [`scalar_operands`].
pub fn scalar_operands_mut(op: &mut OperationIr) -> Option<Vec<&mut ScalarIr>> {
    use NumericOperationIr as N;
    Some(match op {
        OperationIr::NumericFloat(_, n) | OperationIr::NumericInt(_, n) => match n {
            N::AddScalar(d)
            | N::SubScalar(d)
            | N::MulScalar(d)
            | N::DivScalar(d)
            | N::RemScalar(d)
            | N::GreaterElem(d)
            | N::GreaterEqualElem(d)
            | N::LowerElem(d)
            | N::LowerEqualElem(d)
            | N::PowiScalar(d) => vec![&mut d.rhs],
            N::Full(d) => vec![&mut d.value],
            N::Clamp(d) => vec![&mut d.min, &mut d.max],
            _ => return None,
        },
        OperationIr::Float(_, FloatOperationIr::PowfScalar(d)) => vec![&mut d.rhs],
        OperationIr::BaseFloat(b) | OperationIr::BaseInt(b) | OperationIr::BaseBool(b) => match b {
            BaseOperationIr::MaskFill(d) => vec![&mut d.value],
            BaseOperationIr::EqualElem(d) => vec![&mut d.rhs],
            _ => return None,
        },
        _ => return None,
    })
}
