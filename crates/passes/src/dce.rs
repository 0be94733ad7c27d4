//! Dead-code elimination.
//!
//! An operation is dead when none of its outputs is used by a live operation and none survives
//! the segment (each output is dropped, or consumed in place, inside it). Operations with effects
//! beyond their outputs are never dead: random draws (skipping one would shift the generator
//! and change every later draw compared with eager), `Init` (the upload already happened) and
//! custom operations other than captured activations (unknown effects; an [`Activation`] is
//! pure, and the same test decides whether the plan runs it as one).
//!
//! A dead operation may have consumed inputs in place (`ReadWrite`, their last use): eager Burn
//! frees them there, so the plan must release them instead of running the operation.

use burn_compile_graph::Activation;
use burn_ir::{FloatOperationIr, NumericOperationIr, OperationIr, TensorStatus};
use rustc_hash::{FxHashMap, FxHashSet};

/// Result of [`dead_code`]: which operations to skip and which inputs to release for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Liveness {
    /// `dead[i]` is true when operation `i` must not run.
    pub dead: Vec<bool>,
    /// For a dead operation, the positions (in `op.inputs()` order) of the inputs it consumed in
    /// place that exist when it would have run: they are released at its position.
    pub releases: Vec<(u32, Vec<u8>)>,
}

impl Liveness {
    /// Number of operations found dead (drops of dead tensors included).
    pub fn dead_count(&self) -> usize {
        self.dead.iter().filter(|d| **d).count()
    }
}

/// Operations with effects beyond their outputs (never skipped, never merged).
pub(crate) fn has_effects(op: &OperationIr) -> bool {
    matches!(
        op,
        OperationIr::Init(_)
            | OperationIr::Float(_, FloatOperationIr::Random(_))
            | OperationIr::NumericInt(_, NumericOperationIr::IntRandom(_))
            | OperationIr::NumericFloat(_, NumericOperationIr::IntRandom(_))
    ) || (matches!(op, OperationIr::Custom(_)) && Activation::of(op).is_none())
}

/// Finds the dead operations of a segment.
pub fn dead_code(ops: &[OperationIr]) -> Liveness {
    let mut dead = vec![false; ops.len()];
    // Tensors whose life ends inside the segment (dropped or consumed in place).
    let mut ended: FxHashSet<u64> = FxHashSet::default();
    // Tensors read by a live operation later in the segment.
    let mut needed: FxHashSet<u64> = FxHashSet::default();

    for (i, op) in ops.iter().enumerate().rev() {
        if let OperationIr::Drop(t) = op {
            ended.insert(t.id.value());
            continue;
        }
        let live = has_effects(op)
            || op.outputs().any(|o| {
                let id = o.id.value();
                needed.contains(&id) || !ended.contains(&id)
            });
        for input in op.inputs() {
            if input.status == TensorStatus::ReadWrite {
                ended.insert(input.id.value());
            }
            if live {
                needed.insert(input.id.value());
            }
        }
        dead[i] = !live;
    }

    // Drops of tensors produced by dead operations go too; releases only for tensors that exist.
    let mut producer_dead: FxHashMap<u64, bool> = FxHashMap::default();
    let mut releases = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match op {
            OperationIr::Drop(t) => {
                if producer_dead.get(&t.id.value()).copied().unwrap_or(false) {
                    dead[i] = true;
                }
            }
            _ => {
                if dead[i] {
                    let consumed: Vec<u8> = op
                        .inputs()
                        .enumerate()
                        .filter(|(_, t)| {
                            t.status == TensorStatus::ReadWrite
                                && !producer_dead.get(&t.id.value()).copied().unwrap_or(false)
                        })
                        .map(|(pos, _)| pos as u8)
                        .collect();
                    if !consumed.is_empty() {
                        releases.push((i as u32, consumed));
                    }
                }
                for o in op.outputs() {
                    producer_dead.insert(o.id.value(), dead[i]);
                }
            }
        }
    }
    Liveness { dead, releases }
}
