//! Memory planning: the intermediates that generated kernels and library matmuls write, and only
//! such steps read, share the slots of one buffer per replay, by liveness.
//!
//! A replay then reserves its intermediates in one allocation (one call into the runtime, where
//! each tensor would be one), and two intermediates whose lifetimes do not overlap share memory.
//! Only values whose every use the plan can see are planned:
//!
//! - written by a [`Step::Fused`], [`Step::Horizontal`] or [`Step::Matmul`] step (outputs the runtime allocates);
//! - read only by such steps: an operation of the inner backend may return a view of its input
//!   (a reshape, a swap), whose uses the plan does not follow, so a value any other step reads
//!   keeps its own allocation (as does one an alias shares);
//! - freed inside the graph (consumed or dropped): a graph's outputs outlive the replay.
//!
//! A slot is reused only by a value written after the step that freed the previous one (a
//! kernel never writes a slot it reads).

use crate::{FusedGroup, MatmulGroup, Plan, Step};
use burn_ir::{OperationIr, TensorIr, TensorStatus};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// Where the planned intermediates of a replay live.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPlan {
    /// Bytes of each slot of the replay's buffer.
    pub slots: Vec<u64>,
    /// Per pointwise group of the plan, per kernel output: its slot, or `None` (allocated on
    /// its own).
    pub fused: Vec<Vec<Option<u32>>>,
    /// Per matmul group of the plan: its output's slot, or `None`.
    pub matmul: Vec<Option<u32>>,
    /// Bytes the planned values would take allocated one by one (for `explain`: the sum over
    /// slots is what they take planned).
    pub unplanned_bytes: u64,
}

impl MemoryPlan {
    /// Number of values placed in slots.
    pub fn planned(&self) -> usize {
        self.fused.iter().flatten().flatten().count() + self.matmul.iter().flatten().count()
    }

    /// Bytes of the replay's buffer.
    pub fn bytes(&self) -> u64 {
        self.slots.iter().sum()
    }
}

/// Who writes a candidate value.
#[derive(Clone, Copy)]
enum Writer {
    Fused { group: usize, output: usize },
    Matmul { group: usize },
}

struct Candidate {
    writer: Writer,
    bytes: u64,
    written: usize,
    freed: Option<usize>,
    /// Read by a step the plan does not follow (or shared by an alias).
    escapes: bool,
}

fn bytes(t: &TensorIr) -> u64 {
    (t.shape.num_elements() * t.dtype.size()) as u64
}

/// The output of a matmul step (its last epilogue operation's when one is fused).
pub(crate) fn matmul_output<'a>(ops: &'a [OperationIr], group: &MatmulGroup) -> &'a TensorIr {
    ops[group.output_op() as usize]
        .outputs()
        .next()
        .expect("a matmul has an output")
}

/// The tensor a fused group's input (`output` false) or output slot names.
pub(crate) fn slot_tensor<'a>(
    ops: &'a [OperationIr],
    slot: &crate::Slot,
    output: bool,
) -> &'a TensorIr {
    let op = &ops[slot.op as usize];
    let t = if output {
        op.outputs().nth(slot.pos as usize)
    } else {
        op.inputs().nth(slot.pos as usize)
    };
    t.expect("slot within the operation")
}

/// A read by an inner-backend operation (or any step whose uses are not followed).
fn escape(values: &mut FxHashMap<u64, Candidate>, t: &TensorIr) {
    if let Some(c) = values.get_mut(&t.id.value()) {
        c.escapes = true;
    }
}

/// `t`'s last use is at step `at`.
fn free(values: &mut FxHashMap<u64, Candidate>, t: &TensorIr, at: usize) {
    if let Some(c) = values.get_mut(&t.id.value()) {
        c.freed.get_or_insert(at);
    }
}

/// Operation `op` runs on the inner backend at step `at`: a drop frees its tensor; every
/// other operation's inputs escape, and those it consumes are freed.
fn inner_op(values: &mut FxHashMap<u64, Candidate>, op: &OperationIr, at: usize) {
    if let OperationIr::Drop(t) = op {
        free(values, t, at);
        return;
    }
    for t in op.inputs() {
        escape(values, t);
        if t.status == TensorStatus::ReadWrite {
            free(values, t, at);
        }
    }
}

/// `t` is written by `writer` at step `at`: a candidate, in write order.
fn write(
    values: &mut FxHashMap<u64, Candidate>,
    order: &mut Vec<u64>,
    t: &TensorIr,
    writer: Writer,
    at: usize,
) {
    let id = t.id.value();
    values.insert(
        id,
        Candidate {
            writer,
            bytes: bytes(t),
            written: at,
            freed: None,
            escapes: false,
        },
    );
    order.push(id);
}

/// Fused group `group` runs at step `k`: the inputs it consumes and its drops are freed, its
/// outputs written.
fn fused_step(
    ops: &[OperationIr],
    plan: &Plan,
    group: usize,
    k: usize,
    values: &mut FxHashMap<u64, Candidate>,
    order: &mut Vec<u64>,
) {
    let g: &FusedGroup = &plan.fused[group];
    for (slot, consumed) in g.inputs.iter().zip(&g.consumed) {
        if *consumed {
            free(values, slot_tensor(ops, slot, false), k);
        }
    }
    for d in &g.drops {
        if let OperationIr::Drop(t) = &ops[*d as usize] {
            free(values, t, k);
        }
    }
    for (o, slot) in g.outputs.iter().enumerate() {
        let writer = Writer::Fused { group, output: o };
        write(values, order, slot_tensor(ops, slot, true), writer, k);
    }
}

