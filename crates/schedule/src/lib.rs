//! Scheduling: turns an analysed segment into a [`Plan`], the list of steps that the runtime
//! replays every time the same graph comes back.
//!
//! A live operation is either one step executed by the inner backend, or part of a fused kernel
//! ([`Step::Pointwise`]) when the target can generate kernels. A plan refers to operations by
//! position, never by tensor id, so one plan serves every segment with the same key.

mod attention;
mod matmul;
mod memory;
mod pointwise;

pub use attention::{AttentionGroup, attention_groups};
pub use matmul::{
    Gemm, GemmOperand, MatmulGroup, MatmulKind, Residual, gemm, matmul_groups, scale_alpha,
};
pub use memory::{MemoryPlan, memory_plan};
pub use pointwise::{
    BinaryOp, Constant, Instr, PointwiseGroup, PointwiseKernel, ReduceOp, RowLayout, Slot, UnaryOp,
    pointwise_groups, scalar_operand,
};

use burn_compile_graph::Activation;
use burn_compile_passes::{Liveness, common_subexpressions, dead_code};
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
    /// Fused group `group` of [`Plan::pointwise`]: one generated kernel in place of its
    /// operations, then the group's drops and consumed inputs are freed.
    Pointwise { group: u32 },
    /// Matmul group `group` of [`Plan::matmul`]: one library matmul with its epilogue in place
    /// of its operations (or the operations themselves where the library cannot take the call).
    Matmul { group: u32 },
    /// Attention group `group` of [`Plan::attention`]: one attention kernel in place of its
    /// parts (or the parts themselves where the target cannot take the call).
    Attention { group: u32 },
    /// Operation `op` repeats operation `of` (a common subexpression): its outputs share
    /// `of`'s results, then the inputs it consumed in place are freed (positions in
    /// `op.inputs()` order).
    Alias { op: u32, of: u32, inputs: Vec<u8> },
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
    /// The fused pointwise groups, referred to by [`Step::Pointwise`].
    pub pointwise: Vec<PointwiseGroup>,
    /// The library matmuls, referred to by [`Step::Matmul`].
    #[serde(default)]
    pub matmul: Vec<MatmulGroup>,
    /// The attention kernels, referred to by [`Step::Attention`].
    #[serde(default)]
    pub attention: Vec<AttentionGroup>,
    /// Where the intermediates of generated kernels and library matmuls live.
    #[serde(default)]
    pub memory: MemoryPlan,
    /// Built for a family of shapes: the sizes in [`ScheduleOptions::symbolic_sizes`] are
    /// runtime values (fused groups read them from the replayed graph).
    #[serde(default)]
    pub symbolic: bool,
}

impl Plan {
    /// Number of steps that launch work on the inner backend (a drop launches nothing but is
    /// counted: it is one call into the backend).
    pub fn launches(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| !matches!(s, Step::Release { .. } | Step::Alias { .. }))
            .count()
    }

    /// Number of operations that share an earlier operation's result instead of running.
    pub fn merged(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Alias { .. }))
            .count()
    }

    /// Number of generated (fused) kernels.
    pub fn fused_kernels(&self) -> usize {
        self.pointwise.len()
    }

    /// Number of operations that run inside generated kernels.
    pub fn fused_ops(&self) -> usize {
        self.pointwise.iter().map(|g| g.ops.len()).sum()
    }

    /// Number of library matmuls, and how many of them fused an epilogue (bias, scale, residual
    /// add or ReLU).
    pub fn library_matmuls(&self) -> (usize, usize) {
        let fused = self.matmul.iter().filter(|g| g.has_epilogue()).count();
        (self.matmul.len(), fused)
    }

    /// Number of attention kernels (each in place of a whole `softmax(q @ kᵀ / √d) @ v`).
    pub fn attention_kernels(&self) -> usize {
        self.attention.len()
    }

    /// One line per generated kernel (its kind, iteration shape, what it fused), then one per
    /// library matmul, then one per attention kernel.
    pub fn kernel_summaries(&self) -> Vec<String> {
        self.pointwise
            .iter()
            .map(PointwiseGroup::summary)
            .chain(self.matmul.iter().map(MatmulGroup::summary))
            .chain(self.attention.iter().map(AttentionGroup::summary))
            .collect()
    }
}

