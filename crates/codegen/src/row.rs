//! The CubeCL kernel of a row [`FusedKernel`] (one with a [`RowLayout`]): `units` units
//! share a row of the iteration space `[R…, N]`, each taking every `units`-th column; a cube
//! holds `rows_per_cube` rows, its units laid out `[rows_per_cube, units]`.
//!
//! The program is evaluated in phases, one per reduction: phase `p` evaluates the program up to
//! its `p`-th reduction at each of the unit's columns, accumulates (in f32, whatever the
//! element type) and combines the row's units' partial results, through plane operations where
//! a row's units are exactly one plane ([`Reduction::Plane`], CUDA's warps: no shared memory,
//! no barrier), through shared memory otherwise. The row value is then available to every
//! later instruction. A last pass evaluates the rest of the program and stores the outputs.
//!
//! A unit with at most [`KEPT`] columns keeps its values in registers from one phase to the
//! next (each input is loaded once, each value computed once; the column loop is unrolled, so
//! the loads of all columns are in flight together). A unit with more columns (rows longer
//! than `KEPT × units`) streams them: each phase re-evaluates the program from the inputs.
//!
//! In a vectorized layout (`LaunchLayout::vector` > 1) a column is a vector of consecutive
//! elements: units load, compute and store whole vectors, a reduction first combines a
//! vector's elements (in order) and then the row's units, an input broadcast along the row is
//! read once and splatted, and a row output is written as one element.
//!
//! The inputs' strides are the launch's [`LaunchLayout`], constants of the generated code. In a
//! symbolic layout ([`LaunchLayout::symbolic`]) the number of rows, the row length, the row
//! coordinates' sizes and the strides are read from the kernel's `meta` arguments instead: a
//! cube then holds one row when the rows are symbolic (a cube is never partly past them), and a
//! row of symbolic length is always streamed, its mean divided by the runtime length.

use burn_compile_schedule::{FusedKernel, Instr, ReduceOp, RowLayout};
use cubecl::ScalarArgType;
use cubecl::prelude::*;

use crate::pointwise::{compute, launch_value};
use crate::{KernelSpec, LaunchLayout, Meta, RUNTIME};

/// Most columns per unit whose values stay in registers between phases.
pub const KEPT: usize = 32;

/// How the units of a row combine their partial results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// A row's units are one plane: plane operations (warp shuffles on CUDA).
    Plane,
    /// A tree over shared memory, with a barrier per step.
    Shared,
}

impl Reduction {
    /// The reduction a device with these properties runs `layout` with: plane operations only
    /// where the device has them and its plane size is fixed and equal to the row's units
    /// (wgpu reports a range on some GPUs and none on CPU adapters).
    pub fn for_device(properties: &cubecl::ir::DeviceProperties, layout: &RowLayout) -> Self {
        let hardware = &properties.hardware;
        let plane_ops = properties
            .features
            .plane
            .contains(cubecl::ir::features::Plane::Ops);
        if plane_ops
            && hardware.plane_size_min == hardware.plane_size_max
            && hardware.plane_size_max == layout.units
        {
            Reduction::Plane
        } else {
            Reduction::Shared
        }
    }
}

/// The row layout of a row kernel.
pub(crate) fn layout(kernel: &FusedKernel) -> RowLayout {
    kernel.row.clone().expect("a row kernel")
}

/// Positions of the program's reductions, in order.
fn reductions(kernel: &FusedKernel) -> Vec<usize> {
    kernel
        .program
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i, Instr::Reduce { .. }))
        .map(|(p, _)| p)
        .collect()
}

/// The reduction at instruction `at`, and the register it reduces.
fn reduction_at(kernel: &FusedKernel, at: usize) -> (ReduceOp, usize) {
    match kernel.program[at] {
        Instr::Reduce { op, a } => (op, a as usize),
        _ => unreachable!("a reduction"),
    }
}

/// Number of reductions before instruction `at` (the phase whose row value it reads).
fn phase_of(kernel: &FusedKernel, at: usize) -> usize {
    kernel.program[..at]
        .iter()
        .filter(|i| matches!(i, Instr::Reduce { .. }))
        .count()
}

