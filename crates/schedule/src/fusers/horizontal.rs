//! Horizontal fusion ([`HorizontalFuser`]): generated kernels that run the same program over
//! tensors that do not depend on each other become one launch.
//!
//! An optimizer step over N parameters is N chains of the same operations (Adam: the two
//! moments, their bias corrections, the update), each its own pointwise kernel after the
//! kernel fuser: N launches that each read a few small tensors. Grouped, one launch updates
//! every parameter: its units are split among the members, each member's part runs the shared
//! program over that member's own tensors and scalars. The members keep their own groups (and
//! kernels) in [`crate::Plan::fused`]: a target that cannot take the whole group, or a member
//! whose kernel is not ready, runs them one by one, with the same result.
//!
//! A group runs at the place of its last member: the earlier members move later in program
//! order. A member may move past an operation only when that operation neither reads what the
//! member writes nor frees (consumes, drops) what the member reads; everything between a
//! member's own place and the group's place is checked against that, at the places where the
//! steps of the plan really run. Kernels that cannot wait (each parameter's update reads its
//! own bias corrections right after them) are then grouped the other way, at the first
//! member's place: a later member may move before an operation that neither writes what the
//! member reads nor reads what it frees. Members are pointwise kernels whose sizes are all
//! constants (a row kernel's units share rows; a kernel of symbolic sizes does not know its
//! share of the units until it runs) and that hoist no views (they would have to move too).

use super::{Claims, Fuser};
use crate::kernel::FusedKernel;
use crate::memory::slot_tensor;
use crate::{ScheduleOptions, Step};
use burn_ir::{OperationIr, TensorStatus};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// Buffers one horizontal kernel binds at most (inputs and outputs of all its members), on
/// every target. On CUDA every buffer is a kernel parameter (a pointer) and adds its length to
/// the parameter struct beside the members' scalars: 128 buffers of an Adam step (18 members,
/// 126 scalars) stay within the 4 KiB of kernel parameters older toolchains allow; and a longer
/// member list makes a longer kernel to compile for little gain.
pub const MAX_HORIZONTAL_BUFFERS: usize = 128;

/// Fused groups launched as one kernel: the same program, over independent tensors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HorizontalGroup {
    /// The members: groups of [`crate::Plan::fused`], in program order.
    pub members: Vec<u32>,
}

impl HorizontalGroup {
    /// One line for `explain`.
    pub fn summary(&self, fused: &[crate::FusedGroup]) -> String {
        let first = &fused[self.members[0] as usize];
        let elements: usize = self
            .members
            .iter()
            .map(|m| fused[*m as usize].shape.num_elements())
            .sum();
        format!(
            "horizontal kernel of {} pointwise kernels (groups {:?}) {:?}, {} instructions each, \
             {elements} elements",
            self.members.len(),
            self.members,
            first.kernel.dtype,
            first.kernel.program.len(),
        )
    }
}

/// What makes two kernels one program for horizontal fusion: everything but the iteration
/// space (members may differ in rank and broadcasts; each member's part walks its own shape).
#[derive(PartialEq, Eq, Hash)]
struct ProgramKey {
    dtype: burn_backend::DType,
    inputs: usize,
    outputs: u16,
    scalars: u16,
    program: Vec<crate::Instr>,
}

impl ProgramKey {
    fn of(kernel: &FusedKernel) -> Self {
        Self {
            dtype: kernel.dtype,
            inputs: kernel.inputs.len(),
            outputs: kernel.outputs,
            scalars: kernel.scalars,
            program: kernel.program.clone(),
        }
    }
}

/// What a member of an open group does with a tensor.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    Reads,
    Writes,
}

/// A horizontal group being built.
struct Open {
    members: Vec<usize>,
    /// Where the group runs so far: its last member's place.
    at: usize,
    buffers: usize,
    /// The tensors its members read and write, by id (a member writes what no other reads).
    tensors: FxHashMap<u64, (usize, Use)>,
}

/// Which way a group's members move to run together.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// To the last member's place: the earlier members wait (an update whose result nothing
    /// reads before the step ends).
    Later,
    /// To the first member's place: the later members run early. For kernels that a kernel
    /// of another program reads right after them, such as each parameter's bias corrections
    /// of an Adam step, read by that parameter's update: none can wait for the last one, but
    /// all can run at the first one's place since they read only the step's inputs.
    Earlier,
}

/// The groups of the horizontal fuser.
pub(crate) struct HorizontalFuser;

impl Fuser for HorizontalFuser {
    fn fuse(&self, ops: &[OperationIr], options: &ScheduleOptions<'_>, claims: &mut Claims) {
        if !options.horizontal || options.fused.is_none() {
            return;
        }
        let limit = options.max_kernel_buffers.min(MAX_HORIZONTAL_BUFFERS);
        // Moving later first: it takes the updates, which are most of the kernels. The
        // earlier groups are then found among what is left, at the places the later groups
        // run at.
        for direction in [Direction::Later, Direction::Earlier] {
            let groups = find_groups(ops, claims, limit, direction);
            place_groups(claims, groups, direction);
        }
    }
}

