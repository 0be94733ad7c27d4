//! Scheduling: turns an analysed segment into a [`Plan`], the list of steps that the runtime
//! replays every time the same graph comes back.
//!
//! At this stage every live operation is one step executed by the inner backend; fused kernels
//! will become further [`Step`] kinds. A plan refers to operations by position, never by tensor
//! id, so one plan serves every segment with the same key.

mod pointwise;

pub use pointwise::{
    BinaryOp, Instr, PointwiseGroup, PointwiseKernel, Slot, UnaryOp, pointwise_groups,
};

use burn_compile_graph::Activation;
use burn_compile_passes::{Liveness, dead_code};
use burn_ir::OperationIr;
use serde::{Deserialize, Serialize};

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Step {
    /// Run operation `op` of the segment on the inner backend.
    Eager { op: u32 },
    /// Operation `op` is a captured activation: run the inner backend's own kernel for it.
    Activation { op: u32, kind: Activation },
    /// Operation `op` is dead: free the inputs it would have consumed in place (positions in
    /// `op.inputs()` order).
    Release { op: u32, inputs: Vec<u8> },
}

impl Step {
    /// Position of the operation the step is about.
    pub fn op(&self) -> u32 {
        match self {
            Step::Eager { op } | Step::Activation { op, .. } | Step::Release { op, .. } => *op,
        }
    }
}

/// What a cached graph replays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Steps in program order.
    pub steps: Vec<Step>,
    /// Number of operations in the segment the plan was built for.
    pub ops: u32,
    /// Operations removed as dead code.
    pub dead: u32,
}

impl Plan {
    /// Number of steps that launch work on the inner backend.
    pub fn launches(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Eager { .. } | Step::Activation { .. }))
            .count()
    }
}

/// The step that runs live operation `op` (position `i`).
fn step(op: &OperationIr, i: u32) -> Step {
    match Activation::of(op) {
        Some(kind) => Step::Activation { op: i, kind },
        None => Step::Eager { op: i },
    }
}

/// Builds the plan of a segment.
pub fn schedule(ops: &[OperationIr]) -> Plan {
    let Liveness { dead, releases } = dead_code(ops);
    let mut releases = releases.into_iter().peekable();
    let mut steps = Vec::with_capacity(ops.len());
    for (i, is_dead) in dead.iter().enumerate() {
        if !is_dead {
            steps.push(step(&ops[i], i as u32));
        } else if releases.peek().is_some_and(|(op, _)| *op as usize == i) {
            let (op, inputs) = releases.next().expect("peeked");
            steps.push(Step::Release { op, inputs });
        }
    }
    Plan {
        steps,
        ops: ops.len() as u32,
        dead: dead.iter().filter(|d| **d).count() as u32,
    }
}

/// The plan that runs every recorded operation (dead-code elimination off).
pub fn schedule_all(ops: &[OperationIr]) -> Plan {
    Plan {
        steps: ops
            .iter()
            .zip(0..ops.len() as u32)
            .map(|(op, i)| step(op, i))
            .collect(),
        ops: ops.len() as u32,
        dead: 0,
    }
}
