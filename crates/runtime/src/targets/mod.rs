//! Generated kernels on the inner backend's own tensors.
//!
//! A plan's fused steps need a target that launches generated kernels on the inner backend's
//! float tensors: a CubeCL backend (`CubeBackend` on wgpu or CUDA, whose tensors are
//! `CubeTensor`s), or Flex and NdArray on the CPU (C kernels, `cpu`). Other inner
//! backends (Burn's own `Fusion`) have no target here, so their plans run every op on the
//! inner backend. The target is found from the float tensor type, so `Compiled<B>` needs no
//! bound beyond Burn's own.

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod conv_shapes;
#[cfg(feature = "cpu")]
mod cpu;
#[cfg(feature = "cuda")]
mod cublaslt;
#[cfg(feature = "cuda")]
mod cuda_graph;
#[cfg(feature = "cuda")]
mod cudnn;
pub mod rules;

use burn_backend::DType;
use burn_backend::ops::ConvOptions;
use burn_compile_schedule::{AttentionGroup, ColumnGroup, FusedKernel, MatmulGroup};
use burn_std::Shape;
use std::any::Any;
use std::sync::Arc;

/// What a library matmul applies to the product besides its bias and ReLU (read from the
/// group's recorded epilogue operations at replay): `α · product + residual`.
// Read by cuBLASLt's call; without CUDA no target has a library matmul.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct MatmulEpilogue<'a, T> {
    /// The fused scale (1 without one).
    pub alpha: f64,
    /// The fused residual add's other operand, read as the call's C with β = 1.
    pub residual: Option<&'a T>,
}

/// What a plan asks a target to take as one launch of its own, when the plan is compiled.
#[derive(Clone, Copy, Debug)]
pub enum Lowering<'a> {
    /// A fused group's generated kernel.
    Kernel(&'a FusedKernel),
    /// A library matmul with its epilogue.
    Matmul(&'a MatmulGroup),
    /// `softmax(q @ kᵀ / √d) @ v` as one kernel.
    Attention(&'a AttentionGroup),
    /// A chain of sums over leading dimensions as one column-sum kernel.
    Column(&'a ColumnGroup),
    /// Column sums like this group's (its dimensions and dtype) over independent tensors as
    /// one launch ([`Work::HorizontalColumns`]).
    HorizontalColumns(&'a ColumnGroup),
    /// A generated kernel copying a swapped view contiguous for the products that read it:
    /// asked of a target whose products would copy it at each read.
    ViewCopy(&'a FusedKernel),
}

/// One launch of a replay, over the inner backend's tensors.
pub enum Work<'a, T> {
    /// Generated kernel `kernel` over `shape`: `inputs` and `scalars` in kernel order; output
    /// `o` into the slot buffer `into[o]` (from [`KernelTarget::allocate`]) when given, else
    /// newly allocated; contiguous, of `shape` (a row kernel's row outputs: its row shape).
    /// `vectorize`: vector loads and stores where the buffers allow. `dynamic` (empty: none):
    /// the dimensions of a symbolic plan's kernel whose sizes are runtime arguments.
    Kernel {
        kernel: &'a FusedKernel,
        shape: &'a Shape,
        inputs: &'a [T],
        scalars: &'a [f64],
        into: &'a [Option<&'a T>],
        vectorize: bool,
        dynamic: &'a [bool],
    },
    /// The kernels of a horizontal group as one launch: `kernels` are its members'
    /// [`Work::Kernel`]s (never symbolic), independent of each other. The outputs are every
    /// member's, in member order. `Ok(None)`: not taken (no horizontal kernel on this target,
    /// or a member's kernel not built yet); the caller launches the members one by one.
    Horizontal { kernels: &'a [Work<'a, T>] },
    /// A library matmul over `inputs` (the operation's, in its order) and its `epilogue`, into
    /// a contiguous tensor of `out_shape` (in the buffer `into[0]` when given), and, where
    /// `group` fuses a bias gradient, `Σ_rows dy` into a vector of `out_shape`'s last dimension
    /// (in `into[1]` when given): the outputs in that order.
    Matmul {
        group: &'a MatmulGroup,
        inputs: &'a [T],
        epilogue: MatmulEpilogue<'a, T>,
        out_shape: &'a Shape,
        into: [Option<&'a T>; 2],
    },
    /// `softmax(q @ kᵀ / √d) @ v` into a new contiguous tensor.
    Attention {
        group: &'a AttentionGroup,
        q: &'a T,
        k: &'a T,
        v: &'a T,
    },
    /// `input` reshaped to `shape` where the inner backend would copy it (a view whose strides
    /// cannot express the new shape: attention's context, its heads swapped back), copied by a
    /// generated kernel.
    ReshapeCopy { input: &'a T, shape: &'a Shape },
    /// `input` summed as `group.dims` says (`[outer, reduced, inner]` over its middle
    /// dimension) into a new contiguous tensor of `out_shape`. `Ok(None)`: not taken (an
    /// input that is not contiguous); the caller runs the sums.
    Column {
        group: &'a ColumnGroup,
        input: &'a T,
        out_shape: &'a Shape,
    },
    /// The column sums of a horizontal column group as one launch: member `m` sums `inputs[m]`
    /// as `groups[m]` says into a new contiguous tensor of `out_shapes[m]` (the outputs in
    /// member order). `Ok(None)`: not taken (an input not contiguous, or no such kernel on
    /// this target); the caller runs each member as its own [`Work::Column`].
    HorizontalColumns {
        groups: &'a [&'a ColumnGroup],
        inputs: &'a [T],
        out_shapes: &'a [&'a Shape],
    },
    /// One pass of a 2-D convolution as one library call (cuDNN on CUDA), into a new
    /// contiguous (NCHW) tensor of `out_shape` and the inputs' dtype. `inputs`, by pass:
    /// [`ConvPass::Forward`] `[x, weight, bias?]`; [`ConvPass::Data`] `[weight, output_grad]`
    /// (`out_shape` is x's); [`ConvPass::Filter`] `[x, output_grad]` (`out_shape` is the
    /// weight's). `Ok(None)`: not taken (no library, or layouts, a dtype or a shape it does not
    /// take): the caller runs the operation on the inner backend.
    Conv2d {
        pass: ConvPass,
        inputs: &'a [T],
        options: &'a ConvOptions<2>,
        out_shape: &'a Shape,
    },
}

/// Which result of a 2-D convolution a [`Work::Conv2d`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConvPass {
    /// The convolution itself (`conv2d`), its bias added.
    Forward,
    /// The gradient of its input (`conv2d_x_backward`).
    Data,
    /// The gradient of its weight (`conv2d_weight_backward`).
    Filter,
}

