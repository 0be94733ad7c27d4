//! The replay of a plan: its executable's launches, in order, on the inner backend's tensors.

use crate::InnerDevice;
use crate::executable::{Binding, Executable, Launch};
use crate::inner::Member;
use burn_compile_graph::{Activation, GraphKey};
use burn_compile_schedule::{ColumnGroup, Plan};
use burn_ir::{BackendIr, OperationIr, TensorId};
use rustc_hash::FxHashMap;
use std::sync::Arc;
use std::time::Instant;

/// Replays a plan over the recorded ops of one graph; returns the emptied vector.
///
/// The ops are first rewritten as the plan was scheduled ([`Plan::rewrite`]: a few reads edited
/// in place).
///
/// The plan runs as its [`Executable`], lowered at its first replay on this device: the replay
/// fills the scalar table from the recorded ops and walks the launches. Ops without a launch
/// are dead, or run inside a fused kernel, and are dropped unexecuted. Ops are read in place,
/// never moved: they are large (616 bytes) and were written by the recording thread, so every
/// byte copied here is a cache miss on the execution thread.
///
/// A target that builds kernels for the layouts it first met in this replay (the CPU target's
/// C unit) builds them at its end: graph `key`'s kernels, all in one build.
///
/// In reduce-overhead mode the replay may instead launch the plan's recorded graph
/// ([`crate::recording`]), with the same effect on the device's tensors.
pub fn execute<B: BackendIr>(
    inner: &InnerDevice<B>,
    key: GraphKey,
    mut ops: Vec<OperationIr>,
    plan: &Arc<Plan>,
) -> Vec<OperationIr> {
    plan.rewrite(&mut ops);
    execute_ops(inner, key, &ops, plan);
    ops.clear();
    ops
}

/// [`execute`] over ops the caller keeps (a step replayed whole keeps its graph's ops), already
/// rewritten by the plan ([`Plan::rewrite`]).
pub fn execute_ops<B: BackendIr>(
    inner: &InnerDevice<B>,
    key: GraphKey,
    ops: &[OperationIr],
    plan: &Arc<Plan>,
) {
    debug_assert!(
        plan.is_rewritten(ops),
        "graph {key}: ops not rewritten by its plan"
    );
    let executable = inner.executable(plan, ops);
    let table = executable.scalar_table(ops);
    let walk = |table: &[f64], placed: &Placed<B::FloatTensorPrimitive>| {
        walk(inner, key, ops, plan, &executable, table, placed)
    };
    let recorded = inner.reduce_overhead()
        && crate::recording::replay(inner, ops, plan, &executable, &table, walk);
    if !recorded {
        walk(&table, &FxHashMap::default());
    }
}

/// Buffers some graph outputs are written into instead of new ones (a recording's capture
/// places outputs where the other recording of the plan reads them: [`crate::recording`]),
/// keyed by the output's tensor id; each a slot tensor, as the slab's.
pub type Placed<T> = FxHashMap<TensorId, T>;

/// How a graph replayed for a whole step (burn-compile's `jit`) is bound to the caller's
/// tensors: its ops keep the ids of the step's recording, private to the replay, and these
/// renames run around it on the execution thread, in the graph's order with the device's other
/// graphs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepBinding {
    /// Before the graph: `(caller's tensor, graph input)`: the input shares the caller's inner
    /// tensor (a handle clone).
    pub inputs: Vec<(TensorId, TensorId)>,
    /// Before the graph, once shared: the caller's tensors the step consumes.
    pub consumed: Vec<TensorId>,
    /// After the graph: `(graph output, caller's new tensor)`.
    pub outputs: Vec<(TensorId, TensorId)>,
    /// After the graph: the graph's own ids still held (inputs it only read, outputs once
    /// renamed, outputs nobody takes).
    pub released: Vec<TensorId>,
}

