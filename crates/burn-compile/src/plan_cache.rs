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
//!
//! A recompile may instead build a *symbolic* plan ([`DynamicShapes`]): the family's sizes that
//! changed (or every size, or the declared ones) become runtime values of its fused kernels,
//! and the family keeps that plan with its guard, the pattern of sizes it serves
//! ([`Template::admits`]). A later graph of new sizes that the guard admits replays it with no
//! compile at all.

use crate::capture::{BreakReason, GraphBreak};
use crate::config::{CompileConfig, DynamicShapes};
use crate::diagnostics::GraphRecord;
use crate::dims::Dim;
use burn_compile_graph::{GraphKey, KeyWriter, op_listing, op_name};
use burn_compile_runtime::targets::Lowering;
use burn_compile_runtime::targets::rules::GpuRules;
use burn_compile_runtime::{Executable, InnerDevice, panic_message};
use burn_compile_schedule::{
    AttentionGroup, ColumnGroup, FusedKernel, MatmulGroup, Plan, ScheduleOptions, schedule,
};
use burn_ir::{BackendIr, OperationIr};
use rustc_hash::FxHashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The config fields a plan depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PlanConfig {
    dead_code_elimination: bool,
    common_subexpressions: bool,
    fusion: bool,
    library_matmul: bool,
    bias_gradient_epilogue: bool,
    attention: bool,
    attention_f32: bool,
    memory_planning: bool,
    horizontal_fusion: bool,
    column_sums: bool,
    view_copies: bool,
    relu_masks: bool,
    dynamic: DynamicShapes,
    /// The injected faults (hashed): a plan compiled with one is never reused without it.
    faults: u64,
}

impl From<&CompileConfig> for PlanConfig {
    fn from(c: &CompileConfig) -> Self {
        Self {
            dead_code_elimination: c.dead_code_elimination,
            common_subexpressions: c.common_subexpressions,
            fusion: c.fusion,
            library_matmul: c.library_matmul,
            bias_gradient_epilogue: c.bias_gradient_epilogue,
            attention: c.attention,
            attention_f32: c.attention_f32,
            memory_planning: c.memory_planning,
            horizontal_fusion: c.horizontal_fusion,
            column_sums: c.column_sums,
            view_copies: c.view_copies,
            relu_masks: c.relu_masks,
            dynamic: c.dynamic,
            faults: {
                use std::hash::{Hash, Hasher};
                let mut h = rustc_hash::FxHasher::default();
                let faults = c.faults();
                (faults.compile_failure, &faults.wrong_kernel).hash(&mut h);
                h.finish()
            },
        }
    }
}

/// What the device's kernel target can run (each `None` where it has no target).
#[derive(Clone, Copy)]
pub(crate) struct Accepts<'a> {
    /// Generated pointwise and row kernels.
    pub fused: Option<&'a dyn Fn(&FusedKernel) -> bool>,
    /// Buffers a generated kernel may bind for its tensors (`usize::MAX`: no limit).
    pub max_kernel_buffers: usize,
    /// Library matmuls.
    pub matmul: Option<&'a dyn Fn(&MatmulGroup) -> bool>,
    /// Attention steps (not those the attention autotune found slower than their parts).
    pub attention: Option<&'a dyn Fn(&AttentionGroup) -> bool>,
    /// Column sums.
    pub column: Option<&'a dyn Fn(&ColumnGroup) -> bool>,
    /// Column sums like this one launched together.
    pub horizontal_columns: Option<&'a dyn Fn(&ColumnGroup) -> bool>,
    /// Copies of swapped views that products read.
    pub view_copies: Option<&'a dyn Fn(&FusedKernel) -> bool>,
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
    /// Its latest symbolic plan, with its guard.
    symbolic: Option<Template>,
}

/// A symbolic plan and the sizes it serves: the graph it was scheduled from, its sizes in
/// classes of equal value, some of them symbolic.
struct Template {
    plan: Arc<Plan>,
    /// Per size of the key ([`KeyWriter::dims`]), its class.
    class_of: Vec<u32>,
    classes: Vec<SizeClass>,
}

