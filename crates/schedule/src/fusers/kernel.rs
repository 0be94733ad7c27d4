//! Generated kernels ([`KernelFuser`]): a run of elementwise float operations over one iteration
//! shape becomes one kernel that reads each input once, keeps intermediates in registers and
//! writes only what is used after the run or outlives the graph (a pointwise kernel).
//!
//! Row fusion extends it to reductions over the last dimension: a run over a shape `[R…, N]`
//! may also hold reductions (sum, mean, max) of such tensors to `[R…, 1]`, elementwise ops on
//! those row values, and ops mixing both (a row value broadcasts along the row). The run becomes
//! one row kernel ([`RowLayout`]): one cube per row, reductions across the cube. Burn's layer
//! norm (with the residual add before it) and softmax (captured whole, expanded here) are each
//! one such kernel.
//!
//! The rules, chosen so that no reordering is ever needed (every operation of a group runs at the
//! group's place in program order, and nothing between its first and last operation depends on
//! it):
//! - a group is a contiguous run of fusible operations; `Drop`s inside the run do not end it
//!   (they run after the kernel), any other operation does;
//! - every operation of a group has the same output shape and float dtype, and each tensor input
//!   has that dtype and the same rank, each dimension equal to the output's or 1 (broadcast);
//! - a run of elementwise operations over `[R…, 1]` (more than one row) that meets an operation
//!   over `[R…, N]` becomes a row kernel over `[R…, N]`, those operations its row values (a
//!   layer norm's backward begins with the reciprocal of its standard deviation, per row);
//! - a run of one operation is left to the inner backend's own kernel (nothing to fuse);
//! - any other live operation inside a run that reads nothing the run has produced or read is
//!   hoisted: it runs on the inner backend just before the kernel, and the run goes on. Burn's
//!   layer norm reshapes γ and β between its elementwise ops; autodiff interleaves the
//!   gradients of independent branches, so a convolution, a reduction over another axis or the
//!   reshape of a swapped view would otherwise end a run after an op or two (a ResNet's
//!   backward). A hoisted operation keeps its order among the operations that are not fused;
//!   it moves only ahead of the run's earlier operations, which produce nothing it reads, read
//!   nothing it might consume in place, and have no effect but their values.
//!
//! Kernels refer to the graph by position (operation index, input or output position), never by
//! tensor id, and carry no scalar values (scalars are runtime arguments, read from the recorded
//! operations at replay): one kernel serves every graph with the same key.

use crate::kernel::{BinaryOp, Constant, FusedKernel, Instr, ReduceOp, RowLayout, UnaryOp};
use burn_backend::{DType, Shape};
use burn_compile_graph::Activation;
use burn_ir::{
    BaseOperationIr, BinaryOpIr, FloatOperationIr, NumericOperationIr, OperationIr, ScalarOpIr,
    TensorIr, TensorStatus, UnaryOpIr,
};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

/// A known value of a register, for the exact simplifications of [`simplified`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    Zero,
    One,
}

/// Where a kernel input or output lives in the graph: operation `op`, position `pos` in its
/// `inputs()` or `outputs()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Slot {
    pub op: u32,
    pub pos: u8,
}

/// One fused group of a graph and its kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FusedGroup {
    /// Positions of the fused operations, in program order.
    pub ops: Vec<u32>,
    /// Positions of the `Drop`s inside the run (they run after the kernel).
    pub drops: Vec<u32>,
    /// Positions of the operations hoisted out of the run (they run, in order, on the inner
    /// backend just before the kernel).
    pub hoisted: Vec<u32>,
    /// Kernel input `i` is the tensor read at `inputs[i]` (its first read in the group).
    pub inputs: Vec<Slot>,
    /// Kernel input `i` has its last use in the group (read `ReadWrite` there): the group
    /// frees it after the kernel.
    pub consumed: Vec<bool>,
    /// Kernel output `i` is the tensor written at `outputs[i]`.
    pub outputs: Vec<Slot>,
    /// Scalar argument `i` is the scalar of operation `scalars[i]`.
    pub scalars: Vec<u32>,
    /// Output shape (the iteration space) of the graph the plan was built from.
    pub shape: Shape,
    pub kernel: FusedKernel,
    /// Per dimension of the iteration space: symbolic (its size is a runtime argument of the
    /// kernel, read from the replayed graph's own shapes). Empty: every size is a constant of
    /// the kernel (a plan specialized on every shape).
    #[serde(default)]
    pub dynamic: Vec<bool>,
    /// Kernel inputs read through a swap of two of their dimensions, as `(input, dim1, dim2)`:
    /// the group copies a swapped view contiguous (`view_copies`), and the runtime binds the
    /// swap's input as that view. Empty for every other kernel.
    #[serde(default)]
    pub swapped_inputs: Vec<(u16, u8, u8)>,
}

