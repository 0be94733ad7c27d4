//! The CPU kernel target: a graph's fused kernels as C, built by the system compiler, run on
//! the tensors of a CPU inner backend (Flex's `FlexTensor`, NdArray's `NdArrayTensor`).
//!
//! A C kernel is specialized on its iteration shape and on its inputs' strides (constants of
//! the source: `burn_compile_codegen_c`), and those strides are only known when the inputs
//! exist: an input may be a view (transposed, sliced, flipped) made by the inner backend inside
//! the graph. So a replay that meets a kernel over layouts it has not built yet runs that
//! kernel's operations on Flex, as eager Burn would, and keeps its C function; at the end of
//! the replay every such function of the graph is built into one shared object (one compiler
//! run per graph, or none where the disk cache has it), and the next replays call them. The
//! first run of a graph is its eager run; a graph whose layouts never change (the usual case)
//! is built once.
//!
//! Kernels run on the caller's threads: a large kernel's tasks (rows, or blocks of a long
//! row's columns) are split over rayon's global pool, the pool Flex's and NdArray's own ops
//! use, so the two never compete for the cores.
//!
//! Without a C compiler, or when a build fails, the kernels' operations keep running on the
//! inner backend (one warning per distinct failure; an error in strict mode:
//! `InnerDevice::finish_replay`).

use super::{KernelTarget, Lowering, Work};
use crate::RuntimeConfig;
use crate::counters::KernelBuild;
use crate::disk;
use burn_backend::DType;
use burn_backend::{TensorData, TensorMetadata};
use burn_compile_codegen_c::{
    CFunction, KernelFn, Toolchain, Unit, c_function, c_symbolic_function, c_unit, symbolic_args,
    symbolic_layout, symbolic_tasks,
};
use burn_compile_schedule::{ColumnGroup, FusedKernel, column_layout};
use burn_flex::FlexTensor;
use burn_ndarray::NdArrayTensor;
use burn_std::{Bytes, Shape};
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use std::any::{Any, TypeId};
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// What a C function is specialized on besides its kernel: the iteration shape, each input's
/// strides (0 where it is not walked: a broadcast dimension or one of size 1), and which
/// dimensions are symbolic (empty: none; a symbolic function's layout is normalized by
/// `symbolic_layout`, its sizes and strides read at each call).
type Layout = (Vec<usize>, Vec<Vec<isize>>, Vec<bool>);

/// A built kernel.
struct Built {
    function: KernelFn,
    /// A specialized function's tasks and whether they split among threads (a symbolic
    /// function's are those of each call).
    tasks: usize,
    parallel: bool,
    symbolic: bool,
    /// The shared object holding `function`.
    _unit: Arc<Unit>,
}

enum Entry {
    /// Met in a replay; built at the end of it.
    Pending,
    Built(Arc<Built>),
    /// No C function (its build failed, reported then, for this reason): the operations run
    /// on Flex, or, in strict mode, the failure is an error at each call.
    Failed(Arc<str>),
}

/// The compiler settings of the device ([`RuntimeConfig`]'s `c_compiler`, `c_flags`,
/// `cache_dir`, `disk_cache`, `cache_max_bytes`).
#[derive(Clone, PartialEq, Eq)]
struct Settings {
    compiler: Option<String>,
    flags: Option<String>,
    cache_dir: PathBuf,
    disk_cache: bool,
    max_bytes: u64,
}

impl Settings {
    fn of(config: &RuntimeConfig) -> Settings {
        Settings {
            compiler: config.c_compiler.clone(),
            flags: config.c_flags.clone(),
            cache_dir: config.cache_dir.clone(),
            disk_cache: config.disk_cache,
            max_bytes: config.cache_max_bytes,
        }
    }
}

/// The disk cache's kind of C shared objects.
const C_UNIT: &str = "c-unit";

