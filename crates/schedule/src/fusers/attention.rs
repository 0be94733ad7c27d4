//! Attention steps: `softmax(q @ kᵀ / √d) @ v` as one attention kernel (flash attention).
//!
//! Burn 0.21's `MultiHeadAttention` computes attention from parts: `q.matmul(k.transpose())`,
//! a division by √d_k, dropout (training only), the optional padding/attention masks
//! (`mask_fill`), a softmax over the keys and the product with `v`. Where those parts are exactly
//! the attention op's semantics (no mask, no dropout, the default scale 1/√head_dim, a softmax
//! over the last dimension) and nothing outside them reads the scores or the weights (MHA also
//! returns the weights: a caller who keeps them keeps the parts), the target runs one attention
//! kernel for all of them: the score matrix never reaches memory. Anything else (a mask, dropout,
//! another scale, the weights read, a rank other than 4) leaves the parts to the other steps.
//!
//! The step sits at the last part (the product with `v`), so `v` exists; `q` and `k` are read
//! there, which is only valid when nothing between the first part and the last consumes them
//! in place: checked here.

use burn_backend::DType;
use burn_compile_graph::Activation;
use burn_ir::{
    BaseOperationIr, FloatOperationIr, NumericOperationIr, OperationIr, TensorId, TensorStatus,
};
use serde::{Deserialize, Serialize};

/// One attention kernel in place of the parts of `softmax(q @ kᵀ · scale) @ v`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AttentionGroup {
    /// `kᵀ = swap_dims(k, 2, 3)`; its input is the step's key.
    pub transpose: u32,
    /// `q @ kᵀ`; its left-hand side is the step's query.
    pub scores: u32,
    /// The division by √head_dim (or multiplication by its inverse).
    pub scale: u32,
    /// The softmax over the keys.
    pub softmax: u32,
    /// `weights @ v`; its right-hand side is the step's value, its output the step's output.
    pub context: u32,
    /// Drops of the parts' intermediates (`kᵀ`, scores, weights): never materialized.
    pub drops: Vec<u32>,
    /// `[batch, heads, seq_q, seq_kv, head_dim, val_dim]`.
    pub dims: [usize; 6],
    pub dtype: DType,
}

impl AttentionGroup {
    /// The operations the step replaces, in program order (drops last).
    pub fn ops(&self) -> impl Iterator<Item = u32> + '_ {
        [
            self.transpose,
            self.scores,
            self.scale,
            self.softmax,
            self.context,
        ]
        .into_iter()
        .chain(self.drops.iter().copied())
    }

    /// One line for `explain`.
    pub fn summary(&self) -> String {
        let [b, h, sq, skv, d, dv] = self.dims;
        format!(
            "attention: softmax(q @ kᵀ / √{d}) @ v in one kernel, {b}×{h} heads, {sq} queries × \
             {skv} keys, head dim {d}, value dim {dv}, {:?}",
            self.dtype
        )
    }
}

/// The readers of tensor `id` after position `from`: the one live part that must read it
/// (returned), plus drops (collected). `None` when another operation reads it, or when the
/// tensor would outlive the graph (no consuming read and no drop).
fn sole_reader(
    ops: &[OperationIr],
    live: &[bool],
    id: TensorId,
    from: usize,
    drops: &mut Vec<u32>,
) -> Option<usize> {
    let mut reader = None;
    let mut ends = false;
    for (j, op) in ops.iter().enumerate().skip(from + 1) {
        if let OperationIr::Drop(t) = op {
            if t.id == id {
                drops.push(j as u32);
                ends = true;
            }
            continue;
        }
        let mut reads = op.inputs().filter(|t| t.id == id).peekable();
        if reads.peek().is_none() {
            continue;
        }
        if reader.is_some() || !live[j] {
            return None;
        }
        ends |= reads.any(|t| t.status == TensorStatus::ReadWrite);
        reader = Some(j);
    }
    reader.filter(|_| ends)
}

fn output(op: &OperationIr) -> Option<&burn_ir::TensorIr> {
    op.outputs().next()
}

/// The matmul's operands, if `op` is a float matmul.
fn matmul(op: &OperationIr) -> Option<(&burn_ir::TensorIr, &burn_ir::TensorIr)> {
    match op {
        OperationIr::Float(_, FloatOperationIr::Matmul(m)) => Some((&m.lhs, &m.rhs)),
        _ => None,
    }
}