impl FusedGroup {
    /// Whether dimension `d` of the iteration space is symbolic.
    pub fn is_dynamic(&self, d: usize) -> bool {
        self.dynamic.get(d).copied().unwrap_or(false)
    }

    /// Whether any size of the iteration space is symbolic.
    pub fn symbolic(&self) -> bool {
        self.dynamic.iter().any(|d| *d)
    }
    /// A one-line description for `explain`: kind, iteration shape, ops fused (and which
    /// reductions), inputs and outputs, operations hoisted.
    pub fn summary(&self) -> String {
        let reductions: Vec<String> = self
            .kernel
            .program
            .iter()
            .filter_map(|i| match i {
                Instr::Reduce { op, .. } => Some(format!("{op:?}").to_lowercase()),
                _ => None,
            })
            .collect();
        let kind = if !self.swapped_inputs.is_empty() {
            "copy of a swapped view".to_string()
        } else if let Some(row) = &self.kernel.row {
            format!(
                "row kernel, reductions [{}], {} units per row × {} rows per cube",
                reductions.join(", "),
                row.units,
                row.rows_per_cube
            )
        } else {
            "pointwise kernel".to_string()
        };
        let hoisted = if self.hoisted.is_empty() {
            String::new()
        } else {
            format!(", {} op(s) hoisted", self.hoisted.len())
        };
        let shape: Vec<String> = self
            .shape
            .iter()
            .enumerate()
            .map(|(d, s)| {
                if self.is_dynamic(d) {
                    format!("s{s}")
                } else {
                    s.to_string()
                }
            })
            .collect();
        format!(
            "{kind} over [{}] {:?}: ops {:?} fused, {} input(s), {} output(s){hoisted}",
            shape.join(", "),
            self.kernel.dtype,
            self.ops,
            self.inputs.len(),
            self.outputs.len(),
        )
    }
}

/// What a fusible operation computes.
enum Compute<'a> {
    Unary(UnaryOp, &'a TensorIr),
    Binary(BinaryOp, &'a TensorIr, &'a TensorIr),
    /// `tensor op scalar`.
    Scalar(BinaryOp, &'a TensorIr),
    /// Reduction over the last dimension (kept dimension of size 1).
    Reduce(ReduceOp, &'a TensorIr),
    /// Softmax over the last dimension (captured whole; expanded into row instructions), or
    /// log-softmax when the flag is set.
    Softmax(&'a TensorIr, bool),
    /// A tensor of ones: a literal, no input, no fill kernel.
    One,
    /// A tensor filled with a runtime scalar (`full`; `zeros`, whose scalar is 0): no input,
    /// no fill kernel.
    Fill,
    /// The input itself: a reduction over a dimension of size 1.
    Identity(&'a TensorIr),
}

struct Fusible<'a> {
    compute: Compute<'a>,
    out: &'a TensorIr,
}

fn unary(op: UnaryOp, d: &UnaryOpIr) -> Option<Fusible<'_>> {
    Some(Fusible {
        compute: Compute::Unary(op, &d.input),
        out: &d.out,
    })
}

fn binary(op: BinaryOp, d: &BinaryOpIr) -> Option<Fusible<'_>> {
    Some(Fusible {
        compute: Compute::Binary(op, &d.lhs, &d.rhs),
        out: &d.out,
    })
}

fn reduce(op: ReduceOp, d: &burn_ir::ReduceDimOpIr) -> Option<Fusible<'_>> {
    let rank = d.input.shape.num_dims();
    if rank >= 1 && d.input.shape[d.axis] == 1 {
        // A sum, mean or max over one element is that element (exactly): no reduction.
        return Some(Fusible {
            compute: Compute::Identity(&d.input),
            out: &d.out,
        });
    }
    // Over the last dimension only.
    (rank >= 1 && d.axis == rank - 1).then_some(Fusible {
        compute: Compute::Reduce(op, &d.input),
        out: &d.out,
    })
}