/// The groups that moving `direction` makes among the kernels no horizontal group holds yet.
fn find_groups(
    ops: &[OperationIr],
    claims: &Claims,
    limit: usize,
    direction: Direction,
) -> Vec<Vec<usize>> {
    let at_place = ops_by_place(ops, claims);
    let member_of = {
        let mut member_of = vec![None; ops.len()];
        for (g, group) in claims.fused.iter().enumerate() {
            for &op in group.ops.iter().chain(&group.drops) {
                member_of[op as usize] = Some(g);
            }
        }
        member_of
    };
    let mut grouped = vec![false; claims.fused.len()];
    for h in &claims.horizontal {
        for &m in &h.members {
            grouped[m as usize] = true;
        }
    }
    let mut candidates: Vec<usize> = (0..claims.fused.len())
        .filter(|&g| {
            let group = &claims.fused[g];
            !grouped[g]
                && group.kernel.row.is_none()
                && !group.symbolic()
                && group.hoisted.is_empty()
                && group.inputs.len() + group.outputs.len() <= limit / 2
        })
        .collect();
    candidates.sort_by_key(|&g| claims.fused[g].ops[0]);

    let mut open: FxHashMap<ProgramKey, Open> = FxHashMap::default();
    let mut done: Vec<Vec<usize>> = Vec::new();
    for g in candidates {
        let group = &claims.fused[g];
        let at = group.ops[0] as usize;
        let key = ProgramKey::of(&group.kernel);
        let buffers = group.inputs.len() + group.outputs.len();
        if let Some(current) = open.get_mut(&key) {
            let fits = current.buffers + buffers <= limit;
            let joins = fits
                && match direction {
                    Direction::Later => movable(ops, &at_place, &member_of, current, at),
                    Direction::Earlier => {
                        hoistable(ops, &at_place, &member_of, current, group, g, at)
                    }
                };
            if joins {
                current.members.push(g);
                if direction == Direction::Later {
                    current.at = at;
                }
                current.buffers += buffers;
                add_tensors(ops, group, g, &mut current.tensors);
                continue;
            }
            let closed = open.remove(&key).expect("found above");
            done.push(closed.members);
        }
        let mut tensors = FxHashMap::default();
        add_tensors(ops, group, g, &mut tensors);
        open.insert(
            key,
            Open {
                members: vec![g],
                at,
                buffers,
                tensors,
            },
        );
    }
    done.extend(open.into_values().map(|o| o.members));
    done.retain(|members| members.len() > 1);
    done.sort_by_key(|members| claims.fused[members[0]].ops[0]);
    done
}

/// Puts each group's step in place of its members' steps: at the last member's place (after
/// what runs there) or at the first member's (where its step was).
fn place_groups(claims: &mut Claims, groups: Vec<Vec<usize>>, direction: Direction) {
    for members in groups {
        let at = claims.horizontal.len() as u32;
        let is_member =
            |s: &Step, m: usize| matches!(s, Step::Fused { group } if *group as usize == m);
        match direction {
            Direction::Later => {
                for &m in &members {
                    let place = claims.fused[m].ops[0] as usize;
                    claims.steps_at[place].retain(|s| !is_member(s, m));
                }
                let last = claims.fused[*members.last().expect("members")].ops[0] as usize;
                claims.steps_at[last].push(Step::Horizontal { group: at });
            }
            Direction::Earlier => {
                let first = members[0];
                let place = claims.fused[first].ops[0] as usize;
                let step = claims.steps_at[place]
                    .iter()
                    .position(|s| is_member(s, first))
                    .expect("a member's step is at its place");
                claims.steps_at[place][step] = Step::Horizontal { group: at };
                for &m in &members[1..] {
                    let place = claims.fused[m].ops[0] as usize;
                    claims.steps_at[place].retain(|s| !is_member(s, m));
                }
            }
        }
        claims.horizontal.push(HorizontalGroup {
            members: members.into_iter().map(|m| m as u32).collect(),
        });
    }
}

/// The tensors group `g` reads and writes.
fn add_tensors(
    ops: &[OperationIr],
    group: &crate::FusedGroup,
    g: usize,
    tensors: &mut FxHashMap<u64, (usize, Use)>,
) {
    for slot in &group.inputs {
        let t = slot_tensor(ops, slot, false);
        tensors.entry(t.id.value()).or_insert((g, Use::Reads));
    }
    for slot in &group.outputs {
        let t = slot_tensor(ops, slot, true);
        tensors.insert(t.id.value(), (g, Use::Writes));
    }
}

/// Whether the members of `open` may run at `to` instead of `open.at`: no step that runs in
/// between (at places `open.at + 1 ..= to`, the new member's own operations included) reads
/// what a member writes or frees what a member reads. Operations of the members themselves run
/// with them.
fn movable(
    ops: &[OperationIr],
    at_place: &[Vec<u32>],
    member_of: &[Option<usize>],
    open: &Open,
    to: usize,
) -> bool {
    let is_member = |op: u32| member_of[op as usize].is_some_and(|g| open.members.contains(&g));
    moves_past(ops, &at_place[open.at + 1..=to], &is_member, &open.tensors)
}

