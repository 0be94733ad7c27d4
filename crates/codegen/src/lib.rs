//! Code generation for GPUs: scheduled kernels (`burn-compile-schedule`) become CubeCL kernels,
//! which CubeCL compiles for CUDA and wgpu.
//!
//! [`cuda_source`] and [`wgsl_source`] give a kernel's generated code as text without any device
//! (see [`offline`]): what the snapshots in `snapshots/` hold and what reviewers read.

pub mod column;
pub mod launch;
pub mod offline;
pub mod pointwise;
pub mod row;

pub use column::{ColumnDims, launch_column_sum, launch_column_sums};
pub use launch::{launch_horizontal, launch_pointwise};
pub use row::Reduction;

/// What a launch compiles into a kernel besides its program: the iteration shape, each
/// input's element strides and the vector width. All are compile-time constants of the
/// generated code, so a kernel specialized on every size reads no shape or stride at run time:
/// its arguments are plain buffers, and a launch uploads no metadata (CubeCL copies a tensor
/// argument's shape and strides to the device at every launch). A symbolic kernel
/// ([`LaunchLayout::symbolic`]) reads the sizes of its symbolic dimensions (and the strides
/// they scale) from a few launch values instead. Each distinct layout is a kernel of its own,
/// compiled once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LaunchLayout {
    /// The iteration shape (output 0's shape; a row kernel's `[R…, N]`).
    pub shape: Vec<usize>,
    /// Per input, its stride in elements along each dimension; 0 where the kernel broadcasts
    /// the input along it (the stride is never read there).
    pub strides: Vec<Vec<usize>>,
    /// Elements per vector (1: scalar code). With `vector > 1` each unit loads, computes and
    /// stores `vector` consecutive elements of the last dimension at once (one 16-byte access
    /// where the width allows): the inputs read along that dimension are contiguous in it
    /// ("wide" buffers, indexed in vectors), the inputs broadcast along it are read one value
    /// per vector and splatted ("narrow" buffers), see [`LaunchLayout::vectorize`].
    pub vector: usize,
    /// Per dimension: symbolic (empty: none). A symbolic layout ([`LaunchLayout::symbolic`])
    /// holds 0 for a symbolic dimension's size and [`RUNTIME`] for each stride read at run
    /// time; those values, and the products the index arithmetic needs, are the kernel's
    /// `meta` arguments ([`Meta`]), so one kernel serves every size of those dimensions.
    pub dynamic: Vec<bool>,
}

/// The stride of a symbolic layout that the kernel reads from its `meta` arguments.
pub const RUNTIME: usize = usize::MAX;

/// A runtime argument of a symbolic kernel (a `u32` of its `meta` sequence, in the order of
/// [`LaunchLayout::meta_entries`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Meta {
    /// A pointwise kernel's units: the iteration space's length in vectors.
    Len,
    /// Vectors (a row kernel: rows) per step along dimension `d`.
    Inner(usize),
    /// The size of dimension `d` (the last one in vectors).
    Size(usize),
    /// A row kernel's rows.
    Rows,
    /// A row kernel's row length, in vectors.
    Columns,
    /// Input `i`'s stride along dimension `d`, in its buffer's units.
    Stride(usize, usize),
}

impl LaunchLayout {
    /// The layout of `kernel` over `shape` with inputs of these `strides`; the strides of
    /// broadcast dimensions are normalized to 0, so layouts that read the same elements are one
    /// kernel.
    pub fn new(kernel: &FusedKernel, shape: &[usize], strides: &[&[usize]]) -> Self {
        assert_eq!(
            shape.len(),
            kernel.rank as usize,
            "a shape of the kernel's rank"
        );
        assert_eq!(
            strides.len(),
            kernel.inputs.len(),
            "strides per kernel input"
        );
        let strides = strides
            .iter()
            .zip(&kernel.inputs)
            .map(|(s, broadcast)| {
                assert_eq!(s.len(), shape.len(), "strides of the kernel's rank");
                s.iter()
                    .zip(broadcast)
                    .map(|(&s, &b)| if b { 0 } else { s })
                    .collect()
            })
            .collect();
        Self {
            shape: shape.to_vec(),
            strides,
            vector: 1,
            dynamic: Vec::new(),
        }
    }

    /// Whether dimension `d` is symbolic.
    pub fn is_dynamic(&self, d: usize) -> bool {
        self.dynamic.get(d).copied().unwrap_or(false)
    }

    /// Whether any dimension is symbolic.
    pub fn is_symbolic(&self) -> bool {
        self.dynamic.iter().any(|d| *d)
    }

    /// This layout (of a launch: its real sizes and strides, its vector width chosen) as the
    /// symbolic kernel that serves every size of the `dynamic` dimensions, and the `meta`
    /// values of this launch. Sizes of the other dimensions stay constants; every stride
    /// becomes a runtime value except a broadcast (0) and a last dimension's unit stride (so a
    /// contiguous row is still read as consecutive elements, and vectorized).
    pub fn symbolic(&self, kernel: &FusedKernel, dynamic: &[bool]) -> (Self, Vec<u32>) {
        let rank = self.shape.len();
        let mut spec = self.clone();
        spec.dynamic = (0..rank)
            .map(|d| dynamic.get(d).copied().unwrap_or(false))
            .collect();
        for d in 0..rank {
            if spec.dynamic[d] {
                spec.shape[d] = 0;
            }
        }
        for strides in &mut spec.strides {
            for (d, s) in strides.iter_mut().enumerate() {
                if *s != 0 && !(d + 1 == rank && *s == 1) {
                    *s = RUNTIME;
                }
            }
        }
        let meta = spec
            .meta_entries(kernel)
            .into_iter()
            .map(|m| self.meta_value(kernel, m))
            .collect();
        (spec, meta)
    }