fn scalar(op: BinaryOp, d: &ScalarOpIr) -> Option<Fusible<'_>> {
    Some(Fusible {
        compute: Compute::Scalar(op, &d.lhs),
        out: &d.out,
    })
}

/// The elementwise meaning of `op`, when it has one this module fuses.
fn fusible(op: &OperationIr) -> Option<Fusible<'_>> {
    let f = match op {
        OperationIr::Float(_, f) => match f {
            FloatOperationIr::Exp(d) => unary(UnaryOp::Exp, d),
            FloatOperationIr::Log(d) => unary(UnaryOp::Log, d),
            FloatOperationIr::Sqrt(d) => unary(UnaryOp::Sqrt, d),
            FloatOperationIr::Tanh(d) => unary(UnaryOp::Tanh, d),
            FloatOperationIr::Erf(d) => unary(UnaryOp::Erf, d),
            FloatOperationIr::Recip(d) => unary(UnaryOp::Recip, d),
            FloatOperationIr::Cos(d) => unary(UnaryOp::Cos, d),
            FloatOperationIr::Sin(d) => unary(UnaryOp::Sin, d),
            FloatOperationIr::Powf(d) => binary(BinaryOp::Powf, d),
            FloatOperationIr::PowfScalar(d) => scalar(BinaryOp::Powf, d),
            _ => None,
        },
        OperationIr::BaseFloat(BaseOperationIr::Ones(d)) => Some(Fusible {
            compute: Compute::One,
            out: &d.out,
        }),
        OperationIr::BaseFloat(BaseOperationIr::Zeros(d)) => Some(Fusible {
            compute: Compute::Fill,
            out: &d.out,
        }),
        OperationIr::NumericFloat(_, n) => match n {
            NumericOperationIr::Add(d) => binary(BinaryOp::Add, d),
            NumericOperationIr::Sub(d) => binary(BinaryOp::Sub, d),
            NumericOperationIr::Mul(d) => binary(BinaryOp::Mul, d),
            NumericOperationIr::Div(d) => binary(BinaryOp::Div, d),
            NumericOperationIr::AddScalar(d) => scalar(BinaryOp::Add, d),
            NumericOperationIr::SubScalar(d) => scalar(BinaryOp::Sub, d),
            NumericOperationIr::MulScalar(d) => scalar(BinaryOp::Mul, d),
            NumericOperationIr::DivScalar(d) => scalar(BinaryOp::Div, d),
            NumericOperationIr::Abs(d) => unary(UnaryOp::Abs, d),
            NumericOperationIr::SumDim(d) => reduce(ReduceOp::Sum, d),
            NumericOperationIr::MeanDim(d) => reduce(ReduceOp::Mean, d),
            NumericOperationIr::MaxDim(d) => reduce(ReduceOp::Max, d),
            NumericOperationIr::Full(d) => Some(Fusible {
                compute: Compute::Fill,
                out: &d.out,
            }),
            _ => None,
        },
        OperationIr::Custom(custom) => {
            let op = match Activation::of(op)? {
                // Inputs: the forward output, the gradient.
                Activation::ReluBackward => {
                    return Some(Fusible {
                        compute: Compute::Binary(
                            BinaryOp::ReluBackward,
                            &custom.inputs[0],
                            &custom.inputs[1],
                        ),
                        out: &custom.outputs[0],
                    })
                    .filter(|f| {
                        f.out.dtype.is_float()
                            && custom.inputs.iter().all(|t| t.dtype == f.out.dtype)
                    });
                }
                Activation::Relu => UnaryOp::Relu,
                Activation::Sigmoid => UnaryOp::Sigmoid,
                Activation::Gelu => UnaryOp::Gelu,
                activation @ (Activation::Softmax { dim } | Activation::LogSoftmax { dim }) => {
                    let input = &custom.inputs[0];
                    let rank = input.shape.num_dims();
                    let log = matches!(activation, Activation::LogSoftmax { .. });
                    return (rank >= 1 && dim == rank - 1 && input.dtype.is_float()).then_some(
                        Fusible {
                            compute: Compute::Softmax(input, log),
                            out: &custom.outputs[0],
                        },
                    );
                }
                _ => return None,
            };
            Some(Fusible {
                compute: Compute::Unary(op, &custom.inputs[0]),
                out: &custom.outputs[0],
            })
        }
        _ => None,
    }?;
    let float = f.out.dtype.is_float();
    let same_dtype = match f.compute {
        Compute::Unary(_, a)
        | Compute::Scalar(_, a)
        | Compute::Reduce(_, a)
        | Compute::Softmax(a, _)
        | Compute::Identity(a) => a.dtype == f.out.dtype,
        Compute::Binary(_, a, b) => a.dtype == f.out.dtype && b.dtype == f.out.dtype,
        Compute::One | Compute::Fill => true,
    };
    (float && same_dtype).then_some(f)
}

