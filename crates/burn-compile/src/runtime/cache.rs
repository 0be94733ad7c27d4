//! The in-memory plan cache of one device, and plan execution.
//!
//! A compile is a memoized function of (graph key, plan-relevant config): the second time a
//! graph comes back, the plan is found in O(1) and replayed with no graph work.
//!
//! Plans are specialized on every size: the exact key holds them, so a graph whose sizes
//! changed misses and compiles again. The *family* of a graph (the same program over any
//! sizes, [`KeyWriter::family`]) counts those recompiles: each is logged under the
//! `burn_compile::recompiles` target with the tensors and dimensions whose sizes differ from
//! the family's previous compile, and past [`CompileConfig::recompile_limit`] the family stops
//! compiling: its graphs replay eagerly from then on, after one warning.

use super::InnerDevice;
use crate::capture::{BreakReason, GraphBreak};
use crate::config::CompileConfig;
use crate::diagnostics::GraphRecord;
use burn_compile_graph::{Activation, GraphKey, KeyWriter, op_listing, op_name};
use burn_compile_schedule::{
    AttentionGroup, MatmulGroup, Plan, PointwiseKernel, ScheduleOptions, Step, schedule,
};
use burn_ir::{BackendIr, OperationIr};
use rustc_hash::FxHashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The config fields a plan depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PlanConfig {
    dead_code_elimination: bool,
    common_subexpressions: bool,
    fusion: bool,
    library_matmul: bool,
    attention: bool,
    attention_f32: bool,
    memory_planning: bool,
}

impl From<&CompileConfig> for PlanConfig {
    fn from(c: &CompileConfig) -> Self {
        Self {
            dead_code_elimination: c.dead_code_elimination,
            common_subexpressions: c.common_subexpressions,
            fusion: c.fusion,
            library_matmul: c.library_matmul,
            attention: c.attention,
            attention_f32: c.attention_f32,
            memory_planning: c.memory_planning,
        }
    }
}

/// What the device's kernel target can run (each `None` where it has no target).
#[derive(Clone, Copy)]
pub(crate) struct Accepts<'a> {
    /// Generated pointwise and row kernels.
    pub pointwise: Option<&'a dyn Fn(&PointwiseKernel) -> bool>,
    /// Buffers a generated kernel may bind for its tensors (`usize::MAX`: no limit).
    pub max_kernel_buffers: usize,
    /// Library matmuls.
    pub matmul: Option<&'a dyn Fn(&MatmulGroup) -> bool>,
    /// Attention steps (not those the attention autotune found slower than their parts).
    pub attention: Option<&'a dyn Fn(&AttentionGroup) -> bool>,
}

#[derive(Default)]
pub(crate) struct PlanCache {
    plans: FxHashMap<(GraphKey, PlanConfig), Arc<Plan>>,
    families: FxHashMap<(GraphKey, PlanConfig), Family>,
}

/// What the cache knows of a graph family: the compiles of one program over several sizes.
struct Family {
    /// The sizes of its latest compile (what the next recompile is compared with).
    last: Vec<u64>,
    /// Compiles after the first.
    recompiles: usize,
    /// Past the recompile limit: the plan its graphs run, every op on the inner backend (the
    /// same for every size of the family, so built once).
    eager: Option<Arc<Plan>>,
}

/// How a graph's plan was found.
enum Found {
    Cached(Arc<Plan>),
    /// Compiled; `Some` with what changed when the family had been compiled before.
    Compiled(Arc<Plan>, Option<String>),
    /// Its family is past the recompile limit: every op on the inner backend.
    Eager(Arc<Plan>),
}

impl PlanCache {
    /// Finds or builds the plan of a closed graph, found by the exact key of `keys` (the
    /// record's `key`); the record describes the graph for diagnostics (its break is filled in by the caller). `accepts` says which generated
    /// kernels, library calls and attention steps the device can run.
    pub fn plan(
        &mut self,
        keys: &KeyWriter,
        ops: &[OperationIr],
        config: &CompileConfig,
        diagnostics: bool,
        accepts: Accepts<'_>,
    ) -> (Arc<Plan>, GraphRecord) {
        let key = keys.key();
        let plan_config = PlanConfig::from(config);
        let cache_key = (key, plan_config);
        // A plan whose attention step the device has since found slower than its parts (the
        // attention autotune) is built again, with the parts scheduled as the other steps.
        let cached = self.plans.get(&cache_key).filter(|plan| {
            plan.attention.is_empty()
                || accepts
                    .attention
                    .is_none_or(|accepts| plan.attention.iter().all(accepts))
        });
        let start = Instant::now();
        let found = match cached {
            Some(plan) => Found::Cached(plan.clone()),
            None => self.compile(keys, ops, config, plan_config, accepts),
        };
        let elapsed = start.elapsed();
        let (plan, cache_hit, compile_time, recompile, past_limit) = match found {
            Found::Cached(plan) => (plan, true, Duration::ZERO, None, false),
            Found::Compiled(plan, recompile) => {
                self.plans.insert(cache_key, plan.clone());
                (plan, false, elapsed, recompile, false)
            }
            // Not kept under the exact key: a family past its limit may come with any number of
            // new sizes, and its one eager plan serves them all.
            Found::Eager(plan) => (plan, true, Duration::ZERO, None, true),
        };
        let listing = diagnostics.then(|| op_listing(ops));
        let record = GraphRecord {
            key,
            ops: plan.ops as usize,
            launches: plan.launches(),
            fused_kernels: plan.fused_kernels(),
            fused_ops: plan.fused_ops(),
            library_matmuls: plan.library_matmuls(),
            attention_kernels: plan.attention_kernels(),
            memory: crate::diagnostics::PlannedMemory {
                values: plan.memory.planned(),
                slots: plan.memory.slots.len(),
                bytes: plan.memory.bytes(),
                unplanned_bytes: plan.memory.unplanned_bytes,
            },
            kernels: if diagnostics {
                plan.kernel_summaries()
            } else {
                Vec::new()
            },
            generated: if diagnostics {
                plan.pointwise
                    .iter()
                    .map(|g| (g.kernel.clone(), g.shape.as_slice().to_vec()))
                    .collect()
            } else {
                Vec::new()
            },
            dead: plan.dead as usize,
            merged: plan.merged(),
            cache_hit,
            compile_time,
            recompile,
            past_recompile_limit: past_limit,
            ended_by: GraphBreak {
                reason: BreakReason::MarkStep,
                detail: None,
                location: None,
            },
            region_end: false,
            listing,
            kernel_build: None,
        };
        (plan, record)
    }