impl StepBinding {
    /// Runs `ops` as `plan` with the binding's renames around it.
    pub fn execute<B: BackendIr>(
        &self,
        inner: &InnerDevice<B>,
        key: GraphKey,
        ops: &[OperationIr],
        plan: &Arc<Plan>,
    ) {
        for (from, to) in &self.inputs {
            inner.alias(*from, *to);
        }
        for id in &self.consumed {
            inner.release(*id);
        }
        // The graph's ids are the same at every call: a recording that tells tensors apart by
        // id (alternating recordings) sees the caller's, each naming one value.
        let naming = inner.reduce_overhead() && inner.alternate_recordings();
        if naming {
            let named = self.inputs.iter().map(|(caller, graph)| (*graph, *caller));
            inner.name_values(named.chain(self.outputs.iter().copied()).collect());
        }
        execute_ops(inner, key, ops, plan);
        if naming {
            inner.name_values(FxHashMap::default());
        }
        for (from, to) in &self.outputs {
            inner.alias(*from, *to);
        }
        for id in &self.released {
            inner.release(*id);
        }
    }
}

/// Runs the launches of `executable` over `ops`, in order.
fn walk<B: BackendIr>(
    inner: &InnerDevice<B>,
    key: GraphKey,
    ops: &[OperationIr],
    plan: &Arc<Plan>,
    executable: &Executable,
    scalars: &[f64],
    placed: &Placed<B::FloatTensorPrimitive>,
) {
    let profiling = crate::profile::on();
    // The memory plan's buffers, reserved at once; dropped at the end of the replay (every
    // planned value is freed inside the graph).
    let slab = inner.slab(&executable.slab);
    let mut into = Vec::new();
    for (i, launch) in executable.launches.iter().enumerate() {
        inner.set_current_launch(i);
        let start = profiling.then(Instant::now);
        match launch {
            Launch::Eager { op } => inner.execute(&ops[*op as usize]),
            Launch::Activation { op, kind } => {
                crate::activation::run(inner, &ops[*op as usize], *kind)
            }
            Launch::Kernel {
                group,
                bindings,
                scalars: (first, len),
            } => {
                into.clear();
                into.extend(outputs_into(ops, bindings, &slab, placed));
                let (first, len) = (*first as usize, *len as usize);
                let group = &plan.fused[*group as usize];
                inner.fused(ops, group, &into, &scalars[first..first + len])
            }
            Launch::Horizontal { kernels, .. } => {
                let members: Vec<Member<'_, _>> = kernels
                    .iter()
                    .filter_map(|k| match k {
                        Launch::Kernel {
                            group,
                            bindings,
                            scalars: (first, len),
                        } => Some(Member {
                            group: &plan.fused[*group as usize],
                            into: outputs_into(ops, bindings, &slab, placed).collect(),
                            scalars: &scalars[*first as usize..(*first + *len) as usize],
                        }),
                        _ => None,
                    })
                    .collect();
                inner.horizontal(ops, &members)
            }
            Launch::Matmul {
                group,
                bindings,
                alpha,
            } => {
                let mut into = outputs_into(ops, bindings, &slab, placed);
                let (product, bias_grad) = (into.next().flatten(), into.next().flatten());
                let alpha = alpha.map_or(1.0, |a| scalars[a as usize]);
                let group = &plan.matmul[*group as usize];
                inner.library_matmul(ops, group, [product, bias_grad], alpha)
            }
            Launch::Attention { group, .. } => {
                inner.attention(ops, &plan.attention[*group as usize])
            }
            Launch::Column { group, .. } => inner.column(ops, &plan.column[*group as usize]),
            Launch::HorizontalColumns { group, .. } => {
                let members: Vec<&ColumnGroup> = plan.horizontal_columns[*group as usize]
                    .members
                    .iter()
                    .map(|m| &plan.column[*m as usize])
                    .collect();
                inner.horizontal_columns(ops, &members)
            }
            Launch::Release { op, inputs } => release(inner, &ops[*op as usize], inputs),
            Launch::Alias { op, of, inputs } => {
                let (repeat, original) = (&ops[*op as usize], &ops[*of as usize]);
                for (out, shared) in repeat.outputs().zip(original.outputs()) {
                    inner.alias(shared.id, out.id);
                }
                release(inner, repeat, inputs);
            }
        }
        if let Some(start) = start {
            let elapsed = start.elapsed();
            let label = match launch {
                Launch::Eager { op } | Launch::Activation { op, .. } => executable.op_name(*op),
                Launch::Kernel { group, .. }
                    if plan.fused[*group as usize].kernel.row.is_some() =>
                {
                    "kernel (row)"
                }
                Launch::Kernel { .. } => "kernel (pointwise)",
                Launch::Horizontal { .. } => "kernel (horizontal)",
                Launch::Matmul { .. } => "library matmul",
                Launch::Attention { .. } => "attention",
                Launch::Column { .. } => "column sum",
                Launch::HorizontalColumns { .. } => "column sums (horizontal)",
                Launch::Release { .. } | Launch::Alias { .. } => "release",
            };
            crate::profile::record(label, elapsed);
        }
    }
    if !plan.fused.is_empty() {
        inner.finish_replay(key);
    }
}