/// One distinct size value of a template's graph.
struct SizeClass {
    value: u64,
    /// A runtime value of the plan (else a constant every graph must repeat).
    symbolic: bool,
    /// Its declared range, if one was declared ([`crate::mark_dynamic`]).
    dim: Option<Dim>,
}

/// A declared size outside its range.
struct OutOfRange {
    dim: Dim,
    size: u64,
}

impl OutOfRange {
    fn message(&self) -> String {
        format!(
            "burn-compile: dimension `{}` is {} in this graph, outside its declared range \
             {}..={} (mark_dynamic); the graph ran eagerly",
            self.dim.name, self.size, self.dim.min, self.dim.max
        )
    }
}

impl Template {
    /// Whether the plan serves a graph of these sizes: every constant class at its value,
    /// every symbolic class one value of at least 2 (within its range), and the classes'
    /// values still pairwise distinct. A declared class out of its range is an error.
    fn admits(&self, dims: &[u64]) -> Result<bool, OutOfRange> {
        if dims.len() != self.class_of.len() {
            return Ok(false);
        }
        let mut values: Vec<Option<u64>> = vec![None; self.classes.len()];
        for (&v, &c) in dims.iter().zip(&self.class_of) {
            let class = &self.classes[c as usize];
            if !class.symbolic {
                if v != class.value {
                    return Ok(false);
                }
                continue;
            }
            match values[c as usize] {
                None => values[c as usize] = Some(v),
                Some(w) if w != v => return Ok(false),
                Some(_) => {}
            }
        }
        let mut all = Vec::with_capacity(self.classes.len());
        for (class, value) in self.classes.iter().zip(values) {
            if !class.symbolic {
                all.push(class.value);
                continue;
            }
            let v = value.unwrap_or(class.value);
            if let Some(dim) = &class.dim
                && !dim.contains(v)
            {
                return Err(OutOfRange {
                    dim: dim.clone(),
                    size: v,
                });
            }
            if v < 2 {
                return Ok(false);
            }
            all.push(v);
        }
        all.sort_unstable();
        Ok(all.windows(2).all(|w| w[0] != w[1]))
    }

    /// The template of a graph of sizes `dims` whose positions `symbolic` (by size) are runtime
    /// values: a class is symbolic when any of its positions is and its value is at least 2.
    fn build(
        dims: &[u64],
        symbolic: &[bool],
        declared: &[(u64, Dim)],
    ) -> (Vec<u32>, Vec<SizeClass>) {
        let mut index: FxHashMap<u64, u32> = FxHashMap::default();
        let mut classes: Vec<SizeClass> = Vec::new();
        let class_of = dims
            .iter()
            .zip(symbolic)
            .map(|(&v, &sym)| {
                let c = *index.entry(v).or_insert_with(|| {
                    classes.push(SizeClass {
                        value: v,
                        symbolic: false,
                        dim: None,
                    });
                    (classes.len() - 1) as u32
                });
                classes[c as usize].symbolic |= sym && v >= 2;
                c
            })
            .collect();
        for (v, dim) in declared {
            if let Some(&c) = index.get(v) {
                let class = &mut classes[c as usize];
                class.symbolic |= *v >= 2;
                class.dim.get_or_insert_with(|| dim.clone());
            }
        }
        (class_of, classes)
    }
}

/// How a graph's plan was found.
enum Found {
    Cached(Arc<Plan>),
    /// Its family's symbolic plan, whose guard admits these sizes: no compile.
    Symbolic(Arc<Plan>),
    /// A declared size is out of its range: every op on the inner backend, and the error.
    OutOfRange(Arc<Plan>, String),
    /// Compiled; `Some` with what changed when the family had been compiled before.
    Compiled(Arc<Plan>, Option<String>),
    /// Its family is past the recompile limit: every op on the inner backend.
    Eager(Arc<Plan>),
}