    /// The runtime arguments of this (symbolic) layout, in order; empty for a layout with no
    /// symbolic dimension.
    pub fn meta_entries(&self, kernel: &FusedKernel) -> Vec<Meta> {
        let mut entries = Vec::new();
        if !self.is_symbolic() {
            return entries;
        }
        let rank = self.shape.len();
        let any_after = |d: usize, end: usize| (d + 1..end).any(|e| self.is_dynamic(e));
        if kernel.row.is_some() {
            let row_dims = rank.saturating_sub(1);
            if (0..row_dims).any(|d| self.is_dynamic(d)) {
                entries.push(Meta::Rows);
            }
            if self.is_dynamic(rank - 1) {
                entries.push(Meta::Columns);
            }
            for d in 0..row_dims {
                if any_after(d, row_dims) {
                    entries.push(Meta::Inner(d));
                }
                if self.is_dynamic(d) {
                    entries.push(Meta::Size(d));
                }
            }
        } else {
            entries.push(Meta::Len);
            for d in 0..rank {
                if any_after(d, rank) {
                    entries.push(Meta::Inner(d));
                }
                if self.is_dynamic(d) {
                    entries.push(Meta::Size(d));
                }
            }
        }
        for (i, strides) in self.strides.iter().enumerate() {
            for (d, s) in strides.iter().enumerate() {
                if *s == RUNTIME {
                    entries.push(Meta::Stride(i, d));
                }
            }
        }
        entries
    }

    /// Where runtime argument `m` sits in the kernel's `meta` sequence; `None` when it is a
    /// constant of the kernel.
    pub fn meta_slot(&self, kernel: &FusedKernel, m: Meta) -> Option<usize> {
        self.meta_entries(kernel).iter().position(|e| *e == m)
    }

    /// The value of `m` in this (real) layout.
    fn meta_value(&self, kernel: &FusedKernel, m: Meta) -> u32 {
        let rank = self.shape.len();
        let vector = self.vector.max(1);
        let value = match m {
            Meta::Len => self.len() / vector,
            Meta::Inner(d) if kernel.row.is_some() => {
                self.shape[d + 1..rank - 1].iter().product::<usize>()
            }
            Meta::Inner(d) => self.shape[d + 1..].iter().product::<usize>() / vector,
            Meta::Size(d) if d + 1 == rank && kernel.row.is_none() => self.shape[d] / vector,
            Meta::Size(d) => self.shape[d],
            Meta::Rows => self.shape[..rank - 1].iter().product(),
            Meta::Columns => self.shape[rank - 1] / vector,
            Meta::Stride(i, d) => self.buffer_stride(kernel, i, d),
        };
        u32::try_from(value).expect("a symbolic kernel's sizes fit 32-bit indexing")
    }

    /// This layout with the widest vector, up to `widest` (a power of two: the target's widest
    /// access over the largest power of two that divides every buffer's element offset), that
    /// the kernel's buffers allow: the last dimension a multiple of it, every input read along
    /// that dimension contiguous in it with its other strides multiples of it (so a vector is
    /// whole and aligned in every buffer), and for a row kernel at least one vector per unit
    /// of a row. Otherwise scalar code (`vector` 1).
    pub fn vectorize(mut self, kernel: &FusedKernel, widest: usize) -> Self {
        self.vector = 1;
        let Some(last) = self.shape.len().checked_sub(1) else {
            return self;
        };
        let columns = self.shape[last];
        let units = kernel.row.as_ref().map_or(1, |r| r.units as usize);
        let mut v = widest.max(1);
        if !v.is_power_of_two() {
            v = v.next_power_of_two() / 2;
        }
        while v > 1 {
            let fits = columns.is_multiple_of(v)
                && columns >= v * units
                && kernel
                    .inputs
                    .iter()
                    .zip(&self.strides)
                    .all(|(broadcast, strides)| {
                        broadcast[last]
                            || (strides[last] == 1
                                && (0..last).all(|d| broadcast[d] || strides[d].is_multiple_of(v)))
                    });
            if fits {
                self.vector = v;
                break;
            }
            v /= 2;
        }
        self
    }

    /// Whether input `input` is read one value per vector (broadcast along the last
    /// dimension of a vectorized layout): a narrow buffer.
    pub fn narrow_input(&self, kernel: &FusedKernel, input: usize) -> bool {
        self.vector > 1 && kernel.inputs[input].last().copied().unwrap_or(false)
    }

    /// Whether output `output` is written one value per vector position (a row kernel's row
    /// value in a vectorized layout): a narrow buffer.
    pub fn narrow_output(&self, kernel: &FusedKernel, output: usize) -> bool {
        self.vector > 1 && kernel.row.as_ref().is_some_and(|r| r.row_outputs[output])
    }

    /// Position of input `input` among the kernel's wide or narrow input buffers (its index in
    /// the launch's sequence of its kind).
    pub fn input_slot(&self, kernel: &FusedKernel, input: usize) -> usize {
        let narrow = self.narrow_input(kernel, input);
        (0..input)
            .filter(|&i| self.narrow_input(kernel, i) == narrow)
            .count()
    }

