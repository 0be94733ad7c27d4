//! The CubeCL kernel of a [`FusedKernel`]: one kernel body, specialized at compile time on
//! the kernel's program (CubeCL expands the comptime `#[unroll]` loops and `match`es into
//! straight-line code, so each distinct program is its own kernel).
//!
//! Each unit computes one vector of the iteration space: `LaunchLayout::vector` consecutive
//! elements of the last dimension (one element in scalar code). The outputs are contiguous in
//! it, allocated by the plan; each input is read through its own strides (so views need no
//! copy), skipping the dimensions it broadcasts; an input broadcast along the last dimension
//! is read once per vector and splatted. Shape, strides and vector width are the launch's
//! [`LaunchLayout`], constants of the generated code, except in a symbolic layout
//! ([`LaunchLayout::symbolic`]): there the sizes of its symbolic dimensions, the index
//! arithmetic's products over them and the strides are read from the kernel's `meta`
//! arguments, so one kernel serves every size of those dimensions.

use crate::{Bases, HorizontalSpec, KernelSpec, LaunchLayout, Meta};
use burn_compile_schedule::{BinaryOp, Constant, FusedKernel, Instr, UnaryOp};
use cubecl::ScalarArgType;
use cubecl::prelude::*;

// Inside `comptime!` the kernel is owned in the expansion (the borrow clippy sees as needless).
#[allow(clippy::needless_borrow)]
#[cube(launch_unchecked)]
pub fn pointwise<F: Float + ScalarArgType, N: Size>(
    inputs: &Sequence<Array<Vector<F, N>>>,
    narrow: &Sequence<Array<F>>,
    scalars: &Sequence<F>,
    meta: &Sequence<u32>,
    outputs: &mut Sequence<Array<Vector<F, N>>>,
    #[comptime] spec: &KernelSpec,
) {
    let kernel = comptime![spec.kernel()];
    let layout = comptime![spec.layout()];
    let symbolic = comptime![layout.is_symbolic()];
    // Each unit takes one vector: `vector` consecutive elements of the last dimension.
    let pos = ABSOLUTE_POS;
    let vector = comptime![layout.vector];
    if comptime![symbolic] {
        let slot = comptime![layout.meta_slot(&kernel, Meta::Len)];
        if pos >= launch_value(meta, slot, 0usize) {
            terminate!();
        }
    } else if pos >= comptime![layout.len() / vector] {
        terminate!();
    }
    pointwise_at::<F, N>(
        inputs,
        narrow,
        scalars,
        meta,
        outputs,
        pos,
        kernel,
        layout,
        comptime![Bases::default()],
    );
}

/// Several pointwise kernels as one launch (a horizontal group): each member takes a range of
/// the launch's units, starting on a plane of its own, and runs its own program over its own
/// buffers, which follow the earlier members' in each sequence (the members' scalar indices are
/// offset in their programs).
#[cube(launch_unchecked)]
pub fn horizontal<F: Float + ScalarArgType, N: Size>(
    inputs: &Sequence<Array<Vector<F, N>>>,
    narrow: &Sequence<Array<F>>,
    scalars: &Sequence<F>,
    meta: &Sequence<u32>,
    outputs: &mut Sequence<Array<Vector<F, N>>>,
    #[comptime] spec: &HorizontalSpec,
) {
    let pos = ABSOLUTE_POS;
    let members = comptime![spec.members()];
    #[unroll]
    for m in 0..members {
        let start = comptime![spec.start(m)];
        let end = comptime![spec.end(m)];
        if pos >= start && pos < end {
            let kernel = comptime![spec.kernel(m)];
            let layout = comptime![spec.layout(m)];
            let bases = comptime![spec.bases(m)];
            pointwise_at::<F, N>(
                inputs,
                narrow,
                scalars,
                meta,
                outputs,
                pos - start,
                kernel,
                layout,
                bases,
            );
        }
    }
}

