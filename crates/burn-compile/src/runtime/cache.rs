//! The in-memory plan cache of one device, and plan execution.
//!
//! A compile is a memoized function of (graph key, plan-relevant config): the second time a
//! graph comes back, the plan is found in O(1) and replayed with no graph work.

use crate::capture::{BreakReason, GraphBreak};
use crate::config::CompileConfig;
use crate::diagnostics::GraphRecord;
use burn_compile_graph::{GraphKey, op_listing};
use burn_compile_schedule::{Plan, Step, schedule, schedule_all};
use burn_ir::{BackendIr, OperationIr};
use burn_router::{Runner, RunnerClient};
use rustc_hash::FxHashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The config fields a plan depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PlanConfig {
    dead_code_elimination: bool,
}

impl From<&CompileConfig> for PlanConfig {
    fn from(c: &CompileConfig) -> Self {
        Self {
            dead_code_elimination: c.dead_code_elimination,
        }
    }
}

#[derive(Default)]
pub(crate) struct PlanCache {
    plans: FxHashMap<(GraphKey, PlanConfig), Arc<Plan>>,
}

impl PlanCache {
    /// Finds or builds the plan of a closed graph; the record describes the graph for
    /// diagnostics (its break is filled in by the caller).
    pub fn plan(
        &mut self,
        key: GraphKey,
        ops: &[OperationIr],
        config: &CompileConfig,
        diagnostics: bool,
    ) -> (Arc<Plan>, GraphRecord) {
        let cache_key = (key, PlanConfig::from(config));
        let (plan, cache_hit, compile_time) = match self.plans.get(&cache_key) {
            Some(plan) => (plan.clone(), true, Duration::ZERO),
            None => {
                let start = Instant::now();
                let plan = Arc::new(if config.dead_code_elimination {
                    schedule(ops)
                } else {
                    schedule_all(ops)
                });
                let elapsed = start.elapsed();
                self.plans.insert(cache_key, plan.clone());
                (plan, false, elapsed)
            }
        };
        let listing = diagnostics.then(|| op_listing(ops));
        let record = GraphRecord {
            key,
            ops: plan.ops as usize,
            launches: plan.launches(),
            dead: plan.dead as usize,
            cache_hit,
            compile_time,
            ended_by: GraphBreak {
                reason: BreakReason::MarkStep,
                detail: None,
                location: None,
            },
            region_end: false,
            listing,
        };
        (plan, record)
    }

    /// Number of plans held.
    #[allow(dead_code)]
    pub fn len(&self) -> usize {
        self.plans.len()
    }
}

/// Replays a plan over the recorded ops of one graph; returns the emptied vector.
///
/// Steps are in program order, so one pass over the ops pairs each with its step; an op without
/// a step is dead and is dropped unexecuted. Operations are large (hundreds of bytes): each is
/// moved once, out of the vector into the step that runs it.
pub(crate) fn execute<B: BackendIr>(
    runner: &Runner<B>,
    mut ops: Vec<OperationIr>,
    plan: &Plan,
) -> Vec<OperationIr> {
    let mut steps = plan.steps.iter().peekable();
    for (i, op) in ops.drain(..).enumerate() {
        let Some(step) = steps.next_if(|s| s.op() as usize == i) else {
            continue;
        };
        match step {
            Step::Eager { .. } => runner.register_op(op),
            Step::Activation { kind, .. } => super::activation::run(runner, op, *kind),
            Step::Release { inputs, .. } => {
                for (pos, input) in op.inputs().enumerate() {
                    if inputs.contains(&(pos as u8)) {
                        runner.register_op(OperationIr::Drop(input.clone()));
                    }
                }
            }
        }
    }
    debug_assert!(steps.next().is_none(), "a plan step past the graph's ops");
    ops
}