    /// Position of output `output` among the kernel's wide or narrow output buffers.
    pub fn output_slot(&self, kernel: &FusedKernel, output: usize) -> usize {
        let narrow = self.narrow_output(kernel, output);
        (0..output)
            .filter(|&o| self.narrow_output(kernel, o) == narrow)
            .count()
    }

    /// Input `input`'s stride along dimension `d` in its own buffer's units: vectors for a
    /// wide buffer (the last dimension's stride is then 1, or any stride in scalar code),
    /// elements for a narrow one.
    pub fn buffer_stride(&self, kernel: &FusedKernel, input: usize, d: usize) -> usize {
        let stride = self.strides[input][d];
        if stride == RUNTIME {
            return RUNTIME;
        }
        let last = d + 1 == self.shape.len();
        if self.narrow_input(kernel, input) || last {
            stride
        } else {
            stride / self.vector
        }
    }

    /// The layout of `kernel` over `shape` with every input contiguous in its own shape (the
    /// iteration shape with broadcast dimensions of size 1).
    pub fn contiguous(kernel: &FusedKernel, shape: &[usize]) -> Self {
        let strides: Vec<Vec<usize>> = kernel
            .inputs
            .iter()
            .map(|broadcast| {
                let own: Vec<usize> = shape
                    .iter()
                    .zip(broadcast)
                    .map(|(&d, &b)| if b { 1 } else { d })
                    .collect();
                contiguous_strides(&own)
            })
            .collect();
        let refs: Vec<&[usize]> = strides.iter().map(|s| s.as_slice()).collect();
        Self::new(kernel, shape, &refs)
    }

    /// Elements of the iteration space.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the iteration space is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A kernel and the layout it is launched over: the one comptime argument of the generated
/// kernels, cheap to hash, compare and clone. CubeCL clones a kernel's comptime arguments into
/// every launch (the kernel and its id) and, on the server, hashes and compares them to find the
/// compiled kernel (twice per launch); a spec is an `Arc` with its hash computed once, equal to
/// itself by pointer. [`KernelSpec::cached`] gives launches of one kernel and layout one spec.
#[derive(Clone)]
pub struct KernelSpec(std::sync::Arc<SpecInner>);

struct SpecInner {
    kernel: FusedKernel,
    layout: LaunchLayout,
    hash: u64,
}

impl KernelSpec {
    /// The spec of `kernel` over `layout`.
    pub fn new(kernel: FusedKernel, layout: LaunchLayout) -> Self {
        let hash = content_hash(&kernel, &layout);
        Self(std::sync::Arc::new(SpecInner {
            kernel,
            layout,
            hash,
        }))
    }

    /// The spec of `kernel` over `layout`, one per process for equal contents (so that the
    /// compiled kernel is found by pointer at every later launch).
    pub fn cached(kernel: &FusedKernel, layout: &LaunchLayout) -> Self {
        use std::collections::HashMap;
        use std::sync::Mutex;
        static SPECS: Mutex<Option<HashMap<u64, Vec<KernelSpec>>>> = Mutex::new(None);
        let hash = content_hash(kernel, layout);
        let mut specs = SPECS.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = specs
            .get_or_insert_with(HashMap::new)
            .entry(hash)
            .or_default();
        if let Some(spec) = bucket
            .iter()
            .find(|s| s.0.kernel == *kernel && s.0.layout == *layout)
        {
            return spec.clone();
        }
        let spec = Self::new(kernel.clone(), layout.clone());
        bucket.push(spec.clone());
        spec
    }

    pub fn kernel(&self) -> &FusedKernel {
        &self.0.kernel
    }

    pub fn layout(&self) -> &LaunchLayout {
        &self.0.layout
    }
}

/// Where a kernel's buffers start in the launch's sequences (wide inputs, narrow inputs,
/// outputs): 0 for a kernel launched alone, the earlier members' buffers for a member of a
/// horizontal kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bases {
    pub wide: usize,
    pub narrow: usize,
    pub outputs: usize,
}

/// Units a horizontal kernel's member ranges are aligned to: a plane (warp) on CUDA.
pub const MEMBER_ALIGNMENT: usize = 32;

/// The members of a horizontal kernel (pointwise kernels of one vector width over layouts of
/// their own, launched as one): the comptime argument of [`pointwise::horizontal`], shared as
/// [`KernelSpec`] is.
#[derive(Clone)]
pub struct HorizontalSpec(std::sync::Arc<HorizontalInner>);

struct HorizontalInner {
    /// Per member: its kernel, its scalar indices offset by the earlier members' scalars.
    kernels: Vec<FusedKernel>,
    layouts: Vec<LaunchLayout>,
    /// Per member, its first unit (a multiple of [`MEMBER_ALIGNMENT`]).
    starts: Vec<usize>,
    /// Per member, the unit after its last (the last member's: the launch's units).
    ends: Vec<usize>,
    bases: Vec<Bases>,
    hash: u64,
}

