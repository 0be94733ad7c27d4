//! Column sums launched together ([`HorizontalColumnFuser`]): independent column sums of the
//! same dimensions become one launch.
//!
//! A transformer layer's backward pass has nine sums over the rows of `[tokens, d]` — the
//! bias gradients of its q, k, v, output and second feed-forward products, and each layer
//! norm's γ and β — each a column-sum kernel of few cubes (W1's: 64 of them, on a device of
//! 132 multiprocessors), so most of the device idles through each one and pays its launch.
//! Launched together, the members' cubes fill the device and the launches are one. Each
//! member keeps its own [`ColumnGroup`] (and its step's semantics): a target that cannot take
//! the group runs them one by one, with the same result, bit for bit (each member's sum runs
//! in the same order in both).
//!
//! The group runs at its last member's place: the earlier members wait. Their results are
//! parameter gradients that nothing reads before the optimizer, and their inputs stay alive
//! until the group runs — so a member joins only when nothing in between reads what a member
//! writes or frees what a member reads, and while the inputs held together stay within
//! [`MAX_HELD_BYTES`] (grouping must not hold a model's activations past their last use).
//!
//! One free in between is taken over rather than refused: a generated kernel's, whose input
//! a member sums (a layer norm's β gradient sums the output gradient `dy`, whose last use is
//! the next kernel, before γ's sum of `dy · x̂` comes). That kernel then leaves the input alive
//! (its `consumed` flag off; on its fallback, its operations run with that input read-only)
//! and the group frees it after its sums (`ColumnGroup::frees_input`).

use super::horizontal::{Use, moves_past, ops_by_place};
use super::{Claims, ColumnGroup, Fuser};
use crate::memory::slot_tensor;
use crate::{ScheduleOptions, Step};
use burn_ir::{OperationIr, TensorStatus};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// Bytes of input a horizontal column group reads at most: what its members' inputs hold
/// together when it runs (nine `[4096, 512]` bf16 gradients are 36 MiB).
pub const MAX_HELD_BYTES: usize = 64 << 20;

/// Column sums of one shape launched as one kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HorizontalColumnGroup {
    /// The members: groups of [`crate::Plan::column`], in program order.
    pub members: Vec<u32>,
}

impl HorizontalColumnGroup {
    /// One line for `explain`.
    pub fn summary(&self, column: &[ColumnGroup]) -> String {
        let first = &column[self.members[0] as usize];
        format!(
            "horizontal column sums: {} sums of {:?} (groups {:?}) in one kernel, {:?}",
            self.members.len(),
            first.dims,
            self.members,
            first.dtype
        )
    }
}

/// What makes two column sums one kernel: the same dimensions, divisor and dtype.
type SumKey = ([usize; 4], usize, burn_backend::DType);

/// A group being built.
struct Open {
    members: Vec<usize>,
    /// Its last member's place.
    at: usize,
    held: usize,
    tensors: FxHashMap<u64, (usize, Use)>,
}

/// The groups of the horizontal column fuser.
pub(crate) struct HorizontalColumnFuser;

impl Fuser for HorizontalColumnFuser {
    fn fuse(&self, ops: &[OperationIr], options: &ScheduleOptions<'_>, claims: &mut Claims) {
        let Some(accepts) = options.horizontal_columns.filter(|_| options.horizontal) else {
            return;
        };
        let limit = options.max_kernel_buffers;
        let (groups, takeovers) = find_groups(ops, claims, limit, accepts);
        for Takeover {
            kernel,
            tensor,
            member,
        } in takeovers
        {
            let group = &mut claims.fused[kernel];
            for (slot, consumed) in group.inputs.iter().zip(group.consumed.iter_mut()) {
                if slot_tensor(ops, slot, false).id.value() == tensor {
                    *consumed = false;
                }
            }
            claims.column[member].frees_input = true;
        }
        for members in groups {
            let at = claims.horizontal_columns.len() as u32;
            let is_member =
                |s: &Step, m: usize| matches!(s, Step::Column { group } if *group as usize == m);
            for &m in &members {
                let place = claims.column[m].at() as usize;
                claims.steps_at[place].retain(|s| !is_member(s, m));
            }
            let last = claims.column[*members.last().expect("members")].at() as usize;
            claims.steps_at[last].push(Step::HorizontalColumns { group: at });
            claims.horizontal_columns.push(HorizontalColumnGroup {
                members: members.into_iter().map(|m| m as u32).collect(),
            });
        }
    }
}

/// A free taken over by a group: fused kernel `kernel` no longer frees `tensor`, which
/// column group `member` sums and frees instead.
#[derive(Debug)]
struct Takeover {
    kernel: usize,
    tensor: u64,
    member: usize,
}