/// What [`schedule`] may do.
#[derive(Clone, Copy)]
pub struct ScheduleOptions<'a> {
    /// Skip operations whose results are never used.
    pub dead_code_elimination: bool,
    /// Run an operation that repeats an earlier one (same operation on the same tensors, no
    /// scalar operand) once: the repeat shares its result. Only operations that run as steps
    /// of their own are compared (a fused kernel may never write its intermediates).
    pub common_subexpressions: bool,
    /// Fuse runs of elementwise operations into generated kernels, each kept only when the
    /// target accepts it (e.g. its dtype has a kernel there). `None`: no fusion (a target that
    /// cannot generate kernels, or fusion turned off).
    pub pointwise: Option<&'a dyn Fn(&PointwiseKernel) -> bool>,
    /// Buffers a generated kernel may bind for its inputs and outputs (wgpu: the device's
    /// storage buffers per shader, less what the runtime binds itself); a larger group is
    /// split into kernels that fit. `usize::MAX`: no limit.
    pub max_kernel_buffers: usize,
    /// Run matrix products through a library matmul with fused epilogues, each kept only when
    /// the target accepts it (its dtype). `None`: the inner backend's own matmul.
    pub matmul: Option<&'a dyn Fn(&MatmulGroup) -> bool>,
    /// Run `softmax(q @ kᵀ / √d) @ v` as one attention kernel, each kept only when the target
    /// accepts it. `None`: the parts run as the other steps schedule them.
    pub attention: Option<&'a dyn Fn(&AttentionGroup) -> bool>,
    /// Place the intermediates of generated kernels and library matmuls in the slots of one
    /// buffer per replay, by liveness ([`memory_plan`]).
    pub memory_planning: bool,
    /// Sizes that are symbolic in this plan (sorted): the plan serves every graph of the family
    /// whose sizes keep the pattern of the one scheduled (each symbolic size one value, distinct
    /// from every other size; see the compiler's guards), so a fused group's dimension of one of
    /// these sizes becomes a runtime argument of its kernel. Empty: a plan specialized on every
    /// size. A symbolic plan has no memory plan (slot sizes would change with the shapes) and
    /// no attention steps (their tuning is per problem size): the caller leaves them off.
    pub symbolic_sizes: &'a [u64],
}

/// The step that runs live operation `op` (position `i`).
fn step(op: &OperationIr, i: u32) -> Step {
    match Activation::of(op) {
        Some(kind) => Step::Activation { op: i, kind },
        None => Step::Eager { op: i },
    }
}

