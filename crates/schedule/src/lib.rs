//! Scheduling: turns an analysed segment into a [`Plan`], the list of steps that the runtime
//! replays every time the same graph comes back.
//!
//! A live operation is either one step executed by the inner backend, or part of a fused step
//! that a fuser took (`fusers/`: attention, a library matmul with its epilogue, a generated
//! kernel whose program is the kernel IR of `kernel.rs`). A plan refers to operations by
//! position, never by tensor id, so one plan serves every segment with the same key.

mod fusers;
mod kernel;
mod memory;

pub use burn_compile_passes::InputRewrite;
pub use fusers::{
    AttentionGroup, ColumnGroup, FusedGroup, Gemm, GemmOperand, HorizontalColumnGroup,
    HorizontalGroup, MAX_HELD_BYTES, MAX_HORIZONTAL_BUFFERS, MatmulGroup, MatmulKind,
    OperandCopies, Residual, Slot, attention_groups, batch_summed_gemm, column_groups,
    column_layout, fused_groups, gemm, matmul_groups, operand_copies, scalar_operand, scale_alpha,
};
pub use kernel::{BinaryOp, Constant, FusedKernel, Instr, ReduceOp, RowLayout, UnaryOp};
pub use memory::{MemoryPlan, memory_plan};

use burn_compile_graph::Activation;
use burn_compile_passes::{
    Liveness, apply_rewrites, common_subexpressions, dead_code, relu_backward_reads_output,
};
use burn_ir::OperationIr;
use fusers::{Claims, FUSERS};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

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
    /// Fused group `group` of [`Plan::fused`]: one generated kernel in place of its
    /// operations, then the group's drops and consumed inputs are freed.
    Fused { group: u32 },
    /// Horizontal group `group` of [`Plan::horizontal`]: its members' kernels (fused groups
    /// running the same program over independent tensors) as one launch, then each member's
    /// drops and consumed inputs are freed.
    Horizontal { group: u32 },
    /// Matmul group `group` of [`Plan::matmul`]: one library matmul with its epilogue in place
    /// of its operations (or the operations themselves where the library cannot take the call).
    Matmul { group: u32 },
    /// Attention group `group` of [`Plan::attention`]: one attention kernel in place of its
    /// parts (or the parts themselves where the target cannot take the call).
    Attention { group: u32 },
    /// Column group `group` of [`Plan::column`]: one column-sum kernel in place of its sums (or
    /// the sums themselves where the target cannot take the call).
    Column { group: u32 },
    /// Horizontal column group `group` of [`Plan::horizontal_columns`]: its members' column
    /// sums (groups of [`Plan::column`] of one shape, over independent tensors) as one launch
    /// (or one by one where the target cannot take it).
    HorizontalColumns { group: u32 },
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
    /// The generated kernels' groups (elementwise runs and row reductions), referred to by
    /// [`Step::Fused`].
    pub fused: Vec<FusedGroup>,
    /// Fused groups launched together, referred to by [`Step::Horizontal`] (their members
    /// have no [`Step::Fused`] of their own).
    #[serde(default)]
    pub horizontal: Vec<HorizontalGroup>,
    /// The library matmuls, referred to by [`Step::Matmul`].
    #[serde(default)]
    pub matmul: Vec<MatmulGroup>,
    /// The attention kernels, referred to by [`Step::Attention`].
    #[serde(default)]
    pub attention: Vec<AttentionGroup>,
    /// The column sums, referred to by [`Step::Column`].
    #[serde(default)]
    pub column: Vec<ColumnGroup>,
    /// Column sums launched together, referred to by [`Step::HorizontalColumns`] (their
    /// members have no [`Step::Column`] of their own).
    #[serde(default)]
    pub horizontal_columns: Vec<HorizontalColumnGroup>,
    /// Where the intermediates of generated kernels and library matmuls live.
    #[serde(default)]
    pub memory: MemoryPlan,
    /// Built for a family of shapes: the sizes in [`ScheduleOptions::symbolic_sizes`] are
    /// runtime values (fused groups read them from the replayed graph).
    #[serde(default)]
    pub symbolic: bool,
    /// Edits of the segment's reads the plan was scheduled for ([`ScheduleOptions::relu_masks`]):
    /// every replayed segment is rewritten with them ([`Plan::rewrite`]) before it runs.
    #[serde(default)]
    pub rewrites: Vec<InputRewrite>,
}

