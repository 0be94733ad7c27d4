//! The column-sum kernels: a contiguous tensor viewed as `[outer, reduced, inner, trailing]`
//! summed over its second and fourth dimensions into `[outer, inner]`, optionally divided by a
//! count (a mean) — a bias gradient (`[rows, features]` summed over the rows), a gradient
//! reduced over the dimensions its operand was broadcast along, a batch norm's per-channel
//! statistics and gradients (`[1, N, C, H·W]`).
//!
//! Without trailing dimension ([`column_sum`]), a cube takes [`COLUMN_TILE`] adjacent output
//! columns: its units are laid out `[groups, COLUMN_TILE]` ([`ColumnDims::groups`]), unit
//! `(g, l)` summing rows `g, g + groups, …` of column `l` (so the units of a plane read adjacent
//! columns of a few rows), then the groups' partial sums are added pairwise in a fixed tree.
//! The tile is narrow on purpose: a bias gradient has few columns (512 on W1) and many rows
//! (4096), and a tile of 8 columns still gives 64 cubes there where a tile of 32 would give 16.
//! So few cubes leave most of the device's memory requests unmade: tall sums take up to
//! [`MAX_COLUMN_GROUPS`] groups (1024 units a cube), and where each unit's rows are few and
//! divide evenly ([`UNROLLED_ROWS`]) its loop is unrolled, so all its loads are in flight at
//! once rather than one per trip.
//!
//! With one ([`strided_column_sum`]), each output has a cube of [`STRIDED_UNITS`] units that
//! walk its `reduced` runs of `trailing` adjacent elements in order (adjacent units read
//! adjacent elements), then add their partial sums pairwise in a fixed tree. Few outputs over
//! many elements each (a batch norm's early layers: 64 channels of 802,816 elements on W3) would
//! leave most of the device idle with one cube each: there the elements of each output are
//! split into [`ColumnDims::splits`] consecutive chunks, a cube per chunk
//! ([`strided_column_partials`], f32 partial sums), and a second launch adds each output's
//! partial sums in chunk order ([`column_partials_total`]).
//!
//! Every sum is in f32, in an order fixed by the shape alone, so a replay gives the same bits
//! every time.

use burn_compile_schedule::column_layout;
use cubecl::prelude::*;
use cubecl::server::Handle;

