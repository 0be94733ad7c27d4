//! The column-sum kernels: a contiguous tensor viewed as `[outer, reduced, inner, trailing]`
//! summed over its second and fourth dimensions into `[outer, inner]`, optionally divided by a
//! count (a mean) — a bias gradient (`[rows, features]` summed over the rows), a gradient
//! reduced over the dimensions its operand was broadcast along, a batch norm's per-channel
//! statistics and gradients (`[1, N, C, H·W]`).
//!
//! Without trailing dimension ([`column_sum`]), a cube takes [`COLUMN_TILE`] adjacent output
//! columns: its units are laid out `[COLUMN_GROUPS, COLUMN_TILE]`, unit `(g, l)` summing rows
//! `g, g + COLUMN_GROUPS, …` of column `l` (so the units of a plane read adjacent columns of a
//! few rows: whole memory sectors), then group 0 adds the groups' partial sums in group order.
//! The tile is narrow on purpose: a bias gradient has few columns (512 on W1) and many rows
//! (4096), and a tile of 8 columns still gives 64 cubes there where a tile of 32 would give 16.
//!
//! With one ([`strided_column_sum`]), each output has a cube of [`STRIDED_UNITS`] units that
//! walk its `reduced` runs of `trailing` adjacent elements in order (adjacent units read
//! adjacent elements), then add their partial sums pairwise in a fixed tree.
//!
//! Every sum is in f32, in an order fixed by the shape alone, so a replay gives the same bits
//! every time.

use burn_compile_schedule::column_layout;
use cubecl::prelude::*;
use cubecl::server::Handle;

/// Output columns per cube.
pub const COLUMN_TILE: usize = 8;
/// Units per cube along the reduced dimension.
pub const COLUMN_GROUPS: usize = 32;
/// Units per cube of [`strided_column_sum`] (a power of two: its partial sums add pairwise).
pub const STRIDED_UNITS: usize = 256;

/// The dimensions a column sum is specialized on: `[outer, reduced, inner, trailing]` of its
/// contiguous input; the output is `[outer, inner]`, contiguous, divided by `divisor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ColumnDims {
    pub outer: usize,
    pub reduced: usize,
    pub inner: usize,
    pub trailing: usize,
    pub divisor: usize,
}

impl ColumnDims {
    /// Elements of the output.
    pub fn columns(&self) -> usize {
        self.outer * self.inner
    }

    /// Elements of the input.
    pub fn elements(&self) -> usize {
        self.outer * self.reduced * self.inner * self.trailing
    }

    /// Whether the sums run along strided runs ([`strided_column_sum`]) rather than along
    /// columns ([`column_sum`]).
    pub fn strided(&self) -> bool {
        self.trailing > 1
    }

    /// Cubes of a launch.
    pub fn cubes(&self) -> usize {
        if self.strided() {
            self.columns().max(1)
        } else {
            self.columns().div_ceil(COLUMN_TILE).max(1)
        }
    }

    /// Units of each cube, `[x, y]`.
    pub fn cube_dim(&self) -> [u32; 2] {
        if self.strided() {
            [STRIDED_UNITS as u32, 1]
        } else {
            [COLUMN_TILE as u32, COLUMN_GROUPS as u32]
        }
    }

    /// The dimensions of the same sums over a tensor of logical `shape` with these element
    /// strides ([`burn_compile_schedule::column_layout`]): itself where the tensor is
    /// contiguous, a plain column sum where a batch norm's input is channels-last.
    pub fn for_strides(&self, shape: &[usize], strides: &[usize]) -> Option<ColumnDims> {
        let dims = [self.outer, self.reduced, self.inner, self.trailing];
        let [outer, reduced, inner, trailing] = column_layout(dims, shape, strides)?;
        Some(ColumnDims {
            outer,
            reduced,
            inner,
            trailing,
            divisor: self.divisor,
        })
    }
}

