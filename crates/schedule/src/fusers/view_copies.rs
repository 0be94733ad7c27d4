//! Swapped views that products read, copied contiguous once ([`ViewCopyFuser`]).
//!
//! Burn's MultiHeadAttention splits the heads out of the model dimension: `[b, s, h, d]`
//! swapped to `[b, h, s, d]`, a view whose batch dimensions do not fold into one stride. A
//! batched product cannot read it in place: a library matmul (and the inner backend's) copies
//! it contiguous first, at every product that reads it — in a training step q, k and v are
//! read by a forward product and again by a backward one, the heads of the attention output's
//! gradient by two backward products; and a head-merging reshape (`[b, s, h, d]` from the
//! product's `[b, h, s, d]`, swapped back) is one more copy before its linear layer.
//!
//! Here such a swap becomes a generated kernel of its own: it copies the view contiguous, once,
//! at the swap's place, and every product reads the copy (a later swap of the last two
//! dimensions, `kᵀ`, is then a transposed view a product reads in place; a reshape of the copy
//! is a view). Being plain pointwise kernels of one program, the copies of one shape become one
//! launch where they can wait for each other (the horizontal fuser: q, k and v, three copies in
//! one kernel). The kernel reads the swap's input through the swap
//! ([`FusedGroup::swapped_inputs`]); where it cannot run, the swap runs as the view it is.

use super::{Claims, FusedGroup, Fuser, Slot};
use crate::ScheduleOptions;
use crate::kernel::{FusedKernel, Instr};
use burn_ir::{BaseOperationIr, ModuleOperationIr, OperationIr, TensorStatus};
use rustc_hash::FxHashMap;

pub(crate) struct ViewCopyFuser;

impl Fuser for ViewCopyFuser {
    fn fuse(&self, ops: &[OperationIr], options: &ScheduleOptions<'_>, claims: &mut Claims) {
        let Some(accepts) = options.view_copies else {
            return;
        };
        // The copies are specialized on every size; a symbolic plan, whose kernels take some
        // sizes at run time, keeps its views (the products copy them, as before).
        if !options.symbolic_sizes.is_empty() {
            return;
        }
        let mut readers: FxHashMap<u64, Vec<usize>> = FxHashMap::default();
        let mut producer: FxHashMap<u64, usize> = FxHashMap::default();
        for (i, op) in ops.iter().enumerate() {
            for t in op.inputs() {
                readers.entry(t.id.value()).or_default().push(i);
            }
            for t in op.outputs() {
                producer.insert(t.id.value(), i);
            }
        }
        let in_attention: Vec<bool> = {
            let mut marked = vec![false; ops.len()];
            for group in &claims.attention {
                for op in group.ops() {
                    marked[op as usize] = true;
                }
            }
            marked
        };
        // Views this fuser copies, and the swaps library matmuls write transposed: contiguous
        // from then on.
        let mut copied = transposed_outputs(ops, &claims.matmul);
        for i in 0..ops.len() {
            if !claims.live[i] || claims.claimed[i] {
                continue;
            }
            let OperationIr::BaseFloat(BaseOperationIr::SwapDims(swap)) = &ops[i] else {
                continue;
            };
            if swap.out.shape.num_dims() < 3 || swap.dim1 == swap.dim2 {
                continue;
            }
            let Some(mut strides) = layout(ops, &producer, &copied, &swap.input) else {
                continue;
            };
            strides.swap(swap.dim1, swap.dim2);
            // A view a product could read as it is (a transposed operand) waits: a later swap
            // of it is copied if a product cannot read that one, reading through both.
            if batch_folds(swap.out.shape.as_slice(), &strides) {
                continue;
            }
            let needed = needs_copy(ops, &readers, &in_attention, &swap.out, &strides);
            if needed != Some(true) {
                continue;
            }
            let group = copy_group(i as u32, swap);
            if !accepts(&group.kernel) {
                continue;
            }
            copied.insert(swap.out.id.value());
            claims.live[i] = false;
            claims.claimed[i] = true;
            let at = claims.fused.len() as u32;
            claims.steps_at[i].push(crate::Step::Fused { group: at });
            claims.fused.push(group);
        }
    }
}

/// The copies a plan's steps will still make outside it, found from the layouts the plan
/// makes (see [`operand_copies`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OperandCopies {
    /// Library matmuls that copy an operand first (a batch that does not fold into one stride,
    /// a layout the call cannot read).
    pub matmuls: usize,
    /// Reshapes run on the inner backend over a tensor that is not contiguous (the runtime
    /// copies it).
    pub reshapes: usize,
}

