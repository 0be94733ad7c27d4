//! Column sums ([`ColumnFuser`]): sums over leading dimensions, which the row kernels (sums
//! over the last dimension) do not take, as one generated kernel each instead of the inner
//! backend's generic reduction.
//!
//! A training step has many: a linear layer's bias gradient (`LinearBiasBackward`, its output
//! gradient `[rows, features]` summed over the rows) and the gradient of every operand that was
//! broadcast in the forward pass, which Burn's autodiff sums one broadcast dimension at a time
//! (a layer norm's γ and β of `[1, 1, d]` against `[batch, seq, d]`: `sum_dim(0)` then
//! `sum_dim(1)`). A chain of such sums, each the only reader of the previous one's result, is
//! one sum over all their dimensions: one kernel, and the partial results never reach memory.
//!
//! The kernel reads its input as `[outer, reduced, inner, trailing]` and sums the second and
//! fourth dimensions: `trailing` is 1 for the sums above, and more for a batch norm's, which
//! keep the channels between the batch and the space — `[N, C, H, W]` summed over 0, 2 and 3
//! (the gradient of γ, β, the mean and the variance, one `sum_dim` at a time) is
//! `[1, N, C, H·W]`. A chain is taken up to its last sum whose dimensions have that form (the
//! sums over 0 and 2 alone do not; with 3 they do).
//!
//! Burn's batch norm computes its statistics over a permuted view:
//! `x.swap_dims(0, 1).reshape([C, N·H·W]).mean_dim(1)`. The reshape of a swapped view is a copy
//! of the whole activation on the inner backend, and the mean a generic reduction over it; the
//! three operations read `x` as `[1, N, C, H·W]`, the same kernel, dividing by `N·H·W`.
//!
//! The step sits at the group's last operation and reads the first one's input there: valid only
//! when nothing between the two frees that input (consumes it in place), checked here.

use super::kernel::Slot;
use burn_backend::DType;
use burn_ir::{
    BaseOperationIr, ModuleOperationIr, NumericOperationIr, OperationIr, TensorIr, TensorStatus,
};
use serde::{Deserialize, Serialize};

/// One column-sum kernel in place of a chain of sums over leading dimensions, or of the mean
/// over a batch norm's permuted view.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ColumnGroup {
    /// The operations the kernel replaces (sums, or a swap, a reshape and a sum), in program
    /// order.
    pub ops: Vec<u32>,
    /// Drops of the group's intermediate results (never materialized).
    pub drops: Vec<u32>,
    /// A reshape of the last sum's result that ends its life, wherever it comes later (a
    /// parameter's gradient taken back to the parameter's shape: γ's `[1, 1, d]` to `[d]`): the
    /// kernel writes its output — the same contiguous elements under that shape — so the sum's
    /// result is never a value of its own, and no step has to wait for the reshape.
    #[serde(default)]
    pub reshape: Option<u32>,
    /// The first operation's input: the tensor the kernel reads.
    pub input: Slot,
    /// The kernel's input has its last use in the group: freed after the kernel.
    pub consumed: bool,
    /// The input's last use is a later fused kernel, which a horizontal column group took the
    /// free over from (that kernel no longer frees it): freed after this group's sums, which
    /// run later (`fusers/horizontal_columns.rs`).
    #[serde(default)]
    pub frees_input: bool,
    /// The last operation's output: the tensor the kernel writes.
    pub output: Slot,
    /// `[outer, reduced, inner, trailing]`: the input, contiguous, summed over its second and
    /// fourth dimensions into `[outer, inner]`.
    pub dims: [usize; 4],
    /// What the sums are divided by: 1, or the count of the elements a mean averages.
    pub divisor: usize,
    pub dtype: DType,
}

impl ColumnGroup {
    /// The operations the step replaces: the sums in program order, then the drops and the
    /// reshape.
    pub fn all_ops(&self) -> impl Iterator<Item = u32> + '_ {
        self.ops
            .iter()
            .chain(&self.drops)
            .chain(&self.reshape)
            .copied()
    }

    /// The position the step runs at (the last sum).
    pub fn at(&self) -> u32 {
        *self.ops.last().expect("a group has a sum")
    }

    /// One line for `explain`.
    pub fn summary(&self) -> String {
        let [outer, reduced, inner, trailing] = self.dims;
        let what = if self.divisor > 1 { "mean" } else { "sum" };
        let over = if trailing > 1 {
            format!("{reduced} × {trailing}")
        } else {
            format!("{reduced} rows")
        };
        format!(
            "column {what}: [{outer}, {reduced}, {inner}, {trailing}] over {over} in one kernel \
             (ops {:?}), {:?}",
            self.ops, self.dtype
        )
    }
}