/// The scalar operand of a fusible `tensor op scalar` operation, as a float (the value a
/// kernel's scalar argument takes at replay).
pub fn scalar_operand(op: &OperationIr) -> Option<f64> {
    let d = match op {
        OperationIr::Float(_, FloatOperationIr::PowfScalar(d)) => d,
        OperationIr::NumericFloat(
            _,
            NumericOperationIr::AddScalar(d)
            | NumericOperationIr::SubScalar(d)
            | NumericOperationIr::MulScalar(d)
            | NumericOperationIr::DivScalar(d),
        ) => d,
        OperationIr::NumericFloat(_, NumericOperationIr::Full(d)) => {
            return Some(d.value.elem::<f64>());
        }
        OperationIr::BaseFloat(BaseOperationIr::Zeros(_)) => return Some(0.0),
        _ => return None,
    };
    Some(d.rhs.elem::<f64>())
}

/// `input` can be read at every position of `out`'s iteration space.
fn broadcasts_to(input: &Shape, out: &Shape) -> bool {
    input.num_dims() == out.num_dims()
        && input.iter().zip(out.iter()).all(|(i, o)| i == o || *i == 1)
}

fn tensors<'a>(c: &Compute<'a>) -> Vec<&'a TensorIr> {
    match *c {
        Compute::Unary(_, a)
        | Compute::Scalar(_, a)
        | Compute::Reduce(_, a)
        | Compute::Softmax(a, _)
        | Compute::Identity(a) => vec![a],
        Compute::Binary(_, a, b) => vec![a, b],
        Compute::One | Compute::Fill => Vec::new(),
    }
}

/// Last read of each tensor by an operation other than a drop, and the tensors whose life ends
/// inside the graph (dropped, or consumed in place).
fn lifetimes(ops: &[OperationIr]) -> (FxHashMap<u64, u32>, FxHashSet<u64>) {
    let mut last_read: FxHashMap<u64, u32> = FxHashMap::default();
    let mut ended: FxHashSet<u64> = FxHashSet::default();
    for (i, op) in ops.iter().enumerate() {
        if let OperationIr::Drop(t) = op {
            ended.insert(t.id.value());
            continue;
        }
        for t in op.inputs() {
            last_read.insert(t.id.value(), i as u32);
            if t.status == TensorStatus::ReadWrite {
                ended.insert(t.id.value());
            }
        }
    }
    (last_read, ended)
}

/// Finds the generated kernels' groups of a graph (elementwise runs and row reductions). `live[i]` false marks operations that will not run
/// (dead code); they end runs. A kernel binds one buffer per input and output: a group that
/// would need more than `max_buffers` is split into consecutive parts that each fit (wgpu
/// devices bind a few dozen storage buffers per shader; an optimizer step over many parameters
/// is one run of a hundred elementwise ops).
pub fn fused_groups(ops: &[OperationIr], live: &[bool], max_buffers: usize) -> Vec<FusedGroup> {
    let (last_read, ended) = lifetimes(ops);
    let mut groups = Vec::new();
    let mut run = Run::default();
    for (i, op) in ops.iter().enumerate() {
        let i = i as u32;
        if matches!(op, OperationIr::Drop(_)) {
            if !run.ops.is_empty() {
                run.drops.push(i);
            }
            continue;
        }
        // A fusible live operation, and the iteration space it starts when it opens a run.
        let candidate = fusible(op).filter(|_| live[i as usize]).filter(|f| {
            let space = match f.compute {
                Compute::Reduce(..) => &tensors(&f.compute)[0].shape,
                _ => &f.out.shape,
            };
            tensors(&f.compute)
                .iter()
                .all(|t| broadcasts_to(&t.shape, space))
        });
        match candidate {
            Some(f) if run.accepts(&f) => run.push(op, i, &f),
            Some(f) if run.widens_to(&f) => {
                run.widen(&f);
                run.push(op, i, &f);
            }
            Some(f) => {
                run.close(ops, &last_read, &ended, &mut groups);
                run.space = Some((space_of(&f), f.out.dtype));
                run.push(op, i, &f);
            }
            // Not part of the kernel, independent of it: runs before it.
            None if !run.ops.is_empty()
                && live[i as usize]
                && op.inputs().all(|t| !run.touched.contains(&t.id.value())) =>
            {
                run.hoisted.push(i)
            }
            None => run.close(ops, &last_read, &ended, &mut groups),
        }
    }
    run.close(ops, &last_read, &ended, &mut groups);
    let mut fitting = Vec::with_capacity(groups.len());
    for group in groups {
        fit(ops, group, max_buffers, &last_read, &ended, &mut fitting);
    }
    fitting
}

