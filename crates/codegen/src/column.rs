//! The column-sum kernel: a contiguous tensor viewed as `[outer, reduced, inner]` summed over
//! its middle dimension into `[outer, inner]` — a bias gradient (`[rows, features]` summed
//! over the rows), a gradient reduced over the dimensions its operand was broadcast along.
//!
//! A cube takes [`COLUMN_TILE`] adjacent output columns: its units are laid out
//! `[COLUMN_GROUPS, COLUMN_TILE]`, unit `(g, l)` summing rows `g, g + COLUMN_GROUPS, …` of
//! column `l` (so the units of a plane read adjacent columns of a few rows: whole memory
//! sectors), then group 0 adds the groups' partial sums in group order. Every sum is in f32,
//! in an order fixed by the shape alone, so a replay gives the same bits every time.
//!
//! The tile is narrow on purpose: a bias gradient has few columns (512 on W1) and many rows
//! (4096), and a tile of 8 columns still gives 64 cubes there where a tile of 32 would give 16.

use cubecl::prelude::*;
use cubecl::server::Handle;

/// Output columns per cube.
pub const COLUMN_TILE: usize = 8;
/// Units per cube along the reduced dimension.
pub const COLUMN_GROUPS: usize = 32;

/// The dimensions a column sum is specialized on: `[outer, reduced, inner]` of its contiguous
/// input; the output is `[outer, inner]`, contiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ColumnDims {
    pub outer: usize,
    pub reduced: usize,
    pub inner: usize,
}

impl ColumnDims {
    /// Elements of the output.
    pub fn columns(&self) -> usize {
        self.outer * self.inner
    }

    /// Elements of the input.
    pub fn elements(&self) -> usize {
        self.outer * self.reduced * self.inner
    }

    /// Cubes of a launch.
    pub fn cubes(&self) -> usize {
        self.columns().div_ceil(COLUMN_TILE).max(1)
    }
}

#[cube(launch_unchecked)]
pub fn column_sum<F: Float>(
    input: &Array<F>,
    output: &mut Array<F>,
    #[comptime] reduced: usize,
    #[comptime] inner: usize,
    #[comptime] columns: usize,
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
        output[column] = F::cast_from(sum);
    }
}

/// Launches [`column_sum`] over `dims`: `input` a buffer of `dims.elements()` contiguous
/// elements, `output` one of `dims.columns()`.
///
/// # Safety
/// The buffers must hold those elements (the kernel is launched unchecked).
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
    let cube_dim = CubeDim::new_2d(COLUMN_TILE as u32, COLUMN_GROUPS as u32);
    // SAFETY: the caller's contract; the grid covers every column.
    unsafe {
        column_sum::launch_unchecked::<E, R>(
            client,
            cube_count,
            cube_dim,
            ArrayArg::from_raw_parts(input, dims.elements()),
            ArrayArg::from_raw_parts(output, dims.columns()),
            dims.reduced,
            dims.inner,
            dims.columns(),
        );
    }
}