impl PlanCache {
    /// Finds or builds the plan of a closed graph, found by the exact key of `keys` (the
    /// record's `key`); the record describes the graph for diagnostics (its break is filled in by the caller). `accepts` says which generated
    /// kernels, library calls and attention steps the device can run.
    /// `declared` lists the sizes of this graph declared dynamic ([`crate::mark_dynamic`]), by
    /// value. Returns the plan, its record, and an error for the user when a declared size is
    /// outside its range (the graph then runs eagerly).
    pub fn plan(
        &mut self,
        keys: &KeyWriter,
        ops: &[OperationIr],
        config: &CompileConfig,
        diagnostics: bool,
        accepts: Accepts<'_>,
        declared: &[(u64, Dim)],
    ) -> (Arc<Plan>, GraphRecord, Option<String>) {
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
            None => self.compile(keys, ops, config, plan_config, accepts, declared),
        };
        let elapsed = start.elapsed();
        let mut error = None;
        let (plan, cache_hit, compile_time, recompile, past_limit) = match found {
            Found::Cached(plan) | Found::Symbolic(plan) => {
                (plan, true, Duration::ZERO, None, false)
            }
            Found::OutOfRange(plan, message) => {
                error = Some(message);
                (plan, true, Duration::ZERO, None, false)
            }
            Found::Compiled(plan, recompile) => {
                self.plans.insert(cache_key, plan.clone());
                (plan, false, elapsed, recompile, false)
            }
            // Not kept under the exact key: a family past its limit may come with any number of
            // new sizes, and its one eager plan serves them all.
            Found::Eager(plan) => (plan, true, Duration::ZERO, None, true),
        };
        // The `graphs` log names a new plan's eager ops even without diagnostics.
        let logged =
            !cache_hit && tracing::enabled!(target: "burn_compile::graphs", tracing::Level::DEBUG);
        // What the plan runs, the ops as its rewrites edit them: a copy, made only for what is
        // printed (the replay edits its own ops).
        let rewritten;
        let ops = if diagnostics || logged {
            rewritten = plan.rewritten(ops);
            &*rewritten
        } else {
            ops
        };
        let listing = diagnostics.then(|| op_listing(ops));
        let executable = (diagnostics || logged).then(|| Executable::lower(&plan, ops));
        let record = GraphRecord {
            key,
            ops: plan.ops as usize,
            launches: plan.launches(),
            fused_kernels: plan.fused_kernels(),
            fused_ops: plan.fused_ops(),
            horizontal_kernels: plan.horizontal_kernels(),
            library_matmuls: plan.library_matmuls(),
            attention_kernels: plan.attention_kernels(),
            column_kernels: plan.column_kernels(),
            horizontal_column_kernels: plan.horizontal_column_kernels(),
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
                plan.fused
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
            eager_ops: executable
                .as_ref()
                .map_or(Vec::new(), Executable::eager_ops),
            executable: executable.filter(|_| diagnostics).map(|e| e.to_string()),
            kernel_build: None,
            symbolic_sizes: if plan.symbolic {
                symbolic_values(&plan, ops)
            } else {
                Vec::new()
            },
            copies_outside: None,
        };
        (plan, record, error)
    }

    /// Compiles a graph the exact cache missed: a first compile of its family, a recompile
    /// (logged, counted), or, past the family's recompile limit, an eager plan. A graph its
    /// family's symbolic plan admits takes that plan, with no compile.
    fn compile(
        &mut self,
        keys: &KeyWriter,
        ops: &[OperationIr],
        config: &CompileConfig,
        plan_config: PlanConfig,
        accepts: Accepts<'_>,
        declared: &[(u64, Dim)],
    ) -> Found {
        let _span =
            tracing::info_span!(target: "burn_compile", "compile", graph = %keys.key(), ops = ops.len())
                .entered();
        let dims = keys.dims();
        let family_key = (keys.family(), plan_config);
        // Which sizes (by position) the new plan takes as runtime values.
        let every = || dims.iter().map(|&v| v >= 2).collect::<Vec<bool>>();
        let (recompile, symbolic, inherited) = match self.families.get_mut(&family_key) {
            None => {
                self.families.insert(
                    family_key,
                    Family {
                        last: dims.to_vec(),
                        recompiles: 0,
                        eager: None,
                        symbolic: None,
                    },
                );
                let symbolic = match config.dynamic {
                    DynamicShapes::Always => every(),
                    DynamicShapes::Auto | DynamicShapes::Never => vec![false; dims.len()],
                };
                (None, symbolic, Vec::new())
            }
            Some(Family {
                eager: Some(plan), ..
            }) => return Found::Eager(plan.clone()),
            Some(family) => {
                if let Some(template) = &family.symbolic {
                    match template.admits(dims) {
                        Ok(true) => return Found::Symbolic(template.plan.clone()),
                        Ok(false) => {}
                        Err(out) => {
                            return Found::OutOfRange(Arc::new(eager_plan(ops)), out.message());
                        }
                    }
                }
                let changes = describe_changes(&family.last, dims, ops);
                // Positions symbolic before stay so (with their declared ranges); those whose
                // size changed since the last compile become so (automatic dynamic).
                let mut inherited: Vec<(u64, Dim)> = Vec::new();
                let mut symbolic = vec![false; dims.len()];
                if let Some(t) = &family.symbolic
                    && t.class_of.len() == dims.len()
                {
                    for (p, &c) in t.class_of.iter().enumerate() {
                        let class = &t.classes[c as usize];
                        symbolic[p] = class.symbolic;
                        if let Some(dim) = &class.dim {
                            inherited.push((dims[p], dim.clone()));
                        }
                    }
                }
                match config.dynamic {
                    DynamicShapes::Always => symbolic = every(),
                    DynamicShapes::Never => symbolic.fill(false),
                    DynamicShapes::Auto if family.last.len() == dims.len() => {
                        for (p, (a, b)) in family.last.iter().zip(dims).enumerate() {
                            symbolic[p] |= a != b;
                        }
                    }
                    DynamicShapes::Auto => {}
                }
                family.last.clear();
                family.last.extend_from_slice(dims);
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
                (Some(changes), symbolic, inherited)
            }
        };
        let mut declared_all: Vec<(u64, Dim)> = declared.to_vec();
        declared_all.extend(inherited);
        // Declared sizes are range-checked whatever the mode; under `Never` they stay constants.
        for (size, dim) in &declared_all {
            if !dim.contains(*size) {
                let out = OutOfRange {
                    dim: dim.clone(),
                    size: *size,
                };
                return Found::OutOfRange(Arc::new(eager_plan(ops)), out.message());
            }
        }
        if config.dynamic == DynamicShapes::Never {
            declared_all.clear();
        }
        let (class_of, classes) = Template::build(dims, &symbolic, &declared_all);
        let mut symbolic_sizes: Vec<u64> = classes
            .iter()
            .filter(|c| c.symbolic)
            .map(|c| c.value)
            .collect();
        symbolic_sizes.sort_unstable();
        let is_symbolic = !symbolic_sizes.is_empty();
        let attention = accepts
            .attention
            .map(|accepts| move |g: &AttentionGroup| config.attention_for(g.dtype) && accepts(g));
        let matmul = accepts
            .matmul
            .filter(|_| config.library_matmul)
            .map(|accepts| {
                move |g: &MatmulGroup| {
                    (config.bias_gradient_epilogue || g.bias_grad.is_none()) && accepts(g)
                }
            });
        let options = ScheduleOptions {
            relu_masks: config.relu_masks,
            dead_code_elimination: config.dead_code_elimination,
            common_subexpressions: config.common_subexpressions,
            fused: accepts.fused.filter(|_| config.fusion),
            max_kernel_buffers: accepts.max_kernel_buffers,
            horizontal: config.horizontal_fusion,
            matmul: matmul.as_ref().map(|f| f as _),
            // A symbolic plan's attention tuning and memory slab would be sized per problem.
            attention: attention.as_ref().filter(|_| !is_symbolic).map(|f| f as _),
            column: accepts.column.filter(|_| config.column_sums),
            horizontal_columns: accepts.horizontal_columns,
            view_copies: accepts
                .view_copies
                .filter(|_| config.fusion && config.view_copies),
            memory_planning: config.memory_planning && !is_symbolic,
            symbolic_sizes: &symbolic_sizes,
        };
        let compiled = catch_unwind(AssertUnwindSafe(|| {
            let faults = config.faults();
            if faults.compile_failure {
                panic!("compile failure injected (faults.compile_failure)");
            }
            let mut plan = schedule(ops, options);
            if let Some(kind) = &faults.wrong_kernel {
                inject_wrong_kernel(&mut plan, kind);
            }
            plan
        }));
        let plan = match compiled {
            Ok(plan) => Arc::new(plan),
            Err(payload) => {
                let why = panic_message(&*payload);
                let message = format!(
                    "burn-compile: compiling graph {} ({} ops) failed ({why}); {}",
                    keys.key(),
                    ops.len(),
                    if config.strict {
                        "strict mode, giving up"
                    } else {
                        "it runs eagerly on the inner backend instead"
                    }
                );
                if config.strict {
                    panic!("{message}");
                }
                tracing::warn!(target: "burn_compile::graphs", "{message}");
                crate::diagnostics::count(&crate::diagnostics::COUNTERS.compile_fallbacks);
                // No symbolic template from a failed compile: other sizes try again.
                if let Some(family) = self.families.get_mut(&family_key) {
                    family.symbolic = None;
                }
                return Found::Compiled(Arc::new(eager_plan(ops)), recompile);
            }
        };
        let family = self
            .families
            .get_mut(&family_key)
            .expect("the family was found or made above");
        family.symbolic = is_symbolic.then(|| Template {
            plan: plan.clone(),
            class_of,
            classes,
        });
        Found::Compiled(plan, recompile)
    }

    /// Plans held: by exact key, and the eager plans of families past their recompile limit.
    pub fn len(&self) -> usize {
        self.plans.len()
            + self
                .families
                .values()
                .filter(|family| family.eager.is_some())
                .count()
    }
}