fn find_groups(
    ops: &[OperationIr],
    claims: &Claims,
    limit: usize,
    accepts: &dyn Fn(&ColumnGroup) -> bool,
) -> (Vec<Vec<usize>>, Vec<Takeover>) {
    let at_place = ops_by_place(ops, claims);
    let mut member_of = vec![None; ops.len()];
    for (g, group) in claims.column.iter().enumerate() {
        for op in group.all_ops() {
            member_of[op as usize] = Some(g);
        }
    }
    let mut kernel_of = vec![None; ops.len()];
    for (k, group) in claims.fused.iter().enumerate() {
        for &op in &group.ops {
            kernel_of[op as usize] = Some(k);
        }
    }
    let mut takeovers: Vec<Takeover> = Vec::new();
    let mut candidates: Vec<usize> = (0..claims.column.len())
        .filter(|&g| accepts(&claims.column[g]))
        .collect();
    candidates.sort_by_key(|&g| claims.column[g].at());

    let mut open: FxHashMap<SumKey, Open> = FxHashMap::default();
    let mut done: Vec<Vec<usize>> = Vec::new();
    for g in candidates {
        let group = &claims.column[g];
        let at = group.at() as usize;
        let key = (group.dims, group.divisor, group.dtype);
        let input = slot_tensor(ops, &group.input, false);
        let bytes = input.shape.num_elements() * input.dtype.size();
        let output = slot_tensor(ops, &group.output, true).id.value();
        if let Some(current) = open.get_mut(&key) {
            let fits =
                2 * (current.members.len() + 1) <= limit && current.held + bytes <= MAX_HELD_BYTES;
            // The new member's own sums run in the launch too (where they free an input that
            // a member reads, it is freed after the launch); but it must not sum what a member
            // writes, which one launch would not have written yet.
            let is_member = |op: u32| {
                member_of[op as usize].is_some_and(|m| m == g || current.members.contains(&m))
            };
            let reads_a_result = matches!(
                current.tensors.get(&input.id.value()),
                Some((_, Use::Writes))
            );
            let taken = (fits && !reads_a_result)
                .then(|| {
                    frees_taken_over(
                        ops,
                        claims,
                        &at_place[current.at + 1..=at],
                        &is_member,
                        &kernel_of,
                        &current.tensors,
                    )
                })
                .flatten();
            if let Some(taken) = taken {
                takeovers.extend(taken);
                current.members.push(g);
                current.at = at;
                current.held += bytes;
                current
                    .tensors
                    .entry(input.id.value())
                    .or_insert((g, Use::Reads));
                current.tensors.insert(output, (g, Use::Writes));
                continue;
            }
            let closed = open.remove(&key).expect("found above");
            done.push(closed.members);
        }
        let mut tensors = FxHashMap::default();
        tensors.insert(input.id.value(), (g, Use::Reads));
        tensors.insert(output, (g, Use::Writes));
        open.insert(
            key,
            Open {
                members: vec![g],
                at,
                held: bytes,
                tensors,
            },
        );
    }
    done.extend(open.into_values().map(|o| o.members));
    done.retain(|members| members.len() > 1);
    done.sort_by_key(|members| claims.column[members[0]].at());
    // A takeover is recorded when a second member joins: its group is kept.
    (done, takeovers)
}

/// Whether the group reading and writing `tensors` may run after the operations of `places`
/// (its members' aside), as [`moves_past`] says, but with the frees of what a member reads by a
/// fused kernel that consumes it taken over: `Some` with those (none where nothing frees),
/// `None` where anything else conflicts.
fn frees_taken_over(
    ops: &[OperationIr],
    claims: &Claims,
    places: &[Vec<u32>],
    is_member: &dyn Fn(u32) -> bool,
    kernel_of: &[Option<usize>],
    tensors: &FxHashMap<u64, (usize, Use)>,
) -> Option<Vec<Takeover>> {
    let mut taken = Vec::new();
    for ops_here in places {
        // Each place's operations are checked as moves_past checks them; those of a fused
        // kernel may free a member's input: taken over.
        for &op in ops_here {
            if is_member(op) {
                continue;
            }
            let single = [vec![op]];
            if moves_past(ops, &single, is_member, tensors) {
                continue;
            }
            let kernel = kernel_of[op as usize]?;
            let group = &claims.fused[kernel];
            for t in ops[op as usize].inputs() {
                let id = t.id.value();
                match tensors.get(&id) {
                    None => {}
                    Some((_, Use::Writes)) => return None,
                    Some((_, Use::Reads)) if t.status != TensorStatus::ReadWrite => {}
                    Some((member, Use::Reads)) => {
                        let consumed_here =
                            group
                                .inputs
                                .iter()
                                .zip(&group.consumed)
                                .any(|(slot, consumed)| {
                                    *consumed && slot_tensor(ops, slot, false).id.value() == id
                                });
                        // The sum must read it only (not free it itself).
                        if !consumed_here || claims.column[*member].consumed {
                            return None;
                        }
                        taken.push(Takeover {
                            kernel,
                            tensor: id,
                            member: *member,
                        });
                    }
                }
            }
        }
    }
    Some(taken)
}
