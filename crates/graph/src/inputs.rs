//! The tensors a graph reads that it does not produce.

use burn_ir::{OperationIr, TensorId, TensorIr};
use rustc_hash::FxHashSet;

/// A tensor a graph reads that it does not produce.
#[derive(Clone, Debug)]
pub struct GraphInput {
    /// The op that first names it: its first reader, or the `Init` op that announces it.
    pub op: u32,
    /// Its position among that op's inputs (`init`: among its outputs).
    pub pos: u8,
    /// Announced by an `Init` op: uploaded from data before the graph runs.
    pub init: bool,
    pub tensor: TensorIr,
}

/// The inputs of `ops`, in order of first use. A tensor an `Init` op announces is an input too.
pub fn graph_inputs(ops: &[OperationIr]) -> Vec<GraphInput> {
    let mut produced: FxHashSet<TensorId> = FxHashSet::default();
    let mut seen: FxHashSet<TensorId> = FxHashSet::default();
    let mut inputs = Vec::new();
    for (op, operation) in ops.iter().enumerate() {
        let op = op as u32;
        if let OperationIr::Init(init) = operation {
            if seen.insert(init.out.id) {
                inputs.push(GraphInput {
                    op,
                    pos: 0,
                    init: true,
                    tensor: init.out.clone(),
                });
            }
            continue;
        }
        for (pos, t) in operation.inputs().enumerate() {
            if !produced.contains(&t.id) && seen.insert(t.id) {
                inputs.push(GraphInput {
                    op,
                    pos: pos as u8,
                    init: false,
                    tensor: t.clone(),
                });
            }
        }
        produced.extend(operation.outputs().map(|t| t.id));
    }
    inputs
}