impl Plan {
    /// Applies the plan's rewrites to a segment of its key: what the plan's steps read is then
    /// what they were scheduled for. Idempotent.
    pub fn rewrite(&self, ops: &mut [OperationIr]) {
        apply_rewrites(ops, &self.rewrites);
    }

    /// `ops` as the plan runs them: rewritten ([`Plan::rewrite`]), borrowed when the plan has no
    /// rewrites.
    pub fn rewritten<'a>(&self, ops: &'a [OperationIr]) -> Cow<'a, [OperationIr]> {
        burn_compile_passes::rewritten(ops, &self.rewrites)
    }

    /// Whether `ops` are rewritten as the plan runs them (checked by each rewritten read).
    pub fn is_rewritten(&self, ops: &[OperationIr]) -> bool {
        self.rewrites.iter().all(|r| match *r {
            InputRewrite::Reads {
                op,
                input,
                from,
                output,
                ..
            } => {
                let read = ops[op as usize].inputs().nth(input as usize).map(|t| t.id);
                read.is_some()
                    && read
                        == ops[from as usize]
                            .outputs()
                            .nth(output as usize)
                            .map(|t| t.id)
            }
            _ => true,
        })
    }

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
        self.fused.len()
    }

    /// Number of horizontal kernels, and the fused kernels they launch together.
    pub fn horizontal_kernels(&self) -> (usize, usize) {
        let members = self.horizontal.iter().map(|h| h.members.len()).sum();
        (self.horizontal.len(), members)
    }

    /// Number of operations that run inside generated kernels.
    pub fn fused_ops(&self) -> usize {
        self.fused.iter().map(|g| g.ops.len()).sum()
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

    /// Number of column-sum kernels.
    pub fn column_kernels(&self) -> usize {
        self.column.len()
    }

    /// Number of horizontal column-sum kernels, and the column sums they launch together.
    pub fn horizontal_column_kernels(&self) -> (usize, usize) {
        let members = self
            .horizontal_columns
            .iter()
            .map(|h| h.members.len())
            .sum();
        (self.horizontal_columns.len(), members)
    }

    /// One line per generated kernel (its kind, iteration shape, what it fused), then one per
    /// library matmul, one per attention kernel and one per column sum.
    pub fn kernel_summaries(&self) -> Vec<String> {
        self.fused
            .iter()
            .map(FusedGroup::summary)
            .chain(self.horizontal.iter().map(|h| h.summary(&self.fused)))
            .chain(self.matmul.iter().map(MatmulGroup::summary))
            .chain(self.attention.iter().map(AttentionGroup::summary))
            .chain(self.column.iter().map(ColumnGroup::summary))
            .chain(
                self.horizontal_columns
                    .iter()
                    .map(|h| h.summary(&self.column)),
            )
            .collect()
    }
}

