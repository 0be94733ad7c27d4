//! Common-subexpression elimination.
//!
//! Operation `i` repeats an earlier operation `j` when both compute the same function of the
//! same tensors. Burn's decomposed modules record such repeats: `LayerNorm` computes
//! `x - mean` once inside `var_mean_bias` and again to normalize; autodiff recomputes
//! transposes and broadcasts per use. The plan runs `j` once and gives `i`'s outputs `j`'s
//! results — a clone of the inner tensor handle, exactly what `tensor.clone()` is in eager
//! Burn, so a backend never writes in place into a buffer that another tensor still holds.
//!
//! When two operations are the same, soundly, for every graph with the same key:
//! - same variant, parameters, shapes and dtypes, and the same input tensors in the same
//!   order. Tensor ids are renumbered in the key by first appearance, so "the same input" is
//!   structure: every graph with this key has it too. Input statuses are not compared (the
//!   second use is often an input's last, `ReadWrite`);
//! - no scalar operand: the key holds scalars by kind only (their values are runtime
//!   arguments), so `x * 2` and `x * 3` share a key position, and merging on equal values
//!   would be wrong on the next replay with other values;
//! - no effects: random draws, uploads and custom operations other than captured activations
//!   are never merged (as in dead-code elimination);
//! - `j`'s outputs still exist at `i`: none was dropped or consumed in place before it.
//!
//! Inputs that `i` consumed in place (its last use of them) are released where `i` would have
//! run, as eager Burn frees them there.

use crate::dce::has_effects;
use burn_compile_graph::KeyWriter;
use burn_ir::{OperationIr, TensorId, TensorStatus};
use rustc_hash::FxHashMap;

/// Operation `op` repeats operation `of`: its outputs are `of`'s, and it does not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    pub op: u32,
    pub of: u32,
    /// Positions (in `op.inputs()` order) of the inputs `op` consumed in place: released at
    /// its position.
    pub releases: Vec<u8>,
}

/// What identifies an operation's computation: its structure without tensor ids or input
/// statuses (a key digest of the operation alone), and its input tensors.
type Fingerprint = (u128, Vec<u64>);

/// The fingerprint of `op`, or `None` when it may never be merged.
fn fingerprint(op: &OperationIr) -> Option<Fingerprint> {
    if matches!(op, OperationIr::Drop(_)) || has_effects(op) || op.outputs().next().is_none() {
        return None;
    }
    let inputs: Vec<TensorId> = op.inputs().map(|t| t.id).collect();
    let mut normalized = op.clone();
    normalized.mark_read_only(&inputs);
    let mut key = KeyWriter::new();
    key.push(&normalized);
    if key.scalars() > 0 {
        return None;
    }
    Some((
        key.key().digest,
        inputs.iter().map(|id| id.value()).collect(),
    ))
}

/// Finds the operations of a segment that repeat an earlier one. Only operations marked in
/// `eligible` are compared (both the repeat and the original): the caller leaves out dead
/// operations and those that run inside a fused kernel (whose outputs may never be written).
pub fn common_subexpressions(ops: &[OperationIr], eligible: &[bool]) -> Vec<Duplicate> {
    // Where each tensor's life ends: its drop, or the operation that consumes it in place.
    let mut ends: FxHashMap<u64, usize> = FxHashMap::default();
    for (p, op) in ops.iter().enumerate() {
        match op {
            OperationIr::Drop(t) => {
                ends.entry(t.id.value()).or_insert(p);
            }
            _ => {
                for t in op.inputs() {
                    if t.status == TensorStatus::ReadWrite {
                        ends.entry(t.id.value()).or_insert(p);
                    }
                }
            }
        }
    }
    let alive_at = |op: &OperationIr, at: usize| {
        op.outputs()
            .all(|o| ends.get(&o.id.value()).is_none_or(|&end| end > at))
    };

    let mut first: FxHashMap<Fingerprint, u32> = FxHashMap::default();
    let mut duplicates = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if !eligible[i] {
            continue;
        }
        let Some(print) = fingerprint(op) else {
            continue;
        };
        match first.get(&print) {
            Some(&j) if alive_at(&ops[j as usize], i) => {
                let releases = op
                    .inputs()
                    .enumerate()
                    .filter(|(_, t)| t.status == TensorStatus::ReadWrite)
                    .map(|(pos, _)| pos as u8)
                    .collect();
                duplicates.push(Duplicate {
                    op: i as u32,
                    of: j,
                    releases,
                });
            }
            // A first occurrence, or one whose results are gone: this one is the original
            // for later repeats.
            _ => {
                first.insert(print, i as u32);
            }
        }
    }
    duplicates
}