/// Output columns per cube.
pub const COLUMN_TILE: usize = 8;
/// Units per cube along the reduced dimension, at least.
pub const COLUMN_GROUPS: usize = 32;
/// Units per cube along the reduced dimension, at most (a power of two).
pub const MAX_COLUMN_GROUPS: usize = 128;
/// Rows per unit of a [`column_sum`] whose loop is unrolled, at most.
pub const UNROLLED_ROWS: usize = 32;
/// Units per cube of [`strided_column_sum`] (a power of two: its partial sums add pairwise).
pub const STRIDED_UNITS: usize = 256;
/// Strided sums with at least this many outputs take one cube per output (enough cubes to fill
/// the device: an H100 keeps about a thousand such cubes resident).
pub const SPLIT_BELOW_COLUMNS: usize = 1024;
/// Elements per chunk of a split strided sum (64 per unit).
pub const SPLIT_ELEMENTS: usize = 64 * STRIDED_UNITS;
/// Chunks per output at most.
pub const MAX_SPLITS: usize = 256;
/// Units per cube of [`column_partials_total`] (one output each).
pub const TOTAL_UNITS: usize = 64;

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

    /// The chunks each output's elements are split into, a cube each (1: one cube per output;
    /// more only for strided sums with few outputs over many elements each).
    pub fn splits(&self) -> usize {
        if !self.strided() || self.columns() >= SPLIT_BELOW_COLUMNS {
            return 1;
        }
        (self.reduced * self.trailing)
            .div_ceil(SPLIT_ELEMENTS)
            .clamp(1, MAX_SPLITS)
    }

    /// Elements of each chunk of a split sum (the last may be shorter).
    pub fn chunk(&self) -> usize {
        (self.reduced * self.trailing).div_ceil(self.splits())
    }

    /// Cubes of a launch (of the first launch, for a split sum).
    pub fn cubes(&self) -> usize {
        if self.strided() {
            (self.columns() * self.splits()).max(1)
        } else {
            self.columns().div_ceil(COLUMN_TILE).max(1)
        }
    }

    /// Units along the reduced dimension of a [`column_sum`]'s cube: a power of two, enough
    /// that each unit has at most [`UNROLLED_ROWS`] rows, within
    /// [`COLUMN_GROUPS`]..=[`MAX_COLUMN_GROUPS`].
    pub fn groups(&self) -> usize {
        self.reduced
            .div_ceil(UNROLLED_ROWS)
            .next_power_of_two()
            .clamp(COLUMN_GROUPS, MAX_COLUMN_GROUPS)
    }

    /// Units of each cube, `[x, y]`.
    pub fn cube_dim(&self) -> [u32; 2] {
        if self.strided() {
            [STRIDED_UNITS as u32, 1]
        } else {
            [COLUMN_TILE as u32, self.groups() as u32]
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
    #[comptime] groups: usize,
) {
    let mut partial = SharedMemory::<f32>::new(comptime![groups * COLUMN_TILE]);
    column_tile::<F>(
        input,
        output,
        &mut partial,
        CUBE_POS,
        reduced,
        inner,
        columns,
        divisor,
        groups,
    );
}

/// Several column sums of the same dimensions as one launch: member `m`'s input and output are
/// the `m`-th of `inputs` and `outputs`, its cubes those from `m · cubes` on (`cubes` per
/// member), each as [`column_sum`]'s. A sum whose few cubes leave most of the device idle (64
/// for W1's bias gradients) shares it with the others, and the launches are one.
#[cube(launch_unchecked)]
pub fn column_sums<F: Float>(
    inputs: &Sequence<Array<F>>,
    outputs: &mut Sequence<Array<F>>,
    #[comptime] members: usize,
    #[comptime] reduced: usize,
    #[comptime] inner: usize,
    #[comptime] columns: usize,
    #[comptime] divisor: usize,
    #[comptime] groups: usize,
) {
    let cubes = comptime![columns.div_ceil(COLUMN_TILE)];
    let member = CUBE_POS / cubes;
    let tile = CUBE_POS % cubes;
    let mut partial = SharedMemory::<f32>::new(comptime![groups * COLUMN_TILE]);
    // `member` is the same for every unit of a cube: the barriers inside are reached by all.
    #[unroll]
    for m in 0..members {
        if member == m {
            column_tile::<F>(
                inputs.index(m),
                outputs.index_mut(m),
                &mut partial,
                tile,
                reduced,
                inner,
                columns,
                divisor,
                groups,
            );
        }
    }
}

/// Tile `tile` of a column sum (its [`COLUMN_TILE`] output columns): the cube's units laid out
/// `[groups, COLUMN_TILE]`, unit `(g, l)` summing rows `g, g + groups, …` of column `l`, then
/// the groups' partial sums added pairwise in `partial`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn column_tile<F: Float>(
    input: &Array<F>,
    output: &mut Array<F>,
    partial: &mut SharedMemory<f32>,
    tile: usize,
    #[comptime] reduced: usize,
    #[comptime] inner: usize,
    #[comptime] columns: usize,
    #[comptime] divisor: usize,
    #[comptime] groups: usize,
) {
    let lane = UNIT_POS_X as usize;
    let group = UNIT_POS_Y as usize;
    let width = comptime![COLUMN_TILE];
    let column = tile * width + lane;
    let mut total = 0f32;
    if column < columns {
        let base = (column / inner) * comptime![reduced * inner] + column % inner;
        if comptime![reduced.is_multiple_of(groups) && reduced / groups <= UNROLLED_ROWS] {
            #[unroll]
            for i in 0..comptime![reduced / groups] {
                total += f32::cast_from(input[base + (group + i * groups) * inner]);
            }
        } else {
            let mut r = group;
            while r < reduced {
                total += f32::cast_from(input[base + r * inner]);
                r += groups;
            }
        }
    }
    let at = group * width + lane;
    partial[at] = total;
    sync_cube();
    add_pairwise(partial, group, at, groups, width);
    if group == 0 && column < columns {
        let mut sum = partial[lane];
        if comptime![divisor > 1] {
            sum /= f32::cast_from(comptime![divisor as u32]);
        }
        output[column] = F::cast_from(sum);
    }
}

