//! The CubeCL kernel of a row [`PointwiseKernel`] (one with a [`RowLayout`]): one cube per row
//! of the iteration space `[R…, N]`, its units striding over the row's `N` columns.
//!
//! The program is evaluated in phases, one per reduction: phase `p` evaluates the program up to
//! its `p`-th reduction at each of the unit's columns, accumulates (in f32, whatever the
//! element type), and combines the units' partial results through shared memory; the row value
//! is then available to every later instruction. A last pass evaluates the whole program and
//! stores the outputs. Values are recomputed from the inputs in each pass rather than kept: a
//! row is small (it stays in cache between passes) and registers cannot hold a row.

use burn_compile_schedule::{Instr, PointwiseKernel, ReduceOp, RowLayout};
use cubecl::ScalarArgType;
use cubecl::prelude::*;

use crate::pointwise::compute;

/// The row layout of a row kernel.
pub(crate) fn layout(kernel: &PointwiseKernel) -> RowLayout {
    kernel.row.clone().expect("a row kernel")
}

/// Positions of the program's reductions, in order.
fn reductions(kernel: &PointwiseKernel) -> Vec<usize> {
    kernel
        .program
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i, Instr::Reduce { .. }))
        .map(|(p, _)| p)
        .collect()
}

// Index loops: CubeCL expands `for i in 0..n` with comptime bounds, not iterators. Inside
// `comptime!` the kernel is owned in the expansion (hence the borrows clippy sees as needless).
#[allow(clippy::needless_range_loop, clippy::needless_borrow)]
#[cube(launch_unchecked)]
pub fn row<F: Float + ScalarArgType>(
    inputs: &Sequence<Tensor<F>>,
    scalars: &Sequence<F>,
    outputs: &mut Sequence<Tensor<F>>,
    #[comptime] kernel: &PointwiseKernel,
) {
    let layout = comptime![layout(&kernel)];
    let rank = comptime![layout.shape.len()];
    let columns = comptime![layout.shape[rank - 1]];
    let rows = comptime![layout.shape[..rank - 1].iter().product::<usize>()];
    let cube = comptime![layout.cube as usize];
    let row = CUBE_POS;
    if row >= rows {
        terminate!();
    }

    // Each input's offset at column 0 of this row (broadcast dimensions skipped).
    let mut bases = Sequence::<usize>::new();
    #[unroll]
    for i in 0..kernel.inputs.len() {
        let broadcast = comptime![kernel.inputs[i].clone()];
        let t = inputs.index(i);
        let mut offset: usize = 0;
        #[unroll]
        for d in 0..rank - 1 {
            // Coordinate of the row along dimension d (row-major over the row dimensions).
            let inner = comptime![layout.shape[d + 1..rank - 1].iter().product::<usize>()];
            let size = comptime![layout.shape[d]];
            if comptime![!broadcast[d]] {
                offset += ((row / inner) % size) * t.stride(d);
            }
        }
        bases.push(offset);
    }

    // One row value per reduction, in program order; one shared buffer reused by every
    // reduction (one allocation also keeps the generated code's layout deterministic).
    let mut reduced = Sequence::<F>::new();
    let mut shared = SharedMemory::<f32>::new(cube);
    let phases = comptime![reductions(&kernel)];
    #[unroll]
    for p in 0..phases.len() {
        let at = comptime![phases[p]];
        let (op, a) = comptime![match kernel.program[at] {
            Instr::Reduce { op, a } => (op, a as usize),
            _ => unreachable!("a reduction"),
        }];
        // Each unit accumulates in its own shared slot: no mutable float locals, whose
        // declaration order the compilers do not keep stable.
        let unit = UNIT_POS as usize;
        shared[unit] = identity(op);
        for col in range_stepped(UNIT_POS as usize, columns, cube) {
            let regs = evaluate::<F>(inputs, scalars, &bases, &reduced, col, kernel, at);
            shared[unit] = combine(shared[unit], f32::cast_from(*regs.index(a)), op);
        }
        let total = finish(cube_reduce(&mut shared, op, cube), op, columns);
        reduced.push(F::cast_from(total));
    }

    // Last pass: the whole program, then the stores.
    let len = comptime![kernel.program.len()];
    for col in range_stepped(UNIT_POS as usize, columns, cube) {
        let regs = evaluate::<F>(inputs, scalars, &bases, &reduced, col, kernel, len);
        #[unroll]
        for i in 0..len {
            let instr = comptime![kernel.program[i].clone()];
            if let Instr::Store { output, value } = instr {
                let v = *regs.index(comptime![value as usize]);
                let out = outputs.index_mut(comptime![output as usize]);
                if comptime![layout.row_outputs[output as usize]] {
                    if col == 0 {
                        out[row] = v;
                    }
                } else {
                    out[row * columns + col] = v;
                }
            }
        }
    }
}