impl HorizontalSpec {
    /// The spec of `members` (kernel and layout each; every layout of one vector width, none
    /// symbolic, no row kernel).
    pub fn new(members: &[(&FusedKernel, &LaunchLayout)]) -> Self {
        let hash = horizontal_hash(members);
        let mut starts = Vec::with_capacity(members.len());
        let mut ends = Vec::with_capacity(members.len());
        let mut bases = Vec::with_capacity(members.len());
        let mut next = Bases::default();
        let mut scalars = 0u16;
        let mut kernels = Vec::with_capacity(members.len());
        for (kernel, layout) in members {
            assert!(kernel.row.is_none(), "a horizontal member is pointwise");
            assert!(
                !layout.is_symbolic(),
                "a horizontal member has constant sizes"
            );
            // Each member's range starts on a plane (a warp) of its own: a plane whose units
            // ran two members' programs would run both, one after the other (a step's
            // optimizer updates of scalars, one unit each, took 12 µs so in one launch).
            let units = layout.len() / layout.vector.max(1);
            let start = ends
                .last()
                .map_or(0, |&e: &usize| e.next_multiple_of(MEMBER_ALIGNMENT));
            starts.push(start);
            ends.push(start + units);
            bases.push(next);
            let narrow = (0..kernel.inputs.len())
                .filter(|&i| layout.narrow_input(kernel, i))
                .count();
            next.narrow += narrow;
            next.wide += kernel.inputs.len() - narrow;
            next.outputs += kernel.outputs as usize;
            let mut own = (*kernel).clone();
            for instr in &mut own.program {
                if let burn_compile_schedule::Instr::Scalar { index } = instr {
                    *index += scalars;
                }
            }
            scalars += kernel.scalars;
            kernels.push(own);
        }
        Self(std::sync::Arc::new(HorizontalInner {
            kernels,
            layouts: members.iter().map(|(_, l)| (*l).clone()).collect(),
            starts,
            ends,
            bases,
            hash,
        }))
    }

    /// The spec of `members`, one per process for equal contents (as [`KernelSpec::cached`]).
    pub fn cached(members: &[(&FusedKernel, &LaunchLayout)]) -> Self {
        use std::collections::HashMap;
        use std::sync::Mutex;
        static SPECS: Mutex<Option<HashMap<u64, Vec<HorizontalSpec>>>> = Mutex::new(None);
        let hash = horizontal_hash(members);
        let mut specs = SPECS.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = specs
            .get_or_insert_with(HashMap::new)
            .entry(hash)
            .or_default();
        if let Some(spec) = bucket.iter().find(|s| s.same_members(members)) {
            return spec.clone();
        }
        let spec = Self::new(members);
        bucket.push(spec.clone());
        spec
    }

    fn same_members(&self, members: &[(&FusedKernel, &LaunchLayout)]) -> bool {
        self.0.layouts.len() == members.len()
            && members.iter().enumerate().all(|(m, (kernel, layout))| {
                self.0.layouts[m] == **layout && self.unshifted_eq(m, kernel)
            })
    }

    /// Whether member `m`'s kernel is `kernel` (before its scalar indices were offset).
    fn unshifted_eq(&self, m: usize, kernel: &FusedKernel) -> bool {
        let own = &self.0.kernels[m];
        let shift: u16 = self.0.kernels[..m].iter().map(|k| k.scalars).sum();
        own.dtype == kernel.dtype
            && own.rank == kernel.rank
            && own.inputs == kernel.inputs
            && own.outputs == kernel.outputs
            && own.scalars == kernel.scalars
            && own.row == kernel.row
            && own.program.len() == kernel.program.len()
            && own
                .program
                .iter()
                .zip(&kernel.program)
                .all(|(a, b)| match (a, b) {
                    (
                        burn_compile_schedule::Instr::Scalar { index: x },
                        burn_compile_schedule::Instr::Scalar { index: y },
                    ) => *x == *y + shift,
                    (a, b) => a == b,
                })
    }

    /// Number of members.
    pub fn members(&self) -> usize {
        self.0.kernels.len()
    }

    /// Member `m`'s first unit (`m` = the number of members: the launch's units).
    pub fn start(&self, m: usize) -> usize {
        self.0.starts[m]
    }

    /// The unit after member `m`'s last.
    pub fn end(&self, m: usize) -> usize {
        self.0.ends[m]
    }

    /// Units of the launch (one vector each).
    pub fn units(&self) -> usize {
        self.0.ends.last().copied().unwrap_or(0)
    }

    /// Member `m`'s kernel, its scalars numbered in the launch's sequence.
    pub fn kernel(&self, m: usize) -> &FusedKernel {
        &self.0.kernels[m]
    }

    pub fn layout(&self, m: usize) -> &LaunchLayout {
        &self.0.layouts[m]
    }

    pub fn bases(&self, m: usize) -> Bases {
        self.0.bases[m]
    }

    /// The vector width of every member.
    pub fn vector(&self) -> usize {
        self.0.layouts.first().map_or(1, |l| l.vector)
    }
}

fn horizontal_hash(members: &[(&FusedKernel, &LaunchLayout)]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    for (kernel, layout) in members {
        kernel.hash(&mut h);
        layout.hash(&mut h);
    }
    h.finish()
}

impl core::hash::Hash for HorizontalSpec {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.hash);
    }
}

impl PartialEq for HorizontalSpec {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
            || (self.0.hash == other.0.hash
                && self.0.kernels == other.0.kernels
                && self.0.layouts == other.0.layouts)
    }
}

impl Eq for HorizontalSpec {}

impl core::fmt::Debug for HorizontalSpec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "horizontal {:?} over {:?}",
            self.0.kernels, self.0.layouts
        )
    }
}

/// One fast hash of a kernel and its layout.
fn content_hash(kernel: &FusedKernel, layout: &LaunchLayout) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    kernel.hash(&mut h);
    layout.hash(&mut h);
    h.finish()
}