/// [`PlanCache::plan`] for a graph of the device `inner`: what its kernel target accepts
/// (generated kernels, library matmuls, attention steps the autotune has not found slower).
pub(crate) fn plan_on<B: BackendIr>(
    cache: &mut PlanCache,
    keys: &KeyWriter,
    ops: &[OperationIr],
    config: &CompileConfig,
    diagnostics: bool,
    inner: &InnerDevice<B>,
    declared: &[(u64, Dim)],
) -> (Arc<Plan>, GraphRecord, Option<String>) {
    let kernels = inner.kernels();
    let accepts = kernels.map(|k| move |kernel: &_| k.lower(Lowering::Kernel(kernel)));
    let accepts_matmul = kernels.map(|k| move |group: &_| k.lower(Lowering::Matmul(group)));
    let accepts_column = kernels.map(|k| move |group: &_| k.lower(Lowering::Column(group)));
    let accepts_horizontal_columns =
        kernels.map(|k| move |group: &_| k.lower(Lowering::HorizontalColumns(group)));
    let accepts_view_copy = kernels.map(|k| move |kernel: &_| k.lower(Lowering::ViewCopy(kernel)));
    let accepts_attention = kernels.map(|k| {
        move |group: &_| k.lower(Lowering::Attention(group)) && !inner.attention_lost(group)
    });
    cache.plan(
        keys,
        ops,
        config,
        diagnostics,
        Accepts {
            fused: accepts.as_ref().map(|f| f as _),
            max_kernel_buffers: kernels.map_or(usize::MAX, |k| k.max_kernel_buffers()),
            matmul: accepts_matmul.as_ref().map(|f| f as _),
            attention: accepts_attention.as_ref().map(|f| f as _),
            column: accepts_column.as_ref().map(|f| f as _),
            horizontal_columns: accepts_horizontal_columns.as_ref().map(|f| f as _),
            view_copies: accepts_view_copy.as_ref().map(|f| f as _),
        },
        declared,
    )
}