    /// Compiles a graph the exact cache missed: a first compile of its family, a recompile
    /// (logged, counted), or, past the family's recompile limit, an eager plan.
    fn compile(
        &mut self,
        keys: &KeyWriter,
        ops: &[OperationIr],
        config: &CompileConfig,
        plan_config: PlanConfig,
        accepts: Accepts<'_>,
    ) -> Found {
        let family_key = (keys.family(), plan_config);
        let recompile = match self.families.get_mut(&family_key) {
            None => {
                self.families.insert(
                    family_key,
                    Family {
                        last: keys.dims().to_vec(),
                        recompiles: 0,
                        eager: None,
                    },
                );
                None
            }
            Some(Family {
                eager: Some(plan), ..
            }) => return Found::Eager(plan.clone()),
            Some(family) => {
                let changes = describe_changes(&family.last, keys.dims(), ops);
                family.last.clear();
                family.last.extend_from_slice(keys.dims());
                if family.recompiles >= config.recompile_limit {
                    let plan = Arc::new(eager_plan(ops));
                    family.eager = Some(plan.clone());
                    tracing::warn!(
                        target: "burn_compile::recompiles",
                        "graph family {} ({} ops) hit recompile_limit = {} (sizes changed again: \
                         {changes}): it runs eagerly from now on; raise the limit with \
                         BURN_COMPILE_RECOMPILE_LIMIT or CompileConfig::recompile_limit",
                        family_key.0,
                        ops.len(),
                        config.recompile_limit,
                    );
                    return Found::Eager(plan);
                }
                family.recompiles += 1;
                tracing::info!(
                    target: "burn_compile::recompiles",
                    "recompiling graph family {} ({} ops), recompile {} of {}: {changes}",
                    family_key.0,
                    ops.len(),
                    family.recompiles,
                    config.recompile_limit,
                );
                Some(changes)
            }
        };
        let attention = accepts
            .attention
            .map(|accepts| move |g: &AttentionGroup| config.attention_for(g.dtype) && accepts(g));
        let options = ScheduleOptions {
            dead_code_elimination: config.dead_code_elimination,
            common_subexpressions: config.common_subexpressions,
            pointwise: accepts.pointwise.filter(|_| config.fusion),
            max_kernel_buffers: accepts.max_kernel_buffers,
            matmul: accepts.matmul.filter(|_| config.library_matmul),
            attention: attention.as_ref().map(|f| f as _),
            memory_planning: config.memory_planning,
        };
        Found::Compiled(Arc::new(schedule(ops, options)), recompile)
    }

    /// Number of plans held.
    #[allow(dead_code)]
    pub fn len(&self) -> usize {
        self.plans.len()
    }
}