// Index loops: CubeCL expands `for i in 0..n` with comptime bounds, not iterators. Inside
// `comptime!` the kernel is owned in the expansion (hence the borrows clippy sees as needless).
#[allow(clippy::needless_range_loop, clippy::needless_borrow)]
#[cube(launch_unchecked)]
pub fn row<F: Float + ScalarArgType, N: Size>(
    inputs: &Sequence<Array<Vector<F, N>>>,
    narrow: &Sequence<Array<F>>,
    scalars: &Sequence<F>,
    meta: &Sequence<u32>,
    outputs: &mut Sequence<Array<Vector<F, N>>>,
    narrow_outputs: &mut Sequence<Array<F>>,
    #[comptime] spec: &KernelSpec,
    #[comptime] reduction: Reduction,
) {
    let kernel = comptime![spec.kernel()];
    let launch = comptime![spec.layout()];
    let layout = comptime![layout(&kernel)];
    let rank = comptime![layout.shape.len()];
    let rows = comptime![layout.rows()];
    let units = comptime![layout.units as usize];
    let per_cube = comptime![layout.rows_per_cube as usize];
    let rows_slot = comptime![launch.meta_slot(&kernel, Meta::Rows)];
    // Whole cubes past the last row (the grid spills into y past 65535 cubes) stop here, all
    // their units together: rows per cube divides the rows, so no cube is partly past them.
    let row = CUBE_POS * per_cube + UNIT_POS_Y as usize;
    if comptime![rows_slot.is_some()] {
        if row >= launch_value(meta, rows_slot, 0usize) {
            terminate!();
        }
    } else if row >= rows {
        terminate!();
    }

    // Each input's offset at column 0 of this row, in its buffer's units (broadcast
    // dimensions skipped).
    let mut bases = Sequence::<usize>::new();
    #[unroll]
    for i in 0..kernel.inputs.len() {
        let broadcast = comptime![kernel.inputs[i].clone()];
        let mut offset: usize = 0;
        #[unroll]
        for d in 0..rank - 1 {
            // Coordinate of the row along dimension d (row-major over the row dimensions).
            let inner = comptime![layout.shape[d + 1..rank - 1].iter().product::<usize>()];
            let size = comptime![layout.shape[d]];
            let stride = comptime![launch.buffer_stride(&kernel, i, d)];
            if comptime![!broadcast[d]] {
                if comptime![launch.is_symbolic()] {
                    let inner_slot = comptime![launch.meta_slot(&kernel, Meta::Inner(d))];
                    let size_slot = comptime![launch.meta_slot(&kernel, Meta::Size(d))];
                    let stride_slot = comptime![launch.meta_slot(&kernel, Meta::Stride(i, d))];
                    let inner = launch_value(meta, inner_slot, inner);
                    let size = launch_value(meta, size_slot, size);
                    let stride = launch_value(meta, stride_slot, stride);
                    offset += ((row / inner) % size) * stride;
                } else {
                    offset += ((row / inner) % size) * stride;
                }
            }
        }
        bases.push(offset);
    }

    // One buffer for every reduction of every row of the cube (one allocation also keeps the
    // generated code's layout deterministic); plane reductions leave it unused.
    let mut shared = SharedMemory::<f32>::new(comptime![units * per_cube]);
    let per_unit = comptime![(layout.columns() / launch.vector).div_ceil(units)];
    // A row of symbolic length has no constant count of columns per unit: it is streamed.
    let symbolic_columns = comptime![launch.is_dynamic(rank - 1)];
    if comptime![per_unit <= KEPT && !symbolic_columns] {
        kept::<F, N>(
            inputs,
            narrow,
            scalars,
            meta,
            outputs,
            narrow_outputs,
            &bases,
            &mut shared,
            row,
            kernel,
            launch,
            reduction,
        );
    } else {
        streamed::<F, N>(
            inputs,
            narrow,
            scalars,
            meta,
            outputs,
            narrow_outputs,
            &bases,
            &mut shared,
            row,
            kernel,
            launch,
            reduction,
        );
    }
}