/// The f32 sum, over the cube, of the elements at `e` in `[start, end)` of output `column`'s
/// `reduced · trailing` (none where `valid` is false): the units walk them in order (adjacent
/// units read adjacent elements), then add their partial sums pairwise in a fixed tree. Every
/// unit returns it.
#[cube]
fn cube_sum_of_range<F: Float>(
    input: &Array<F>,
    column: usize,
    start: usize,
    end: usize,
    valid: bool,
    #[comptime] reduced: usize,
    #[comptime] inner: usize,
    #[comptime] trailing: usize,
) -> f32 {
    let unit = UNIT_POS_X as usize;
    let units = comptime![STRIDED_UNITS];
    let mut partial = SharedMemory::<f32>::new(comptime![STRIDED_UNITS]);
    let mut total = 0f32;
    if valid {
        let base =
            (column / inner) * comptime![reduced * inner * trailing] + (column % inner) * trailing;
        let mut e = start + unit;
        while e < end {
            let r = e / trailing;
            let t = e % trailing;
            total += f32::cast_from(input[base + r * comptime![inner * trailing] + t]);
            e += units;
        }
    }
    partial[unit] = total;
    sync_cube();
    add_pairwise(&mut partial, unit, unit, units, comptime![1usize]);
    partial[0]
}

/// Adds `count` partial sums (a power of two), `stride` apart in `partial`, pairwise in a tree
/// fixed by the shape: the calling unit's is at `at`, its index among them `unit`; the total
/// ends at the first one's place. Every unit of the cube calls it (it syncs after each level).
#[cube]
fn add_pairwise(
    partial: &mut SharedMemory<f32>,
    unit: usize,
    at: usize,
    #[comptime] count: usize,
    #[comptime] stride: usize,
) {
    #[unroll]
    for level in 1..comptime![count.trailing_zeros() as usize + 1] {
        let half = comptime![count >> level];
        if unit < half {
            partial[at] += partial[at + comptime![half * stride]];
        }
        sync_cube();
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
    let column = CUBE_POS;
    let mut sum = cube_sum_of_range::<F>(
        input,
        column,
        0,
        comptime![reduced * trailing],
        column < columns,
        reduced,
        inner,
        trailing,
    );
    if UNIT_POS_X == 0 && column < columns {
        if comptime![divisor > 1] {
            sum /= f32::cast_from(comptime![divisor as u32]);
        }
        output[column] = F::cast_from(sum);
    }
}

/// Cube `(o, k, s)` (linear: `((o·inner + k)·splits + s)`): the f32 sum of chunk `s` of output
/// `(o, k)`'s elements — those at `e` in `[s·chunk, (s + 1)·chunk)` of the `reduced · trailing`
/// it sums, in the order of [`strided_column_sum`] — into `partials`.
#[cube(launch_unchecked)]
pub fn strided_column_partials<F: Float>(
    input: &Array<F>,
    partials: &mut Array<f32>,
    #[comptime] reduced: usize,
    #[comptime] inner: usize,
    #[comptime] trailing: usize,
    #[comptime] columns: usize,
    #[comptime] splits: usize,
    #[comptime] chunk: usize,
) {
    let cube = CUBE_POS;
    let column = cube / splits;
    let start = (cube % splits) * chunk;
    let mut end = start + chunk;
    if end > comptime![reduced * trailing] {
        end = comptime![reduced * trailing];
    }
    let sum = cube_sum_of_range::<F>(
        input,
        column,
        start,
        end,
        column < columns,
        reduced,
        inner,
        trailing,
    );
    if UNIT_POS_X == 0 && column < columns {
        partials[cube] = sum;
    }
}

/// Unit `c` (linear over the cubes): output `c`, the sum of its `splits` partial sums in chunk
/// order, divided by `divisor`.
#[cube(launch_unchecked)]
pub fn column_partials_total<F: Float>(
    partials: &Array<f32>,
    output: &mut Array<F>,
    #[comptime] columns: usize,
    #[comptime] splits: usize,
    #[comptime] divisor: usize,
) {
    let column = CUBE_POS * comptime![TOTAL_UNITS] + UNIT_POS_X as usize;
    if column < columns {
        let mut sum = 0f32;
        for s in 0..splits {
            sum += partials[column * splits + s];
        }
        if comptime![divisor > 1] {
            sum /= f32::cast_from(comptime![divisor as u32]);
        }
        output[column] = F::cast_from(sum);
    }
}

/// A grid of `cubes` cubes: past 65535 (wgpu's limit per dimension) it spills into y;
/// `CUBE_POS` is the linear index, and the kernels' bound checks stop the cubes past the end.
fn grid(cubes: usize) -> CubeCount {
    let x = cubes.clamp(1, 65535);
    CubeCount::Static(x as u32, cubes.div_ceil(x) as u32, 1)
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
    let cube_count = grid(dims.cubes());
    let [ux, uy] = dims.cube_dim();
    let cube_dim = CubeDim::new_2d(ux, uy);
    let splits = dims.splits();
    // SAFETY: the caller's contract; the grid covers every column (and every chunk).
    unsafe {
        let input = ArrayArg::from_raw_parts(input, dims.elements());
        if splits > 1 {
            // Freed after the launches that read it (in stream order).
            let partials = client.empty(dims.columns() * splits * 4);
            strided_column_partials::launch_unchecked::<E, R>(
                client,
                cube_count,
                cube_dim,
                input,
                ArrayArg::from_raw_parts(partials.clone(), dims.columns() * splits),
                dims.reduced,
                dims.inner,
                dims.trailing,
                dims.columns(),
                splits,
                dims.chunk(),
            );
            column_partials_total::launch_unchecked::<E, R>(
                client,
                grid(dims.columns().div_ceil(TOTAL_UNITS)),
                CubeDim::new_1d(TOTAL_UNITS as u32),
                ArrayArg::from_raw_parts(partials, dims.columns() * splits),
                ArrayArg::from_raw_parts(output, dims.columns()),
                dims.columns(),
                splits,
                dims.divisor,
            );
            return;
        }
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
                dims.groups(),
            );
        }
    }
}