/// Whether a run of these operations is worth a generated kernel: two or more fuse; one alone
/// is left to the inner backend's own kernel, except where the inner backend takes several: a
/// softmax, ReLU (Burn's default: a comparison, then a masked fill — in training its input is
/// kept for the backward, so it cannot be a matmul's epilogue) and ReLU's backward (the same
/// two).
fn worth_a_kernel(ops: &[OperationIr], run: &[u32]) -> bool {
    match run {
        [] => false,
        [one] => fusible(&ops[*one as usize]).is_some_and(|f| {
            matches!(
                f.compute,
                Compute::Softmax(..)
                    | Compute::Unary(UnaryOp::Relu, _)
                    | Compute::Binary(BinaryOp::ReluBackward, ..)
            )
        }),
        _ => true,
    }
}

/// Buffers a group's kernel binds for its tensors.
fn buffers(group: &FusedGroup) -> usize {
    group.inputs.len() + group.outputs.len()
}

/// Pushes `group` when its kernel binds at most `max_buffers` buffers, or else its two halves
/// (by operations, each rebuilt as a group: what one half produces and the other reads becomes
/// an output of the first and an input of the second), each fitted in turn. A part of one
/// operation is left to the inner backend, as in an unsplit run.
fn fit(
    ops: &[OperationIr],
    group: FusedGroup,
    max_buffers: usize,
    last_read: &FxHashMap<u64, u32>,
    ended: &FxHashSet<u64>,
    out: &mut Vec<FusedGroup>,
) {
    if buffers(&group) <= max_buffers {
        out.push(group);
        return;
    }
    let mid = group.ops.len() / 2;
    // Drops and hoisted operations go with the part whose range of positions holds them: the
    // first part's reaches up to the second's first operation (a drop there follows the
    // first kernel; an operation hoisted there reads nothing either part produces).
    let split_at = group.ops[mid];
    let ranges = [(0, split_at), (split_at, u32::MAX)];
    for (part, (lo, hi)) in [&group.ops[..mid], &group.ops[mid..]]
        .into_iter()
        .zip(ranges)
    {
        if !worth_a_kernel(ops, part) {
            continue;
        }
        let within = |p: &&u32| (lo..hi).contains(*p);
        let drops: Vec<u32> = group.drops.iter().filter(within).copied().collect();
        let hoisted: Vec<u32> = group.hoisted.iter().filter(within).copied().collect();
        // A part of row values only (`[R…, 1]`, no reduction) is a plain kernel over them.
        let row_space = row_shape(&group.shape);
        let kinds: Vec<Fusible<'_>> = part
            .iter()
            .map(|&i| fusible(&ops[i as usize]).expect("fusible"))
            .collect();
        let reduces = kinds
            .iter()
            .any(|f| matches!(f.compute, Compute::Reduce(..) | Compute::Softmax(..)));
        let row_valued = kinds.iter().any(|f| f.out.shape == row_space);
        let (shape, row) = if !reduces
            && row_space != group.shape
            && kinds.iter().all(|f| f.out.shape == row_space)
        {
            (row_space, false)
        } else {
            (
                group.shape.clone(),
                reduces || (row_valued && row_space != group.shape),
            )
        };
        let mut half = build(ops, part, &drops, last_read, ended, &shape, row);
        half.hoisted = hoisted;
        fit(ops, half, max_buffers, last_read, ended, out);
    }
}

/// The iteration space an operation opens a run with: its output's shape, or its input's for
/// a reduction.
fn space_of(f: &Fusible<'_>) -> Shape {
    match f.compute {
        Compute::Reduce(_, input) => input.shape.clone(),
        _ => f.out.shape.clone(),
    }
}