/// Whether work that reads and writes `tensors` may run after the operations of `places`
/// (those of its own members, `is_member`, aside): none of them reads what it writes or frees
/// (consumes, drops) what it reads.
pub(crate) fn moves_past(
    ops: &[OperationIr],
    places: &[Vec<u32>],
    is_member: &dyn Fn(u32) -> bool,
    tensors: &FxHashMap<u64, (usize, Use)>,
) -> bool {
    for ops_here in places {
        for &op in ops_here {
            if is_member(op) {
                continue;
            }
            let op = &ops[op as usize];
            let frees_all = matches!(op, OperationIr::Drop(_));
            for t in op.inputs() {
                match tensors.get(&t.id.value()) {
                    Some((_, Use::Writes)) => return false,
                    Some((_, Use::Reads)) if frees_all || t.status == TensorStatus::ReadWrite => {
                        return false;
                    }
                    _ => {}
                }
            }
        }
    }
    true
}

/// Whether kernel `g` (`group`, at place `from`) may run with the members of `open` at
/// `open.at`, before what runs in between (places `open.at ..= from`, the members' own
/// operations aside): nothing there writes what `g` reads or reads what `g` frees (consumes,
/// drops), and `g` reads nothing a member writes (one launch has no order among its members).
fn hoistable(
    ops: &[OperationIr],
    at_place: &[Vec<u32>],
    member_of: &[Option<usize>],
    open: &Open,
    group: &crate::FusedGroup,
    g: usize,
    from: usize,
) -> bool {
    let input = |slot: &crate::Slot| slot_tensor(ops, slot, false).id.value();
    let reads: Vec<u64> = group.inputs.iter().map(input).collect();
    let mut frees: Vec<u64> = group
        .inputs
        .iter()
        .zip(&group.consumed)
        .filter(|(_, consumed)| **consumed)
        .map(|(slot, _)| input(slot))
        .collect();
    frees.extend(group.drops.iter().filter_map(|&d| match &ops[d as usize] {
        OperationIr::Drop(t) => Some(t.id.value()),
        _ => None,
    }));
    if reads
        .iter()
        .any(|t| matches!(open.tensors.get(t), Some((_, Use::Writes))))
    {
        return false;
    }
    for ops_here in &at_place[open.at..=from] {
        for &op in ops_here {
            if member_of[op as usize].is_some_and(|m| m == g || open.members.contains(&m)) {
                continue;
            }
            let op = &ops[op as usize];
            if op.outputs().any(|t| reads.contains(&t.id.value())) {
                return false;
            }
            if op.inputs().any(|t| frees.contains(&t.id.value())) {
                return false;
            }
        }
    }
    true
}

/// The operations by the place (position in program order) their step runs at.
pub(crate) fn ops_by_place(ops: &[OperationIr], claims: &Claims) -> Vec<Vec<u32>> {
    let mut at_place: Vec<Vec<u32>> = vec![Vec::new(); ops.len()];
    for (op, p) in step_places(ops, claims).iter().enumerate() {
        at_place[*p].push(op as u32);
    }
    at_place
}

/// The place (position in program order) where each operation runs in the plan: a claimed
/// operation at its group's step, any other at its own position.
fn step_places(ops: &[OperationIr], claims: &Claims) -> Vec<usize> {
    let mut place: Vec<usize> = (0..ops.len()).collect();
    for (p, steps) in claims.steps_at.iter().enumerate() {
        for step in steps {
            let ran: Vec<u32> = match step {
                Step::Fused { group } => {
                    let g = &claims.fused[*group as usize];
                    g.ops
                        .iter()
                        .chain(&g.drops)
                        .chain(&g.hoisted)
                        .copied()
                        .collect()
                }
                Step::Matmul { group } => claims.matmul[*group as usize].ops().collect(),
                Step::Attention { group } => claims.attention[*group as usize].ops().collect(),
                Step::Column { group } => claims.column[*group as usize].all_ops().collect(),
                Step::HorizontalColumns { group } => claims.horizontal_columns[*group as usize]
                    .members
                    .iter()
                    .flat_map(|&m| claims.column[m as usize].all_ops())
                    .collect(),
                Step::Eager { op } | Step::Activation { op, .. } => vec![*op],
                Step::Release { op, .. } | Step::Alias { op, .. } => vec![*op],
                Step::Horizontal { group } => claims.horizontal[*group as usize]
                    .members
                    .iter()
                    .flat_map(|&m| {
                        let g = &claims.fused[m as usize];
                        g.ops.iter().chain(&g.drops).copied()
                    })
                    .collect(),
            };
            for op in ran {
                place[op as usize] = p;
            }
        }
    }
    place
}