/// Whether `op` scales `input` by 1/√d: a division by √d or a multiplication by its inverse
/// (to the f32 rounding of either: MHA computes `(d_k as f32).sqrt()`).
fn is_default_scale(op: &OperationIr, input: TensorId, head_dim: usize) -> bool {
    let root = (head_dim as f64).sqrt();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs();
    match op {
        OperationIr::NumericFloat(_, NumericOperationIr::DivScalar(s)) if s.lhs.id == input => {
            close(s.rhs.elem::<f64>(), root)
        }
        OperationIr::NumericFloat(_, NumericOperationIr::MulScalar(s)) if s.lhs.id == input => {
            close(s.rhs.elem::<f64>(), 1.0 / root)
        }
        _ => false,
    }
}

/// Finds the attention steps among the live operations (`live[i]`).
pub fn attention_groups(ops: &[OperationIr], live: &[bool]) -> Vec<AttentionGroup> {
    (0..ops.len())
        .filter(|&i| live[i])
        .filter_map(|i| attention_at(ops, live, i))
        .collect()
}

/// The attention whose key transpose is operation `t`, if the parts match.
fn attention_at(ops: &[OperationIr], live: &[bool], t: usize) -> Option<AttentionGroup> {
    let OperationIr::BaseFloat(BaseOperationIr::SwapDims(swap)) = &ops[t] else {
        return None;
    };
    let key = &swap.input;
    let rank = key.shape.num_dims();
    if rank != 4 || (swap.dim1.min(swap.dim2), swap.dim1.max(swap.dim2)) != (2, 3) {
        return None;
    }
    let dtype = key.dtype;
    let mut drops = Vec::new();

    let scores = sole_reader(ops, live, swap.out.id, t, &mut drops)?;
    let (query, kt) = matmul(&ops[scores])?;
    if kt.id != swap.out.id || query.id == kt.id {
        return None;
    }
    let scores_out = output(&ops[scores])?;

    let scale = sole_reader(ops, live, scores_out.id, scores, &mut drops)?;
    let head_dim = query.shape[3];
    if !is_default_scale(&ops[scale], scores_out.id, head_dim) {
        return None;
    }
    let scaled = output(&ops[scale])?;

    let softmax = sole_reader(ops, live, scaled.id, scale, &mut drops)?;
    if Activation::of(&ops[softmax]) != Some(Activation::Softmax { dim: 3 }) {
        return None;
    }
    let weights = output(&ops[softmax])?;

    let context = sole_reader(ops, live, weights.id, softmax, &mut drops)?;
    let (lhs, value) = matmul(&ops[context])?;
    if lhs.id != weights.id || value.id == weights.id {
        return None;
    }

    // Shapes: the attention op's, with no batch broadcasting.
    let (q, k, v) = (&query.shape, &key.shape, &value.shape);
    let same_batch = q[0] == k[0] && q[1] == k[1] && v[0] == q[0] && v[1] == q[1];
    if !same_batch || k[3] != q[3] || v[2] != k[2] || v.num_dims() != 4 || q.num_dims() != 4 {
        return None;
    }
    if [query.dtype, value.dtype].iter().any(|d| *d != dtype) || !dtype.is_float() {
        return None;
    }

    // q, k and v are read at the step (the last part): nothing between may consume them.
    let parts = [t, scores, scale, softmax, context];
    let operands = [query.id, key.id, value.id];
    let hazard = (t + 1..context).filter(|j| !parts.contains(j)).any(|j| {
        ops[j]
            .inputs()
            .any(|x| operands.contains(&x.id) && x.status == TensorStatus::ReadWrite)
    });
    if hazard {
        return None;
    }
    drops.sort_unstable();
    Some(AttentionGroup {
        transpose: t as u32,
        scores: scores as u32,
        scale: scale as u32,
        softmax: softmax as u32,
        context: context as u32,
        drops,
        dims: [q[0], q[1], q[2], k[2], q[3], v[3]],
        dtype,
    })
}

/// `softmax(q @ kᵀ / √d) @ v` as one attention kernel.
pub(crate) struct AttentionFuser;

impl super::Fuser for AttentionFuser {
    fn fuse(
        &self,
        ops: &[OperationIr],
        options: &crate::ScheduleOptions<'_>,
        claims: &mut super::Claims,
    ) {
        let Some(accepts) = options.attention else {
            return;
        };
        for group in attention_groups(ops, &claims.live) {
            if !accepts(&group) {
                continue;
            }
            // Every part (and every drop of an intermediate) runs inside the kernel.
            for i in group.ops() {
                claims.live[i as usize] = false;
                claims.claimed[i as usize] = true;
            }
            let at = claims.attention.len() as u32;
            claims.steps_at[group.context as usize].push(crate::Step::Attention { group: at });
            claims.attention.push(group);
        }
    }
}