/// Builds the plan of a segment.
pub fn schedule(ops: &[OperationIr], options: ScheduleOptions<'_>) -> Plan {
    let Liveness { dead, releases } = if options.dead_code_elimination {
        dead_code(ops)
    } else {
        Liveness {
            dead: vec![false; ops.len()],
            releases: Vec::new(),
        }
    };
    let mut live: Vec<bool> = dead.iter().map(|d| !d).collect();
    // Attention first: its products and softmax are not the other steps'.
    let attention: Vec<AttentionGroup> = match options.attention {
        Some(accepts) => attention_groups(ops, &live)
            .into_iter()
            .filter(|g| accepts(g))
            .collect(),
        None => Vec::new(),
    };
    // `attention_at[i]`: the group whose step sits at `i`; `in_attention[i]`: a part.
    let mut attention_at = vec![None; ops.len()];
    let mut in_attention = vec![false; ops.len()];
    for (g, group) in attention.iter().enumerate() {
        for i in group.ops() {
            live[i as usize] = false;
            in_attention[i as usize] = true;
        }
        attention_at[group.context as usize] = Some(g as u32);
    }
    // Library matmuls first: the operations of a matmul epilogue are not a pointwise kernel's.
    let matmul: Vec<MatmulGroup> = match options.matmul {
        Some(accepts) => matmul_groups(ops, &live)
            .into_iter()
            .filter(|g| accepts(g))
            .collect(),
        None => Vec::new(),
    };
    let mut matmul_at = vec![None; ops.len()];
    let mut in_epilogue = vec![false; ops.len()];
    for (g, group) in matmul.iter().enumerate() {
        for i in group.ops() {
            live[i as usize] = false;
        }
        matmul_at[group.op as usize] = Some(g as u32);
        for i in group.epilogue_ops() {
            in_epilogue[i as usize] = true;
        }
    }
    let mut pointwise: Vec<PointwiseGroup> = match options.pointwise {
        Some(accepts) => pointwise_groups(ops, &live, options.max_kernel_buffers)
            .into_iter()
            .filter(|g| accepts(&g.kernel))
            .collect(),
        None => Vec::new(),
    };
    if !options.symbolic_sizes.is_empty() {
        for group in &mut pointwise {
            let dynamic: Vec<bool> = group
                .shape
                .iter()
                .map(|s| options.symbolic_sizes.binary_search(&(*s as u64)).is_ok())
                .collect();
            if dynamic.iter().any(|d| *d) {
                group.dynamic = dynamic;
            }
        }
    }
    // Operations (and drops, and hoisted views) that belong to a group; the group's steps sit
    // at its first op: the hoisted views, then the kernel.
    let mut in_group = vec![None; ops.len()];
    for (g, group) in pointwise.iter().enumerate() {
        for &i in group.ops.iter().chain(&group.drops).chain(&group.hoisted) {
            in_group[i as usize] = Some(g as u32);
        }
    }
    // Common subexpressions among the operations left to run one by one.
    let mut alias_at = vec![None; ops.len()];
    if options.common_subexpressions {
        // `live` is already false for dead operations and those of attention and matmul
        // steps; fused groups (with their hoisted views) are left out here.
        let alone: Vec<bool> = (0..ops.len())
            .map(|i| live[i] && in_group[i].is_none())
            .collect();
        for d in common_subexpressions(ops, &alone) {
            let at = d.op as usize;
            alias_at[at] = Some(d);
        }
    }
    let mut releases = releases.into_iter().peekable();
    let mut steps = Vec::with_capacity(ops.len());
    for (i, is_dead) in dead.iter().enumerate() {
        if let Some(group) = attention_at[i] {
            steps.push(Step::Attention { group });
        } else if in_attention[i] {
            // A part of an attention kernel (or a drop of one of its intermediates).
        } else if let Some(group) = matmul_at[i] {
            steps.push(Step::Matmul { group });
        } else if in_epilogue[i] {
            // An operation fused into a matmul's epilogue: runs with it.
        } else if let Some(group) = in_group[i] {
            let g = &pointwise[group as usize];
            if g.ops[0] as usize == i {
                steps.extend(g.hoisted.iter().map(|&h| step(&ops[h as usize], h)));
                steps.push(Step::Pointwise { group });
            }
        } else if let Some(d) = alias_at[i].take() {
            steps.push(Step::Alias {
                op: d.op,
                of: d.of,
                inputs: d.releases,
            });
        } else if !is_dead {
            steps.push(step(&ops[i], i as u32));
        } else if releases.peek().is_some_and(|(op, _)| *op as usize == i) {
            let (op, inputs) = releases.next().expect("peeked");
            steps.push(Step::Release { op, inputs });
        }
    }
    let mut plan = Plan {
        steps,
        ops: ops.len() as u32,
        dead: dead.iter().filter(|d| **d).count() as u32,
        pointwise,
        matmul,
        attention,
        memory: MemoryPlan::default(),
        symbolic: !options.symbolic_sizes.is_empty(),
    };
    if options.memory_planning {
        plan.memory = memory_plan(ops, &plan);
    }
    plan
}