impl core::hash::Hash for KernelSpec {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.hash);
    }
}

impl PartialEq for KernelSpec {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
            || (self.0.hash == other.0.hash
                && self.0.kernel == other.0.kernel
                && self.0.layout == other.0.layout)
    }
}

impl Eq for KernelSpec {}

impl core::fmt::Debug for KernelSpec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?} over {:?}", self.0.kernel, self.0.layout)
    }
}

/// The kernel a symbolic launch of `kernel` compiles ([`launch_pointwise`] with `dynamic`): a
/// pointwise kernel as it is; a row kernel over its row layout with the symbolic sizes left out
/// (0), and one row per cube where the rows are symbolic (so no cube is partly past them).
/// Its units per row stay those of the plan's kernel.
pub fn symbolic_kernel(kernel: &FusedKernel, dynamic: &[bool]) -> FusedKernel {
    let Some(row) = &kernel.row else {
        return kernel.clone();
    };
    let is_dynamic = |d: usize| dynamic.get(d).copied().unwrap_or(false);
    let rank = row.shape.len();
    let dynamic_rows = (0..rank.saturating_sub(1)).any(is_dynamic);
    FusedKernel {
        row: Some(burn_compile_schedule::RowLayout {
            shape: (0..rank)
                .map(|d| if is_dynamic(d) { 0 } else { row.shape[d] })
                .collect(),
            units: row.units,
            rows_per_cube: if dynamic_rows { 1 } else { row.rows_per_cube },
            row_outputs: row.row_outputs.clone(),
        }),
        ..kernel.clone()
    }
}

/// The widest vector, up to `cap` elements, at which buffers starting at these element
/// `offsets` are all aligned (a vector access must start at a multiple of its size).
pub fn widest_aligned(cap: usize, offsets: impl IntoIterator<Item = usize>) -> usize {
    offsets.into_iter().fold(cap.max(1), |v, offset| {
        let mut v = v;
        while v > 1 && !offset.is_multiple_of(v) {
            v /= 2;
        }
        v
    })
}

/// Row-major strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

use burn_backend::DType;
use burn_compile_schedule::FusedKernel;
use cubecl::prelude::*;
use cubecl::{Compiler, ScalarArgType};
use offline::{CudaCompiler, CudaFlavor, Flavor, OfflineRuntime, StubDevice, WgslFlavor};

/// Units per cube of the pointwise kernels.
pub const POINTWISE_CUBE: u32 = 256;

/// Why a kernel has no generated code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodegenError {
    /// The kernel's element type has no kernel on this target.
    UnsupportedDType { dtype: DType, target: &'static str },
    /// CubeCL refused the kernel.
    Compile(String),
}

impl core::fmt::Display for CodegenError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CodegenError::UnsupportedDType { dtype, target } => {
                write!(f, "no {target} pointwise kernel for {dtype:?}")
            }
            CodegenError::Compile(e) => write!(f, "CubeCL could not compile the kernel: {e}"),
        }
    }
}

impl std::error::Error for CodegenError {}

/// The kernel definition of `kernel` over `layout` with element type `E`, for the offline
/// runtime `Fl`.
fn define<Fl: Flavor, E: Float + ScalarArgType>(
    kernel: &FusedKernel,
    layout: &LaunchLayout,
) -> (cubecl::prelude::KernelDefinition, StorageType) {
    let client = OfflineRuntime::<Fl>::client(&StubDevice);
    let properties = Fl::device_properties();
    // As `launch_pointwise` launches it: 32-bit addressing is the kernel macro's default.
    let settings = KernelSettings::default()
        .cube_dim(cube_dim(kernel))
        .address_type(AddressType::U32);
    let arrays = array_args::<E>;
    let scalars = || -> SequenceCompilationArg<E> { (0..kernel.scalars).map(|_| ()).collect() };
    let narrow_inputs = (0..kernel.inputs.len())
        .filter(|&i| layout.narrow_input(kernel, i))
        .count();
    let narrow_outputs = (0..kernel.outputs as usize)
        .filter(|&o| layout.narrow_output(kernel, o))
        .count();
    let wide_inputs = kernel.inputs.len() - narrow_inputs;
    let wide_outputs = kernel.outputs as usize - narrow_outputs;
    let spec = KernelSpec::new(kernel.clone(), layout.clone());
    let meta = || -> SequenceCompilationArg<u32> {
        layout.meta_entries(kernel).iter().map(|_| ()).collect()
    };
    if let Some(row) = &kernel.row {
        // As the device the stub stands for would launch it.
        let reduction = Reduction::for_device(&properties, row);
        let k = row::row::Row::<E, OfflineRuntime<Fl>>::new(
            settings,
            client,
            array_args(wide_inputs),
            arrays(narrow_inputs),
            scalars(),
            meta(),
            array_args(wide_outputs),
            arrays(narrow_outputs),
            // The kernel's vector size (a `Size` generic), then its comptime arguments.
            layout.vector,
            spec,
            reduction,
        );
        (k.define(), k.address_type())
    } else {
        let k = pointwise::pointwise::Pointwise::<E, OfflineRuntime<Fl>>::new(
            settings,
            client,
            array_args(wide_inputs),
            arrays(narrow_inputs),
            scalars(),
            meta(),
            array_args(wide_outputs),
            layout.vector,
            spec,
        );
        (k.define(), k.address_type())
    }
}