/// [`PlanCache::plan`] for a graph as a GPU target with `rules` would first plan it, on a
/// machine without that device: its kernels, library matmuls and column sums by the target's
/// rules; attention steps as before any autotune has timed them.
pub(crate) fn plan_by_rules(
    ops: &[OperationIr],
    config: &CompileConfig,
    rules: GpuRules,
) -> GraphRecord {
    let mut keys = KeyWriter::new();
    for op in ops {
        keys.push(op);
    }
    let fused = move |kernel: &_| rules.lowers(Lowering::Kernel(kernel));
    let matmul = move |group: &_| rules.lowers(Lowering::Matmul(group));
    let attention = move |group: &_| rules.lowers(Lowering::Attention(group));
    let column = move |group: &_| rules.lowers(Lowering::Column(group));
    let horizontal_columns = move |group: &_| rules.lowers(Lowering::HorizontalColumns(group));
    let view_copy = move |kernel: &_| rules.lowers(Lowering::ViewCopy(kernel));
    let (plan, mut record, _) = PlanCache::default().plan(
        &keys,
        ops,
        config,
        true,
        Accepts {
            fused: Some(&fused),
            max_kernel_buffers: rules.max_kernel_buffers(),
            matmul: Some(&matmul),
            attention: Some(&attention),
            column: Some(&column),
            horizontal_columns: Some(&horizontal_columns),
            view_copies: Some(&view_copy),
        },
        &[],
    );
    record.region_end = true;
    record.copies_outside = Some(burn_compile_schedule::operand_copies(
        &plan.rewritten(ops),
        &plan,
    ));
    record
}