/// The unit's columns unrolled, their values kept in registers across phases. Where the units
/// do not divide the row, the last column of some units lies past it: it is evaluated at the
/// row's last column (a valid address), left out of the reductions and not stored. Columns are
/// counted in vectors (`launch.vector` elements each; one in scalar code).
#[allow(
    clippy::needless_range_loop,
    clippy::needless_borrow,
    clippy::too_many_arguments
)]
#[cube]
fn kept<F: Float + ScalarArgType, N: Size>(
    inputs: &Sequence<Array<Vector<F, N>>>,
    narrow: &Sequence<Array<F>>,
    scalars: &Sequence<F>,
    meta: &Sequence<u32>,
    outputs: &mut Sequence<Array<Vector<F, N>>>,
    narrow_outputs: &mut Sequence<Array<F>>,
    bases: &Sequence<usize>,
    shared: &mut SharedMemory<f32>,
    row: usize,
    #[comptime] kernel: &FusedKernel,
    #[comptime] launch: &LaunchLayout,
    #[comptime] reduction: Reduction,
) {
    let layout = comptime![layout(&kernel)];
    let vector = comptime![launch.vector];
    let columns = comptime![layout.columns() / vector];
    let units = comptime![layout.units as usize];
    let per_unit = comptime![columns.div_ceil(units)];
    let lane = UNIT_POS_X as usize;

    // Per column of the unit: its registers so far (register `k` is the `k`-th instruction's
    // value, since stores come last).
    let mut slots = Sequence::<Sequence<Vector<F, N>>>::new();
    #[unroll]
    for _ in 0..per_unit {
        slots.push(Sequence::<Vector<F, N>>::new());
    }
    let mut reduced = Sequence::<Vector<F, N>>::new();
    let phases = comptime![reductions(&kernel)];
    let mut done = comptime![0usize];
    #[unroll]
    for p in 0..phases.len() {
        let at = comptime![phases[p]];
        let (op, a) = comptime![reduction_at(&kernel, at)];
        // Partial results as a chain of values (no mutable float locals, whose declaration
        // order the compilers do not keep stable).
        let mut partial = Sequence::<f32>::new();
        partial.push(identity(op));
        #[unroll]
        for k in 0..per_unit {
            let col = lane + comptime![k * units];
            // Only the unit's last column can lie past the row.
            let ragged = comptime![(k + 1) * units > columns];
            let regs = slots.index_mut(k);
            extend::<F, N>(
                inputs,
                narrow,
                scalars,
                meta,
                bases,
                &reduced,
                clamp(col, columns, ragged),
                kernel,
                launch,
                regs,
                done,
                at,
            );
            let value = *regs.index(a);
            #[unroll]
            for j in 0..vector {
                let v = element::<F, N>(value, j, vector);
                let v = if comptime![ragged] {
                    select(col < columns, v, identity(op))
                } else {
                    v
                };
                let acc = combine(*partial.index(comptime![k * vector + j]), v, op);
                partial.push(acc);
            }
        }
        let total = reduce_row(
            *partial.index(comptime![per_unit * vector]),
            shared,
            op,
            units,
            reduction,
        );
        reduced.push(Vector::new(F::cast_from(finish(
            total,
            op,
            comptime![layout.columns()],
        ))));
        comptime![done = at];
    }

    let len = comptime![kernel.program.len()];
    #[unroll]
    for k in 0..per_unit {
        let col = lane + comptime![k * units];
        let ragged = comptime![(k + 1) * units > columns];
        let regs = slots.index_mut(k);
        extend::<F, N>(
            inputs,
            narrow,
            scalars,
            meta,
            bases,
            &reduced,
            clamp(col, columns, ragged),
            kernel,
            launch,
            regs,
            done,
            len,
        );
        if comptime![ragged] {
            if col < columns {
                store::<F, N>(
                    outputs,
                    narrow_outputs,
                    meta,
                    regs,
                    row,
                    col,
                    kernel,
                    launch,
                    comptime![k == 0],
                );
            }
        } else {
            store::<F, N>(
                outputs,
                narrow_outputs,
                meta,
                regs,
                row,
                col,
                kernel,
                launch,
                comptime![k == 0],
            );
        }
    }
}

/// Element `j` of a vector, as f32 (the reductions accumulate in f32).
#[cube]
fn element<F: Float + ScalarArgType, N: Size>(
    value: Vector<F, N>,
    #[comptime] j: usize,
    #[comptime] vector: usize,
) -> f32 {
    if comptime![vector == 1] {
        f32::cast_from(value)
    } else {
        f32::cast_from(value[j])
    }
}