/// `source` built by `toolchain` and loaded: from the disk cache (keyed by the source and the
/// toolchain's fingerprint) where it holds a verified object, else compiled and written to it.
/// Whether it came from the cache.
fn build_unit(
    toolchain: &Toolchain,
    source: &str,
    settings: &Settings,
) -> Result<(Unit, bool), String> {
    if !settings.disk_cache {
        let work = std::env::temp_dir().join("burn-compile-work");
        let unit = toolchain.build(source, &work).map_err(|e| e.to_string())?;
        return Ok((unit, false));
    }
    let cache = disk::cache_at(settings.cache_dir.clone(), settings.max_bytes);
    let work = settings.cache_dir.join("work");
    let mut material = source.as_bytes().to_vec();
    material.push(0);
    material.extend_from_slice(toolchain.fingerprint().as_bytes());
    let key = cache.key(C_UNIT, &material);
    if let Some(object) = disk::get(&cache, C_UNIT, &key) {
        match Unit::load(&object, &work) {
            Ok(unit) => return Ok((unit, true)),
            Err(e) => tracing::warn!(
                target: "burn_compile::cache",
                "the cached C unit {key} could not be loaded ({e}); building it again"
            ),
        }
    }
    let object = toolchain
        .compile(source, &work)
        .map_err(|e| e.to_string())?;
    disk::put(&cache, C_UNIT, &key, &object);
    let unit = Unit::load(&object, &work).map_err(|e| e.to_string())?;
    Ok((unit, false))
}

#[derive(Default)]
struct State {
    /// Per kernel (found by reference at each call: no copy of its program), per layout.
    entries: FxHashMap<FusedKernel, FxHashMap<Layout, Entry>>,
    /// What was met in the current replay, in order (function `k{i}` of the next unit).
    pending_keys: Vec<(FusedKernel, Layout)>,
    pending: Vec<CFunction>,
    settings: Option<Settings>,
    /// The toolchain of `settings`, probed at the first build (`Err`: why there is none).
    toolchain: Option<Result<Toolchain, String>>,
    /// [`RuntimeConfig::strict`]: a kernel whose build failed is an error at each call.
    strict: bool,
}

/// A CPU backend's float tensor, as the C kernels read and write it.
pub(crate) trait HostTensor: TensorMetadata + Send + Sync + Sized + 'static {
    /// Element types the backend stores (and the C kernels compute).
    const DTYPES: &'static [DType];
    fn element_type(&self) -> DType;
    /// Its strides in elements (negative in a flipped view), one per dimension.
    fn element_strides(&self) -> Vec<isize>;
    /// The address of its first element (a flipped view is read backwards from it).
    fn first_element(&self) -> *const c_void;
    /// A contiguous tensor of `shape` over `bytes`.
    fn contiguous(bytes: Bytes, shape: Shape, dtype: DType) -> Self;
}

impl HostTensor for FlexTensor {
    const DTYPES: &'static [DType] = &[DType::F32, DType::F64, DType::F16, DType::BF16];

    fn element_type(&self) -> DType {
        self.dtype()
    }

    fn element_strides(&self) -> Vec<isize> {
        self.layout().strides().to_vec()
    }

    fn first_element(&self) -> *const c_void {
        let start = self.layout().start_offset() * self.dtype().size();
        self.bytes().as_ptr().wrapping_add(start).cast()
    }

    fn contiguous(bytes: Bytes, shape: Shape, dtype: DType) -> Self {
        FlexTensor::new(bytes, burn_flex::Layout::contiguous(shape), dtype)
    }
}

impl HostTensor for NdArrayTensor {
    // NdArray has no half types.
    const DTYPES: &'static [DType] = &[DType::F32, DType::F64];

    fn element_type(&self) -> DType {
        TensorMetadata::dtype(self)
    }

    fn element_strides(&self) -> Vec<isize> {
        match self {
            NdArrayTensor::F32(s) => s.view().strides().to_vec(),
            NdArrayTensor::F64(s) => s.view().strides().to_vec(),
            _ => Vec::new(),
        }
    }

    fn first_element(&self) -> *const c_void {
        match self {
            NdArrayTensor::F32(s) => s.view().as_ptr().cast(),
            NdArrayTensor::F64(s) => s.view().as_ptr().cast(),
            _ => std::ptr::null(),
        }
    }

    fn contiguous(bytes: Bytes, shape: Shape, dtype: DType) -> Self {
        // A Vec's bytes: NdArray takes the vector back without a copy.
        NdArrayTensor::from_data(TensorData {
            bytes,
            shape,
            dtype,
        })
    }
}