/// `shape` with its last dimension reduced to 1.
fn row_shape(shape: &Shape) -> Shape {
    let mut dims = shape.to_vec();
    if let Some(last) = dims.last_mut() {
        *last = 1;
    }
    Shape::from(dims)
}

/// The run being grown by [`fused_groups`].
#[derive(Default)]
struct Run {
    ops: Vec<u32>,
    drops: Vec<u32>,
    hoisted: Vec<u32>,
    /// Tensors read or written by the run's operations.
    touched: FxHashSet<u64>,
    /// The iteration space: shape and dtype.
    space: Option<(Shape, DType)>,
    /// The run holds a reduction or row values: a row kernel.
    row: bool,
}

impl Run {
    /// Whether `f` belongs to the current run: same dtype, and the run's shape (or, for an
    /// elementwise op, the run's row shape `[R…, 1]`).
    fn accepts(&self, f: &Fusible<'_>) -> bool {
        let Some((shape, dtype)) = &self.space else {
            return false;
        };
        if self.ops.is_empty() || *dtype != f.out.dtype {
            return false;
        }
        match f.compute {
            Compute::Reduce(..) => space_of(f) == *shape && f.out.shape == row_shape(shape),
            // A single value after a run without reductions is no row value to broadcast: a
            // row kernel of one row is one cube (the device Adam's rank-1 updates, each
            // followed by the next parameter's one-element state, chained into such kernels).
            _ if f.out.shape != *shape && !self.row && row_shape(shape).num_elements() < 2 => false,
            _ => f.out.shape == *shape || f.out.shape == row_shape(shape),
        }
    }

    /// Whether the run so far is elementwise ops over the row shape `[R…, 1]` of `f`'s space
    /// (of more than one row), which `f` can widen into a row kernel over that space, the
    /// run's ops its row values. A layer norm's backward starts with the reciprocal of the
    /// forward's standard deviation, a softmax's with that of its sum, one value per row read
    /// by the row kernel after it: without this, each is a launch of its own.
    fn widens_to(&self, f: &Fusible<'_>) -> bool {
        let Some((shape, dtype)) = &self.space else {
            return false;
        };
        if self.ops.is_empty() || self.row || *dtype != f.out.dtype {
            return false;
        }
        let space = space_of(f);
        // One row is no row kernel worth having (an optimizer's one-element state before a
        // rank-1 parameter's update: kept apart, the updates fuse across parameters).
        if space == *shape || *shape != row_shape(&space) || shape.num_elements() < 2 {
            return false;
        }
        match f.compute {
            Compute::Reduce(..) => f.out.shape == *shape,
            _ => f.out.shape == space,
        }
    }

    /// Makes the run a row kernel over `f`'s space ([`Run::widens_to`]).
    fn widen(&mut self, f: &Fusible<'_>) {
        self.space = Some((space_of(f), f.out.dtype));
        self.row = true;
    }

    fn push(&mut self, op: &OperationIr, i: u32, f: &Fusible<'_>) {
        self.ops.push(i);
        for t in op.inputs().chain(op.outputs()) {
            self.touched.insert(t.id.value());
        }
        let shape = &self.space.as_ref().expect("a run has a space").0;
        self.row |= matches!(f.compute, Compute::Reduce(..) | Compute::Softmax(..))
            || (f.out.shape != *shape && f.out.shape == row_shape(shape));
    }

    /// Makes a group of the run when it has something to fuse; starts a new run.
    fn close(
        &mut self,
        ops: &[OperationIr],
        last_read: &FxHashMap<u64, u32>,
        ended: &FxHashSet<u64>,
        groups: &mut Vec<FusedGroup>,
    ) {
        // Drops and operations after the last fused op stay where they are.
        let end = self.ops.last().copied();
        let inside = |p: &u32| end.is_some_and(|e| *p < e);
        self.drops.retain(inside);
        self.hoisted.retain(inside);
        if worth_a_kernel(ops, &self.ops) {
            let (shape, _) = self.space.clone().expect("a run has a space");
            let mut group = build(
                ops,
                &self.ops,
                &self.drops,
                last_read,
                ended,
                &shape,
                self.row,
            );
            group.hoisted = std::mem::take(&mut self.hoisted);
            groups.push(group);
        }
        *self = Run::default();
    }
}

fn binary_instr(op: BinaryOp, a: u16, b: u16) -> Instr {
    Instr::Binary { op, a, b }
}