/// Rows longer than [`KEPT`] columns per unit: a loop over the unit's columns per phase, the
/// program re-evaluated from the inputs each time (a row stays in cache between phases). Each
/// unit accumulates in its own shared slot, which the reduction then reads.
#[allow(
    clippy::needless_range_loop,
    clippy::needless_borrow,
    clippy::too_many_arguments
)]
#[cube]
fn streamed<F: Float + ScalarArgType, N: Size>(
    inputs: &Sequence<Array<Vector<F, N>>>,
    narrow: &Sequence<Array<F>>,
    scalars: &Sequence<F>,
    meta: &Sequence<u32>,
    outputs: &mut Sequence<Array<Vector<F, N>>>,
    narrow_outputs: &mut Sequence<Array<F>>,
    bases: &Sequence<usize>,
    shared: &mut SharedMemory<f32>,
    row: usize,
    #[comptime] kernel: &FusedKernel,
    #[comptime] launch: &LaunchLayout,
    #[comptime] reduction: Reduction,
) {
    let layout = comptime![layout(&kernel)];
    let vector = comptime![launch.vector];
    let units = comptime![layout.units as usize];
    // The row length in vectors: a constant, or a symbolic layout's runtime argument.
    let columns_slot = comptime![launch.meta_slot(&kernel, Meta::Columns)];
    let columns = launch_value(meta, columns_slot, comptime![layout.columns() / vector]);
    let lane = UNIT_POS_X as usize;
    let slot = UNIT_POS_Y as usize * units + lane;
    let mut reduced = Sequence::<Vector<F, N>>::new();
    let phases = comptime![reductions(&kernel)];
    #[unroll]
    for p in 0..phases.len() {
        let at = comptime![phases[p]];
        let (op, a) = comptime![reduction_at(&kernel, at)];
        shared[slot] = identity(op);
        for col in range_stepped(lane, columns, units) {
            let mut regs = Sequence::<Vector<F, N>>::new();
            extend::<F, N>(
                inputs, narrow, scalars, meta, bases, &reduced, col, kernel, launch, &mut regs,
                0usize, at,
            );
            let value = *regs.index(a);
            #[unroll]
            for j in 0..vector {
                shared[slot] = combine(shared[slot], element::<F, N>(value, j, vector), op);
            }
        }
        let total = reduce_row(shared[slot], shared, op, units, reduction);
        if comptime![columns_slot.is_some()] {
            // A mean over a row of runtime length: its elements are its vectors' elements.
            let elements = columns * vector;
            reduced.push(Vector::new(F::cast_from(finish_over(total, op, elements))));
        } else {
            reduced.push(Vector::new(F::cast_from(finish(
                total,
                op,
                comptime![layout.columns()],
            ))));
        }
    }

    let len = comptime![kernel.program.len()];
    for col in range_stepped(lane, columns, units) {
        let mut regs = Sequence::<Vector<F, N>>::new();
        extend::<F, N>(
            inputs, narrow, scalars, meta, bases, &reduced, col, kernel, launch, &mut regs, 0usize,
            len,
        );
        store::<F, N>(
            outputs,
            narrow_outputs,
            meta,
            &regs,
            row,
            col,
            kernel,
            launch,
            true,
        );
    }
}

/// The column a unit evaluates: `col` itself, or where the units do not divide the row, the
/// row's last column for the positions past it (their values are never used).
#[cube]
fn clamp(col: usize, #[comptime] columns: usize, #[comptime] ragged: bool) -> usize {
    if comptime![ragged] {
        select(col < columns, col, comptime![columns - 1])
    } else {
        col
    }
}

/// Evaluates instructions `start..stop` of the program at (vector) column `col` into `regs`
/// (which holds the values of the instructions before `start`); reductions read their row
/// value from `reduced`. Stores are skipped (they are not values, and come last).
// Inside `comptime!` the kernel is owned in the expansion (the borrow clippy sees as needless).
#[allow(
    clippy::needless_range_loop,
    clippy::too_many_arguments,
    clippy::needless_borrow
)]
#[cube]
fn extend<F: Float + ScalarArgType, N: Size>(
    inputs: &Sequence<Array<Vector<F, N>>>,
    narrow: &Sequence<Array<F>>,
    scalars: &Sequence<F>,
    meta: &Sequence<u32>,
    bases: &Sequence<usize>,
    reduced: &Sequence<Vector<F, N>>,
    col: usize,
    #[comptime] kernel: &FusedKernel,
    #[comptime] launch: &LaunchLayout,
    regs: &mut Sequence<Vector<F, N>>,
    #[comptime] start: usize,
    #[comptime] stop: usize,
) {
    let rank = comptime![kernel.rank as usize];
    #[unroll]
    for i in start..stop {
        let instr = comptime![kernel.program[i].clone()];
        match instr {
            Instr::Load { input } => {
                let input = comptime![input as usize];
                let broadcast = comptime![kernel.inputs[input][rank - 1]];
                let slot = comptime![launch.input_slot(&kernel, input)];
                let base = *bases.index(input);
                let stride = comptime![launch.buffer_stride(&kernel, input, rank - 1)];
                if comptime![launch.narrow_input(&kernel, input)] {
                    regs.push(Vector::new(narrow.index(slot)[base]));
                } else if comptime![broadcast] {
                    regs.push(inputs.index(slot)[base]);
                } else if comptime![stride == RUNTIME] {
                    let stride_slot =
                        comptime![launch.meta_slot(&kernel, Meta::Stride(input, rank - 1))];
                    let stride = launch_value(meta, stride_slot, 0usize);
                    regs.push(inputs.index(slot)[base + col * stride]);
                } else {
                    regs.push(inputs.index(slot)[base + col * stride]);
                }
            }
            Instr::Scalar { .. }
            | Instr::Const { .. }
            | Instr::Unary { .. }
            | Instr::Binary { .. } => {
                regs.push(compute::<F, N>(regs, scalars, instr));
            }
            Instr::Reduce { .. } => {
                regs.push(*reduced.index(comptime![phase_of(&kernel, i)]));
            }
            Instr::Store { .. } => {}
        }
    }
}