/// The buffers a launch's outputs go to, in output order: its slab slot, else the buffer placed
/// for it, else `None` (allocated on its own).
fn outputs_into<'a, T>(
    ops: &'a [OperationIr],
    bindings: &'a [Binding],
    slab: &'a [T],
    placed: &'a Placed<T>,
) -> impl Iterator<Item = Option<&'a T>> + 'a {
    bindings.iter().filter_map(move |b| match b {
        Binding::Read(_) => None,
        Binding::Write { slab: Some(s), .. } => Some(slab.get(*s as usize)),
        Binding::Write { at, slab: None } => Some(if placed.is_empty() {
            None
        } else {
            ops[at.op as usize]
                .outputs()
                .nth(at.pos as usize)
                .and_then(|t| placed.get(&t.id))
        }),
    })
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
pub fn execute_one<B: BackendIr>(inner: &InnerDevice<B>, op: OperationIr) {
    match Activation::of(&op) {
        Some(kind) => crate::activation::run(inner, &op, kind),
        None => inner.execute(&op),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn_backend::{DType, Shape};
    use burn_compile_schedule::Slot;
    use burn_ir::{NumericOperationIr, ScalarIr, ScalarOpIr, TensorIr, TensorStatus};

    fn t(id: u64) -> TensorIr {
        TensorIr {
            id: TensorId::new(id),
            shape: Shape::from(vec![4]),
            status: TensorStatus::ReadOnly,
            dtype: DType::F32,
        }
    }

    fn add(lhs: u64, out: u64) -> OperationIr {
        OperationIr::NumericFloat(
            DType::F32,
            NumericOperationIr::AddScalar(ScalarOpIr {
                lhs: t(lhs),
                rhs: ScalarIr::Float(1.0),
                out: t(out),
            }),
        )
    }

    /// A launch's outputs go to their memory-plan slot first, else to the buffer placed for
    /// their tensor (a recording's capture), else nowhere given (allocated); reads take none.
    #[test]
    fn outputs_go_to_their_slot_else_their_placed_buffer() {
        let ops = [add(1, 2), add(2, 3), add(3, 4)];
        let slot = |op, pos| Slot { op, pos };
        let bindings = [
            Binding::Read(slot(0, 0)),
            Binding::Write {
                at: slot(0, 0),
                slab: Some(1),
            },
            Binding::Write {
                at: slot(1, 0),
                slab: None,
            },
            Binding::Write {
                at: slot(2, 0),
                slab: None,
            },
        ];
        let slab = ["slab 0", "slab 1"];
        let mut placed = Placed::default();
        placed.insert(TensorId::new(3), "placed for 3");
        placed.insert(TensorId::new(2), "placed for 2, which has a slot");
        let got: Vec<_> = outputs_into(&ops, &bindings, &slab, &placed).collect();
        assert_eq!(got, [Some(&"slab 1"), Some(&"placed for 3"), None]);
        let none = Placed::default();
        let got: Vec<_> = outputs_into(&ops, &bindings, &slab, &none).collect();
        assert_eq!(got, [Some(&"slab 1"), None, None]);
    }
}