/// The copies `plan`'s library matmuls and reshapes will make outside the plan, counted from
/// the layouts its steps make (a graph input taken as contiguous): what the device's runtime
/// copies at replay, found without it (`burn-compile-plan`).
pub fn operand_copies(ops: &[OperationIr], plan: &crate::Plan) -> OperandCopies {
    let mut producer: FxHashMap<u64, usize> = FxHashMap::default();
    for (i, op) in ops.iter().enumerate() {
        for t in op.outputs() {
            producer.insert(t.id.value(), i);
        }
    }
    let mut copied = transposed_outputs(ops, &plan.matmul);
    copied.extend(
        plan.fused
            .iter()
            .filter(|g| !g.swapped_inputs.is_empty())
            .flat_map(|g| g.outputs.iter())
            .filter_map(|slot| ops[slot.op as usize].outputs().nth(slot.pos as usize))
            .map(|t| t.id.value()),
    );
    let mut found = OperandCopies::default();
    for group in &plan.matmul {
        let inputs: Vec<&burn_ir::TensorIr> = ops[group.op as usize].inputs().collect();
        let Some(strides) = inputs
            .iter()
            .map(|t| layout(ops, &producer, &copied, t))
            .collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape.as_slice()).collect();
        let strides: Vec<&[usize]> = strides.iter().map(Vec::as_slice).collect();
        let out = ops[group.output_op() as usize]
            .outputs()
            .next()
            .expect("a matmul has an output");
        if group
            .gemm(&shapes, &strides, out.shape.as_slice())
            .is_none()
        {
            found.matmuls += 1;
        }
    }
    for step in &plan.steps {
        let crate::Step::Eager { op } = step else {
            continue;
        };
        let OperationIr::BaseFloat(BaseOperationIr::Reshape(r)) = &ops[*op as usize] else {
            continue;
        };
        if layout(ops, &producer, &copied, &r.input).is_some_and(|s| s != packed(&r.input)) {
            found.reshapes += 1;
        }
    }
    found
}

/// The outputs of the swaps that library matmuls write transposed, contiguous
/// ([`crate::MatmulGroup::transposed_output`]).
fn transposed_outputs(
    ops: &[OperationIr],
    groups: &[crate::MatmulGroup],
) -> rustc_hash::FxHashSet<u64> {
    groups
        .iter()
        .filter_map(|g| g.transposed_output)
        .filter_map(|op| ops[op as usize].outputs().next())
        .map(|t| t.id.value())
        .collect()
}

/// The strides (in elements) of tensor `t` where it is made, when known: the
/// output of an operation that is not a view, a graph input (as the caller's tensors almost
/// always are: the copy reads any layout, only the choice assumes it), a copy of this fuser
/// and a product a library matmul writes transposed are contiguous; a reshape of a contiguous
/// tensor too; a swap swaps its input's layout.
/// `None`: another view, whose layout is not followed here.
fn layout(
    ops: &[OperationIr],
    producer: &FxHashMap<u64, usize>,
    copied: &rustc_hash::FxHashSet<u64>,
    t: &burn_ir::TensorIr,
) -> Option<Vec<usize>> {
    if copied.contains(&t.id.value()) {
        return Some(packed(t));
    }
    match producer.get(&t.id.value()).map(|&p| &ops[p]) {
        Some(OperationIr::BaseFloat(BaseOperationIr::Reshape(r))) => {
            (layout(ops, producer, copied, &r.input)? == packed(&r.input)).then(|| packed(t))
        }
        Some(OperationIr::BaseFloat(BaseOperationIr::SwapDims(s))) => {
            let mut strides = layout(ops, producer, copied, &s.input)?;
            strides.swap(s.dim1, s.dim2);
            Some(strides)
        }
        Some(OperationIr::BaseFloat(
            BaseOperationIr::Permute(_)
            | BaseOperationIr::Expand(_)
            | BaseOperationIr::Flip(_)
            | BaseOperationIr::Slice(_),
        )) => None,
        _ => Some(packed(t)),
    }
}

/// Whether a batched product reads this layout in place: its batch dimensions fold into one
/// stride, and one of its last two dimensions has unit stride.
fn batch_folds(shape: &[usize], strides: &[usize]) -> bool {
    let rank = shape.len();
    let matrix = (rank - 2..rank).any(|d| shape[d] == 1 || strides[d] == 1);
    matrix && folds(&shape[..rank - 2], &strides[..rank - 2])
}

/// Whether this layout folds into rows of unit-stride elements (a linear layer's input, or a
/// reshape that stays a view).
fn rows_fold(shape: &[usize], strides: &[usize]) -> bool {
    let rank = shape.len();
    (shape[rank - 1] == 1 || strides[rank - 1] == 1) && folds(shape, strides)
}