/// The program's stores at (vector) column `col` of `row` (outputs contiguous). A row output
/// is written once per row, by the unit holding column 0 (`first`: this is the unit's first
/// column); in a vectorized layout its buffer is narrow (one element per row).
// The comptime test and the runtime one stay apart: CubeCL expands the first at compile time.
#[allow(
    clippy::needless_range_loop,
    clippy::needless_borrow,
    clippy::collapsible_if,
    clippy::too_many_arguments
)]
#[cube]
fn store<F: Float + ScalarArgType, N: Size>(
    outputs: &mut Sequence<Array<Vector<F, N>>>,
    narrow_outputs: &mut Sequence<Array<F>>,
    meta: &Sequence<u32>,
    regs: &Sequence<Vector<F, N>>,
    row: usize,
    col: usize,
    #[comptime] kernel: &FusedKernel,
    #[comptime] launch: &LaunchLayout,
    #[comptime] first: bool,
) {
    let layout = comptime![layout(&kernel)];
    let columns = comptime![layout.columns() / launch.vector];
    let len = comptime![kernel.program.len()];
    #[unroll]
    for i in 0..len {
        let instr = comptime![kernel.program[i].clone()];
        if let Instr::Store { output, value } = instr {
            let output = comptime![output as usize];
            let slot = comptime![launch.output_slot(&kernel, output)];
            let v = *regs.index(comptime![value as usize]);
            if comptime![layout.row_outputs[output]] {
                if comptime![first] {
                    if col == 0 {
                        if comptime![launch.narrow_output(&kernel, output)] {
                            narrow_outputs.index_mut(slot)[row] = v[0];
                        } else {
                            outputs.index_mut(slot)[row] = v;
                        }
                    }
                }
            } else if comptime![launch.is_dynamic(launch.shape.len() - 1)] {
                let columns_slot = comptime![launch.meta_slot(&kernel, Meta::Columns)];
                let columns = launch_value(meta, columns_slot, 0usize);
                outputs.index_mut(slot)[row * columns + col] = v;
            } else {
                outputs.index_mut(slot)[row * columns + col] = v;
            }
        }
    }
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

/// [`finish`] over a row of runtime length `elements`.
#[cube]
fn finish_over(total: f32, #[comptime] op: ReduceOp, elements: usize) -> f32 {
    match comptime![op] {
        ReduceOp::Mean => total / f32::cast_from(elements),
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

/// Combines the partial results of a row's `units` units (a power of two); every unit of the
/// row gets the result. Shared memory (the row's `units` slots) is free again on return.
#[cube]
fn reduce_row(
    value: f32,
    shared: &mut SharedMemory<f32>,
    #[comptime] op: ReduceOp,
    #[comptime] units: usize,
    #[comptime] reduction: Reduction,
) -> f32 {
    match comptime![reduction] {
        Reduction::Plane => match comptime![op] {
            ReduceOp::Sum | ReduceOp::Mean => plane_sum(value),
            ReduceOp::Max => plane_max(value),
        },
        Reduction::Shared => shared_reduce(value, shared, op, units),
    }
}

/// A tree over the row's shared slots, a barrier per step (every unit of the cube reaches the
/// same barriers: all its rows exist).
#[cube]
fn shared_reduce(
    value: f32,
    shared: &mut SharedMemory<f32>,
    #[comptime] op: ReduceOp,
    #[comptime] units: usize,
) -> f32 {
    let lane = UNIT_POS_X as usize;
    let base = UNIT_POS_Y as usize * units;
    // The slot is the unit's own (the last reduction's readers are past its final barrier).
    shared[base + lane] = value;
    sync_cube();
    let steps = comptime![units.trailing_zeros()];
    #[unroll]
    for s in 0..steps {
        let half = comptime![units >> (s + 1)];
        if lane < half {
            let other = shared[base + lane + half];
            shared[base + lane] = combine(shared[base + lane], other, op);
        }
        sync_cube();
    }
    let total = shared[base];
    // Every unit has read the result before the next reduction writes.
    sync_cube();
    total
}