/// What runs a device's executables on its inner backend's tensors (of type `T`): CubeCL on
/// wgpu and CUDA (with cuBLASLt), C on the CPU.
pub trait KernelTarget<T>: Send + Sync {
    /// Whether this target takes `work` as one launch of its own (else its operations run on
    /// the inner backend): asked when a plan is compiled.
    fn lower(&self, work: Lowering<'_>) -> bool;

    /// Buffers a generated kernel may bind for its inputs and outputs on this device (the
    /// schedule splits wider groups).
    fn max_kernel_buffers(&self) -> usize;

    /// One buffer per slot of a replay's memory plan (`bytes` each), reserved in one call;
    /// `None` when the target has none (every output is allocated on its own).
    fn allocate(&self, _bytes: &[u64]) -> Option<Vec<T>> {
        None
    }

    /// Runs `work`; returns its outputs. `Ok(None)`: not taken here, nothing changed — no
    /// kernel for these layouts yet (a target that builds at the end of the replay,
    /// [`KernelTarget::finish_replay`]), a build that failed (reported then), layouts the
    /// library cannot take, no copy needed: the caller runs the operations. `Err`: why the
    /// launch failed.
    /// No default: a target wrapping another must forward every kind (a default silently lost
    /// one).
    fn launch(&self, work: Work<'_, T>) -> Result<Option<Vec<T>>, String>;

    /// Takes the device's config (the compiler and flags of a target that builds kernels).
    fn configure(&self, _config: &crate::RuntimeConfig) {}

    /// The end of a replay: builds the kernels met for the first time in it (all in one
    /// build), if the target defers its builds; `None` when nothing was built.
    fn finish_replay(&self) -> Option<crate::counters::KernelBuild> {
        None
    }

    /// What records a replay's launches as one device graph (reduce-overhead mode), where the
    /// target's device has one (CUDA); `None` elsewhere (wgpu and the CPU replay the executable
    /// launch by launch).
    fn recorder(&self) -> Option<&dyn GraphRecorder> {
        None
    }

    /// Calls `task` once, on the device's own thread where it has one (CubeCL's device
    /// runner: there the runtime's calls made by `task` run directly, not queued as one task
    /// each), else here.
    fn on_device_thread(&self, task: &mut (dyn FnMut() + Send)) {
        task()
    }
}

/// A replay's launches recorded as one device graph, launched again later
/// ([`crate::recording`]). Tensors are the inner backend's handles, passed as `Any` (the
/// recorder checks their type): graph inputs and outputs may be of any dtype.
pub trait GraphRecorder: Send + Sync {
    /// A new buffer with the size and layout of tensor `t` (a recording's own copy of an
    /// input), of `t`'s type.
    fn like(&self, t: &dyn Any) -> Result<Box<dyn Any + Send>, String>;

    /// Starts recording the launches of this thread's stream.
    fn begin(&self) -> Result<(), String>;

    /// Ends the recording begun by [`GraphRecorder::begin`]: the graph, which reads `inputs`
    /// and writes `outputs` (the recording's own tensors), or why it cannot be launched. Ends
    /// the capture in every case. `scalars`: the kernel scalars the capture was given as
    /// markers, `(value, dtype of the kernel)` each — their places in the recorded kernels'
    /// arguments are found, and each launch writes the real values there; an error when one
    /// cannot be found exactly once (the graph holds markers: it must not be launched).
    fn end(
        &self,
        inputs: &[&dyn Any],
        outputs: &[&dyn Any],
        scalars: &[(f64, DType)],
    ) -> Result<Arc<dyn Recorded>, String>;

    /// Launches `recorded`: `inputs` (this replay's, in the recording's order) copied into its
    /// inputs, its kernel scalars set to `scalars` (in the order given to `end`), the graph,
    /// its outputs copied into new tensors laid out as `outputs` (the recording's own),
    /// returned in order. `batched`: only the inputs found elsewhere than where the last
    /// launch copied them from are copied, each direction's copies in one call.
    fn launch(
        &self,
        recorded: &Arc<dyn Recorded>,
        inputs: &[&dyn Any],
        outputs: &[&dyn Any],
        scalars: &[f64],
        batched: bool,
    ) -> Result<Vec<Box<dyn Any + Send>>, String>;

    /// Frees `recorded` once its launches have run.
    fn release(&self, recorded: Arc<dyn Recorded>);

    /// Whether no tensor but `t` holds `t`'s buffer: writing it changes no tensor anyone else
    /// holds.
    fn unshared(&self, t: &dyn Any) -> bool;

    /// A new buffer holding a copy of `t` (the copy ordered on this thread's stream), laid out
    /// as `t`.
    fn copy_of(&self, t: &dyn Any) -> Result<Box<dyn Any + Send>, String>;

    /// The device address where each tensor's buffer starts.
    fn addresses(&self, tensors: &[&dyn Any]) -> Result<Vec<u64>, String>;

    /// A slot over `t`'s buffer (as the memory plan's slots are) for an output of `shape` and
    /// `dtype`, when `t` is contiguous with that shape and dtype (so an output written there is
    /// read back as `t`'s values).
    fn slot(&self, t: &dyn Any, shape: &Shape, dtype: DType) -> Option<Box<dyn Any + Send>>;

    /// Launches `recorded` reading its own inputs and writing its own outputs, both in place
    /// (alternating recordings, [`crate::recording`]): `copies`, `(input index, this replay's
    /// tensor)`, are copied into those inputs first; its kernel scalars set to `scalars` as in
    /// [`GraphRecorder::launch`].
    fn launch_in_place(
        &self,
        recorded: &Arc<dyn Recorded>,
        copies: &[(usize, &dyn Any)],
        scalars: &[f64],
    ) -> Result<(), String>;
}

/// A recorded graph.
pub trait Recorded: Any + Send + Sync {
    /// Nodes of the device graph.
    fn nodes(&self) -> usize;
}

/// The kernel target of an inner backend whose float tensors are `T` on `device`, if it has
/// one.
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(unused_variables))]
pub fn target_for<T: 'static>(device: &dyn Any) -> Option<Arc<dyn KernelTarget<T>>> {
    #[cfg(feature = "cpu")]
    if let Some(t) = cpu::target::<T>() {
        return Some(t);
    }
    #[cfg(feature = "wgpu")]
    if let Some(t) = cube::target::<T, burn_wgpu::WgpuRuntime>(rules::WGPU_DTYPES, device) {
        return Some(t);
    }
    #[cfg(feature = "cuda")]
    if let Some(t) = cuda::target::<T>(device) {
        return Some(t);
    }
    None
}