/// The program's values at column `col`, up to instruction `stop` (excluded); reductions
/// before it read their row value from `reduced`. Stores are skipped (not values): register
/// `k` is the `k`-th instruction, since stores come last.
#[allow(clippy::needless_range_loop)]
#[cube]
fn evaluate<F: Float + ScalarArgType>(
    inputs: &Sequence<Tensor<F>>,
    scalars: &Sequence<F>,
    bases: &Sequence<usize>,
    reduced: &Sequence<F>,
    col: usize,
    #[comptime] kernel: &PointwiseKernel,
    #[comptime] stop: usize,
) -> Sequence<F> {
    let rank = comptime![kernel.rank as usize];
    let mut regs = Sequence::<F>::new();
    let mut phase = comptime![0usize];
    #[unroll]
    for i in 0..stop {
        let instr = comptime![kernel.program[i].clone()];
        match instr {
            Instr::Load { input } => {
                let broadcast = comptime![kernel.inputs[input as usize][rank - 1]];
                let t = inputs.index(comptime![input as usize]);
                let base = *bases.index(comptime![input as usize]);
                if comptime![broadcast] {
                    regs.push(t[base]);
                } else {
                    regs.push(t[base + col * t.stride(rank - 1)]);
                }
            }
            Instr::Scalar { .. } | Instr::Unary { .. } | Instr::Binary { .. } => {
                regs.push(compute::<F>(&regs, scalars, instr));
            }
            Instr::Reduce { .. } => {
                regs.push(*reduced.index(phase));
                comptime![phase += 1];
            }
            Instr::Store { .. } => {}
        }
    }
    regs
}

#[cube]
fn identity(#[comptime] op: ReduceOp) -> f32 {
    match comptime![op] {
        ReduceOp::Sum | ReduceOp::Mean => f32::new(0.0),
        ReduceOp::Max => f32::new(f32::MIN),
    }
}

/// A mean divides the row's sum by the row length.
#[cube]
fn finish(total: f32, #[comptime] op: ReduceOp, #[comptime] columns: usize) -> f32 {
    match comptime![op] {
        ReduceOp::Mean => total / f32::cast_from(columns as u32),
        ReduceOp::Sum | ReduceOp::Max => total,
    }
}

#[cube]
fn combine(a: f32, b: f32, #[comptime] op: ReduceOp) -> f32 {
    match comptime![op] {
        ReduceOp::Sum | ReduceOp::Mean => a + b,
        ReduceOp::Max => f32::max(a, b),
    }
}

/// Combines the values the cube's units (`cube`, a power of two) left in `shared`; every unit
/// gets the result, and `shared` is free again when it returns.
#[cube]
fn cube_reduce(
    shared: &mut SharedMemory<f32>,
    #[comptime] op: ReduceOp,
    #[comptime] cube: usize,
) -> f32 {
    let unit = UNIT_POS as usize;
    sync_cube();
    let steps = comptime![cube.trailing_zeros()];
    #[unroll]
    for s in 0..steps {
        let half = comptime![cube >> (s + 1)];
        if unit < half {
            let other = shared[unit + half];
            shared[unit] = combine(shared[unit], other, op);
        }
        sync_cube();
    }
    let total = shared[0];
    // Every unit has read the result before the next reduction writes.
    sync_cube();
    total
}