/// A sum over some dimensions: its input and output, and the dimensions it sums.
struct Sum<'a> {
    input: &'a TensorIr,
    out: &'a TensorIr,
    axes: Vec<usize>,
    /// A mean divides by this (1: a sum).
    divisor: usize,
    /// Whether another sum may extend it (a `sum_dim`; a bias gradient changes the rank).
    chains: bool,
}

fn sum_of(op: &OperationIr) -> Option<Sum<'_>> {
    let sum = match op {
        OperationIr::NumericFloat(
            _,
            n @ (NumericOperationIr::SumDim(d) | NumericOperationIr::MeanDim(d)),
        ) if d.out.shape.num_dims() == d.input.shape.num_dims()
            && d.out.shape.get(d.axis) == Some(&1) =>
        {
            let mean = matches!(n, NumericOperationIr::MeanDim(_));
            Sum {
                input: &d.input,
                out: &d.out,
                axes: vec![d.axis],
                divisor: if mean { d.input.shape[d.axis] } else { 1 },
                chains: true,
            }
        }
        OperationIr::Module(ModuleOperationIr::LinearBiasBackward(d)) => {
            let rank = d.output_grad.shape.num_dims();
            if rank < 2 {
                return None;
            }
            Sum {
                input: &d.output_grad,
                out: &d.out,
                axes: (0..rank - 1).collect(),
                divisor: 1,
                chains: false,
            }
        }
        _ => return None,
    };
    let float = sum.input.dtype.is_float() && sum.out.dtype == sum.input.dtype;
    // A sum over one element is the row kernels' (an identity).
    let summed: usize = sum.axes.iter().map(|&a| sum.input.shape[a]).product();
    (float && summed > 1).then_some(sum)
}

/// `[outer, reduced, inner, trailing]` of `shape` summed over `axes`: the dimensions of size 1
/// left out, the summed ones must form one block, or two with kept ones between them and the
/// second reaching the end. One block reaching the last dimension is a row sum, not a column
/// sum (the row kernels' and the inner backend's).
pub(crate) fn sum_dims(shape: &[usize], axes: &[usize]) -> Option<[usize; 4]> {
    let mut blocks: Vec<(bool, usize)> = Vec::new();
    for (d, &n) in shape.iter().enumerate() {
        if n == 1 {
            continue;
        }
        let summed = axes.contains(&d);
        match blocks.last_mut() {
            Some((s, size)) if *s == summed => *size *= n,
            _ => blocks.push((summed, n)),
        }
    }
    // Size-1 dimensions after the last summed one keep today's column sums of `[.., r, 1]`.
    let before_last = axes.iter().max().is_some_and(|&a| a + 1 < shape.len());
    match *blocks.as_slice() {
        [(true, r)] if before_last => Some([1, r, 1, 1]),
        [(false, o), (true, r)] if before_last => Some([o, r, 1, 1]),
        [(true, r), (false, k)] => Some([1, r, k, 1]),
        [(false, o), (true, r), (false, k)] => Some([o, r, k, 1]),
        [(true, r), (false, k), (true, t)] => Some([1, r, k, t]),
        [(false, o), (true, r), (false, k), (true, t)] => Some([o, r, k, t]),
        _ => None,
    }
}

/// The dimensions a column sum's kernel reads a tensor of logical `shape` with these element
/// strides as, for the group's `dims`: `dims` where the tensor is contiguous; where a batch
/// norm's input (`[1, N, C, S]`: `[N, C, …]` summed over all but C) is channels-last — C
/// innermost in memory, what Burn's convolutions return on CUDA — `[1, N·S, C, 1]`, a plain
/// column sum. `None` for any other layout (the sums run on the inner backend).
pub fn column_layout(dims: [usize; 4], shape: &[usize], strides: &[usize]) -> Option<[usize; 4]> {
    if strides_match(shape, strides, &contiguous_strides(shape)) {
        return Some(dims);
    }
    let [outer, reduced, inner, trailing] = dims;
    if outer != 1 || shape.len() < 2 || reduced != shape[0] || inner != shape[1] {
        return None;
    }
    // Memory order N, the space, C.
    let mut order: Vec<usize> = vec![0];
    order.extend(2..shape.len());
    order.push(1);
    let permuted: Vec<usize> = order.iter().map(|&d| shape[d]).collect();
    let packed = contiguous_strides(&permuted);
    let mut want = vec![0; shape.len()];
    for (i, &d) in order.iter().enumerate() {
        want[d] = packed[i];
    }
    strides_match(shape, strides, &want).then_some([1, reduced * trailing, inner, 1])
}

