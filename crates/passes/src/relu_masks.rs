//! ReLU's backward reads the forward's output instead of its input.
//!
//! Burn's autodiff keeps a ReLU's *input* `x` for the backward, `relu_backward(x, g)`, so `x`
//! lives from the forward to the backward beside `y = relu(x)`, which the next layer reads (and
//! its weight gradient keeps). Reading `x` twice is what stops the ReLU from fusing into the
//! product that makes `x` (a library matmul fuses an epilogue only when the product has no other
//! reader): W1 spends one pointwise launch per layer on it, and keeps one more activation per
//! layer alive across the step.
//!
//! `relu_backward(y, g)` computes the same gradient: its mask is `x <= 0`, and `relu(x) <= 0`
//! exactly where `x <= 0` (a positive `x` is its own ReLU; a zero of either sign and a negative
//! `x` give zero). Only a NaN `x` can tell them apart, and there the forward's own ReLU already
//! differs between kernels (`max(x, 0)`). So the pass makes the backward read `y` where `y`
//! still exists at the backward, and moves the liveness to match:
//! - the ReLU becomes `x`'s last use (its read turns `ReadWrite`): `x` must have no other reader
//!   between them, and the backward must have been its last use;
//! - the backward reads `y`, as `y`'s last use when the read that ended `y` came before it (that
//!   read turns `ReadOnly`), otherwise as one more read;
//! - where a `Drop` ended `y` before the backward, nothing changes (moving a drop is not an edit of
//!   a read).
//!
//! The pass returns the edits ([`InputRewrite`]); a plan applies them to every replayed segment
//! of its key with [`apply_rewrites`] (the same edits fit: they depend on structure and statuses
//! only, which the key holds).

use burn_compile_graph::Activation;
use burn_ir::{OperationIr, TensorId, TensorStatus};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// One edit of an operation's input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum InputRewrite {
    /// Input `input` of custom op `op` becomes output `output` of op `from`, read with `status`.
    Reads {
        op: u32,
        input: u8,
        from: u32,
        output: u8,
        status: TensorStatus,
    },
    /// Custom op `op` consumes its input `input` (its last use: `ReadWrite`).
    Consumes { op: u32, input: u8 },
    /// Op `op` reads the tensor at its input `input` without consuming it (`ReadOnly`): a later
    /// op now reads it last.
    KeepsAlive { op: u32, input: u8 },
}

/// The edits that make each ReLU backward read its forward's output (see the module's doc).
pub fn relu_backward_reads_output(ops: &[OperationIr]) -> Vec<InputRewrite> {
    // The ReLUs, by input: position, output.
    let mut relus: FxHashMap<TensorId, (usize, TensorId)> = FxHashMap::default();
    // Tensors produced inside the segment.
    let mut produced: FxHashSet<TensorId> = FxHashSet::default();
    let mut rewrites = Vec::new();
    for (b, op) in ops.iter().enumerate() {
        if Activation::of(op) == Some(Activation::Relu)
            && let (Some(x), Some(y)) = (op.inputs().next(), op.outputs().next())
            && x.status == TensorStatus::ReadOnly
        {
            relus.insert(x.id, (b, y.id));
        }
        if Activation::of(op) == Some(Activation::ReluBackward) {
            rewrite(ops, &relus, &produced, b, &mut rewrites);
        }
        produced.extend(op.outputs().map(|out| out.id));
    }
    rewrites
}

/// Adds the edits for the ReLU backward at `b` to `rewrites`, when they apply.
fn rewrite(
    ops: &[OperationIr],
    relus: &FxHashMap<TensorId, (usize, TensorId)>,
    produced: &FxHashSet<TensorId>,
    b: usize,
    rewrites: &mut Vec<InputRewrite>,
) -> Option<()> {
    let mut inputs = ops[b].inputs();
    let (x, g) = (inputs.next()?, inputs.next()?);
    let &(r, y) = relus.get(&x.id)?;
    if x.status != TensorStatus::ReadWrite || g.id == y || g.id == x.id || !produced.contains(&x.id)
    {
        return None;
    }
    // Between the ReLU and the backward: nothing else reads `x`; `y` is not dropped, and the
    // read that ended it (if any) is remembered.
    let mut ended_y = None;
    for (k, op) in ops.iter().enumerate().take(b).skip(r + 1) {
        if let OperationIr::Drop(t) = op {
            if t.id == x.id || t.id == y {
                return None;
            }
            continue;
        }
        let mut reads_x = false;
        for (pos, t) in op.inputs().enumerate() {
            reads_x |= t.id == x.id;
            if t.id == y && t.status == TensorStatus::ReadWrite {
                ended_y = Some((k, pos));
            }
        }
        if reads_x {
            return None;
        }
    }
    let y_status = if ended_y.is_some() {
        TensorStatus::ReadWrite
    } else {
        TensorStatus::ReadOnly
    };
    rewrites.push(InputRewrite::Consumes {
        op: r as u32,
        input: 0,
    });
    rewrites.push(InputRewrite::Reads {
        op: b as u32,
        input: 0,
        from: r as u32,
        output: 0,
        status: y_status,
    });
    if let Some((k, pos)) = ended_y {
        rewrites.push(InputRewrite::KeepsAlive {
            op: k as u32,
            input: pos as u8,
        });
    }
    Some(())
}

/// `ops` with `rewrites` applied: borrowed when there are none, else an edited copy.
pub fn rewritten<'a>(ops: &'a [OperationIr], rewrites: &[InputRewrite]) -> Cow<'a, [OperationIr]> {
    if rewrites.is_empty() {
        Cow::Borrowed(ops)
    } else {
        let mut ops = ops.to_vec();
        apply_rewrites(&mut ops, rewrites);
        Cow::Owned(ops)
    }
}

/// Applies `rewrites` (from this segment's key) to a segment's ops. Idempotent: applying them to
/// ops already rewritten changes nothing.
///
/// # Panics
/// When an edit does not fit the ops (a custom op's input where there is none, an output that
/// does not exist): the rewrites were made for another key.
pub fn apply_rewrites(ops: &mut [OperationIr], rewrites: &[InputRewrite]) {
    for rewrite in rewrites {
        match *rewrite {
            InputRewrite::Reads {
                op,
                input,
                from,
                output,
                status,
            } => {
                let source = ops[from as usize]
                    .outputs()
                    .nth(output as usize)
                    .expect("the rewrite's source output exists")
                    .id;
                let read = &mut custom(&mut ops[op as usize]).inputs[input as usize];
                read.id = source;
                read.status = status;
            }
            InputRewrite::Consumes { op, input } => {
                custom(&mut ops[op as usize]).inputs[input as usize].status =
                    TensorStatus::ReadWrite;
            }
            InputRewrite::KeepsAlive { op, input } => {
                let op = &mut ops[op as usize];
                let id = op
                    .inputs()
                    .nth(input as usize)
                    .expect("the rewrite's input exists")
                    .id;
                op.mark_read_only(&[id]);
            }
        }
    }
}

fn custom(op: &mut OperationIr) -> &mut burn_ir::CustomOpIr {
    match op {
        OperationIr::Custom(c) => c,
        other => panic!("a rewrite of a custom op's read met {other:?}"),
    }
}