/// Unit `pos` of a pointwise kernel (within its iteration space): its program over the vector
/// at `pos`. The kernel's buffers start at `bases` in the launch's sequences.
// Index loops: CubeCL expands `for i in 0..n` with comptime bounds, not iterators. Inside
// `comptime!` the kernel is owned in the expansion (hence the borrows clippy sees as needless).
#[allow(
    clippy::needless_range_loop,
    clippy::needless_borrow,
    clippy::too_many_arguments
)]
#[cube]
fn pointwise_at<F: Float + ScalarArgType, N: Size>(
    inputs: &Sequence<Array<Vector<F, N>>>,
    narrow: &Sequence<Array<F>>,
    scalars: &Sequence<F>,
    meta: &Sequence<u32>,
    outputs: &mut Sequence<Array<Vector<F, N>>>,
    pos: usize,
    #[comptime] kernel: &FusedKernel,
    #[comptime] layout: &LaunchLayout,
    #[comptime] bases: Bases,
) {
    let symbolic = comptime![layout.is_symbolic()];
    let rank = comptime![kernel.rank as usize];
    let vector = comptime![layout.vector];
    // Coordinates of `pos` in the iteration space counted in vectors (row-major; the last
    // dimension in vectors).
    let mut coords = Sequence::<usize>::new();
    #[unroll]
    for d in 0..rank {
        // Vectors per step along d: the last dimension's vectors times the sizes between.
        let (inner, size) = comptime![if d + 1 == rank {
            (1, layout.shape[d] / vector)
        } else {
            (
                layout.shape[d + 1..].iter().product::<usize>() / vector,
                layout.shape[d],
            )
        }];
        if comptime![symbolic] {
            // A product over a symbolic dimension, or a symbolic size, is a runtime argument.
            let inner_slot = comptime![layout.meta_slot(&kernel, Meta::Inner(d))];
            let size_slot = comptime![layout.meta_slot(&kernel, Meta::Size(d))];
            let inner = launch_value(meta, inner_slot, inner);
            let size = launch_value(meta, size_slot, size);
            coords.push((pos / inner) % size);
        } else {
            coords.push((pos / inner) % size);
        }
    }
    // Register k holds the k-th value produced by the program.
    let mut regs = Sequence::<Vector<F, N>>::new();

    #[unroll]
    for i in 0..kernel.program.len() {
        let instr = comptime![kernel.program[i].clone()];
        match instr {
            Instr::Load { input } => {
                let input = comptime![input as usize];
                let broadcast = comptime![kernel.inputs[input].clone()];
                let is_narrow = comptime![layout.narrow_input(&kernel, input)];
                let slot = comptime![
                    layout.input_slot(&kernel, input)
                        + if is_narrow { bases.narrow } else { bases.wide }
                ];
                let mut offset: usize = 0;
                #[unroll]
                for d in 0..rank {
                    let stride = comptime![layout.buffer_stride(&kernel, input, d)];
                    if comptime![!broadcast[d]] {
                        if comptime![stride == crate::RUNTIME] {
                            let slot = comptime![layout.meta_slot(&kernel, Meta::Stride(input, d))];
                            offset += *coords.index(d) * launch_value(meta, slot, 0usize);
                        } else {
                            offset += *coords.index(d) * stride;
                        }
                    }
                }
                if comptime![is_narrow] {
                    regs.push(Vector::new(narrow.index(slot)[offset]));
                } else {
                    regs.push(inputs.index(slot)[offset]);
                }
            }
            Instr::Scalar { .. }
            | Instr::Const { .. }
            | Instr::Unary { .. }
            | Instr::Binary { .. } => {
                regs.push(compute::<F, N>(&regs, scalars, instr));
            }
            Instr::Store { output, value } => {
                let v = *regs.index(comptime![value as usize]);
                let out = outputs.index_mut(comptime![output as usize + bases.outputs]);
                out[pos] = v;
            }
            // Row kernels only (`crate::row`): the scheduler never puts one here.
            Instr::Reduce { .. } => {}
        }
    }
}

/// A size or stride of a launch: runtime argument `slot` of `meta` where the layout has one,
/// else the kernel's constant `constant`.
#[cube]
pub(crate) fn launch_value(
    meta: &Sequence<u32>,
    #[comptime] slot: Option<usize>,
    #[comptime] constant: usize,
) -> usize {
    match comptime![slot] {
        Some(s) => usize::cast_from(*meta.index(s)),
        None => constant.runtime(),
    }
}

/// The value of a scalar, unary or binary instruction (shared by every kernel kind).
#[cube]
pub(crate) fn compute<F: Float + ScalarArgType, N: Size>(
    regs: &Sequence<Vector<F, N>>,
    scalars: &Sequence<F>,
    #[comptime] instr: Instr,
) -> Vector<F, N> {
    match instr {
        Instr::Scalar { index } => Vector::new(*scalars.index(comptime![index as usize])),
        Instr::Const { value } => Vector::new(constant::<F>(value)),
        Instr::Unary { op, a } => unary::<F, N>(*regs.index(comptime![a as usize]), op),
        Instr::Binary { op, a, b } => binary::<F, N>(
            *regs.index(comptime![a as usize]),
            *regs.index(comptime![b as usize]),
            op,
        ),
        _ => panic!("not a value computed from registers: {instr:?}"),
    }
}

#[cube]
fn constant<F: Float>(#[comptime] value: Constant) -> F {
    match comptime![value] {
        Constant::One => F::new(1.0),
    }
}

/// A unary op on every element of a vector (one element in scalar code).
#[cube]
fn unary<F: Float, N: Size>(x: Vector<F, N>, #[comptime] op: UnaryOp) -> Vector<F, N> {
    match comptime![op] {
        UnaryOp::Exp => Vector::exp(x),
        UnaryOp::Log => Vector::ln(x),
        UnaryOp::Sqrt => Vector::sqrt(x),
        UnaryOp::Tanh => Vector::tanh(x),
        UnaryOp::Erf => Vector::erf(x),
        UnaryOp::Recip => Vector::recip(x),
        UnaryOp::Abs => Vector::abs(x),
        UnaryOp::Cos => Vector::cos(x),
        UnaryOp::Sin => Vector::sin(x),
        UnaryOp::Relu => <Vector<F, N> as FloatOps>::max(x, Vector::new(F::new(0.0))),
        // 1 / (1 + exp(0 - x)): CubeCL's C++ vector types have no unary minus (NVRTC refuses
        // `-float_4`); 0 - x differs from -x only in the sign of a zero, and exp(±0) = 1.
        UnaryOp::Sigmoid => {
            Vector::new(F::new(1.0))
                / (Vector::new(F::new(1.0)) + Vector::exp(Vector::new(F::new(0.0)) - x))
        }
        // Burn's GELU: x · (1 + erf(x / √2)) / 2.
        UnaryOp::Gelu => {
            x * (Vector::new(F::new(1.0))
                + Vector::erf(x * Vector::new(F::new(core::f32::consts::FRAC_1_SQRT_2))))
                * Vector::new(F::new(0.5))
        }
    }
}

#[cube]
fn binary<F: Float, N: Size>(
    x: Vector<F, N>,
    y: Vector<F, N>,
    #[comptime] op: BinaryOp,
) -> Vector<F, N> {
    match comptime![op] {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Powf => Vector::powf(x, y),
        // `mask_fill(y, x <= 0, 0)`, as Burn's ReLU backward: a NaN `x` passes `y` on.
        BinaryOp::ReluBackward => {
            let zero = Vector::new(F::new(0.0));
            select_many(x.less_equal(zero), zero, y)
        }
    }
}