/// Whether these dimensions fold into one: each (of more than one element) steps over the
/// whole of the next one that has more than one.
fn folds(shape: &[usize], strides: &[usize]) -> bool {
    let walked: Vec<(usize, usize)> = shape
        .iter()
        .zip(strides)
        .filter(|(size, _)| **size > 1)
        .map(|(size, stride)| (*size, *stride))
        .collect();
    walked.windows(2).all(|w| w[0].1 == w[1].0 * w[1].1)
}

/// Whether a product reads tensor `t` (of these strides), directly or through views of it,
/// in a layout it cannot read in place, so that it would copy it: a batched product whose
/// batch does not fold ([`batch_folds`]), a linear layer whose rows do not ([`rows_fold`]), or
/// a reshape that cannot stay a view on the way to a product. `None` when an attention step
/// reads it (its kernel reads the heads as they are).
fn needs_copy(
    ops: &[OperationIr],
    readers: &FxHashMap<u64, Vec<usize>>,
    in_attention: &[bool],
    t: &burn_ir::TensorIr,
    strides: &[usize],
) -> Option<bool> {
    let shape = t.shape.as_slice();
    let mut needed = false;
    for &r in readers.get(&t.id.value()).map_or(&[][..], |r| r.as_slice()) {
        if in_attention[r] {
            return None;
        }
        needed |= match &ops[r] {
            OperationIr::BaseFloat(BaseOperationIr::Reshape(v)) => {
                let read = needs_copy(ops, readers, in_attention, &v.out, &packed(&v.out))?;
                // A reshape of a layout whose rows do not fold copies it on its own.
                read || (!rows_fold(shape, strides) && reaches_product(ops, readers, &v.out))
            }
            OperationIr::BaseFloat(BaseOperationIr::SwapDims(v)) => {
                let mut swapped = strides.to_vec();
                swapped.swap(v.dim1, v.dim2);
                needs_copy(ops, readers, in_attention, &v.out, &swapped)?
            }
            OperationIr::Float(_, burn_ir::FloatOperationIr::Matmul(_)) => {
                !batch_folds(shape, strides)
            }
            OperationIr::Module(
                ModuleOperationIr::Linear(_)
                | ModuleOperationIr::LinearXBackward(_)
                | ModuleOperationIr::LinearWeightBackward(_),
            ) => !rows_fold(shape, strides),
            _ => false,
        };
    }
    Some(needed)
}

/// Whether a product reads tensor `t`, directly or through views of it.
fn reaches_product(
    ops: &[OperationIr],
    readers: &FxHashMap<u64, Vec<usize>>,
    t: &burn_ir::TensorIr,
) -> bool {
    readers
        .get(&t.id.value())
        .map_or(&[][..], |r| r.as_slice())
        .iter()
        .any(|&r| match &ops[r] {
            OperationIr::BaseFloat(BaseOperationIr::Reshape(v)) => {
                reaches_product(ops, readers, &v.out)
            }
            OperationIr::BaseFloat(BaseOperationIr::SwapDims(v)) => {
                reaches_product(ops, readers, &v.out)
            }
            OperationIr::Float(_, burn_ir::FloatOperationIr::Matmul(_))
            | OperationIr::Module(
                ModuleOperationIr::Linear(_)
                | ModuleOperationIr::LinearXBackward(_)
                | ModuleOperationIr::LinearWeightBackward(_),
            ) => true,
            _ => false,
        })
}

/// The contiguous strides of `t`'s shape.
fn packed(t: &burn_ir::TensorIr) -> Vec<usize> {
    super::column::contiguous_strides(t.shape.as_slice())
}

/// The group of swap `op`: one kernel over the swapped shape that loads its input (bound as
/// the swapped view) and stores it contiguous.
fn copy_group(op: u32, swap: &burn_ir::SwapDimsOpIr) -> FusedGroup {
    let rank = swap.out.shape.num_dims();
    FusedGroup {
        ops: vec![op],
        drops: Vec::new(),
        hoisted: Vec::new(),
        inputs: vec![Slot { op, pos: 0 }],
        consumed: vec![swap.input.status == TensorStatus::ReadWrite],
        outputs: vec![Slot { op, pos: 0 }],
        scalars: Vec::new(),
        shape: swap.out.shape.clone(),
        kernel: FusedKernel {
            dtype: swap.out.dtype,
            rank: rank as u8,
            inputs: vec![vec![false; rank]],
            outputs: 1,
            scalars: 0,
            program: vec![
                Instr::Load { input: 0 },
                Instr::Store {
                    output: 0,
                    value: 0,
                },
            ],
            row: None,
        },
        dynamic: Vec::new(),
        swapped_inputs: vec![(0, swap.dim1 as u8, swap.dim2 as u8)],
    }
}
