//! Column sums ([`ColumnFuser`]): sums over leading dimensions, which the row kernels (sums
//! over the last dimension) do not take, as one generated kernel each instead of the inner
//! backend's generic reduction.
//!
//! A training step has many: a linear layer's bias gradient (`LinearBiasBackward`, its output
//! gradient `[rows, features]` summed over the rows) and the gradient of every operand that was
//! broadcast in the forward pass, which Burn's autodiff sums one broadcast dimension at a time
//! (a layer norm's γ and β of `[1, 1, d]` against `[batch, seq, d]`: `sum_dim(0)` then
//! `sum_dim(1)`). A chain of such sums, each the only reader of the previous one's result,
//! over dimensions that are adjacent once the size-1 ones are left out, is one sum over those
//! dimensions: one kernel, and the partial results never reach memory.
//!
//! The step sits at the chain's last sum and reads the first sum's input there: valid only when
//! nothing between the two frees that input (consumes it in place), checked here.

use super::kernel::Slot;
use burn_backend::DType;
use burn_ir::{ModuleOperationIr, NumericOperationIr, OperationIr, TensorIr, TensorStatus};
use serde::{Deserialize, Serialize};

/// One column-sum kernel in place of a chain of sums over leading dimensions.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ColumnGroup {
    /// The sums, in program order.
    pub ops: Vec<u32>,
    /// Drops of the chain's intermediate results (never materialized).
    pub drops: Vec<u32>,
    /// The first sum's input: the tensor the kernel reads.
    pub input: Slot,
    /// The kernel's input has its last use in the chain: freed after the kernel.
    pub consumed: bool,
    /// The last sum's output: the tensor the kernel writes.
    pub output: Slot,
    /// `[outer, reduced, inner]`: the input, contiguous, summed over its middle dimension.
    pub dims: [usize; 3],
    pub dtype: DType,
}

impl ColumnGroup {
    /// The operations the step replaces, in program order (drops last).
    pub fn all_ops(&self) -> impl Iterator<Item = u32> + '_ {
        self.ops.iter().chain(&self.drops).copied()
    }

    /// The position the step runs at (the last sum).
    pub fn at(&self) -> u32 {
        *self.ops.last().expect("a group has a sum")
    }

    /// One line for `explain`.
    pub fn summary(&self) -> String {
        let [outer, reduced, inner] = self.dims;
        format!(
            "column sum: [{outer}, {reduced}, {inner}] summed over {reduced} rows in one kernel \
             ({} sum(s) fused: ops {:?}), {:?}",
            self.ops.len(),
            self.ops,
            self.dtype
        )
    }
}

/// A sum over leading dimensions: its input and output, and the dimensions it sums.
struct Sum<'a> {
    input: &'a TensorIr,
    out: &'a TensorIr,
    axes: Vec<usize>,
    /// Whether another sum may extend it (a `sum_dim`; a bias gradient changes the rank).
    chains: bool,
}

fn sum_of(op: &OperationIr) -> Option<Sum<'_>> {
    let sum = match op {
        OperationIr::NumericFloat(_, NumericOperationIr::SumDim(d))
            if d.out.shape.num_dims() == d.input.shape.num_dims()
                && d.out.shape.get(d.axis) == Some(&1) =>
        {
            Sum {
                input: &d.input,
                out: &d.out,
                axes: vec![d.axis],
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
                chains: false,
            }
        }
        _ => return None,
    };
    let rank = sum.input.shape.num_dims();
    let leading = sum.axes.iter().all(|&a| a + 1 < rank);
    let float = sum.input.dtype.is_float() && sum.out.dtype == sum.input.dtype;
    // A sum over one element is the row kernels' (an identity).
    let summed: usize = sum.axes.iter().map(|&a| sum.input.shape[a]).product();
    (leading && float && summed > 1).then_some(sum)
}

/// `[outer, reduced, inner]` of `shape` summed over `axes`, when those axes are adjacent once
/// the size-1 dimensions are left out (and none is the last).
fn column_dims(shape: &[usize], axes: &[usize]) -> Option<[usize; 3]> {
    let (&first, &last) = (axes.iter().min()?, axes.iter().max()?);
    if last + 1 >= shape.len() {
        return None;
    }
    let gap = (first..=last).any(|d| !axes.contains(&d) && shape[d] != 1);
    if gap {
        return None;
    }
    let outer = shape[..first].iter().product();
    let reduced = shape[first..=last].iter().product();
    let inner = shape[last + 1..].iter().product();
    Some([outer, reduced, inner])
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

/// The column-sum groups of a graph, among its live operations.
pub fn column_groups(ops: &[OperationIr], live: &[bool]) -> Vec<ColumnGroup> {
    let mut taken = vec![false; ops.len()];
    let mut groups = Vec::new();
    for i in 0..ops.len() {
        if taken[i] || !live[i] {
            continue;
        }
        let Some(first) = sum_of(&ops[i]) else {
            continue;
        };
        let shape: Vec<usize> = first.input.shape.iter().copied().collect();
        let Some(mut dims) = column_dims(&shape, &first.axes) else {
            continue;
        };
        let mut chain = vec![i];
        let mut drops = Vec::new();
        let (mut axes, mut out, mut chains) = (first.axes.clone(), first.out, first.chains);
        // Extend the chain while the next sum is the sole reader of this one's result and the
        // dimensions stay adjacent.
        while chains {
            let mut more = Vec::new();
            let last = *chain.last().expect("a chain has a sum");
            let Some(j) = sole_reader(ops, live, out, last, &mut more) else {
                break;
            };
            let Some(next) = sum_of(&ops[j]).filter(|s| s.chains && !taken[j]) else {
                break;
            };
            let mut wider = axes.clone();
            wider.extend(&next.axes);
            let Some(d) = column_dims(&shape, &wider) else {
                break;
            };
            // Nothing between the first sum and this one may free the kernel's input.
            let frees_input = (i + 1..j).any(|k| {
                !chain.contains(&k)
                    && ops[k]
                        .inputs()
                        .any(|x| x.id == first.input.id && x.status == TensorStatus::ReadWrite)
            });
            if frees_input {
                break;
            }
            chain.push(j);
            drops.extend(more);
            (axes, out, chains, dims) = (wider, next.out, next.chains, d);
        }
        for &k in &chain {
            taken[k] = true;
        }
        drops.sort_unstable();
        groups.push(ColumnGroup {
            input: Slot {
                op: i as u32,
                pos: 0,
            },
            consumed: first.input.status == TensorStatus::ReadWrite,
            output: Slot {
                op: *chain.last().expect("a chain has a sum") as u32,
                pos: 0,
            },
            ops: chain.into_iter().map(|k| k as u32).collect(),
            drops,
            dims,
            dtype: first.input.dtype,
        });
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