/// The kernel definition of a horizontal kernel over `members` with element type `E`.
fn define_horizontal<Fl: Flavor, E: Float + ScalarArgType>(
    members: &[(&FusedKernel, &LaunchLayout)],
) -> (cubecl::prelude::KernelDefinition, StorageType) {
    let client = OfflineRuntime::<Fl>::client(&StubDevice);
    let settings = KernelSettings::default()
        .cube_dim(CubeDim::new_1d(POINTWISE_CUBE))
        .address_type(AddressType::U32);
    let spec = HorizontalSpec::new(members);
    let (mut wide, mut narrow, mut outputs, mut scalars) = (0, 0, 0, 0);
    for (kernel, layout) in members {
        let n = (0..kernel.inputs.len())
            .filter(|&i| layout.narrow_input(kernel, i))
            .count();
        narrow += n;
        wide += kernel.inputs.len() - n;
        outputs += kernel.outputs as usize;
        scalars += kernel.scalars as usize;
    }
    let k = pointwise::horizontal::Horizontal::<E, OfflineRuntime<Fl>>::new(
        settings,
        client,
        array_args(wide),
        array_args::<E>(narrow),
        (0..scalars).map(|_| ()).collect(),
        SequenceCompilationArg {
            values: Default::default(),
        },
        array_args(outputs),
        spec.vector(),
        spec,
    );
    (k.define(), k.address_type())
}

/// The compilation arguments of `n` array parameters of element `C` (scalars or vectors).
fn array_args<C: CubePrimitive>(n: usize) -> SequenceCompilationArg<Array<C>> {
    (0..n)
        .map(|_| ArrayCompilationArg { inplace: None })
        .collect()
}

/// The cube shape a kernel is launched with: 256 units for a pointwise kernel; for a row
/// kernel, the layout's units per row (x) by rows per cube (y).
pub fn cube_dim(kernel: &FusedKernel) -> CubeDim {
    match &kernel.row {
        Some(r) => CubeDim::new_2d(r.units, r.rows_per_cube),
        None => CubeDim::new_1d(POINTWISE_CUBE),
    }
}

/// The CUDA C++ source of `kernel` over `layout`, as CubeCL's CUDA runtime compiles it
/// (unchecked launch, fast math, grid constants).
pub fn cuda_source(kernel: &FusedKernel, layout: &LaunchLayout) -> Result<String, CodegenError> {
    let (definition, address) = match kernel.dtype {
        DType::F32 | DType::Flex32 => define::<CudaFlavor, f32>(kernel, layout),
        DType::F16 => define::<CudaFlavor, half::f16>(kernel, layout),
        DType::BF16 => define::<CudaFlavor, half::bf16>(kernel, layout),
        DType::F64 => define::<CudaFlavor, f64>(kernel, layout),
        dtype => {
            return Err(CodegenError::UnsupportedDType {
                dtype,
                target: "CUDA",
            });
        }
    };
    compile_cuda(definition, address)
}

/// The CUDA C++ source of a horizontal kernel over `members` (as [`launch_horizontal`]
/// launches it).
pub fn cuda_horizontal_source(
    members: &[(&FusedKernel, &LaunchLayout)],
) -> Result<String, CodegenError> {
    let dtype = members.first().map_or(DType::F32, |(k, _)| k.dtype);
    let (definition, address) = match dtype {
        DType::F32 | DType::Flex32 => define_horizontal::<CudaFlavor, f32>(members),
        DType::F16 => define_horizontal::<CudaFlavor, half::f16>(members),
        DType::BF16 => define_horizontal::<CudaFlavor, half::bf16>(members),
        DType::F64 => define_horizontal::<CudaFlavor, f64>(members),
        dtype => {
            return Err(CodegenError::UnsupportedDType {
                dtype,
                target: "CUDA",
            });
        }
    };
    compile_cuda(definition, address)
}

/// The definitions of the column sum over `dims`, in launch order, as [`launch_column_sum`]
/// launches them (two for a split sum: the partial sums, then their totals).
fn define_column<Fl: Flavor, E: Float>(
    dims: ColumnDims,
) -> Vec<(cubecl::prelude::KernelDefinition, StorageType)> {
    let client = OfflineRuntime::<Fl>::client(&StubDevice);
    let [ux, uy] = dims.cube_dim();
    let settings = KernelSettings::default()
        .cube_dim(CubeDim::new_2d(ux, uy))
        .address_type(AddressType::U32);
    let array = || ArrayCompilationArg { inplace: None };
    if dims.splits() > 1 {
        let partials =
            column::strided_column_partials::StridedColumnPartials::<E, OfflineRuntime<Fl>>::new(
                settings,
                client.clone(),
                array(),
                array(),
                dims.reduced,
                dims.inner,
                dims.trailing,
                dims.columns(),
                dims.splits(),
                dims.chunk(),
            );
        let totals =
            column::column_partials_total::ColumnPartialsTotal::<E, OfflineRuntime<Fl>>::new(
                KernelSettings::default()
                    .cube_dim(CubeDim::new_1d(column::TOTAL_UNITS as u32))
                    .address_type(AddressType::U32),
                client,
                array(),
                array(),
                dims.columns(),
                dims.splits(),
                dims.divisor,
            );
        return vec![
            (partials.define(), partials.address_type()),
            (totals.define(), totals.address_type()),
        ];
    }
    if dims.strided() {
        let k = column::strided_column_sum::StridedColumnSum::<E, OfflineRuntime<Fl>>::new(
            settings,
            client,
            array(),
            array(),
            dims.reduced,
            dims.inner,
            dims.trailing,
            dims.columns(),
            dims.divisor,
        );
        return vec![(k.define(), k.address_type())];
    }
    let k = column::column_sum::ColumnSum::<E, OfflineRuntime<Fl>>::new(
        settings,
        client,
        array(),
        array(),
        dims.reduced,
        dims.inner,
        dims.columns(),
        dims.divisor,
        dims.groups(),
    );
    vec![(k.define(), k.address_type())]
}