/// Test-only fault (`Faults::wrong_kernel`): every generated kernel computes
/// the ops of `kind` (a unary or binary op's name, as `exp` or `mul`) as another op — a
/// unary one as `abs` (`relu` for `abs`), a binary one as `sub` (`add` for `sub`) — the wrong
/// kernel an accuracy check must catch.
fn inject_wrong_kernel(plan: &mut Plan, kind: &str) {
    use burn_compile_schedule::{BinaryOp, Instr, UnaryOp};
    let kind = kind.to_ascii_lowercase();
    for group in &mut plan.fused {
        for instr in &mut group.kernel.program {
            match instr {
                Instr::Unary { op, .. } if format!("{op:?}").to_ascii_lowercase() == kind => {
                    *op = if *op == UnaryOp::Abs {
                        UnaryOp::Relu
                    } else {
                        UnaryOp::Abs
                    };
                }
                Instr::Binary { op, .. } if format!("{op:?}").to_ascii_lowercase() == kind => {
                    *op = if *op == BinaryOp::Sub {
                        BinaryOp::Add
                    } else {
                        BinaryOp::Sub
                    };
                }
                _ => {}
            }
        }
    }
}

/// The plan that runs every op on the inner backend, as if nothing were captured.
fn eager_plan(ops: &[OperationIr]) -> Plan {
    schedule(
        ops,
        ScheduleOptions {
            relu_masks: false,
            dead_code_elimination: false,
            common_subexpressions: false,
            fused: None,
            max_kernel_buffers: usize::MAX,
            horizontal: false,
            matmul: None,
            attention: None,
            column: None,
            horizontal_columns: None,
            view_copies: None,
            memory_planning: false,
            symbolic_sizes: &[],
        },
    )
}

/// The values, in this graph, of the sizes its symbolic plan takes at run time: those of its
/// fused groups' symbolic dimensions, read from the group's outputs (sorted, distinct).
fn symbolic_values(plan: &Plan, ops: &[OperationIr]) -> Vec<u64> {
    let mut values: Vec<u64> = Vec::new();
    for group in plan.fused.iter().filter(|g| g.symbolic()) {
        let Some(slot) = group.outputs.first() else {
            continue;
        };
        let Some(out) = ops[slot.op as usize].outputs().nth(slot.pos as usize) else {
            continue;
        };
        let rank = out.shape.num_dims();
        let row_output = group.kernel.row.as_ref().is_some_and(|r| r.row_outputs[0]);
        for d in 0..rank {
            if group.is_dynamic(d) && !(row_output && d + 1 == rank) {
                values.push(out.shape[d] as u64);
            }
        }
    }
    values.sort_unstable();
    values.dedup();
    values
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