pub(crate) struct CpuTarget<T> {
    state: Mutex<State>,
    tensors: std::marker::PhantomData<fn() -> T>,
}

/// The CPU target, when `T` is Flex's or NdArray's float tensor.
pub(crate) fn target<T: 'static>() -> Option<Arc<dyn KernelTarget<T>>> {
    fn of<H: HostTensor, T: 'static>() -> Option<Arc<dyn KernelTarget<T>>> {
        if TypeId::of::<T>() != TypeId::of::<H>() {
            return None;
        }
        let target: Arc<dyn KernelTarget<H>> = Arc::new(CpuTarget::<H> {
            state: Mutex::new(State::default()),
            tensors: std::marker::PhantomData,
        });
        // `T` is `H`: the downcast is the identity.
        let any: Box<dyn Any> = Box::new(target);
        any.downcast::<Arc<dyn KernelTarget<T>>>().ok().map(|t| *t)
    }
    of::<FlexTensor, T>().or_else(of::<NdArrayTensor, T>)
}

impl<T> CpuTarget<T> {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The pointers of one call, shared by the threads that split its tasks.
struct Call {
    inputs: Vec<*const c_void>,
    outputs: Vec<*mut c_void>,
    scalars: Vec<f64>,
}

// SAFETY: the pointers are only read by the kernel's tasks, which write disjoint rows (or
// column blocks) of the outputs; the buffers outlive the call.
unsafe impl Sync for Call {}

impl Call {
    /// Runs tasks `begin..end` of `built`.
    ///
    /// # Safety
    /// `built` was generated for this kernel over the shapes and input strides of this call's
    /// buffers; the outputs have room for every element it writes; the tasks are in range.
    unsafe fn run(&self, built: &Built, begin: usize, end: usize) {
        // SAFETY: this function's contract; the pointer arrays live in `self`.
        unsafe {
            (built.function)(
                self.inputs.as_ptr(),
                self.outputs.as_ptr(),
                self.scalars.as_ptr(),
                begin as i64,
                end as i64,
            )
        }
    }
}

/// A newly allocated output: its elements, written by the kernel before they are read.
enum Output {
    F32(Vec<f32>),
    F64(Vec<f64>),
    Half(Vec<u16>),
}

impl Output {
    fn new(dtype: DType, len: usize) -> Output {
        match dtype {
            DType::F64 => Output::F64(Vec::with_capacity(len)),
            DType::F16 | DType::BF16 => Output::Half(Vec::with_capacity(len)),
            _ => Output::F32(Vec::with_capacity(len)),
        }
    }

    fn pointer(&mut self) -> *mut c_void {
        match self {
            Output::F32(v) => v.as_mut_ptr().cast(),
            Output::F64(v) => v.as_mut_ptr().cast(),
            Output::Half(v) => v.as_mut_ptr().cast(),
        }
    }

    /// The tensor, once the kernel wrote its `len` elements.
    ///
    /// # Safety
    /// All `len` elements were written.
    unsafe fn into_tensor<T: HostTensor>(self, shape: Shape, dtype: DType) -> T {
        let len = shape.num_elements();
        // SAFETY (each `set_len`): the vector was made with capacity `len` (`Output::new`)
        // and the kernel wrote all `len` elements (this function's contract).
        let bytes = match self {
            Output::F32(mut v) => {
                unsafe { v.set_len(len) };
                Bytes::from_elems(v)
            }
            Output::F64(mut v) => {
                unsafe { v.set_len(len) };
                Bytes::from_elems(v)
            }
            Output::Half(mut v) => {
                unsafe { v.set_len(len) };
                Bytes::from_elems(v)
            }
        };
        T::contiguous(bytes, shape, dtype)
    }
}

impl<T: HostTensor> KernelTarget<T> for CpuTarget<T> {
    fn lower(&self, work: Lowering<'_>) -> bool {
        match work {
            Lowering::Kernel(kernel) => T::DTYPES.contains(&kernel.dtype),
            // Summed on the host, no C: f32 and f64.
            Lowering::Column(group) => {
                matches!(group.dtype, DType::F32 | DType::F64) && T::DTYPES.contains(&group.dtype)
            }
            // Host sums gain nothing from one call: each runs on its own.
            // Flex's and NdArray's products read strided views in place: a copy only costs.
            Lowering::Matmul(_)
            | Lowering::Attention(_)
            | Lowering::HorizontalColumns(_)
            | Lowering::ViewCopy(_) => false,
        }
    }