/// The register that already holds `a op b`, by identities exact in IEEE arithmetic (signed
/// zeros and NaNs included): x·1 = 1·x = x, x/1 = x, x−0 = x. Not x+0 (−0 + 0 is +0) nor x·0
/// (∞·0 is NaN). A register is read at every position of the iteration space, whatever its
/// broadcast, so the value at each position is the same.
fn simplified(constants: &FxHashMap<u16, Known>, op: BinaryOp, a: u16, b: u16) -> Option<u16> {
    let is = |reg: u16, c: Known| constants.get(&reg) == Some(&c);
    match op {
        BinaryOp::Mul if is(b, Known::One) => Some(a),
        BinaryOp::Mul if is(a, Known::One) => Some(b),
        BinaryOp::Div if is(b, Known::One) => Some(a),
        BinaryOp::Sub if is(b, Known::Zero) => Some(a),
        _ => None,
    }
}

/// Builds the kernel of one run.
fn build(
    ops: &[OperationIr],
    run: &[u32],
    drops: &[u32],
    last_read: &FxHashMap<u64, u32>,
    ended: &FxHashSet<u64>,
    shape: &Shape,
    row: bool,
) -> FusedGroup {
    let end = *run.last().expect("non-empty run");
    let first = fusible(&ops[run[0] as usize]).expect("fusible");
    let (shape, dtype) = (shape.clone(), first.out.dtype);

    let mut program = Vec::new();
    // Register holding each tensor already in the kernel.
    let mut regs: FxHashMap<u64, u16> = FxHashMap::default();
    // Kernel input of each tensor loaded from outside the run.
    let mut input_of: FxHashMap<u64, usize> = FxHashMap::default();
    let mut inputs = Vec::new();
    let mut consumed = Vec::new();
    let mut broadcast = Vec::new();
    let mut scalars = Vec::new();
    let mut outputs = Vec::new();
    // The registers holding constants (for the exact simplifications below).
    let mut constants: FxHashMap<u16, Known> = FxHashMap::default();
    // Each value the run produces: tensor id, where it is written, register, a row value.
    let mut produced: Vec<(u64, Slot, u16, bool)> = Vec::new();
    let row_of_space = row_shape(&shape);

    // Stores are appended after the loop, so while it runs every instruction is a value and the
    // new register is the instruction's position.
    let value = |program: &mut Vec<Instr>, instr: Instr| {
        program.push(instr);
        (program.len() - 1) as u16
    };

    for &i in run {
        let op = &ops[i as usize];
        let f = fusible(op).expect("fusible");
        let mut operand = |program: &mut Vec<Instr>, t: &TensorIr, pos: u8| -> u16 {
            let id = t.id.value();
            let consumes = t.status == TensorStatus::ReadWrite;
            if let Some(r) = regs.get(&id) {
                // A later read of an input can be its last use (an intermediate's is not an input).
                if consumes && let Some(k) = input_of.get(&id) {
                    consumed[*k] = true;
                }
                return *r;
            }
            input_of.insert(id, inputs.len());
            let input = inputs.len() as u16;
            inputs.push(Slot { op: i, pos });
            consumed.push(consumes);
            broadcast.push(
                t.shape
                    .iter()
                    .zip(shape.iter())
                    .map(|(a, o)| *a == 1 && *o != 1)
                    .collect(),
            );
            let r = value(program, Instr::Load { input });
            regs.insert(id, r);
            r
        };
        let r = match f.compute {
            Compute::Unary(u, a) => {
                let a = operand(&mut program, a, 0);
                value(&mut program, Instr::Unary { op: u, a })
            }
            Compute::Binary(b, l, r) => {
                let l = operand(&mut program, l, 0);
                let r = operand(&mut program, r, 1);
                simplified(&constants, b, l, r)
                    .unwrap_or_else(|| value(&mut program, Instr::Binary { op: b, a: l, b: r }))
            }
            Compute::One => {
                let r = value(
                    &mut program,
                    Instr::Const {
                        value: Constant::One,
                    },
                );
                constants.insert(r, Known::One);
                r
            }
            Compute::Fill => {
                let index = scalars.len() as u16;
                scalars.push(i);
                let r = value(&mut program, Instr::Scalar { index });
                if matches!(op, OperationIr::BaseFloat(BaseOperationIr::Zeros(_))) {
                    constants.insert(r, Known::Zero);
                }
                r
            }
            Compute::Identity(a) => operand(&mut program, a, 0),
            Compute::Scalar(b, l) => {
                let l = operand(&mut program, l, 0);
                let index = scalars.len() as u16;
                scalars.push(i);
                let s = value(&mut program, Instr::Scalar { index });
                simplified(&constants, b, l, s)
                    .unwrap_or_else(|| value(&mut program, Instr::Binary { op: b, a: l, b: s }))
            }
            Compute::Reduce(op, a) => {
                let a = operand(&mut program, a, 0);
                value(&mut program, Instr::Reduce { op, a })
            }
            Compute::Softmax(x, log) => {
                // As Burn computes them: d = x - max(x); softmax is exp(d) / sum(exp(d)),
                // log-softmax is d - log(sum(exp(d))).
                let x = operand(&mut program, x, 0);
                let m = value(
                    &mut program,
                    Instr::Reduce {
                        op: ReduceOp::Max,
                        a: x,
                    },
                );
                let d = value(&mut program, binary_instr(BinaryOp::Sub, x, m));
                let e = value(
                    &mut program,
                    Instr::Unary {
                        op: UnaryOp::Exp,
                        a: d,
                    },
                );
                let s = value(
                    &mut program,
                    Instr::Reduce {
                        op: ReduceOp::Sum,
                        a: e,
                    },
                );
                if log {
                    let l = value(
                        &mut program,
                        Instr::Unary {
                            op: UnaryOp::Log,
                            a: s,
                        },
                    );
                    value(&mut program, binary_instr(BinaryOp::Sub, d, l))
                } else {
                    value(&mut program, binary_instr(BinaryOp::Div, e, s))
                }
            }
        };
        let id = f.out.id.value();
        regs.insert(id, r);
        let row_value = row && f.out.shape == row_of_space && row_of_space != shape;
        produced.push((id, Slot { op: i, pos: 0 }, r, row_value));
    }

    // Outputs: what is read after the run, or outlives the graph.
    let mut row_outputs = Vec::new();
    for (id, slot, r, row_value) in produced {
        let read_later = last_read.get(&id).is_some_and(|l| *l > end);
        if read_later || !ended.contains(&id) {
            let output = outputs.len() as u16;
            outputs.push(slot);
            row_outputs.push(row_value);
            program.push(Instr::Store { output, value: r });
        }
    }
    let row = row.then(|| RowLayout::new(shape.to_vec(), row_outputs));

    FusedGroup {
        ops: run.to_vec(),
        drops: drops.to_vec(),
        hoisted: Vec::new(),
        kernel: FusedKernel {
            dtype,
            rank: shape.num_dims() as u8,
            inputs: broadcast,
            outputs: outputs.len() as u16,
            scalars: scalars.len() as u16,
            program,
            row,
        },
        inputs,
        consumed,
        outputs,
        scalars,
        shape,
        dynamic: Vec::new(),
        swapped_inputs: Vec::new(),
    }
}