/// The sources of `kernels`, each compiled by `compile`, in order (a comment line between two).
fn sources(
    kernels: Vec<(cubecl::prelude::KernelDefinition, StorageType)>,
    compile: impl Fn(cubecl::prelude::KernelDefinition, StorageType) -> Result<String, CodegenError>,
) -> Result<String, CodegenError> {
    let mut out = Vec::with_capacity(kernels.len());
    for (definition, address) in kernels {
        out.push(compile(definition, address)?);
    }
    Ok(out.join("\n// then:\n"))
}

/// The CUDA C++ source of the column sum of `dtype` over `dims` (both kernels of a split sum,
/// in launch order).
pub fn cuda_column_source(dtype: DType, dims: ColumnDims) -> Result<String, CodegenError> {
    let kernels = match dtype {
        DType::F32 | DType::Flex32 => define_column::<CudaFlavor, f32>(dims),
        DType::F16 => define_column::<CudaFlavor, half::f16>(dims),
        DType::BF16 => define_column::<CudaFlavor, half::bf16>(dims),
        DType::F64 => define_column::<CudaFlavor, f64>(dims),
        dtype => {
            return Err(CodegenError::UnsupportedDType {
                dtype,
                target: "CUDA",
            });
        }
    };
    sources(kernels, compile_cuda)
}

/// The WGSL source of the column sum of `dtype` over `dims` (both kernels of a split sum, in
/// launch order).
pub fn wgsl_column_source(dtype: DType, dims: ColumnDims) -> Result<String, CodegenError> {
    let kernels = match dtype {
        DType::F32 | DType::Flex32 => define_column::<WgslFlavor, f32>(dims),
        dtype => {
            return Err(CodegenError::UnsupportedDType {
                dtype,
                target: "WGSL",
            });
        }
    };
    sources(kernels, compile_wgsl)
}

/// The definition of `members` column sums over `dims` launched together
/// ([`launch_column_sums`]).
fn define_column_sums<Fl: Flavor, E: Float>(
    dims: ColumnDims,
    members: usize,
) -> (cubecl::prelude::KernelDefinition, StorageType) {
    let client = OfflineRuntime::<Fl>::client(&StubDevice);
    let [ux, uy] = dims.cube_dim();
    let settings = KernelSettings::default()
        .cube_dim(CubeDim::new_2d(ux, uy))
        .address_type(AddressType::U32);
    let k = column::column_sums::ColumnSums::<E, OfflineRuntime<Fl>>::new(
        settings,
        client,
        array_args::<E>(members),
        array_args::<E>(members),
        members,
        dims.reduced,
        dims.inner,
        dims.columns(),
        dims.divisor,
        dims.groups(),
    );
    (k.define(), k.address_type())
}

/// The CUDA C++ source of `members` column sums of `dtype` over `dims` launched together.
pub fn cuda_column_sums_source(
    dtype: DType,
    dims: ColumnDims,
    members: usize,
) -> Result<String, CodegenError> {
    let (definition, address) = match dtype {
        DType::F32 | DType::Flex32 => define_column_sums::<CudaFlavor, f32>(dims, members),
        DType::F16 => define_column_sums::<CudaFlavor, half::f16>(dims, members),
        DType::BF16 => define_column_sums::<CudaFlavor, half::bf16>(dims, members),
        DType::F64 => define_column_sums::<CudaFlavor, f64>(dims, members),
        dtype => {
            return Err(CodegenError::UnsupportedDType {
                dtype,
                target: "CUDA",
            });
        }
    };
    compile_cuda(definition, address)
}

/// The WGSL source of `members` column sums of `dtype` over `dims` launched together.
pub fn wgsl_column_sums_source(
    dtype: DType,
    dims: ColumnDims,
    members: usize,
) -> Result<String, CodegenError> {
    let (definition, address) = match dtype {
        DType::F32 | DType::Flex32 => define_column_sums::<WgslFlavor, f32>(dims, members),
        dtype => {
            return Err(CodegenError::UnsupportedDType {
                dtype,
                target: "WGSL",
            });
        }
    };
    compile_wgsl(definition, address)
}

fn compile_cuda(
    definition: cubecl::prelude::KernelDefinition,
    address: StorageType,
) -> Result<String, CodegenError> {
    let options = cubecl_cpp::shared::CompilationOptions {
        warp_size: 32,
        supports_features: cubecl_cpp::shared::CppSupportedFeatures {
            fast_math: true,
            grid_constants: true,
            ..Default::default()
        },
    };
    // CubeCL's C++ compiler numbers temporaries (`_tmp_N`, the bf16 pair operations) with one
    // process-wide counter, reset after each compile: concurrent compiles would interleave
    // their numbers, so the offline compiles take turns.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    CudaCompiler::default()
        .compile(definition, &options, ExecutionMode::Unchecked, address)
        .map(|k| sorted_declarations(&sorted_vector_types(&k.to_string())))
        .map_err(|e| CodegenError::Compile(format!("{e:?}")))
}