    fn max_kernel_buffers(&self) -> usize {
        // A C function takes arrays of pointers: no binding limit.
        usize::MAX
    }

    fn configure(&self, config: &RuntimeConfig) {
        let settings = Settings::of(config);
        let mut state = self.state();
        state.strict = config.strict;
        if state.settings.as_ref() != Some(&settings) {
            // Another compiler or other flags: every kernel is built again with them (a
            // failed build may now succeed; a built one takes the new flags). Units the disk
            // cache holds for them load without compiling.
            if state.settings.is_some() {
                state.entries.clear();
            }
            state.settings = Some(settings);
            state.toolchain = None;
        }
    }

    fn launch(&self, work: Work<'_, T>) -> Result<Option<Vec<T>>, String> {
        match work {
            Work::Kernel {
                kernel,
                shape,
                inputs,
                scalars,
                dynamic,
                ..
            } => self.fused_kernel(kernel, shape, inputs, scalars, dynamic),
            Work::Horizontal { kernels } => self.horizontal(kernels),
            Work::Column {
                group,
                input,
                out_shape,
            } => Ok(column_sum(group, input, out_shape).map(|out| vec![out])),
            // The backend's own matmul, attention and convolutions; a reshape that needs a
            // copy copies in the backend's own kernel.
            Work::Matmul { .. }
            | Work::Attention { .. }
            | Work::ReshapeCopy { .. }
            | Work::Conv2d { .. }
            | Work::HorizontalColumns { .. } => Ok(None),
        }
    }