/// Column group `g` runs at step `k`, its kernel or its sums on the inner backend: what those
/// read escapes, what they consume is freed, and an input whose free the group took over from
/// a fused kernel (`frees_input`) is freed there too.
fn column_step(
    ops: &[OperationIr],
    g: &crate::ColumnGroup,
    k: usize,
    values: &mut FxHashMap<u64, Candidate>,
) {
    for i in g.all_ops() {
        inner_op(values, &ops[i as usize], k);
    }
    if g.frees_input {
        free(values, slot_tensor(ops, &g.input, false), k);
    }
}

/// Plans the intermediates of `plan` (built from `ops`).
pub fn memory_plan(ops: &[OperationIr], plan: &Plan) -> MemoryPlan {
    let mut values: FxHashMap<u64, Candidate> = FxHashMap::default();
    let mut order: Vec<u64> = Vec::new();
    for (k, step) in plan.steps.iter().enumerate() {
        match step {
            Step::Eager { op } | Step::Activation { op, .. } => {
                inner_op(&mut values, &ops[*op as usize], k)
            }
            Step::Release { op, inputs } => {
                for (pos, t) in ops[*op as usize].inputs().enumerate() {
                    if inputs.contains(&(pos as u8)) {
                        free(&mut values, t, k);
                    }
                }
            }
            Step::Alias { op, of, inputs } => {
                // The repeat shares the original's outputs: their uses are no longer only the
                // plan's own.
                for t in ops[*of as usize].outputs() {
                    escape(&mut values, t);
                }
                for (pos, t) in ops[*op as usize].inputs().enumerate() {
                    if inputs.contains(&(pos as u8)) {
                        free(&mut values, t, k);
                    }
                }
            }
            Step::Fused { group } => {
                fused_step(ops, plan, *group as usize, k, &mut values, &mut order)
            }
            // The members run in one launch: each member's frees and writes at this step (a
            // slot freed here is not reused by a value written here, so no member writes
            // memory another reads).
            Step::Horizontal { group } => {
                for &m in &plan.horizontal[*group as usize].members {
                    fused_step(ops, plan, m as usize, k, &mut values, &mut order)
                }
            }
            Step::Matmul { group } => {
                let g = &plan.matmul[*group as usize];
                // The operands it consumes, a fused residual's included (the epilogue's
                // intermediates are never values of their own).
                for t in g.ops().flat_map(|i| ops[i as usize].inputs()) {
                    if t.status == TensorStatus::ReadWrite {
                        free(&mut values, t, k);
                    }
                }
                let writer = Writer::Matmul {
                    group: *group as usize,
                };
                write(&mut values, &mut order, matmul_output(ops, g), writer, k);
            }
            Step::Attention { group } => {
                // The kernel or, where it cannot run, its parts: every operand escapes.
                for i in plan.attention[*group as usize].ops() {
                    inner_op(&mut values, &ops[i as usize], k);
                }
            }
            Step::Column { group } => {
                // Likewise: the kernel, or the sums on the inner backend.
                column_step(ops, &plan.column[*group as usize], k, &mut values);
            }
            Step::HorizontalColumns { group } => {
                for &m in &plan.horizontal_columns[*group as usize].members {
                    column_step(ops, &plan.column[m as usize], k, &mut values);
                }
            }
        }
    }

    let mut memory = MemoryPlan {
        slots: Vec::new(),
        fused: plan
            .fused
            .iter()
            .map(|g| vec![None; g.outputs.len()])
            .collect(),
        matmul: vec![None; plan.matmul.len()],
        unplanned_bytes: 0,
    };
    // Per slot, the step that frees its current value.
    let mut busy_until: Vec<usize> = Vec::new();
    for id in order {
        let c = &values[&id];
        let Some(freed) = c.freed.filter(|_| !c.escapes && c.bytes > 0) else {
            continue;
        };
        // Best fit among the free slots that hold it; else the largest free slot, grown; else
        // a new slot.
        let free_slots = (0..memory.slots.len()).filter(|&s| busy_until[s] < c.written);
        let fitting = free_slots
            .clone()
            .filter(|&s| memory.slots[s] >= c.bytes)
            .min_by_key(|&s| memory.slots[s]);
        let slot = match fitting.or_else(|| free_slots.max_by_key(|&s| memory.slots[s])) {
            Some(s) => {
                memory.slots[s] = memory.slots[s].max(c.bytes);
                busy_until[s] = freed;
                s
            }
            None => {
                memory.slots.push(c.bytes);
                busy_until.push(freed);
                memory.slots.len() - 1
            }
        };
        memory.unplanned_bytes += c.bytes;
        match c.writer {
            Writer::Fused { group, output } => memory.fused[group][output] = Some(slot as u32),
            Writer::Matmul { group } => memory.matmul[group] = Some(slot as u32),
        }
    }
    memory
}