/// The number of a declaration line of a mutable register without initializer (`float
/// l_mut_3;` in CUDA, `var l_mut_3: f32;` in WGSL), if `line` is one.
fn declared_register(line: &str) -> Option<u32> {
    let line = line.trim_end();
    if !line.ends_with(';') || line.contains('=') {
        return None;
    }
    let at = line.find("l_mut_")?;
    let digits: String = line[at + 6..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let rest = &line[at + 6 + digits.len()..];
    let declaration = rest == ";" || rest.starts_with(": ");
    declaration.then(|| digits.parse().ok()).flatten()
}

/// `source` with its runs of mutable-register declarations in register order. CubeCL's
/// compilers collect a function's mutable registers in a hash set and declare them in its
/// iteration order, which changes between runs (seen in the column sum's WGSL: `l_mut_3` and
/// `l_mut_9` swapped); a declaration without initializer does not depend on its neighbours, so
/// sorting makes the text deterministic for review.
fn sorted_declarations(source: &str) -> String {
    let lines: Vec<&str> = source.split_inclusive('\n').collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < lines.len() {
        let mut run: Vec<(u32, &str)> = Vec::new();
        while let Some(n) = lines.get(i).and_then(|l| declared_register(l)) {
            run.push((n, lines[i]));
            i += 1;
        }
        if run.is_empty() {
            out.push_str(lines[i]);
            i += 1;
        } else {
            run.sort_by_key(|(n, _)| *n);
            out.extend(run.into_iter().map(|(_, l)| l));
        }
    }
    out
}

/// `source` with its runs of vector type definitions (`struct __align__(…) name { … };`) in
/// name order. CubeCL's C++ compiler keeps the types a kernel uses in a hash set and prints
/// them in its iteration order, which changes between runs (seen with bf16 vectors: pairs and
/// octets); each is a standalone struct of built-in members, so their order is immaterial to
/// the compiler and sorting makes the text deterministic for review.
fn sorted_vector_types(source: &str) -> String {
    let lines: Vec<&str> = source.split_inclusive('\n').collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < lines.len() {
        let mut run: Vec<String> = Vec::new();
        while i < lines.len() && lines[i].starts_with("struct __align__(") {
            let mut block = String::new();
            while i < lines.len() {
                block.push_str(lines[i]);
                i += 1;
                if block.ends_with("};\n") {
                    break;
                }
            }
            run.push(block);
        }
        if run.is_empty() {
            out.push_str(lines[i]);
            i += 1;
        } else {
            run.sort();
            out.extend(run);
        }
    }
    out
}

/// The WGSL source of `kernel` over `layout`, as CubeCL's wgpu runtime compiles it (unchecked
/// launch).
pub fn wgsl_source(kernel: &FusedKernel, layout: &LaunchLayout) -> Result<String, CodegenError> {
    let (definition, address) = match kernel.dtype {
        DType::F32 | DType::Flex32 => define::<WgslFlavor, f32>(kernel, layout),
        dtype => {
            return Err(CodegenError::UnsupportedDType {
                dtype,
                target: "WGSL",
            });
        }
    };
    compile_wgsl(definition, address)
}

/// The WGSL source of a horizontal kernel over `members`.
pub fn wgsl_horizontal_source(
    members: &[(&FusedKernel, &LaunchLayout)],
) -> Result<String, CodegenError> {
    let (definition, address) = match members.first().map_or(DType::F32, |(k, _)| k.dtype) {
        DType::F32 | DType::Flex32 => define_horizontal::<WgslFlavor, f32>(members),
        dtype => {
            return Err(CodegenError::UnsupportedDType {
                dtype,
                target: "WGSL",
            });
        }
    };
    compile_wgsl(definition, address)
}

fn compile_wgsl(
    definition: cubecl::prelude::KernelDefinition,
    address: StorageType,
) -> Result<String, CodegenError> {
    cubecl_wgpu::WgslCompiler::default()
        .compile(
            definition,
            &cubecl::WgpuCompilationOptions::default(),
            ExecutionMode::Unchecked,
            address,
        )
        .map(|k| sorted_declarations(&k.to_string()))
        .map_err(|e| CodegenError::Compile(format!("{e:?}")))
}

#[cfg(test)]
mod tests {
    use super::sorted_declarations;

    /// The declarations of a function's mutable registers come out in register order whatever
    /// order the compiler printed them in (it iterates a hash set); nothing else moves.
    #[test]
    fn register_declarations_are_sorted_and_nothing_else_moves() {
        let wgsl = "fn f() {\nvar l_mut_9: u32;\nvar l_mut_3: f32;\nl_mut_3 = f32(0.0);\nlet b = 1u;\nlet a = 2u;\n}\n";
        assert_eq!(
            sorted_declarations(wgsl),
            "fn f() {\nvar l_mut_3: f32;\nvar l_mut_9: u32;\nl_mut_3 = f32(0.0);\nlet b = 1u;\nlet a = 2u;\n}\n"
        );
        let cuda = "uint32 l_mut_12;\nfloat l_mut_3;\nl_mut_3 = float(0.0);\n";
        assert_eq!(
            sorted_declarations(cuda),
            "float l_mut_3;\nuint32 l_mut_12;\nl_mut_3 = float(0.0);\n"
        );
    }
}