    fn finish_replay(&self) -> Option<KernelBuild> {
        let (pending, settings, toolchain) = {
            let mut state = self.state();
            if state.pending.is_empty() {
                return None;
            }
            let settings = state
                .settings
                .clone()
                .unwrap_or_else(|| Settings::of(&RuntimeConfig::default()));
            let toolchain = state
                .toolchain
                .get_or_insert_with(|| {
                    Toolchain::new(settings.compiler.as_deref(), settings.flags.as_deref()).map_err(
                        |e| {
                            format!(
                                "{e}; install one, or name it with BURN_COMPILE_CC \
                                 (RuntimeConfig::c_compiler)"
                            )
                        },
                    )
                })
                .clone();
            let pending = (
                std::mem::take(&mut state.pending_keys),
                std::mem::take(&mut state.pending),
            );
            (pending, settings, toolchain)
        };
        let (keys, functions) = pending;
        let start = Instant::now();
        let kernels = functions.len();
        tracing::debug!(
            target: "burn_compile::output_code",
            "building {kernels} C kernel(s) in {}",
            settings.cache_dir.display()
        );
        let built = toolchain.and_then(|toolchain| {
            let (unit, cached) =
                crate::progress::long_work(&format!("building {kernels} C kernel(s)"), || {
                    build_unit(&toolchain, &c_unit(&functions), &settings)
                })?;
            let unit = Arc::new(unit);
            functions
                .iter()
                .enumerate()
                .zip(&keys)
                .map(|((i, f), (_, layout))| {
                    let function = unit.kernel(&format!("k{i}")).map_err(|e| e.to_string())?;
                    Ok(Arc::new(Built {
                        function,
                        tasks: f.tasks,
                        parallel: f.parallel,
                        symbolic: layout.2.iter().any(|d| *d),
                        _unit: unit.clone(),
                    }))
                })
                .collect::<Result<Vec<_>, String>>()
                .map(|built| (cached, built))
        });
        let mut state = self.state();
        let (cached, error) = match built {
            Ok((cached, built)) => {
                for ((kernel, layout), built) in keys.into_iter().zip(built) {
                    let layouts = state.entries.entry(kernel).or_default();
                    layouts.insert(layout, Entry::Built(built));
                }
                (cached, None)
            }
            Err(error) => {
                let why: Arc<str> = error.as_str().into();
                for (kernel, layout) in keys {
                    let layouts = state.entries.entry(kernel).or_default();
                    layouts.insert(layout, Entry::Failed(why.clone()));
                }
                (false, Some(error))
            }
        };
        Some(KernelBuild {
            kernels,
            time: start.elapsed(),
            cached,
            error,
        })
    }
}

/// A column sum on the host ([`ColumnGroup`]): `input` read as `[outer, reduced, inner,
/// trailing]` (or channels-last, as a plain column sum), summed in f64 and divided by the
/// group's divisor, the outputs split among the pool's threads. `None` for another dtype or
/// layout (the sums run on the inner backend).
fn column_sum<T: HostTensor>(group: &ColumnGroup, input: &T, out_shape: &Shape) -> Option<T> {
    let dtype = input.element_type();
    let strides: Vec<usize> = input
        .element_strides()
        .into_iter()
        .map(usize::try_from)
        .collect::<Result<_, _>>()
        .ok()?;
    let shape = input.shape();
    let [outer, reduced, inner, trailing] = column_layout(group.dims, &shape, &strides)?;
    let (len, columns) = (shape.num_elements(), outer * inner);
    if dtype != group.dtype || len != outer * reduced * inner * trailing {
        return None;
    }
    if out_shape.num_elements() != columns {
        return None;
    }
    let divisor = group.divisor as f64;
    // Each task sums a few adjacent outputs: with a trailing dimension each output's runs are
    // contiguous; without, the task walks the rows, adding a row's slice of adjacent columns
    // (each cache line read once).
    fn sums<E: Copy + Send + Sync>(
        x: &[E],
        [outer, reduced, inner, trailing]: [usize; 4],
        divisor: f64,
        to: impl Fn(E) -> f64 + Sync,
        from: impl Fn(f64) -> E + Sync,
    ) -> Vec<E> {
        const CHUNK: usize = 64;
        let chunks = inner.div_ceil(CHUNK);
        let parts: Vec<Vec<E>> = (0..outer * chunks)
            .into_par_iter()
            .map(|task| {
                let (o, k0) = (task / chunks, task % chunks * CHUNK);
                let k1 = (k0 + CHUNK).min(inner);
                let mut total = vec![0f64; k1 - k0];
                for r in 0..reduced {
                    let row = (o * reduced + r) * inner;
                    if trailing == 1 {
                        for (t, v) in total.iter_mut().zip(&x[row + k0..row + k1]) {
                            *t += to(*v);
                        }
                    } else {
                        for (t, k) in total.iter_mut().zip(k0..k1) {
                            let run = (row + k) * trailing;
                            *t += x[run..run + trailing].iter().map(|v| to(*v)).sum::<f64>();
                        }
                    }
                }
                total.into_iter().map(|t| from(t / divisor)).collect()
            })
            .collect();
        parts.concat()
    }
    let dims = [outer, reduced, inner, trailing];
    let bytes = match dtype {
        DType::F32 => {
            // SAFETY: the tensor's memory holds `len` f32 values from its first element in the
            // order `dims` reads (`column_layout` checked its strides).
            let x = unsafe { std::slice::from_raw_parts(input.first_element().cast::<f32>(), len) };
            Bytes::from_elems(sums(x, dims, divisor, f64::from, |v| v as f32))
        }
        DType::F64 => {
            // SAFETY: as above, for f64 values.
            let x = unsafe { std::slice::from_raw_parts(input.first_element().cast::<f64>(), len) };
            Bytes::from_elems(sums(x, dims, divisor, |v| v, |v| v))
        }
        _ => return None,
    };
    Some(T::contiguous(bytes, out_shape.clone(), dtype))
}

impl<T: HostTensor> CpuTarget<T> {
    /// Runs a C kernel (in-place slots and vectorization are the compiler's business here).
    fn fused_kernel(
        &self,
        kernel: &FusedKernel,
        shape: &Shape,
        inputs: &[T],
        scalars: &[f64],
        dynamic: &[bool],
    ) -> Result<Option<Vec<T>>, String> {
        let Some(call) = self.prepare(kernel, shape, inputs, scalars, dynamic)? else {
            return Ok(None);
        };
        let threads = rayon::current_num_threads();
        // SAFETY (each `run`, then `outputs`): the chunks split `0..tasks` exactly, and all of
        // them ran before the outputs are taken.
        if call.parallel && threads > 1 {
            // A few chunks per thread: rows cost alike, but a thread may be late to start.
            let chunks = (threads * 4).min(call.tasks);
            (0..chunks).into_par_iter().for_each(|c| unsafe {
                call.run(c * call.tasks / chunks, (c + 1) * call.tasks / chunks)
            });
        } else if call.tasks > 0 {
            unsafe { call.run(0, call.tasks) };
        }
        Ok(Some(unsafe { call.outputs() }))
    }

