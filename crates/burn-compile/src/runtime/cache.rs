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

pub(crate) struct Outcome {
    pub record: GraphRecord,
    /// The graph's op vector, emptied, for the next graph to record into.
    pub spent: Vec<OperationIr>,
}

impl PlanCache {
    /// Finds or builds the plan of a closed graph and runs it.
    pub fn run<B: BackendIr>(
        &mut self,
        runner: &Runner<B>,
        key: GraphKey,
        ops: Vec<OperationIr>,
        config: &CompileConfig,
        diagnostics: bool,
    ) -> Outcome {
        let cache_key = (key, PlanConfig::from(config));
        let (plan, cache_hit, compile_time) = match self.plans.get(&cache_key) {
            Some(plan) => (plan.clone(), true, Duration::ZERO),
            None => {
                let start = Instant::now();
                let plan = Arc::new(if config.dead_code_elimination {
                    schedule(&ops)
                } else {
                    schedule_all(&ops)
                });
                let elapsed = start.elapsed();
                self.plans.insert(cache_key, plan.clone());
                (plan, false, elapsed)
            }
        };
        let listing = diagnostics.then(|| op_listing(&ops));
        let spent = execute(runner, ops, &plan);
        Outcome {
            spent,
            record: GraphRecord {
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
            },
        }
    }

    /// Number of plans held.
    #[allow(dead_code)]
    pub fn len(&self) -> usize {
        self.plans.len()
    }
}

/// Replays a plan over the recorded ops of one graph; returns the emptied vector.
fn execute<B: BackendIr>(
    runner: &Runner<B>,
    mut ops: Vec<OperationIr>,
    plan: &Plan,
) -> Vec<OperationIr> {
    let mut recorded = ops.drain(..).enumerate();
    let mut take = |index: u32| {
        recorded
            .find(|(i, _)| *i == index as usize)
            .map(|(_, op)| op)
            .expect("plan steps follow program order")
    };
    for step in &plan.steps {
        match step {
            Step::Eager { op } => runner.register_op(take(*op)),
            Step::Release { op, inputs } => {
                let op = take(*op);
                for (pos, input) in op.inputs().enumerate() {
                    if inputs.contains(&(pos as u8)) {
                        runner.register_op(OperationIr::Drop(input.clone()));
                    }
                }
            }
        }
    }
    drop(recorded);
    ops
}