/// Launches the column sums of `inputs` into `outputs` (the same number, each pair as
/// [`launch_column_sum`] takes them: `dims.elements()` contiguous elements in, `dims.columns()`
/// out) as one kernel ([`column_sums`]). Plain column sums only (`dims.trailing == 1`).
///
/// # Safety
/// As [`launch_column_sum`], for every pair.
pub unsafe fn launch_column_sums<R: Runtime, E: Float>(
    client: &ComputeClient<R>,
    dims: ColumnDims,
    inputs: Vec<Handle>,
    outputs: Vec<Handle>,
) {
    assert!(
        !dims.strided(),
        "column sums launched together are plain ones"
    );
    assert_eq!(inputs.len(), outputs.len(), "an output per input");
    let members = inputs.len();
    let [ux, uy] = dims.cube_dim();
    // SAFETY: the caller's contract; each member's cubes cover its columns.
    unsafe {
        let inputs: SequenceArg<R, Array<E>> = inputs
            .into_iter()
            .map(|h| ArrayArg::from_raw_parts(h, dims.elements()))
            .collect();
        let outputs: SequenceArg<R, Array<E>> = outputs
            .into_iter()
            .map(|h| ArrayArg::from_raw_parts(h, dims.columns()))
            .collect();
        column_sums::launch_unchecked::<E, R>(
            client,
            grid(dims.cubes() * members),
            CubeDim::new_2d(ux, uy),
            inputs,
            outputs,
            members,
            dims.reduced,
            dims.inner,
            dims.columns(),
            dims.divisor,
            dims.groups(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(outer: usize, reduced: usize, inner: usize, trailing: usize) -> ColumnDims {
        ColumnDims {
            outer,
            reduced,
            inner,
            trailing,
            divisor: 1,
        }
    }

    /// W3's batch norms: the early layers' few channels of many elements are split (a cube per
    /// 16,384 elements), the late layers' many channels are not, nor is a bias gradient.
    #[test]
    fn strided_sums_with_few_outputs_are_split_into_chunks() {
        let early = dims(1, 256, 64, 56 * 56);
        assert_eq!(early.splits(), 49);
        assert_eq!(early.chunk(), 16_384);
        assert_eq!(early.cubes(), 64 * 49);
        let late = dims(1, 256, 2048, 7 * 7);
        assert_eq!((late.splits(), late.cubes()), (1, 2048));
        let small = dims(1, 256, 512, 7 * 7);
        assert_eq!(small.splits(), 1, "12,544 elements fit one chunk");
        let bias = dims(1, 4096, 512, 1);
        assert_eq!((bias.splits(), bias.cubes()), (1, 64));
        assert_eq!((bias.groups(), bias.cube_dim()), (128, [8, 128]));
        let huge = dims(1, 1 << 20, 1, 64);
        assert_eq!(huge.splits(), MAX_SPLITS);
        assert!(huge.chunk() * MAX_SPLITS >= (1 << 20) * 64);
    }

    /// A column sum's units along its rows: enough for at most 32 rows each (unrolled), 32 to
    /// 128 of them (a power of two).
    #[test]
    fn column_sums_take_more_groups_for_taller_columns() {
        let groups = |reduced| dims(1, reduced, 512, 1).groups();
        assert_eq!(groups(7), 32);
        assert_eq!(groups(1024), 32);
        assert_eq!(groups(1025), 64);
        assert_eq!(groups(2048), 64);
        assert_eq!(groups(4096), 128);
        assert_eq!(
            groups(1 << 20),
            128,
            "past 4096 rows the loop is not unrolled"
        );
    }
}