    /// Runs the kernels of a horizontal group in one parallel region: every member's tasks
    /// (split in chunks where the member is large) shared by the pool's threads, so that the
    /// small kernels of an optimizer step run side by side instead of one after the other on
    /// the caller's thread. `None` when a member's C function is not built yet (it is built at
    /// the end of this replay; the caller launches the members one by one meanwhile).
    fn horizontal(&self, kernels: &[Work<'_, T>]) -> Result<Option<Vec<T>>, String> {
        let mut calls = Vec::with_capacity(kernels.len());
        let mut missing = false;
        for work in kernels {
            let Work::Kernel {
                kernel,
                shape,
                inputs,
                scalars,
                dynamic,
                ..
            } = work
            else {
                return Err("a horizontal group member that is not a kernel".into());
            };
            match self.prepare(kernel, shape, inputs, scalars, dynamic)? {
                Some(call) => calls.push(call),
                // Every member is still looked up, so all missing ones build in this replay.
                None => missing = true,
            }
        }
        if missing {
            return Ok(None);
        }
        let threads = rayon::current_num_threads();
        let elements: usize = calls.iter().map(|c| c.elements).sum();
        if threads > 1 && elements >= burn_compile_codegen_c::PARALLEL_ELEMENTS {
            // (call, begin, end) for every chunk of every member.
            let mut chunks = Vec::new();
            for (i, call) in calls.iter().enumerate() {
                let n = if call.parallel {
                    (threads * 4).min(call.tasks)
                } else {
                    call.tasks.min(1)
                };
                chunks.extend((0..n).map(|c| (i, c * call.tasks / n, (c + 1) * call.tasks / n)));
            }
            // SAFETY: each member's chunks split its `0..tasks` exactly.
            chunks
                .into_par_iter()
                .for_each(|(i, begin, end)| unsafe { calls[i].run(begin, end) });
        } else {
            for call in &calls {
                if call.tasks > 0 {
                    // SAFETY: all of the member's tasks.
                    unsafe { call.run(0, call.tasks) };
                }
            }
        }
        // SAFETY: every task of every member ran above.
        Ok(Some(
            calls
                .into_iter()
                .flat_map(|call| unsafe { call.outputs() })
                .collect(),
        ))
    }

    /// A C kernel's call, ready to run: `None` when its function is not built yet (met now:
    /// built at the end of the replay) or its build failed.
    fn prepare(
        &self,
        kernel: &FusedKernel,
        shape: &Shape,
        inputs: &[T],
        scalars: &[f64],
        dynamic: &[bool],
    ) -> Result<Option<Prepared<T>>, String> {
        let dims = shape.as_slice();
        let rank = dims.len();
        let mut strides = Vec::with_capacity(inputs.len());
        for (i, t) in inputs.iter().enumerate() {
            let own = t.element_strides();
            if t.element_type() != kernel.dtype || own.len() != rank {
                return Err(format!(
                    "input {i} is {:?} of rank {}, the kernel reads {:?} of rank {rank}",
                    t.element_type(),
                    own.len(),
                    kernel.dtype
                ));
            }
            let walked = |d: usize| dims[d] > 1 && !kernel.inputs[i][d];
            strides.push(
                (0..rank)
                    .map(|d| if walked(d) { own[d] } else { 0 })
                    .collect::<Vec<isize>>(),
            );
        }
        let symbolic = dynamic.iter().any(|d| *d);
        let (layout, extra): (Layout, Vec<f64>) = if symbolic {
            let normalized = symbolic_layout(kernel, dynamic, dims, &strides);
            let args = symbolic_args(dynamic, &normalized, dims, &strides);
            ((normalized.0, normalized.1, dynamic.to_vec()), args)
        } else {
            ((dims.to_vec(), strides, Vec::new()), Vec::new())
        };
        let built = {
            let mut state = self.state();
            let known = state.entries.get(kernel).and_then(|l| l.get(&layout));
            match known {
                Some(Entry::Built(built)) => built.clone(),
                Some(Entry::Pending) => return Ok(None),
                Some(Entry::Failed(why)) if state.strict => {
                    return Err(format!("its build failed: {why}"));
                }
                Some(Entry::Failed(_)) => return Ok(None),
                None => {
                    // First meeting of this kernel and layout: its C, built at the end of
                    // the replay.
                    let name = format!("k{}", state.pending.len());
                    let function = if symbolic {
                        let normalized = (layout.0.clone(), layout.1.clone());
                        c_symbolic_function(&name, kernel, dynamic, &normalized)
                    } else {
                        c_function(&name, kernel, dims, &layout.1)
                    };
                    let entry = match &function {
                        Ok(_) => Entry::Pending,
                        Err(e) => Entry::Failed(format!("no C function: {e}").into()),
                    };
                    let layouts = state.entries.entry(kernel.clone()).or_default();
                    layouts.insert(layout.clone(), entry);
                    return match function {
                        Ok(function) => {
                            state.pending_keys.push((kernel.clone(), layout));
                            state.pending.push(function);
                            Ok(None)
                        }
                        Err(e) => Err(format!("no C function: {e}")),
                    };
                }
            }
        };

        // Each view from its first element: negative strides walk back from it.
        let call_inputs = inputs.iter().map(HostTensor::first_element).collect();
        let out_shapes: Vec<Shape> = (0..kernel.outputs as usize)
            .map(|o| {
                let mut out = shape.clone();
                if kernel.row.as_ref().is_some_and(|r| r.row_outputs[o]) {
                    out[rank - 1] = 1;
                }
                out
            })
            .collect();
        let mut outputs: Vec<Output> = out_shapes
            .iter()
            .map(|s| Output::new(kernel.dtype, s.num_elements()))
            .collect();
        let mut call_scalars = scalars.to_vec();
        call_scalars.extend(extra);
        let call = Call {
            inputs: call_inputs,
            outputs: outputs.iter_mut().map(Output::pointer).collect(),
            scalars: call_scalars,
        };
        let (tasks, parallel) = if built.symbolic {
            symbolic_tasks(kernel, dims)
        } else {
            (built.tasks, built.parallel)
        };
        Ok(Some(Prepared {
            built,
            call,
            outputs,
            out_shapes,
            dtype: kernel.dtype,
            tasks,
            parallel,
            elements: shape.num_elements(),
            tensors: std::marker::PhantomData,
        }))
    }
}

/// A C kernel's call with its outputs allocated, not run yet.
struct Prepared<T> {
    built: Arc<Built>,
    call: Call,
    outputs: Vec<Output>,
    out_shapes: Vec<Shape>,
    dtype: DType,
    tasks: usize,
    parallel: bool,
    elements: usize,
    tensors: std::marker::PhantomData<fn() -> T>,
}

impl<T: HostTensor> Prepared<T> {
    /// Runs tasks `begin..end`.
    ///
    /// # Safety
    /// `begin..end` lies within `0..tasks`.
    unsafe fn run(&self, begin: usize, end: usize) {
        // SAFETY: the function was generated for this kernel over these shapes and these
        // inputs' strides (the key), reading each input from its view's first element; the
        // outputs have room for every element it writes; the range is within `0..tasks`
        // (this function's contract).
        unsafe { self.call.run(&self.built, begin, end) }
    }

    /// The outputs.
    ///
    /// # Safety
    /// Every task of `0..tasks` ran.
    unsafe fn outputs(self) -> Vec<T> {
        let Prepared {
            call,
            outputs,
            out_shapes,
            dtype,
            ..
        } = self;
        drop(call);
        outputs
            .into_iter()
            .zip(out_shapes)
            // SAFETY: the kernel's tasks wrote every element of every output (this function's
            // contract: they all ran).
            .map(|(o, s)| unsafe { o.into_tensor(s, dtype) })
            .collect()
    }
}