/// The strides of a contiguous tensor of `shape`, in elements.
pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// Strides equal where they matter: a dimension of size 1 is never stepped along.
fn strides_match(shape: &[usize], strides: &[usize], want: &[usize]) -> bool {
    strides.len() == shape.len() && (0..shape.len()).all(|d| shape[d] == 1 || strides[d] == want[d])
}

/// The one live reader of tensor `t` after position `from` (drops collected), when that reader
/// ends its life (a consuming read, or a drop): `None` when another operation reads it or it
/// outlives the graph.
fn sole_reader(
    ops: &[OperationIr],
    live: &[bool],
    t: &TensorIr,
    from: usize,
    drops: &mut Vec<u32>,
) -> Option<usize> {
    let (mut reader, mut ends) = (None, false);
    for (j, op) in ops.iter().enumerate().skip(from + 1) {
        if let OperationIr::Drop(d) = op {
            if d.id == t.id {
                drops.push(j as u32);
                ends = true;
            }
            continue;
        }
        for x in op.inputs().filter(|x| x.id == t.id) {
            if reader.is_some_and(|r| r != j) || !live[j] {
                return None;
            }
            reader = Some(j);
            ends |= x.status == TensorStatus::ReadWrite;
        }
    }
    reader.filter(|_| ends)
}

/// Whether an operation between positions `from` and `to`, other than the group's own, frees
/// `input` (reads it in place): the kernel at `to` could not read it then.
fn freed_between(
    ops: &[OperationIr],
    group: &[usize],
    from: usize,
    to: usize,
    input: &TensorIr,
) -> bool {
    (from + 1..to).any(|k| {
        !group.contains(&k)
            && ops[k]
                .inputs()
                .any(|x| x.id == input.id && x.status == TensorStatus::ReadWrite)
    })
}

/// The group of the chain of sums starting at `i`, up to its last sum whose dimensions have the
/// kernel's form.
fn sum_chain(ops: &[OperationIr], live: &[bool], taken: &[bool], i: usize) -> Option<ColumnGroup> {
    let first = sum_of(&ops[i])?;
    let shape: Vec<usize> = first.input.shape.iter().copied().collect();
    // A chain starts with a sum over leading dimensions: one over the last is a row kernel's
    // (a layer norm's mean), whatever reads it.
    if first.axes.iter().any(|&a| a + 1 >= shape.len()) {
        return None;
    }
    let mut chain = vec![i];
    let mut drops = Vec::new();
    let (mut axes, mut out, mut chains, mut divisor) =
        (first.axes.clone(), first.out, first.chains, first.divisor);
    // (length of the chain, its dimensions, its divisor, drops collected) at its longest valid
    // prefix so far.
    let mut best = sum_dims(&shape, &axes).map(|d| (1, d, divisor, 0));
    // Extend the chain while the next sum is the sole reader of this one's result.
    while chains {
        let mut more = Vec::new();
        let last = *chain.last().expect("a chain has a sum");
        let Some(j) = sole_reader(ops, live, out, last, &mut more) else {
            break;
        };
        let Some(next) = sum_of(&ops[j]).filter(|s| s.chains && !taken[j]) else {
            break;
        };
        // Nothing between the first sum and this one may free the kernel's input.
        if freed_between(ops, &chain, i, j, first.input) {
            break;
        }
        chain.push(j);
        drops.extend(more);
        axes.extend(&next.axes);
        (out, chains, divisor) = (next.out, next.chains, divisor * next.divisor);
        if let Some(d) = sum_dims(&shape, &axes) {
            best = Some((chain.len(), d, divisor, drops.len()));
        }
    }
    let (len, dims, divisor, kept_drops) = best?;
    chain.truncate(len);
    drops.truncate(kept_drops);
    // A reshape that ends the result's life is the kernel's output ([`ColumnGroup::reshape`]).
    let last = *chain.last().expect("a chain has a sum");
    let result = sum_of(&ops[last]).expect("a chain of sums").out;
    let mut more = Vec::new();
    let reshape = sole_reader(ops, live, result, last, &mut more).filter(|&j| {
        !taken[j]
            && matches!(
                &ops[j],
                OperationIr::BaseFloat(BaseOperationIr::Reshape(r)) if r.input.id == result.id
            )
    });
    if reshape.is_some() {
        drops.extend(more);
    }
    drops.sort_unstable();
    Some(ColumnGroup {
        input: Slot {
            op: i as u32,
            pos: 0,
        },
        consumed: first.input.status == TensorStatus::ReadWrite,
        frees_input: false,
        output: Slot {
            op: reshape.unwrap_or(last) as u32,
            pos: 0,
        },
        ops: chain.into_iter().map(|k| k as u32).collect(),
        drops,
        reshape: reshape.map(|j| j as u32),
        dims,
        divisor,
        dtype: first.input.dtype,
    })
}