#[cube(launch_unchecked)]
pub fn column_sum<F: Float>(
    input: &Array<F>,
    output: &mut Array<F>,
    #[comptime] reduced: usize,
    #[comptime] inner: usize,
    #[comptime] columns: usize,
    #[comptime] divisor: usize,
) {
    let lane = UNIT_POS_X as usize;
    let group = UNIT_POS_Y as usize;
    let tile = comptime![COLUMN_TILE];
    let groups = comptime![COLUMN_GROUPS];
    let column = CUBE_POS * tile + lane;
    let mut partial = SharedMemory::<f32>::new(comptime![COLUMN_GROUPS * COLUMN_TILE]);
    let mut total = 0f32;
    if column < columns {
        let base = (column / inner) * comptime![reduced * inner] + column % inner;
        let mut r = group;
        while r < reduced {
            total += f32::cast_from(input[base + r * inner]);
            r += groups;
        }
    }
    partial[group * tile + lane] = total;
    sync_cube();
    if group == 0 && column < columns {
        let mut sum = 0f32;
        #[unroll]
        for g in 0..groups {
            sum += partial[g * tile + lane];
        }
        if comptime![divisor > 1] {
            sum /= f32::cast_from(comptime![divisor as u32]);
        }
        output[column] = F::cast_from(sum);
    }
}

/// One cube per output `(o, k)`: the sum over `r` and `t` of `input[o, r, k, t]`, the units
/// walking the `reduced` runs of `trailing` adjacent elements in order, then adding their
/// partial sums pairwise.
#[cube(launch_unchecked)]
pub fn strided_column_sum<F: Float>(
    input: &Array<F>,
    output: &mut Array<F>,
    #[comptime] reduced: usize,
    #[comptime] inner: usize,
    #[comptime] trailing: usize,
    #[comptime] columns: usize,
    #[comptime] divisor: usize,
) {
    let unit = UNIT_POS_X as usize;
    let units = comptime![STRIDED_UNITS];
    let column = CUBE_POS;
    let mut partial = SharedMemory::<f32>::new(comptime![STRIDED_UNITS]);
    let mut total = 0f32;
    if column < columns {
        let base =
            (column / inner) * comptime![reduced * inner * trailing] + (column % inner) * trailing;
        let mut e = unit;
        while e < comptime![reduced * trailing] {
            let r = e / trailing;
            let t = e % trailing;
            total += f32::cast_from(input[base + r * comptime![inner * trailing] + t]);
            e += units;
        }
    }
    partial[unit] = total;
    sync_cube();
    #[unroll]
    for level in 1..comptime![STRIDED_UNITS.trailing_zeros() as usize + 1] {
        let half = comptime![STRIDED_UNITS >> level];
        if unit < half {
            partial[unit] += partial[unit + half];
        }
        sync_cube();
    }
    if unit == 0 && column < columns {
        let mut sum = partial[0];
        if comptime![divisor > 1] {
            sum /= f32::cast_from(comptime![divisor as u32]);
        }
        output[column] = F::cast_from(sum);
    }
}

/// Launches the column sum over `dims` ([`column_sum`], or [`strided_column_sum`] with a
/// trailing dimension): `input` a buffer of `dims.elements()` contiguous elements, `output` one
/// of `dims.columns()`.
///
/// # Safety
/// The buffers must hold those elements (the kernels are launched unchecked).
pub unsafe fn launch_column_sum<R: Runtime, E: Float>(
    client: &ComputeClient<R>,
    dims: ColumnDims,
    input: Handle,
    output: Handle,
) {
    let cubes = dims.cubes();
    // Past 65535 cubes (wgpu's limit per dimension) the grid spills into y; `CUBE_POS` is the
    // linear index, and the kernel's bound check stops the cubes past the columns.
    let x = cubes.clamp(1, 65535);
    let cube_count = CubeCount::Static(x as u32, cubes.div_ceil(x) as u32, 1);
    let [ux, uy] = dims.cube_dim();
    let cube_dim = CubeDim::new_2d(ux, uy);
    // SAFETY: the caller's contract; the grid covers every column.
    unsafe {
        let input = ArrayArg::from_raw_parts(input, dims.elements());
        let output = ArrayArg::from_raw_parts(output, dims.columns());
        if dims.strided() {
            strided_column_sum::launch_unchecked::<E, R>(
                client,
                cube_count,
                cube_dim,
                input,
                output,
                dims.reduced,
                dims.inner,
                dims.trailing,
                dims.columns(),
                dims.divisor,
            );
        } else {
            column_sum::launch_unchecked::<E, R>(
                client,
                cube_count,
                cube_dim,
                input,
                output,
                dims.reduced,
                dims.inner,
                dims.columns(),
                dims.divisor,
            );
        }
    }
}