/// Whether `T` is the float tensor of a raw CubeCL inner backend (wgpu, CUDA).
#[cfg(feature = "gpu")]
pub fn is_cubecl<T: 'static>() -> bool {
    let id = std::any::TypeId::of::<T>();
    #[cfg(feature = "wgpu")]
    if id == std::any::TypeId::of::<burn_cubecl::tensor::CubeTensor<burn_wgpu::WgpuRuntime>>() {
        return true;
    }
    #[cfg(feature = "cuda")]
    if id
        == std::any::TypeId::of::<
            burn_cubecl::tensor::CubeTensor<burn_cubecl::cubecl::cuda::CudaRuntime>,
        >()
    {
        return true;
    }
    let _ = id;
    false
}

#[cfg(feature = "cuda")]
pub(crate) use cube::{batch_folded, in_slot};

/// CUDA: generated kernels, cuBLASLt for the matmuls, and cuDNN for 2-D convolutions when asked
/// (`CompileConfig::cudnn`).
#[cfg(feature = "cuda")]
mod cuda {
    use super::cube::CubeTarget;
    use super::cublaslt::CuBlasLt;
    use super::cudnn::CuDnn;
    use super::{KernelTarget, Lowering, Work};
    use burn_cubecl::cubecl::cuda::CudaRuntime;
    use burn_cubecl::tensor::CubeTensor;
    use std::any::{Any, TypeId};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, OnceLock};

    type Tensor = CubeTensor<CudaRuntime>;

    struct CudaTarget {
        kernels: CubeTarget<CudaRuntime>,
        /// Reduce-overhead mode's recordings (CUDA graphs).
        graphs: super::cuda_graph::CudaGraphs,
        /// cuBLASLt, or `None` (warned once) when its library cannot be loaded: the inner
        /// backend's matmul (cubek) runs instead.
        blas: Option<&'static CuBlasLt>,
        /// `RuntimeConfig::pad_matmul_dims`, as last configured.
        pad_matmul_dims: AtomicBool,
        /// `RuntimeConfig::tune_matmuls`, as last configured.
        tune_matmuls: AtomicBool,
        /// The disk cache timed matmul algorithms are kept in, as last configured (`None`:
        /// `RuntimeConfig::disk_cache` off).
        matmul_cache: std::sync::Mutex<Option<Arc<crate::disk::DiskCache>>>,
    }

    /// cuBLASLt for the process, loaded once.
    fn blas() -> Option<&'static CuBlasLt> {
        static BLAS: OnceLock<Option<CuBlasLt>> = OnceLock::new();
        library(
            &BLAS,
            CuBlasLt::load,
            "cuBLASLt",
            "matmuls run on the inner backend's own kernels (cubek)",
        )
    }

    /// cuDNN for the process, loaded the first time a convolution asks for it (only when
    /// `CompileConfig::cudnn` is on: a process that does not use it neither loads it nor warns).
    fn dnn() -> Option<&'static CuDnn> {
        static DNN: OnceLock<Option<CuDnn>> = OnceLock::new();
        library(
            &DNN,
            CuDnn::load,
            "cuDNN",
            "convolutions run on the inner backend's own kernels",
        )
    }

    /// A vendor library loaded once per process; a library that cannot be loaded is said once,
    /// with what runs instead.
    fn library<L>(
        cell: &'static OnceLock<Option<L>>,
        load: fn() -> Result<L, String>,
        name: &str,
        instead: &str,
    ) -> Option<&'static L> {
        cell.get_or_init(|| match load() {
            Ok(library) => Some(library),
            Err(e) => {
                tracing::warn!(
                    target: "burn_compile::output_code",
                    "burn-compile: {name} cannot be loaded ({e}); {instead}"
                );
                None
            }
        })
        .as_ref()
    }

    pub fn target<T: 'static>(device: &dyn Any) -> Option<Arc<dyn KernelTarget<T>>> {
        if TypeId::of::<T>() != TypeId::of::<Tensor>() {
            return None;
        }
        let device = device.downcast_ref()?;
        let target: Arc<dyn KernelTarget<Tensor>> = Arc::new(CudaTarget {
            kernels: CubeTarget::new(super::rules::CUDA_DTYPES, device),
            graphs: super::cuda_graph::CudaGraphs::new(
                <CudaRuntime as burn_cubecl::cubecl::Runtime>::client(device),
            ),
            blas: blas(),
            pad_matmul_dims: AtomicBool::new(crate::RuntimeConfig::default().pad_matmul_dims),
            tune_matmuls: AtomicBool::new(crate::RuntimeConfig::default().tune_matmuls),
            matmul_cache: std::sync::Mutex::new(None),
        });
        // `T` is `CubeTensor<CudaRuntime>`: the downcast is the identity.
        let any: Box<dyn Any> = Box::new(target);
        any.downcast::<Arc<dyn KernelTarget<T>>>().ok().map(|t| *t)
    }

    impl KernelTarget<Tensor> for CudaTarget {
        fn configure(&self, config: &crate::RuntimeConfig) {
            self.pad_matmul_dims
                .store(config.pad_matmul_dims, Ordering::Relaxed);
            self.tune_matmuls
                .store(config.tune_matmuls, Ordering::Relaxed);
            *self.matmul_cache.lock().unwrap_or_else(|e| e.into_inner()) = config
                .disk_cache
                .then(|| crate::disk::cache_at(config.cache_dir.clone(), config.cache_max_bytes));
        }

        fn lower(&self, work: Lowering<'_>) -> bool {
            match work {
                Lowering::Matmul(group) => {
                    self.blas.is_some() && super::rules::library_matmul_lowers(group)
                }
                other => self.kernels.lower(other),
            }
        }

        fn max_kernel_buffers(&self) -> usize {
            self.kernels.max_kernel_buffers()
        }

        fn on_device_thread(&self, task: &mut (dyn FnMut() + Send)) {
            self.kernels.on_device_thread(task)
        }

        fn recorder(&self) -> Option<&dyn super::GraphRecorder> {
            Some(&self.graphs)
        }

        fn allocate(&self, bytes: &[u64]) -> Option<Vec<Tensor>> {
            self.kernels.allocate(bytes)
        }

        fn launch(&self, work: Work<'_, Tensor>) -> Result<Option<Vec<Tensor>>, String> {
            match (work, self.blas) {
                (
                    Work::Matmul {
                        group,
                        inputs,
                        epilogue,
                        out_shape,
                        into,
                    },
                    Some(blas),
                ) => blas.matmul(
                    group,
                    inputs,
                    epilogue,
                    out_shape,
                    into,
                    &super::cublaslt::CallOptions {
                        pad_dims: self.pad_matmul_dims.load(Ordering::Relaxed),
                        tune: self.tune_matmuls.load(Ordering::Relaxed),
                        cache: &self.matmul_cache,
                    },
                ),
                (Work::Matmul { .. }, None) => Ok(None),
                (
                    Work::Conv2d {
                        pass,
                        inputs,
                        options,
                        out_shape,
                    },
                    _,
                ) => match dnn() {
                    Some(dnn) => Ok(dnn
                        .conv2d(pass, inputs, options, out_shape)?
                        .map(|out| vec![out])),
                    None => Ok(None),
                },
                (other, _) => self.kernels.launch(other),
            }
        }
    }
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod cube {
    use super::{KernelTarget, Lowering, Work};
    use burn_backend::ops::AttentionModuleOptions;
    use burn_backend::{DType, ElementConversion};
    use burn_compile_codegen::{
        ColumnDims, LaunchLayout, launch_column_sum, launch_column_sums, launch_horizontal,
        launch_pointwise, widest_aligned,
    };
    use burn_compile_schedule::{AttentionGroup, ColumnGroup, FusedKernel, Instr};
    use burn_cubecl::CubeRuntime;
    use burn_cubecl::cubecl::ScalarArgType;
    use burn_cubecl::cubecl::client::ComputeClient;
    use burn_cubecl::cubecl::prelude::Float;
    use burn_cubecl::cubecl::server::Handle;
    use burn_cubecl::cubecl::server::MemoryLayoutDescriptor;
    use burn_cubecl::kernel::attention::{AttentionStrategy, attention};
    use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
    use burn_cubecl::tensor::CubeTensor;
    use burn_std::{Metadata, Shape, Strides};
    use cubek_attention::routines::blackbox_accelerated::BlackboxAcceleratedStrategy;
    use rustc_hash::FxHashMap;
    use std::any::{Any, TypeId};
    use std::sync::{Arc, Mutex};

    /// An attention problem: `AttentionGroup::dims` and the dtype.
    type AttentionProblem = ([usize; 6], DType);

    pub(super) struct CubeTarget<R: CubeRuntime> {
        /// Element types with kernels on this runtime (WGSL: f32 only).
        dtypes: &'static [DType],
        /// Per attention problem, the flash strategy that sets up on this device (an index in
        /// [`flash_strategies`]), or `None` when none does (the parts run). Found at the first
        /// call, so later replays neither retry nor re-validate.
        attention: Mutex<FxHashMap<AttentionProblem, Option<usize>>>,
        /// Buffers a kernel may bind for its tensors: the device's bindings less the one the
        /// runtime adds for scalars and metadata.
        max_buffers: usize,
        /// The device's client: a kernel of constants (a `full` folded with what follows)
        /// reads no tensor to take one from.
        client: ComputeClient<R>,
        device: R::Device,
    }

    impl<R: CubeRuntime> CubeTarget<R> {
        pub(super) fn new(dtypes: &'static [DType], device: &R::Device) -> Self {
            let client = R::client(device);
            let bindings = client.properties().hardware.max_bindings as usize;
            Self {
                dtypes,
                attention: Mutex::new(FxHashMap::default()),
                max_buffers: bindings.saturating_sub(1).max(2),
                client,
                device: device.clone(),
            }
        }

        /// The outputs of `kernel` over `shape`: in their slots when given, else new.
        fn outputs(
            &self,
            kernel: &FusedKernel,
            shape: &Shape,
            into: &[Option<&CubeTensor<R>>],
        ) -> Vec<CubeTensor<R>> {
            (0..kernel.outputs as usize)
                .map(|o| {
                    // A row kernel's row outputs have the row shape `[R…, 1]`.
                    let mut out_shape = shape.clone();
                    if kernel.row.as_ref().is_some_and(|r| r.row_outputs[o]) {
                        let last = out_shape.num_dims() - 1;
                        out_shape[last] = 1;
                    }
                    match into.get(o).copied().flatten() {
                        Some(slot) => in_slot(slot, out_shape, kernel.dtype),
                        None => empty_device_contiguous_dtype(
                            self.client.clone(),
                            self.device.clone(),
                            out_shape,
                            kernel.dtype,
                        ),
                    }
                })
                .collect()
        }
    }

    /// cubek's flash-attention kernels, in order of preference: the tensor-core (CMMA)
    /// kernel, whose blueprint cubek infers from the problem, then the portable one (plain
    /// units: runtimes without tensor cores, e.g. wgpu on a CPU Vulkan).
    fn flash_strategies() -> [AttentionStrategy; 2] {
        [
            AttentionStrategy::FlashBlackboxAccelerated(BlackboxAcceleratedStrategy {
                num_planes: 4,
                seq_q: 1,
                seq_kv: 1,
            }),
            AttentionStrategy::FlashUnit,
        ]
    }

    /// Whether the batch dimensions of `t` (all but the last two) fold into one index times one
    /// stride, as libraries address a batch (cuBLASLt's strided batches, cubek's attention).
    fn batch_folds<R: CubeRuntime>(t: &CubeTensor<R>) -> bool {
        let (shape, strides) = (t.meta.shape(), t.meta.strides());
        let rank = shape.num_dims();
        (0..rank.saturating_sub(3))
            .all(|d| shape[d] == 1 || strides[d] == shape[d + 1] * strides[d + 1])
    }

    /// `tensors`, each as is where its batch dimensions fold into one stride, else as a copy
    /// whose do. Burn's MultiHeadAttention splits heads out of the model dimension (`[b, s, h, d]`
    /// swapped to `[b, h, s, d]`: the batch stride is `s·h·d`, not `h·d`), so its q, k, v need
    /// one, as the inner backend's batched matmul copies them too.
    ///
    /// A copy keeps the memory order of the tensor's last two dimensions (a transposed view
    /// `kᵀ` stays a transposed view, over the copy: a library reads it as a transposed operand),
    /// so it reads and writes along the same contiguous dimension. The copies of one shape and
    /// dtype are one generated kernel (q and kᵀ of attention's scores: one launch, not two),
    /// launched without metadata like every generated kernel, in place of one Burn
    /// `into_contiguous` launch each.
    pub(crate) fn batch_folded<R: CubeRuntime>(tensors: &[&CubeTensor<R>]) -> Vec<CubeTensor<R>> {
        let mut out: Vec<Option<CubeTensor<R>>> = tensors
            .iter()
            .map(|t| batch_folds(t).then(|| (*t).clone()))
            .collect();
        // The copies to make, as (index, memory-order shape, memory-order strides, transposed).
        let mut pending: Vec<(usize, Vec<usize>, Vec<usize>, bool)> = Vec::new();
        for (i, t) in tensors.iter().enumerate() {
            if out[i].is_some() {
                continue;
            }
            let (mut shape, mut strides) = (
                t.meta.shape().as_slice().to_vec(),
                t.meta.strides().to_vec(),
            );
            let rank = shape.len();
            let transposed = strides[rank - 1] > strides[rank - 2];
            if transposed {
                shape.swap(rank - 1, rank - 2);
                strides.swap(rank - 1, rank - 2);
            }
            pending.push((i, shape, strides, transposed));
        }
        while let Some((_, shape, _, _)) = pending.first().cloned() {
            let dtype = tensors[pending[0].0].dtype;
            let (group, rest): (Vec<_>, Vec<_>) = pending
                .into_iter()
                .partition(|(i, s, _, _)| *s == shape && tensors[*i].dtype == dtype);
            pending = rest;
            let first = tensors[group[0].0];
            let n = group.len();
            let kernel = copy_kernel(dtype, shape.len(), n);
            // The inputs as views in memory order (their own buffers and offsets).
            let inputs: Vec<CubeTensor<R>> = group
                .iter()
                .map(|(i, s, st, _)| {
                    let t = tensors[*i];
                    CubeTensor::new(
                        t.client.clone(),
                        t.handle.clone(),
                        Metadata::new(Shape::from(s.clone()), Strides::new(st)),
                        t.device.clone(),
                        dtype,
                    )
                })
                .collect();
            let shape = Shape::from(shape);
            let copies: Vec<CubeTensor<R>> = (0..n)
                .map(|_| {
                    empty_device_contiguous_dtype(
                        first.client.clone(),
                        first.device.clone(),
                        shape.clone(),
                        dtype,
                    )
                })
                .collect();
            if !launch_any(
                &first.client,
                &kernel,
                &inputs,
                &[],
                &copies,
                &shape,
                true,
                &[],
            ) {
                // No generated kernel for this dtype: the inner backend's copy.
                for (i, _, _, _) in &group {
                    out[*i] = Some(burn_cubecl::kernel::into_contiguous(tensors[*i].clone()));
                }
                continue;
            }
            for ((i, _, _, transposed), copy) in group.into_iter().zip(copies) {
                let rank = shape.num_dims();
                let mut strides = copy.meta.strides().to_vec();
                if transposed {
                    strides.swap(rank - 1, rank - 2);
                }
                let t = tensors[i];
                out[i] = Some(CubeTensor::new(
                    copy.client.clone(),
                    copy.handle.clone(),
                    Metadata::new(t.meta.shape().clone(), Strides::new(&strides)),
                    copy.device.clone(),
                    dtype,
                ));
            }
        }
        out.into_iter()
            .map(|t| t.expect("every tensor kept or copied"))
            .collect()
    }

    /// The kernel copying `n` tensors of one shape (rank `rank`), input `i` to output `i`.
    fn copy_kernel(dtype: DType, rank: usize, n: usize) -> FusedKernel {
        FusedKernel {
            dtype,
            rank: rank as u8,
            inputs: vec![vec![false; rank]; n],
            outputs: n as u16,
            scalars: 0,
            program: (0..n as u16)
                .map(|input| Instr::Load { input })
                .chain((0..n as u16).map(|o| Instr::Store {
                    output: o,
                    value: o,
                }))
                .collect(),
            row: None,
        }
    }

    /// A contiguous copy of `t` (in its own shape) by one generated kernel; `None` when the
    /// dtype has no kernel.
    fn contiguous_copy<R: CubeRuntime>(t: &CubeTensor<R>) -> Option<CubeTensor<R>> {
        let shape = t.meta.shape().clone();
        let kernel = copy_kernel(t.dtype, shape.num_dims(), 1);
        let copy = empty_device_contiguous_dtype(
            t.client.clone(),
            t.device.clone(),
            shape.clone(),
            t.dtype,
        );
        let outputs = [copy];
        launch_any(
            &t.client,
            &kernel,
            std::slice::from_ref(t),
            &[],
            &outputs,
            &shape,
            true,
            &[],
        )
        .then(|| outputs.into_iter().next().expect("one output"))
    }

    /// A contiguous tensor of `shape` and `dtype` over a slot buffer of the replay's slab (the
    /// memory plan sized the slot for it).
    pub(crate) fn in_slot<R: CubeRuntime>(
        slot: &CubeTensor<R>,
        shape: Shape,
        dtype: DType,
    ) -> CubeTensor<R> {
        debug_assert!(shape.num_elements() * dtype.size() <= slot.meta.shape()[0]);
        CubeTensor::new_contiguous(
            slot.client.clone(),
            slot.device.clone(),
            shape,
            slot.handle.clone(),
            dtype,
        )
    }

    /// The target of `CubeTensor<R>`, as a target of `T` when `T` is that type.
    #[cfg_attr(not(feature = "wgpu"), allow(dead_code))]
    pub fn target<T: 'static, R: CubeRuntime>(
        dtypes: &'static [DType],
        device: &dyn Any,
    ) -> Option<Arc<dyn KernelTarget<T>>> {
        if TypeId::of::<T>() != TypeId::of::<CubeTensor<R>>() {
            return None;
        }
        let target: Arc<dyn KernelTarget<CubeTensor<R>>> =
            Arc::new(CubeTarget::<R>::new(dtypes, device.downcast_ref()?));
        // `T` is `CubeTensor<R>`: the downcast is the identity.
        let any: Box<dyn Any> = Box::new(target);
        any.downcast::<Arc<dyn KernelTarget<T>>>().ok().map(|t| *t)
    }

    /// Launches `kernel` (any float dtype with a CubeCL element type) over `shape`; `false`
    /// when its dtype has none. The kernel is specialized on the inputs' strides
    /// ([`LaunchLayout`]: buffers as plain arrays, no metadata uploaded per launch) and, with
    /// `vectorize`, vectorized where the buffers allow: the widest vector the runtime loads at
    /// once for the dtype (16 bytes on CUDA), narrowed to what every buffer's start is aligned
    /// to. A pointwise kernel with `dynamic` dimensions is the symbolic kernel of all their
    /// sizes (`launch_pointwise`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_any<R: CubeRuntime>(
        client: &ComputeClient<R>,
        kernel: &FusedKernel,
        inputs: &[CubeTensor<R>],
        scalars: &[f64],
        outputs: &[CubeTensor<R>],
        shape: &Shape,
        vectorize: bool,
        dynamic: &[bool],
    ) -> bool {
        let strides: Vec<&[usize]> = inputs.iter().map(|t| &t.meta.strides()[..]).collect();
        let mut layout = LaunchLayout::new(kernel, shape.as_slice(), &strides);
        let elem = kernel.dtype.size() as u64;
        if vectorize {
            let widest = client
                .io_optimized_vector_sizes(elem as usize)
                .max()
                .unwrap_or(1);
            // A start that is not a whole element offset allows no vector at all.
            let offsets = inputs.iter().chain(outputs).map(|t| {
                let bytes = t.handle.offset_start.unwrap_or(0);
                if bytes.is_multiple_of(elem) {
                    (bytes / elem) as usize
                } else {
                    1
                }
            });
            layout = layout.vectorize(kernel, widest_aligned(widest, offsets));
        }
        let buffers = |ts: &[CubeTensor<R>]| -> Vec<(Handle, usize)> {
            ts.iter()
                .map(|t| (t.handle.clone(), (t.handle.size_in_used() / elem) as usize))
                .collect()
        };
        let (ins, outs) = (buffers(inputs), buffers(outputs));
        match kernel.dtype {
            DType::F32 => launch::<R, f32>(client, kernel, &layout, ins, scalars, outs, dynamic),
            DType::F16 => {
                launch::<R, half::f16>(client, kernel, &layout, ins, scalars, outs, dynamic)
            }
            DType::BF16 => {
                launch::<R, half::bf16>(client, kernel, &layout, ins, scalars, outs, dynamic)
            }
            DType::F64 => launch::<R, f64>(client, kernel, &layout, ins, scalars, outs, dynamic),
            _ => return false,
        }
        if layout.vector > 1 {
            crate::counters::count(&crate::counters::COUNTERS.vectorized_kernels);
        }
        true
    }

    /// Launches `kernel` over `layout` with element type `E`: `inputs` and `outputs` are
    /// buffers and their lengths in elements.
    fn launch<R: CubeRuntime, E: Float + ScalarArgType + ElementConversion>(
        client: &ComputeClient<R>,
        kernel: &FusedKernel,
        layout: &LaunchLayout,
        inputs: Vec<(Handle, usize)>,
        scalars: &[f64],
        outputs: Vec<(Handle, usize)>,
        dynamic: &[bool],
    ) {
        let scalars = scalars.iter().map(|s| E::from_elem(*s)).collect();
        // SAFETY: the schedule built the kernel from these tensors' shapes (each input broadcasts
        // to the iteration shape, the outputs have it and are contiguous) and dtype (dispatched
        // by the caller); the layout holds the inputs' own strides, and a vector width that
        // every buffer's start is aligned to.
        unsafe {
            launch_pointwise::<R, E>(client, kernel, layout, inputs, scalars, outputs, dynamic)
        };
    }

    /// Launches the `members` of a horizontal kernel with element type `E`.
    ///
    /// # Safety
    /// As `launch_horizontal`: each member's layout was made from its own buffers.
    unsafe fn horizontal<R: CubeRuntime, E: Float + ScalarArgType + ElementConversion>(
        client: &ComputeClient<R>,
        members: &[(&FusedKernel, &LaunchLayout)],
        inputs: Vec<(Handle, usize)>,
        scalars: &[f64],
        outputs: Vec<(Handle, usize)>,
    ) {
        let scalars = scalars.iter().map(|s| E::from_elem(*s)).collect();
        // SAFETY: this function's contract.
        unsafe { launch_horizontal::<R, E>(client, members, inputs, scalars, outputs) };
    }

    impl<R: CubeRuntime> CubeTarget<R> {
        pub(super) fn accepts(&self, kernel: &FusedKernel) -> bool {
            self.dtypes.contains(&kernel.dtype)
        }

        pub(super) fn max_kernel_buffers(&self) -> usize {
            self.max_buffers
        }

        pub(super) fn on_device_thread(&self, task: &mut (dyn FnMut() + Send)) {
            // CubeCL's device handle runs a task it is given on its runner thread directly when
            // the caller is that thread: inside this exclusive task, every allocation and
            // launch of the replay is a call, not a message through the runner's queue.
            let mut ran = false;
            let sent = self.client.exclusive(|| {
                ran = true;
                task()
            });
            if sent.is_err() && !ran {
                // The runner is gone: the replay's own calls report it.
                task()
            }
        }

        pub(super) fn slab(&self, bytes: &[u64]) -> Option<Vec<CubeTensor<R>>> {
            let descriptors = bytes
                .iter()
                .map(|b| MemoryLayoutDescriptor::contiguous([*b as usize].into(), 1))
                .collect();
            let buffers = self.client.empty_tensors(descriptors);
            Some(
                buffers
                    .into_iter()
                    .zip(bytes)
                    .map(|(layout, b)| {
                        CubeTensor::new(
                            self.client.clone(),
                            layout.memory,
                            Metadata::new(Shape::new([*b as usize]), layout.strides),
                            self.device.clone(),
                            DType::U8,
                        )
                    })
                    .collect(),
            )
        }

        #[allow(clippy::too_many_arguments)]
        pub(super) fn fused_kernel(
            &self,
            kernel: &FusedKernel,
            shape: &Shape,
            inputs: &[CubeTensor<R>],
            scalars: &[f64],
            into: &[Option<&CubeTensor<R>>],
            vectorize: bool,
            dynamic: &[bool],
        ) -> Result<Option<Vec<CubeTensor<R>>>, String> {
            let step = if kernel.row.is_some() {
                "kernel (row)"
            } else {
                "kernel (pointwise)"
            };
            let outputs =
                crate::profile::part(step, "outputs", || self.outputs(kernel, shape, into));
            // CubeCL compiles a kernel at its first launch and panics when the compiler
            // refuses it: that is a failed compile, reported to the caller (which falls back).
            let launched = crate::profile::part(step, "launch", || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let launched = launch_any(
                        &self.client,
                        kernel,
                        inputs,
                        scalars,
                        &outputs,
                        shape,
                        vectorize,
                        dynamic,
                    );
                    assert!(
                        launched,
                        "the plan only keeps accepted kernels, not {:?}",
                        kernel.dtype
                    );
                }))
            });
            launched
                .map(|_| Some(outputs))
                .map_err(|payload| crate::panic_message(&*payload))
        }

        /// The members of a horizontal group as one kernel (`launch_horizontal`): each
        /// member's layout as `launch_any` makes it, at the widest vector every member's
        /// buffers allow.
        pub(super) fn horizontal(
            &self,
            kernels: &[Work<'_, CubeTensor<R>>],
        ) -> Result<Option<Vec<CubeTensor<R>>>, String> {
            let mut members = Vec::with_capacity(kernels.len());
            for work in kernels {
                let Work::Kernel {
                    kernel,
                    shape,
                    inputs,
                    scalars,
                    into,
                    vectorize,
                    dynamic,
                } = work
                else {
                    return Err("a horizontal group member that is not a kernel".into());
                };
                if kernel.row.is_some() || dynamic.iter().any(|d| *d) || !self.accepts(kernel) {
                    return Ok(None);
                }
                members.push((*kernel, *shape, *inputs, *scalars, *into, *vectorize));
            }
            let Some(&(first, ..)) = members.first() else {
                return Ok(Some(Vec::new()));
            };
            let dtype = first.dtype;
            if members.iter().any(|m| m.0.dtype != dtype) {
                return Ok(None);
            }
            let elem = dtype.size() as u64;
            let step = "kernel (horizontal)";
            let outputs: Vec<Vec<CubeTensor<R>>> = crate::profile::part(step, "outputs", || {
                members
                    .iter()
                    .map(|(kernel, shape, _, _, into, _)| self.outputs(kernel, shape, into))
                    .collect()
            });
            // The widest vector every member allows.
            let widest = self
                .client
                .io_optimized_vector_sizes(elem as usize)
                .max()
                .unwrap_or(1);
            let mut layouts: Vec<LaunchLayout> = Vec::with_capacity(members.len());
            let mut vector = widest;
            for ((kernel, shape, inputs, _, _, vectorize), outs) in members.iter().zip(&outputs) {
                let strides: Vec<&[usize]> = inputs.iter().map(|t| &t.meta.strides()[..]).collect();
                let layout = LaunchLayout::new(kernel, shape.as_slice(), &strides);
                let own = if *vectorize {
                    let offsets = inputs.iter().chain(outs).map(|t| {
                        let bytes = t.handle.offset_start.unwrap_or(0);
                        if bytes.is_multiple_of(elem) {
                            (bytes / elem) as usize
                        } else {
                            1
                        }
                    });
                    layout
                        .clone()
                        .vectorize(kernel, widest_aligned(widest, offsets))
                        .vector
                } else {
                    1
                };
                vector = vector.min(own);
                layouts.push(layout);
            }
            let layouts: Vec<LaunchLayout> = members
                .iter()
                .zip(layouts)
                .map(|(m, l)| l.vectorize(m.0, vector))
                .collect();
            let buffer = |t: &CubeTensor<R>| -> (Handle, usize) {
                (t.handle.clone(), (t.handle.size_in_used() / elem) as usize)
            };
            let ins: Vec<_> = members
                .iter()
                .flat_map(|m| m.2.iter())
                .map(buffer)
                .collect();
            let outs: Vec<_> = outputs.iter().flatten().map(buffer).collect();
            let scalars: Vec<f64> = members.iter().flat_map(|m| m.3.iter().copied()).collect();
            let specs: Vec<(&FusedKernel, &LaunchLayout)> =
                members.iter().map(|m| m.0).zip(&layouts).collect();
            let client = &self.client;
            // CubeCL compiles a kernel at its first launch and panics when the compiler
            // refuses it: a failed compile, reported to the caller (which launches the
            // members one by one).
            let launched = crate::profile::part(step, "launch", || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    // SAFETY: as `launch` (each member's layout built from its own tensors
                    // and aligned to the one vector width).
                    unsafe {
                        match dtype {
                            DType::F32 => horizontal::<R, f32>(client, &specs, ins, &scalars, outs),
                            DType::F16 => {
                                horizontal::<R, half::f16>(client, &specs, ins, &scalars, outs)
                            }
                            DType::BF16 => {
                                horizontal::<R, half::bf16>(client, &specs, ins, &scalars, outs)
                            }
                            DType::F64 => horizontal::<R, f64>(client, &specs, ins, &scalars, outs),
                            other => panic!("the plan only keeps accepted kernels, not {other:?}"),
                        }
                    }
                }))
            });
            launched
                .map(|_| Some(outputs.into_iter().flatten().collect()))
                .map_err(|payload| crate::panic_message(&*payload))
        }

        pub(super) fn reshape_copy(
            &self,
            input: &CubeTensor<R>,
            shape: &Shape,
        ) -> Option<CubeTensor<R>> {
            let (from, strides) = (input.meta.shape(), input.meta.strides());
            let copies = matches!(
                burn_std::tensor::reshape_action(from, strides, shape),
                burn_std::tensor::ReshapeAction::Recompute
            );
            if !copies
                || input.qparams.is_some()
                || !self.dtypes.contains(&input.dtype)
                || from.num_dims() == 0
                || from.num_elements() == 0
            {
                return None;
            }
            // The copy is contiguous in the input's shape: its elements are in row-major order,
            // which is the reshaped tensor's.
            let copy = contiguous_copy(input)?;
            Some(CubeTensor::new_contiguous(
                copy.client.clone(),
                copy.device.clone(),
                shape.clone(),
                copy.handle.clone(),
                copy.dtype,
            ))
        }

        /// The column sum of `group` over `input` into a new tensor of `out_shape`; `None` when
        /// `input` is neither contiguous (the kernel reads it as `[outer, reduced, inner,
        /// trailing]`) nor, for a batch norm's sums, in channels-last order.
        pub(super) fn column_sum(
            &self,
            group: &ColumnGroup,
            input: &CubeTensor<R>,
            out_shape: &Shape,
        ) -> Result<Option<CubeTensor<R>>, String> {
            let [outer, reduced, inner, trailing] = group.dims;
            let dims = ColumnDims {
                outer,
                reduced,
                inner,
                trailing,
                divisor: group.divisor,
            };
            if input.qparams.is_some()
                || input.dtype != group.dtype
                || !self.dtypes.contains(&input.dtype)
                || input.meta.shape().num_elements() != dims.elements()
                || out_shape.num_elements() != dims.columns()
            {
                return Ok(None);
            }
            let Some(dims) = dims.for_strides(input.meta.shape(), input.meta.strides()) else {
                return Ok(None);
            };
            // A tall sum's cube of 1024 units is past what some devices launch: there the
            // sums run on the inner backend.
            let [ux, uy] = dims.cube_dim();
            if ux * uy > input.client.properties().hardware.max_units_per_cube {
                return Ok(None);
            }
            let out = empty_device_contiguous_dtype(
                input.client.clone(),
                input.device.clone(),
                out_shape.clone(),
                input.dtype,
            );
            let (client, from, to) = (&input.client, input.handle.clone(), out.handle.clone());
            // CubeCL compiles a kernel at its first launch and panics when the compiler refuses
            // it: reported to the caller, which runs the sums.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: `input`'s memory holds `dims.elements()` elements in the order `dims`
                // reads them (checked above) and `out` was allocated with `dims.columns()`.
                unsafe {
                    match input.dtype {
                        DType::F32 | DType::Flex32 => {
                            launch_column_sum::<R, f32>(client, dims, from, to)
                        }
                        DType::F16 => launch_column_sum::<R, half::f16>(client, dims, from, to),
                        DType::BF16 => launch_column_sum::<R, half::bf16>(client, dims, from, to),
                        DType::F64 => launch_column_sum::<R, f64>(client, dims, from, to),
                        other => panic!("the plan only keeps accepted column sums, not {other:?}"),
                    }
                }
            }))
            .map(|_| Some(out))
            .map_err(|payload| crate::panic_message(&*payload))
        }

        /// The column sums of `groups` over `inputs` as one kernel (`launch_column_sums`),
        /// into new tensors of `out_shapes`; `None` when a sum is not a plain one over a
        /// contiguous input of the first one's dimensions (the caller runs them one by one).
        pub(super) fn column_sums(
            &self,
            groups: &[&ColumnGroup],
            inputs: &[CubeTensor<R>],
            out_shapes: &[&Shape],
        ) -> Result<Option<Vec<CubeTensor<R>>>, String> {
            let Some((first, input)) = groups.first().zip(inputs.first()) else {
                return Ok(Some(Vec::new()));
            };
            let [outer, reduced, inner, trailing] = first.dims;
            let dims = ColumnDims {
                outer,
                reduced,
                inner,
                trailing,
                divisor: first.divisor,
            };
            let dtype = input.dtype;
            let plain = groups
                .iter()
                .zip(inputs)
                .zip(out_shapes)
                .all(|((g, t), out)| {
                    (g.dims, g.divisor, g.dtype) == (first.dims, first.divisor, dtype)
                        && t.qparams.is_none()
                        && t.dtype == dtype
                        && out.num_elements() == dims.columns()
                        && dims.for_strides(t.meta.shape(), t.meta.strides()) == Some(dims)
                });
            let [ux, uy] = dims.cube_dim();
            if !plain
                || dims.strided()
                || !self.dtypes.contains(&dtype)
                || ux * uy > input.client.properties().hardware.max_units_per_cube
            {
                return Ok(None);
            }
            let outputs: Vec<CubeTensor<R>> = out_shapes
                .iter()
                .map(|shape| {
                    empty_device_contiguous_dtype(
                        input.client.clone(),
                        input.device.clone(),
                        (*shape).clone(),
                        dtype,
                    )
                })
                .collect();
            let from: Vec<_> = inputs.iter().map(|t| t.handle.clone()).collect();
            let to: Vec<_> = outputs.iter().map(|t| t.handle.clone()).collect();
            let client = &input.client;
            // As `column_sum`: a compile failure is reported to the caller.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: every input holds `dims.elements()` contiguous elements (checked
                // above) and every output was allocated with `dims.columns()`.
                unsafe {
                    match dtype {
                        DType::F32 | DType::Flex32 => {
                            launch_column_sums::<R, f32>(client, dims, from, to)
                        }
                        DType::F16 => launch_column_sums::<R, half::f16>(client, dims, from, to),
                        DType::BF16 => launch_column_sums::<R, half::bf16>(client, dims, from, to),
                        DType::F64 => launch_column_sums::<R, f64>(client, dims, from, to),
                        other => panic!("the plan only keeps accepted column sums, not {other:?}"),
                    }
                }
            }))
            .map(|_| Some(outputs))
            .map_err(|payload| crate::panic_message(&*payload))
        }

        pub(super) fn attention(
            &self,
            group: &AttentionGroup,
            q: &CubeTensor<R>,
            k: &CubeTensor<R>,
            v: &CubeTensor<R>,
        ) -> Result<Option<CubeTensor<R>>, String> {
            let key = (group.dims, group.dtype);
            let known = self
                .attention
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&key)
                .copied();
            // No scale: the kernel's default, 1/√head_dim, is what the schedule matched.
            let options = AttentionModuleOptions::default();
            let [q, k, v]: [CubeTensor<R>; 3] = batch_folded(&[q, k, v])
                .try_into()
                .unwrap_or_else(|_| unreachable!("three tensors in, three out"));
            let run = |strategy: AttentionStrategy| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    attention(
                        q.clone(),
                        k.clone(),
                        v.clone(),
                        None,
                        None,
                        options,
                        strategy,
                    )
                }))
                .map_err(|payload| crate::panic_message(&*payload))
            };
            let remember = |chosen: Option<usize>| {
                self.attention
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, chosen);
            };
            match known {
                Some(None) => Ok(None),
                Some(Some(i)) => {
                    let strategy = flash_strategies().into_iter().nth(i).expect("an index");
                    let result = run(strategy).and_then(|r| r.map_err(|e| format!("{e:?}")));
                    if result.is_err() {
                        // Reported once by the caller; the parts run from then on.
                        remember(None);
                    }
                    result.map(Some)
                }
                None => {
                    // First call of this problem: the first strategy that sets up is kept. A
                    // setup error launches nothing; a panic is a failed kernel.
                    let mut refusals = Vec::new();
                    for (i, strategy) in flash_strategies().into_iter().enumerate() {
                        let result = run(strategy).inspect_err(|_| remember(None))?;
                        match result {
                            Ok(out) => {
                                remember(Some(i));
                                return Ok(Some(out));
                            }
                            Err(e) => refusals.push(format!("{e:?}")),
                        }
                    }
                    remember(None);
                    tracing::warn!(
                        target: "burn_compile::output_code",
                        "burn-compile: no flash-attention kernel sets up on this device for {} \
                         ({}); its parts run as separate steps",
                        group.summary(),
                        refusals.join("; ")
                    );
                    Ok(None)
                }
            }
        }
    }

    impl<R: CubeRuntime> KernelTarget<CubeTensor<R>> for CubeTarget<R> {
        fn lower(&self, work: Lowering<'_>) -> bool {
            super::rules::cube_lowers(self.dtypes, work)
        }

        fn max_kernel_buffers(&self) -> usize {
            self.max_kernel_buffers()
        }

        fn on_device_thread(&self, task: &mut (dyn FnMut() + Send)) {
            self.on_device_thread(task)
        }

        fn allocate(&self, bytes: &[u64]) -> Option<Vec<CubeTensor<R>>> {
            self.slab(bytes)
        }

        fn launch(
            &self,
            work: Work<'_, CubeTensor<R>>,
        ) -> Result<Option<Vec<CubeTensor<R>>>, String> {
            match work {
                Work::Kernel {
                    kernel,
                    shape,
                    inputs,
                    scalars,
                    into,
                    vectorize,
                    dynamic,
                } => self.fused_kernel(kernel, shape, inputs, scalars, into, vectorize, dynamic),
                Work::Attention { group, q, k, v } => {
                    Ok(self.attention(group, q, k, v)?.map(|out| vec![out]))
                }
                Work::ReshapeCopy { input, shape } => {
                    Ok(self.reshape_copy(input, shape).map(|out| vec![out]))
                }
                Work::Horizontal { kernels } => self.horizontal(kernels),
                Work::Column {
                    group,
                    input,
                    out_shape,
                } => Ok(self
                    .column_sum(group, input, out_shape)?
                    .map(|out| vec![out])),
                Work::HorizontalColumns {
                    groups,
                    inputs,
                    out_shapes,
                } => self.column_sums(groups, inputs, out_shapes),
                // Library calls: CUDA's target takes them (cuBLASLt, cuDNN).
                Work::Matmul { .. } | Work::Conv2d { .. } => Ok(None),
            }
        }
    }
}