/// The group of `x.swap_dims(0, 1).reshape([C, rest]).sum_dim(1)` (or `mean_dim`) starting at
/// the swap at `i`: `x` of `[N, C, …]` read as `[1, N, C, rest / N]`.
fn permuted_sum(
    ops: &[OperationIr],
    live: &[bool],
    taken: &[bool],
    i: usize,
) -> Option<ColumnGroup> {
    let OperationIr::BaseFloat(BaseOperationIr::SwapDims(swap)) = &ops[i] else {
        return None;
    };
    let x = &swap.input;
    let rank = x.shape.num_dims();
    if rank < 2 || (swap.dim1.min(swap.dim2), swap.dim1.max(swap.dim2)) != (0, 1) {
        return None;
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let trailing: usize = x.shape[2..].iter().product();
    let mut drops = Vec::new();
    let j = sole_reader(ops, live, &swap.out, i, &mut drops)?;
    let OperationIr::BaseFloat(BaseOperationIr::Reshape(reshape)) = &ops[j] else {
        return None;
    };
    if reshape.out.shape.as_slice() != [c, n * trailing] {
        return None;
    }
    let k = sole_reader(ops, live, &reshape.out, j, &mut drops)?;
    let sum = sum_of(&ops[k]).filter(|s| s.chains && s.axes == [1] && !taken[k])?;
    if sum.input.dtype != x.dtype || freed_between(ops, &[i, j, k], i, k, x) {
        return None;
    }
    drops.sort_unstable();
    Some(ColumnGroup {
        ops: vec![i as u32, j as u32, k as u32],
        drops,
        reshape: None,
        input: Slot {
            op: i as u32,
            pos: 0,
        },
        consumed: x.status == TensorStatus::ReadWrite,
        frees_input: false,
        output: Slot {
            op: k as u32,
            pos: 0,
        },
        dims: [1, n, c, trailing],
        divisor: sum.divisor,
        dtype: x.dtype,
    })
}

/// The column-sum groups of a graph, among its live operations.
pub fn column_groups(ops: &[OperationIr], live: &[bool]) -> Vec<ColumnGroup> {
    let mut taken = vec![false; ops.len()];
    let mut groups = Vec::new();
    for i in 0..ops.len() {
        if taken[i] || !live[i] {
            continue;
        }
        let Some(group) =
            permuted_sum(ops, live, &taken, i).or_else(|| sum_chain(ops, live, &taken, i))
        else {
            continue;
        };
        for &k in &group.ops {
            taken[k as usize] = true;
        }
        groups.push(group);
    }
    groups
}

/// Sums over leading dimensions as column-sum kernels.
pub(crate) struct ColumnFuser;

impl super::Fuser for ColumnFuser {
    fn fuse(
        &self,
        ops: &[OperationIr],
        options: &crate::ScheduleOptions<'_>,
        claims: &mut super::Claims,
    ) {
        let Some(accepts) = options.column else {
            return;
        };
        // A symbolic plan's dimensions change between graphs; the kernel is specialized on them.
        if !options.symbolic_sizes.is_empty() {
            return;
        }
        for group in column_groups(ops, &claims.live) {
            if !accepts(&group) {
                continue;
            }
            for i in group.all_ops() {
                claims.live[i as usize] = false;
                claims.claimed[i as usize] = true;
            }
            let at = claims.column.len() as u32;
            claims.steps_at[group.at() as usize].push(crate::Step::Column { group: at });
            claims.column.push(group);
        }
    }
}