/// What [`schedule`] may do.
#[derive(Clone, Copy)]
pub struct ScheduleOptions<'a> {
    /// Make each ReLU backward read the forward's output instead of its input, where that output
    /// still exists (same gradient; the ReLU then fuses into the product that makes its input,
    /// which no longer lives until the backward): [`Plan::rewrites`].
    pub relu_masks: bool,
    /// Skip operations whose results are never used.
    pub dead_code_elimination: bool,
    /// Run an operation that repeats an earlier one (same operation on the same tensors, no
    /// scalar operand) once: the repeat shares its result. Only operations that run as steps
    /// of their own are compared (a fused kernel may never write its intermediates).
    pub common_subexpressions: bool,
    /// Fuse runs of elementwise operations into generated kernels, each kept only when the
    /// target accepts it (e.g. its dtype has a kernel there). `None`: no fusion (a target that
    /// cannot generate kernels, or fusion turned off).
    pub fused: Option<&'a dyn Fn(&FusedKernel) -> bool>,
    /// Buffers a generated kernel may bind for its inputs and outputs (wgpu: the device's
    /// storage buffers per shader, less what the runtime binds itself); a larger group is
    /// split into kernels that fit. `usize::MAX`: no limit.
    pub max_kernel_buffers: usize,
    /// Copy a swapped view that products read and cannot read in place (attention's heads)
    /// contiguous once, by a generated kernel at the swap's place, each kept only when the
    /// target accepts it ([`FusedGroup::swapped_inputs`]). `None`: the products copy it at
    /// each read, or read it in place (the CPU's). Not in symbolic plans.
    pub view_copies: Option<&'a dyn Fn(&FusedKernel) -> bool>,
    /// Launch fused kernels that run the same program over independent tensors (an
    /// optimizer's per-parameter updates) as one kernel ([`HorizontalGroup`]).
    pub horizontal: bool,
    /// Run matrix products through a library matmul with fused epilogues, each kept only when
    /// the target accepts it (its dtype). `None`: the inner backend's own matmul.
    pub matmul: Option<&'a dyn Fn(&MatmulGroup) -> bool>,
    /// Run `softmax(q @ kᵀ / √d) @ v` as one attention kernel, each kept only when the target
    /// accepts it. `None`: the parts run as the other steps schedule them.
    pub attention: Option<&'a dyn Fn(&AttentionGroup) -> bool>,
    /// Run sums over leading dimensions (bias gradients, gradients of broadcast operands) as
    /// column-sum kernels, each kept only when the target accepts it. `None`: the inner
    /// backend's reductions. Not in symbolic plans.
    pub column: Option<&'a dyn Fn(&ColumnGroup) -> bool>,
    /// Launch column sums of one shape over independent tensors (a layer's bias gradients) as
    /// one kernel ([`HorizontalColumnGroup`]), with [`Self::horizontal`], where the target
    /// takes such a group of sums like this one. `None`: each its own launch.
    pub horizontal_columns: Option<&'a dyn Fn(&ColumnGroup) -> bool>,
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
pub(crate) fn step(op: &OperationIr, i: u32) -> Step {
    match Activation::of(op) {
        Some(kind) => Step::Activation { op: i, kind },
        None => Step::Eager { op: i },
    }
}

/// Builds the plan of a segment.
pub fn schedule(ops: &[OperationIr], options: ScheduleOptions<'_>) -> Plan {
    let rewrites = if options.relu_masks {
        relu_backward_reads_output(ops)
    } else {
        Vec::new()
    };
    let rewritten = burn_compile_passes::rewritten(ops, &rewrites);
    let ops = &*rewritten;
    let Liveness { dead, releases } = if options.dead_code_elimination {
        dead_code(ops)
    } else {
        Liveness {
            dead: vec![false; ops.len()],
            releases: Vec::new(),
        }
    };
    let mut claims = Claims::new(dead.iter().map(|d| !d).collect());
    for fuser in FUSERS {
        fuser.fuse(ops, &options, &mut claims);
    }
    // Common subexpressions among the operations left to run one by one.
    let mut alias_at = vec![None; ops.len()];
    if options.common_subexpressions {
        for d in common_subexpressions(ops, &claims.live) {
            let at = d.op as usize;
            alias_at[at] = Some(d);
        }
    }
    let mut releases = releases.into_iter().peekable();
    let mut steps = Vec::with_capacity(ops.len());
    for (i, is_dead) in dead.iter().enumerate() {
        if !claims.steps_at[i].is_empty() {
            steps.append(&mut claims.steps_at[i]);
        } else if claims.claimed[i] {
            // Runs inside a fused step placed at another position.
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
        fused: claims.fused,
        horizontal: claims.horizontal,
        matmul: claims.matmul,
        attention: claims.attention,
        column: claims.column,
        horizontal_columns: claims.horizontal_columns,
        memory: MemoryPlan::default(),
        symbolic: !options.symbolic_sizes.is_empty(),
        rewrites,
    };
    if options.memory_planning {
        plan.memory = memory_plan(ops, &plan);
    }
    plan
}