/// Runs of elementwise operations and row reductions as one generated kernel each.
pub(crate) struct KernelFuser;

impl super::Fuser for KernelFuser {
    fn fuse(
        &self,
        ops: &[OperationIr],
        options: &crate::ScheduleOptions<'_>,
        claims: &mut super::Claims,
    ) {
        let Some(accepts) = options.fused else {
            return;
        };
        for mut group in fused_groups(ops, &claims.live, options.max_kernel_buffers) {
            if !accepts(&group.kernel) {
                continue;
            }
            if !options.symbolic_sizes.is_empty() {
                let dynamic: Vec<bool> = group
                    .shape
                    .iter()
                    .map(|s| options.symbolic_sizes.binary_search(&(*s as u64)).is_ok())
                    .collect();
                if dynamic.iter().any(|d| *d) {
                    group.dynamic = dynamic;
                }
            }
            // Its operations, drops and hoisted operations run at the group's first operation:
            // the hoisted ones, then the kernel.
            for &i in group.ops.iter().chain(&group.drops).chain(&group.hoisted) {
                claims.live[i as usize] = false;
                claims.claimed[i as usize] = true;
            }
            let at = claims.fused.len() as u32;
            let steps = &mut claims.steps_at[group.ops[0] as usize];
            steps.extend(
                group
                    .hoisted
                    .iter()
                    .map(|&h| crate::step(&ops[h as usize], h)),
            );
            steps.push(crate::Step::Fused { group: at });
            claims.fused.push(group);
        }
    }
}