/// Replays a plan over the recorded ops of one graph; returns the emptied vector.
///
/// Each step names its op (or fused group) by position; ops without a step are dead, or run
/// inside a fused kernel, and are dropped unexecuted.
/// Ops are read in place, never moved: they are large (616 bytes) and were written by the
/// recording thread, so every byte copied here is a cache miss on the execution thread.
///
/// A target that builds kernels for the layouts it first met in this replay (the CPU target's
/// C unit) builds them at its end: graph `key`'s kernels, all in one build.
pub(crate) fn execute<B: BackendIr>(
    inner: &InnerDevice<B>,
    key: GraphKey,
    mut ops: Vec<OperationIr>,
    plan: &Plan,
) -> Vec<OperationIr> {
    let profiling = super::profile::on();
    // The memory plan's buffers, reserved at once; dropped at the end of the replay (every
    // planned value is freed inside the graph).
    let slab = inner.slab(&plan.memory.slots);
    let slot = |s: &Option<u32>| s.and_then(|s| slab.get(s as usize));
    let mut into = Vec::new();
    for step in &plan.steps {
        let start = profiling.then(Instant::now);
        match step {
            Step::Eager { op } => inner.execute(&ops[*op as usize]),
            Step::Activation { op, kind } => {
                super::activation::run(inner, &ops[*op as usize], *kind)
            }
            Step::Pointwise { group } => {
                into.clear();
                if let Some(slots) = plan.memory.pointwise.get(*group as usize) {
                    into.extend(slots.iter().map(slot));
                }
                inner.fused(&ops, &plan.pointwise[*group as usize], &into)
            }
            Step::Matmul { group } => {
                let into = plan.memory.matmul.get(*group as usize).and_then(slot);
                inner.library_matmul(&ops, &plan.matmul[*group as usize], into)
            }
            Step::Attention { group } => inner.attention(&ops, &plan.attention[*group as usize]),
            Step::Release { op, inputs } => release(inner, &ops[*op as usize], inputs),
            Step::Alias { op, of, inputs } => {
                let (repeat, original) = (&ops[*op as usize], &ops[*of as usize]);
                for (out, shared) in repeat.outputs().zip(original.outputs()) {
                    inner.alias(shared.id, out.id);
                }
                release(inner, repeat, inputs);
            }
        }
        if let Some(start) = start {
            let elapsed = start.elapsed();
            let label = match step {
                Step::Eager { op } | Step::Activation { op, .. } => op_name(&ops[*op as usize]),
                Step::Pointwise { group }
                    if plan.pointwise[*group as usize].kernel.row.is_some() =>
                {
                    "kernel (row)".into()
                }
                Step::Pointwise { .. } => "kernel (pointwise)".into(),
                Step::Matmul { .. } => "library matmul".into(),
                Step::Attention { .. } => "attention".into(),
                Step::Release { .. } | Step::Alias { .. } => "release".into(),
            };
            super::profile::record(&label, elapsed);
        }
    }
    if !plan.pointwise.is_empty() {
        inner.finish_replay(key);
    }
    ops.clear();
    ops
}

/// Frees the inputs of `op` at `positions` (in `op.inputs()` order): it consumed them in place,
/// and does not run.
fn release<B: BackendIr>(inner: &InnerDevice<B>, op: &OperationIr, positions: &[u8]) {
    for (pos, input) in op.inputs().enumerate() {
        if positions.contains(&(pos as u8)) {
            inner.release(input.id);
        }
    }
}

/// Runs one op outside any plan (capture off).
pub(crate) fn execute_one<B: BackendIr>(inner: &InnerDevice<B>, op: OperationIr) {
    match Activation::of(&op) {
        Some(kind) => super::activation::run(inner, &op, kind),
        None => inner.execute(&op),
    }
}

/// The plan that runs every op on the inner backend, as if nothing were captured.
fn eager_plan(ops: &[OperationIr]) -> Plan {
    schedule(
        ops,
        ScheduleOptions {
            dead_code_elimination: false,
            common_subexpressions: false,
            pointwise: None,
            max_kernel_buffers: usize::MAX,
            matmul: None,
            attention: None,
            memory_planning: false,
        },
    )
}

/// Most changed sizes a recompile message lists.
const LISTED_CHANGES: usize = 6;

/// Which sizes differ between a family's previous compile (`before`) and this graph
/// (`after`), by the tensor and dimension they belong to: one line, e.g.
/// `tensor #0 (first named by op 0, float_matmul) dim 0: 4 -> 6; slice bound of op 7, slice:
/// 8 -> 12`. Tensors are numbered by first appearance in the graph (#0 is the first tensor its
/// first op names); a tensor named by several ops is listed once. The owners of the sizes are
/// found by walking the ops again (recording keeps the sizes only).
fn describe_changes(before: &[u64], after: &[u64], ops: &[OperationIr]) -> String {
    if before.len() != after.len() {
        return format!("{} sizes -> {} sizes", before.len(), after.len());
    }
    let mut walk = KeyWriter::with_owners();
    for op in ops {
        walk.push(op);
    }
    let owners = walk.dim_owners();
    let op_label = |op: u32| format!("op {op}, {}", op_name(&ops[op as usize]));
    let mut seen = rustc_hash::FxHashSet::default();
    let mut parts = Vec::new();
    let mut more = 0;
    for ((b, a), owner) in before.iter().zip(after).zip(owners) {
        if b == a || (!owner.is_slice_bound() && !seen.insert((owner.tensor, owner.axis))) {
            continue;
        }
        if parts.len() == LISTED_CHANGES {
            more += 1;
            continue;
        }
        parts.push(if owner.is_slice_bound() {
            format!("slice bound of {}: {b} -> {a}", op_label(owner.op))
        } else {
            format!(
                "tensor #{} (first named by {}) dim {}: {b} -> {a}",
                owner.tensor,
                op_label(owner.op),
                owner.axis
            )
        });
    }
    if more > 0 {
        parts.push(format!("and {more} more"));
    }
    parts.join("; ")
}
