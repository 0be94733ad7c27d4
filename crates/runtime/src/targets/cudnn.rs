//! Library convolutions on CUDA through cuDNN, in order with CubeCL's kernels.
//!
//! Burn's own 2-D convolutions on CUDA (burn-cubecl's implicit GEMM, chosen per shape by an
//! autotune that benchmarks its variants on a fresh machine) are what ResNet-like models spend
//! their time in; cuDNN's are the ones other frameworks run. With `CompileConfig::cudnn`
//! (`BURN_COMPILE_CUDNN`; off by default), a `conv2d` and the gradients of its input and weight
//! (`conv2d_x_backward`, `conv2d_weight_backward`) run as one cuDNN call each; anything cuDNN is
//! not given here (another dtype, a layout it cannot read, a shape it refuses) runs on the inner
//! backend, as before.
//!
//! cuDNN is loaded at run time (like cuBLASLt, `cublaslt.rs`), the first time a convolution asks
//! for it; without the library, one warning, and the convolutions run on the inner backend. A
//! call is launched like a kernel: an external task of the patched cubecl-cuda
//! (`vendor/README.md`) with the operands as its bindings, so CubeCL's device thread enqueues it
//! on the right stream, after the work that produced its inputs. Descriptors and the algorithm
//! (cuDNN's heuristic, `cudnnGetConvolution*Algorithm_v7`: no benchmark) are prepared once per
//! call shape on the device thread, where the CUDA context is current, and cached; a shape cuDNN
//! refuses is known before anything is enqueued. Per call, the task only sets the stream and
//! makes the call (and, for a forward pass with a bias, adds it): no `cudnnFind*`, no
//! allocation, no synchronization, so a reduce-overhead recording (a CUDA graph) captures it.
//!
//! f32 runs in full f32 (`CUDNN_FMA_MATH`, no TF32 tensor cores; see `types`); f16 and bf16
//! accumulate in f32; f64 in f64. Activations (x and the output gradient) are read through their
//! strides when they are dense in NCHW or NHWC order (burn-cubecl's own convolutions return
//! NHWC-strided views) and 16-byte aligned, copied contiguous otherwise; the weight is copied
//! when it is not packed NCHW (cuDNN's filter descriptors take no strides) — Burn's CUDA
//! tensors are pitched, rows padded to an aligned length, so a 3×3 filter always is. Passes not
//! taken are logged with their operands at debug level (`burn_compile::output_code`). Outputs are
//! new contiguous NCHW tensors.

use super::ConvPass;
use super::conv_shapes::{Layout, Params, dense_layout, dims4, filter_copies, packed, passes_from};
use burn_backend::DType;
use burn_backend::ops::ConvOptions;
use burn_cubecl::cubecl::cuda::CudaRuntime;
use burn_cubecl::cubecl::prelude::CubeCount;
use burn_cubecl::cubecl::server::{Handle as Buffer, KernelArguments};
use burn_cubecl::cubecl::stream_id::StreamId;
use burn_cubecl::tensor::CubeTensor;
use burn_std::Shape;
use cubecl_cuda::external::ExternalTask;
use cudarc::cudnn::{result, sys};
use rustc_hash::{FxHashMap, FxHashSet};
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

type Tensor = CubeTensor<CudaRuntime>;

/// The most workspace a call may use: its algorithm is the heuristic's first that fits.
const WORKSPACE_LIMIT: usize = 256 << 20;

/// The smallest workspace buffer allocated for a stream (calls that need none bind it too).
const MIN_WORKSPACE: usize = 1 << 20;

/// The operand alignment every prepared call assumes.
const ALIGNMENT: u64 = 16;

/// The oldest cuDNN taken: 9.0 (`cudnnGetVersion`'s numbering from 9 on: major · 10000 +
/// minor · 100 + patch). cudarc's bindings are 9.x's, whose status codes differ from 8's.
const MIN_VERSION: usize = 90000;

/// cuDNN on one process: a handle per device, workspaces and prepared calls.
pub(crate) struct CuDnn {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// A handle is tied to the CUDA context current where it was made: one per device.
    handles: FxHashMap<u32, Arc<DnnHandle>>,
    /// One workspace per device and CubeCL stream (calls on one stream are ordered, calls on
    /// two may overlap), with its size; replaced by a larger one when a call needs more.
    workspaces: FxHashMap<(u32, u64), (Buffer, usize)>,
    calls: FxHashMap<ConvKey, Arc<Conv>>,
    /// Call shapes cuDNN refused (reported once; their convolutions run on the inner backend).
    refused: FxHashSet<ConvKey>,
}

struct DnnHandle {
    raw: sys::cudnnHandle_t,
    /// Held while the handle's stream is set and the call enqueued.
    lock: Mutex<()>,
}

// SAFETY: a cuDNN handle may be used from any thread, one at a time (`DnnHandle::lock`);
// descriptors are only read once prepared.
unsafe impl Send for DnnHandle {}
unsafe impl Sync for DnnHandle {}
unsafe impl Send for Conv {}
unsafe impl Sync for Conv {}

/// What a prepared call depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ConvKey {
    pass: ConvPass,
    dtype: DType,
    device: u32,
    /// The convolution's input: x (forward, filter pass) or the input gradient dx (data pass,
    /// packed NCHW).
    x: Layout,
    /// Its output: y (forward, packed NCHW) or the output gradient dy.
    y: Layout,
    /// The filter, packed NCHW (KCRS): `[out channels, in channels / groups, kh, kw]`.
    w: [i32; 4],
    stride: [i32; 2],
    padding: [i32; 2],
    dilation: [i32; 2],
    groups: i32,
    /// A forward pass with a bias (added by `cudnnAddTensor`).
    bias: bool,
}

struct TensorDesc(sys::cudnnTensorDescriptor_t);
struct FilterDesc(sys::cudnnFilterDescriptor_t);
struct ConvDesc(sys::cudnnConvolutionDescriptor_t);

impl Drop for TensorDesc {
    fn drop(&mut self) {
        // SAFETY: created by `tensor_desc`, destroyed once.
        unsafe {
            let _ = result::destroy_tensor_descriptor(self.0);
        }
    }
}

impl Drop for FilterDesc {
    fn drop(&mut self) {
        // SAFETY: created by `prepare`, destroyed once.
        unsafe {
            let _ = result::destroy_filter_descriptor(self.0);
        }
    }
}

impl Drop for ConvDesc {
    fn drop(&mut self) {
        // SAFETY: created by `prepare`, destroyed once.
        unsafe {
            let _ = result::destroy_convolution_descriptor(self.0);
        }
    }
}

/// The algorithm of a prepared call, by pass.
#[derive(Clone, Copy, Debug)]
enum Algo {
    Forward(sys::cudnnConvolutionFwdAlgo_t),
    Data(sys::cudnnConvolutionBwdDataAlgo_t),
    Filter(sys::cudnnConvolutionBwdFilterAlgo_t),
}

/// A prepared call: descriptors, algorithm and the workspace it needs.
struct Conv {
    /// x (forward, filter pass) or dx (data pass).
    x: TensorDesc,
    /// y (forward) or dy.
    y: TensorDesc,
    /// w (forward, data pass) or dw (filter pass).
    w: FilterDesc,
    conv: ConvDesc,
    /// The bias as `[1, C, 1, 1]` (a forward pass with a bias).
    bias: Option<TensorDesc>,
    algo: Algo,
    /// Bytes of workspace the algorithm needs (at most [`WORKSPACE_LIMIT`]).
    workspace: usize,
    /// α and β are f64 (f64 data), else f32.
    double: bool,
}

/// A cuDNN error or refusal, as text.
fn err(e: impl std::fmt::Debug) -> String {
    format!("cuDNN: {e:?}")
}

impl CuDnn {
    /// cuDNN, if its library can be loaded on this machine.
    pub fn load() -> Result<Self, String> {
        // SAFETY: opens and closes the library under each name cudarc tries; nothing is called.
        if !unsafe { sys::is_culib_present() } {
            return Err(
                "libcudnn is not found by the dynamic loader (its directory may need to \
                 be on LD_LIBRARY_PATH)"
                    .into(),
            );
        }
        // `culib` panics with the names it tried when the library is missing, and a missing
        // symbol panics when first called.
        let version = std::panic::catch_unwind(|| {
            // SAFETY: loads the shared library once (cudarc's lazy loader).
            unsafe {
                sys::culib();
            }
            result::get_version()
        })
        .map_err(|payload| crate::panic_message(&*payload))?;
        if version < MIN_VERSION {
            return Err(format!(
                "cuDNN {version} is older than 9.0, the oldest taken (cudarc's bindings are \
                 9.x's)"
            ));
        }
        Ok(Self {
            state: Mutex::new(State::default()),
        })
    }

    /// Runs `pass` of a 2-D convolution over `inputs` ([`super::Work::Conv2d`]'s) into a new
    /// contiguous NCHW tensor of `out_shape`. `Ok(None)`: not taken here (a dtype, layout or
    /// shape this call does not express, or one cuDNN refused before; the caller runs the
    /// operation); `Err`: cuDNN refused this call shape (reported once, then `Ok(None)`).
    pub fn conv2d(
        &self,
        pass: ConvPass,
        inputs: &[Tensor],
        options: &ConvOptions<2>,
        out_shape: &Shape,
    ) -> Result<Option<Tensor>, String> {
        let Some(first) = inputs.first() else {
            return Ok(None);
        };
        if !passes_taken()[pass as usize] {
            return Ok(not_taken(
                pass,
                "left to the inner backend by BURN_COMPILE_CUDNN_PASSES",
                inputs,
            ));
        }
        let dtype = first.dtype;
        let operands = match pass {
            ConvPass::Forward => 2..=3,
            ConvPass::Data | ConvPass::Filter => 2..=2,
        };
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
            || inputs.iter().any(|t| t.dtype != dtype)
            || !operands.contains(&inputs.len())
        {
            return Ok(not_taken(
                pass,
                "a dtype cuDNN is not given, mixed dtypes or an unexpected operand count",
                inputs,
            ));
        }
        let Some(out) = dims4(out_shape.as_slice()) else {
            return Ok(not_taken(pass, "an output that is not 4-D", inputs));
        };
        let Some(params) = Params::of(options) else {
            return Ok(not_taken(pass, "options out of cuDNN's range", inputs));
        };
        let dims = |t: &Tensor| dims4(t.meta.shape().as_slice());
        // The sizes first, then the operands as cuDNN reads them (copied, once the call is
        // taken, where their layout or alignment does not do). The operands in binding order (the call's two inputs), the layouts of x and y, the
        // filter's dimensions and the bias.
        let (a, b, x, y, w, bias) = match pass {
            ConvPass::Forward => {
                let (x, w) = (&inputs[0], &inputs[1]);
                let (Some(x_dims), Some(w_dims)) = (dims(x), dims(w)) else {
                    return Ok(not_taken(
                        pass,
                        "an input or weight that is not 4-D",
                        inputs,
                    ));
                };
                let bias = inputs.get(2);
                if bias.is_some_and(|b| b.meta.shape().as_slice() != [out[1] as usize])
                    || params.output(x_dims, w_dims) != Some(out)
                {
                    return Ok(not_taken(
                        pass,
                        "a bias that is not one value per output channel, or an output size \
                         that disagrees",
                        inputs,
                    ));
                }
                let (x, x_layout) = activation(x);
                let bias = bias.map(|b| bias_operand(b, out[1] as u32));
                (
                    x,
                    packed_weight(w),
                    x_layout,
                    (out, packed(out, false)),
                    w_dims,
                    bias,
                )
            }
            ConvPass::Data => {
                let (w, dy) = (&inputs[0], &inputs[1]);
                let (Some(w_dims), Some(dy_dims)) = (dims(w), dims(dy)) else {
                    return Ok(not_taken(
                        pass,
                        "a weight or output gradient that is not 4-D",
                        inputs,
                    ));
                };
                if params.output(out, w_dims) != Some(dy_dims) {
                    return Ok(not_taken(
                        pass,
                        "an input size that disagrees with the output gradient",
                        inputs,
                    ));
                }
                let (dy, dy_layout) = activation(dy);
                (
                    packed_weight(w),
                    dy,
                    (out, packed(out, false)),
                    dy_layout,
                    w_dims,
                    None,
                )
            }
            ConvPass::Filter => {
                let (x, dy) = (&inputs[0], &inputs[1]);
                let (Some(x_dims), Some(dy_dims)) = (dims(x), dims(dy)) else {
                    return Ok(not_taken(
                        pass,
                        "an input or output gradient that is not 4-D",
                        inputs,
                    ));
                };
                if params.output(x_dims, out) != Some(dy_dims) {
                    return Ok(not_taken(
                        pass,
                        "a weight size that disagrees with the output gradient",
                        inputs,
                    ));
                }
                let (mut x_read, mut dy_read) = (activation(x), activation(dy));
                match filter_copies(x_read.1, dy_read.1) {
                    (true, _) => x_read = nchw_copy(x),
                    (_, true) => dy_read = nchw_copy(dy),
                    _ => {}
                }
                let ((x, x_layout), (dy, dy_layout)) = (x_read, dy_read);
                (x, dy, x_layout, dy_layout, out, None)
            }
        };
        let client = first.client.clone();
        let key = ConvKey {
            pass,
            dtype,
            device: first.device.index as u32,
            x,
            y,
            w,
            stride: params.stride,
            padding: params.padding,
            dilation: params.dilation,
            groups: params.groups,
            bias: bias.is_some(),
        };
        let (handle, conv, workspace) = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let state = &mut *state;
            if state.refused.contains(&key) {
                return Ok(not_taken(
                    pass,
                    "cuDNN refused this call shape before",
                    inputs,
                ));
            }
            // A prepared call implies its device's handle exists.
            if !state.calls.contains_key(&key) {
                // Nothing is prepared while a graph is being captured (the warm-up replays
                // before a recording prepared what it runs): this convolution runs on the
                // inner backend.
                if cubecl_cuda::capture::active() {
                    return Ok(not_taken(
                        pass,
                        "a call shape met for the first time while a graph is captured",
                        inputs,
                    ));
                }
                // Once per call shape: on the device thread, where the context is current.
                let existing = state.handles.get(&key.device).cloned();
                let prepared = client
                    .exclusive(move || -> Result<_, String> {
                        let handle = match existing {
                            Some(h) => h,
                            None => Arc::new(DnnHandle {
                                raw: result::create_handle().map_err(err)?,
                                lock: Mutex::new(()),
                            }),
                        };
                        let conv = prepare(&handle, &key);
                        Ok((handle, conv))
                    })
                    .map_err(err)
                    .and_then(|r| r);
                let conv = prepared
                    .and_then(|(handle, conv)| {
                        state.handles.insert(key.device, handle);
                        conv
                    })
                    .map_err(|e| {
                        state.refused.insert(key);
                        format!("{e} (conv2d {pass:?}, {dtype:?}, {key:?})")
                    })?;
                state.calls.insert(key, Arc::new(conv));
            }
            let conv = state.calls[&key].clone();
            let stream = StreamId::current().value;
            let slot = state
                .workspaces
                .entry((key.device, stream))
                .or_insert_with(|| (client.empty(MIN_WORKSPACE), MIN_WORKSPACE));
            if slot.1 < conv.workspace {
                // Grown for the largest call met so far: work enqueued on the old buffer keeps
                // it (its bindings hold it) until it ran.
                let bytes = conv
                    .workspace
                    .next_power_of_two()
                    .clamp(MIN_WORKSPACE, WORKSPACE_LIMIT);
                *slot = (client.empty(bytes), bytes);
            }
            (state.handles[&key.device].clone(), conv, slot.0.clone())
        };
        let (a, b, bias) = (a.read(), b.read(), bias.map(Operand::read));

        // The output: reserved by the server inside the call's own task — a handle no client
        // has seen, bound before the bindings are resolved.
        let elements: usize = out.iter().map(|&d| d as usize).product();
        let bytes = (elements * dtype.size()) as u64;
        let reserved = Buffer::new(
            StreamId::current(),
            bytes.next_multiple_of(ALIGNMENT).max(ALIGNMENT),
        );
        let output = CubeTensor::new_contiguous(
            client.clone(),
            first.device.clone(),
            out_shape.clone(),
            reserved.clone(),
            dtype,
        );
        // The bindings, in the order `enqueue` reads their pointers: the call's two inputs
        // (forward: x, w; data: w, dy; filter: x, dy), its output, the workspace, the bias.
        let mut buffers = vec![
            a.handle.clone().binding(),
            b.handle.clone().binding(),
            output.handle.clone().binding(),
            workspace.binding(),
        ];
        if let Some(bias) = bias {
            buffers.push(bias.handle.clone().binding());
        }
        let task = ExternalTask::with_outputs(
            Box::new(
                move |stream: cudarc::driver::sys::CUstream, pointers: &[u64]| {
                    enqueue(&handle, &conv, stream, pointers)
                },
            ),
            std::slice::from_ref(&reserved),
        );
        crate::profile::part("library convolution", "call", || {
            client.launch(
                Box::new(task),
                CubeCount::Static(1, 1, 1),
                KernelArguments::new().with_buffers(buffers),
            )
        });
        Ok(Some(output))
    }
}

/// The passes `BURN_COMPILE_CUDNN_PASSES` gives cuDNN, read once (an unknown name: one
/// warning, and every pass is taken).
fn passes_taken() -> [bool; 3] {
    static PASSES: std::sync::OnceLock<[bool; 3]> = std::sync::OnceLock::new();
    *PASSES.get_or_init(|| {
        let list = std::env::var("BURN_COMPILE_CUDNN_PASSES").ok();
        passes_from(list.as_deref()).unwrap_or_else(|e| {
            tracing::warn!(target: "burn_compile::output_code", "burn-compile: {e}; every pass runs on cuDNN");
            [true; 3]
        })
    })
}

/// A convolution pass not taken (the caller runs it on the inner backend): why, with the
/// operands it read, at debug level under `burn_compile::output_code` (what `explain` users
/// and the GPU tests look at when fewer passes than expected are library calls).
fn not_taken(pass: ConvPass, why: &str, inputs: &[Tensor]) -> Option<Tensor> {
    if tracing::enabled!(target: "burn_compile::output_code", tracing::Level::DEBUG) {
        let operands: Vec<String> = inputs
            .iter()
            .map(|t| {
                format!(
                    "{:?} {:?} strides {:?} at byte {}",
                    t.dtype,
                    t.meta.shape().as_slice(),
                    &t.meta.strides()[..],
                    t.handle.offset_start.unwrap_or(0)
                )
            })
            .collect();
        tracing::debug!(
            target: "burn_compile::output_code",
            "cuDNN does not take this conv2d ({pass:?}): {why}; operands {}",
            operands.join(", ")
        );
    }
    None
}

/// The layout of `t` if it is dense in NCHW or NHWC order ([`dense_layout`]).
fn dense(t: &Tensor) -> Option<Layout> {
    dense_layout(t.meta.shape().as_slice(), t.meta.strides())
}

/// Whether `t` starts 16-byte aligned, as every prepared call assumes.
fn aligned(t: &Tensor) -> bool {
    t.handle.offset_start.unwrap_or(0).is_multiple_of(ALIGNMENT)
}

/// A contiguous copy of `t`: a new allocation, so aligned. (Burn's own CUDA tensors are
/// pitched: rows padded to an aligned length, so a 3×3 filter or a 12-wide image is not dense.)
fn copy(t: &Tensor) -> Tensor {
    let copy = burn_cubecl::cubecl::std::tensor::into_contiguous(
        &t.client,
        t.clone().binding(),
        t.dtype.into(),
    );
    CubeTensor::new(
        t.client.clone(),
        copy.handle,
        *copy.metadata,
        t.device.clone(),
        t.dtype,
    )
}

/// An operand as cuDNN will read it: the tensor itself, or a contiguous copy of it made only
/// once the call is taken (a call not taken, refused or met first during a capture copies
/// nothing).
struct Operand<'a> {
    tensor: &'a Tensor,
    copied: bool,
}

impl Operand<'_> {
    fn read(self) -> Tensor {
        if self.copied {
            copy(self.tensor)
        } else {
            self.tensor.clone()
        }
    }
}

/// The weight as cuDNN's filter descriptors take it (no strides: packed NCHW), copied when it
/// is not, or not aligned. Its dimensions were checked 4-D.
fn packed_weight(w: &Tensor) -> Operand<'_> {
    let packed_nchw = dense(w).is_some_and(|(dims, strides)| strides == packed(dims, false));
    Operand {
        tensor: w,
        copied: !(packed_nchw && aligned(w)),
    }
}

/// An activation (x or the output gradient) as cuDNN reads it, with its layout: itself when
/// dense in NCHW or NHWC order and aligned, else a contiguous copy (NCHW). Its dimensions were
/// checked 4-D.
fn activation(t: &Tensor) -> (Operand<'_>, Layout) {
    match dense(t).filter(|_| aligned(t)) {
        Some(layout) => (
            Operand {
                tensor: t,
                copied: false,
            },
            layout,
        ),
        None => nchw_copy(t),
    }
}

/// An activation read as a packed NCHW copy, with that layout. Its dimensions were checked 4-D.
fn nchw_copy(t: &Tensor) -> (Operand<'_>, Layout) {
    let dims = dims4(t.meta.shape().as_slice()).expect("checked 4-D");
    (
        Operand {
            tensor: t,
            copied: true,
        },
        (dims, packed(dims, false)),
    )
}

/// The bias (one value per output channel) as cuDNN reads it: itself when aligned and unit
/// strided, else a copy.
fn bias_operand(b: &Tensor, channels: u32) -> Operand<'_> {
    let fits = aligned(b) && (channels == 1 || b.meta.strides()[0] == 1);
    Operand {
        tensor: b,
        copied: !fits,
    }
}

/// Enqueues a prepared call on `stream` (on the device thread). `pointers`: the call's two
/// inputs, its output, the workspace, then the bias if any (`CuDnn::conv2d`'s bindings).
fn enqueue(
    handle: &DnnHandle,
    conv: &Conv,
    stream: cudarc::driver::sys::CUstream,
    pointers: &[u64],
) -> Result<(), String> {
    if pointers.iter().any(|p| !p.is_multiple_of(ALIGNMENT)) {
        return Err(err(format!(
            "an operand is not {ALIGNMENT}-byte aligned: {pointers:x?}"
        )));
    }
    let _guard = handle.lock.lock().unwrap_or_else(|e| e.into_inner());
    // The scaling factors are host values, f64 for f64 data and f32 otherwise; they live on
    // this stack until the calls have read them (when they are enqueued).
    let (one_f32, zero_f32, one_f64, zero_f64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
    let (one, zero): (*const c_void, *const c_void) = if conv.double {
        (
            &one_f64 as *const f64 as *const c_void,
            &zero_f64 as *const f64 as *const c_void,
        )
    } else {
        (
            &one_f32 as *const f32 as *const c_void,
            &zero_f32 as *const f32 as *const c_void,
        )
    };
    let h = handle.raw;
    let [a, b, out, workspace] = [0, 1, 2, 3].map(|i| pointers[i] as *mut c_void);
    // SAFETY: the pointers are CubeCL allocations bound to this task (alive until it ran) of
    // the dimensions and strides the descriptors were built from (checked by `conv2d`); the
    // workspace holds at least `conv.workspace` bytes; the stream is the one CubeCL resolved
    // the bindings on, so the call is ordered with their producers. β = 0: the output is only
    // written.
    unsafe {
        result::set_stream(h, stream as sys::cudaStream_t).map_err(err)?;
        match conv.algo {
            Algo::Forward(algo) => {
                result::convolution_forward(
                    h,
                    one,
                    conv.x.0,
                    a,
                    conv.w.0,
                    b,
                    conv.conv.0,
                    algo,
                    workspace,
                    conv.workspace,
                    zero,
                    conv.y.0,
                    out,
                )
                .map_err(err)?;
                if let Some(bias) = &conv.bias {
                    // y = 1 · bias (broadcast over N, H, W) + 1 · y.
                    sys::cudnnAddTensor(
                        h,
                        one,
                        bias.0,
                        pointers[4] as *const c_void,
                        one,
                        conv.y.0,
                        out,
                    )
                    .result()
                    .map_err(err)?;
                }
                Ok(())
            }
            Algo::Data(algo) => result::convolution_backward_data(
                h,
                one,
                conv.w.0,
                a,
                conv.y.0,
                b,
                conv.conv.0,
                algo,
                workspace,
                conv.workspace,
                zero,
                conv.x.0,
                out,
            )
            .map_err(err),
            Algo::Filter(algo) => result::convolution_backward_filter(
                h,
                one,
                conv.x.0,
                a,
                conv.y.0,
                b,
                conv.conv.0,
                algo,
                workspace,
                conv.workspace,
                zero,
                conv.w.0,
                out,
            )
            .map_err(err),
        }
    }
}

/// The cuDNN data type, the convolution's compute type and the math type the heuristic is
/// asked with, for `dtype`.
fn types(
    dtype: DType,
) -> (
    sys::cudnnDataType_t,
    sys::cudnnDataType_t,
    sys::cudnnMathType_t,
) {
    use sys::cudnnDataType_t::*;
    use sys::cudnnMathType_t::*;
    match dtype {
        // Full f32, no TF32 tensor cores (`CUDNN_FMA_MATH`): Burn's own f32 convolutions use
        // TF32 only in the kernels its autotune picks on some shapes, so TF32 here made a
        // training run part from eager's beyond f32's tolerance (`train_digits` on CUDA,
        // BENCHMARKS.md).
        DType::F32 => (CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH),
        DType::F16 => (CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH),
        DType::BF16 => (CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH),
        DType::F64 => (CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH),
        other => unreachable!("`CuDnn::conv2d` refused {other:?}"),
    }
}

/// A tensor descriptor of `layout`.
fn tensor_desc(data: sys::cudnnDataType_t, (dims, strides): Layout) -> Result<TensorDesc, String> {
    let desc = TensorDesc(result::create_tensor_descriptor().map_err(err)?);
    // SAFETY: the descriptor was just created.
    unsafe { result::set_tensor4d_descriptor_ex(desc.0, data, dims, strides).map_err(err)? };
    Ok(desc)
}

/// One result of cuDNN's algorithm heuristic, read with integer fields: the layout of
/// `cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t` (asserted below), without assuming that
/// a library newer than the bindings returns only the enum values they know.
#[repr(C)]
#[derive(Clone, Copy)]
struct Perf {
    algo: u32,
    status: u32,
    time: f32,
    memory: usize,
    determinism: u32,
    math_type: u32,
    reserved: [c_int; 3],
}

const _: () = {
    use std::mem::{align_of, size_of};
    assert!(size_of::<Perf>() == size_of::<sys::cudnnConvolutionFwdAlgoPerf_t>());
    assert!(size_of::<Perf>() == size_of::<sys::cudnnConvolutionBwdDataAlgoPerf_t>());
    assert!(size_of::<Perf>() == size_of::<sys::cudnnConvolutionBwdFilterAlgoPerf_t>());
    assert!(align_of::<Perf>() == align_of::<sys::cudnnConvolutionFwdAlgoPerf_t>());
};

/// The enum value of `sys` type `E` numbered `raw`, among `known`.
fn known<E: Copy>(raw: u32, known: &[E], number: impl Fn(E) -> u32) -> Option<E> {
    known.iter().copied().find(|&e| number(e) == raw)
}

fn math_type(raw: u32) -> Option<sys::cudnnMathType_t> {
    use sys::cudnnMathType_t::*;
    let all = [
        CUDNN_DEFAULT_MATH,
        CUDNN_TENSOR_OP_MATH,
        CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION,
        CUDNN_FMA_MATH,
    ];
    known(raw, &all, |e| e as u32)
}

/// The algorithm numbered `raw` for `pass`, if the bindings know it.
fn algo(pass: ConvPass, raw: u32) -> Option<Algo> {
    use sys::cudnnConvolutionBwdDataAlgo_t as D;
    use sys::cudnnConvolutionBwdFilterAlgo_t as F;
    use sys::cudnnConvolutionFwdAlgo_t as W;
    match pass {
        ConvPass::Forward => {
            let all = [
                W::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                W::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                W::CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                W::CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
                W::CUDNN_CONVOLUTION_FWD_ALGO_FFT,
                W::CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
                W::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
                W::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
            ];
            known(raw, &all, |e| e as u32).map(Algo::Forward)
        }
        ConvPass::Data => {
            let all = [
                D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT,
                D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
                D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD,
                D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
            ];
            known(raw, &all, |e| e as u32).map(Algo::Data)
        }
        ConvPass::Filter => {
            let all = [
                F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT,
                F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3,
                F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD,
                F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED,
                F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING,
            ];
            known(raw, &all, |e| e as u32).map(Algo::Filter)
        }
    }
}

/// Builds the descriptors of a call and picks its algorithm: the heuristic's first (fastest
/// expected) whose status is success and whose workspace, as queried for it, fits in
/// [`WORKSPACE_LIMIT`]. Host-side only, but for the probe of a bias add ([`probe_bias`]).
fn prepare(handle: &DnnHandle, key: &ConvKey) -> Result<Conv, String> {
    let h = handle.raw;
    let (data, compute, math) = types(key.dtype);
    let x = tensor_desc(data, key.x)?;
    let y = tensor_desc(data, key.y)?;
    let w = FilterDesc(result::create_filter_descriptor().map_err(err)?);
    let conv = ConvDesc(result::create_convolution_descriptor().map_err(err)?);
    // SAFETY: the descriptors were just created.
    unsafe {
        result::set_filter4d_descriptor(
            w.0,
            data,
            sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            key.w,
        )
        .map_err(err)?;
        result::set_convolution2d_descriptor(
            conv.0,
            key.padding[0],
            key.padding[1],
            key.stride[0],
            key.stride[1],
            key.dilation[0],
            key.dilation[1],
            sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
            compute,
        )
        .map_err(err)?;
        result::set_convolution_group_count(conv.0, key.groups).map_err(err)?;
        result::set_convolution_math_type(conv.0, math).map_err(err)?;
    }

    // SAFETY: plain integers and a float: zero is a valid value of each.
    let mut perf: [Perf; 8] = unsafe { std::mem::zeroed() };
    let mut returned: c_int = 0;
    // The algorithm counts of each pass (`*_ALGO_COUNT`).
    let requested: c_int = match key.pass {
        ConvPass::Forward => 8,
        ConvPass::Data => 6,
        ConvPass::Filter => 7,
    };
    // SAFETY: every descriptor is alive and describes this call; `perf` holds `requested`
    // results of the layout of the pass's perf struct (asserted above).
    unsafe {
        match key.pass {
            ConvPass::Forward => result::get_convolution_forward_algorithm(
                h,
                x.0,
                w.0,
                conv.0,
                y.0,
                requested,
                &mut returned,
                perf.as_mut_ptr().cast(),
            ),
            ConvPass::Data => result::get_convolution_backward_data_algorithm(
                h,
                w.0,
                y.0,
                conv.0,
                x.0,
                requested,
                &mut returned,
                perf.as_mut_ptr().cast(),
            ),
            ConvPass::Filter => result::get_convolution_backward_filter_algorithm(
                h,
                x.0,
                y.0,
                conv.0,
                w.0,
                requested,
                &mut returned,
                perf.as_mut_ptr().cast(),
            ),
        }
        .map_err(err)?;
    }
    let returned = (returned.max(0) as usize).min(perf.len());
    let success = sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS as u32;
    let mut chosen = None;
    for p in &perf[..returned] {
        if p.status != success || p.memory > WORKSPACE_LIMIT {
            continue;
        }
        let (Some(algo), Some(math)) = (algo(key.pass, p.algo), math_type(p.math_type)) else {
            continue;
        };
        // f32 stays f32 (see `types`): an algorithm the heuristic assumed tensor cores for is
        // not taken.
        if key.dtype == DType::F32 && math != sys::cudnnMathType_t::CUDNN_FMA_MATH {
            continue;
        }
        // The math the heuristic assumed for this algorithm; then its workspace, as the call
        // will need it (an error here is one more refusal: the next candidate is tried).
        // SAFETY: the descriptors are alive and describe this call.
        let workspace = unsafe {
            result::set_convolution_math_type(conv.0, math).map_err(err)?;
            match algo {
                Algo::Forward(a) => {
                    result::get_convolution_forward_workspace_size(h, x.0, w.0, conv.0, y.0, a)
                }
                Algo::Data(a) => result::get_convolution_backward_data_workspace_size(
                    h, w.0, y.0, conv.0, x.0, a,
                ),
                Algo::Filter(a) => result::get_convolution_backward_filter_workspace_size(
                    h, x.0, y.0, conv.0, w.0, a,
                ),
            }
        };
        if let Ok(bytes) = workspace
            && bytes <= WORKSPACE_LIMIT
        {
            chosen = Some((algo, bytes));
            break;
        }
    }
    let Some((algo, workspace)) = chosen else {
        let statuses: Vec<String> = perf[..returned]
            .iter()
            .map(|p| format!("algo {} status {} {} B", p.algo, p.status, p.memory))
            .collect();
        return Err(err(format!(
            "no algorithm for this convolution within a {WORKSPACE_LIMIT}-byte workspace \
             ({})",
            statuses.join(", ")
        )));
    };
    let bias = if key.bias {
        let channels = key.y.0[1];
        let bias = tensor_desc(data, ([1, channels, 1, 1], [channels, 1, 1, 1]))?;
        probe_bias(handle, &bias, data, channels, key.dtype)?;
        Some(bias)
    } else {
        None
    };
    Ok(Conv {
        x,
        y,
        w,
        conv,
        bias,
        algo,
        workspace,
        double: key.dtype == DType::F64,
    })
}

/// Adds a bias of `channels` once, on scratch memory of a stream of its own, and waits: cuDNN
/// says whether it adds a bias of this data type only when called, and a refusal inside a
/// call's task would be an error of CubeCL's stream, not a fallback. On the device thread,
/// never while a graph is captured (`cubecl_cuda::capture::active`).
fn probe_bias(
    handle: &DnnHandle,
    bias: &TensorDesc,
    data: sys::cudnnDataType_t,
    channels: i32,
    dtype: DType,
) -> Result<(), String> {
    use cudarc::driver::result::{free_async, malloc_async, stream};
    let y = tensor_desc(data, ([1, channels, 1, 1], [channels, 1, 1, 1]))?;
    let bytes = channels as usize * dtype.size();
    let (one_f32, one_f64) = (1.0f32, 1.0f64);
    let one: *const c_void = if dtype == DType::F64 {
        &one_f64 as *const f64 as *const c_void
    } else {
        &one_f32 as *const f32 as *const c_void
    };
    let probe = stream::create(stream::StreamKind::NonBlocking).map_err(err)?;
    // SAFETY: the stream and the two buffers are this function's own, freed on the stream and
    // waited for before it returns; the handle is used on this thread only (under its lock),
    // and every call sets its stream before enqueuing.
    let run = unsafe {
        let _guard = handle.lock.lock().unwrap_or_else(|e| e.into_inner());
        (|| -> Result<(), String> {
            let b = malloc_async(probe, bytes).map_err(err)?;
            let added = match malloc_async(probe, bytes) {
                Ok(out) => {
                    let added = result::set_stream(handle.raw, probe as sys::cudaStream_t)
                        .and_then(|()| {
                            sys::cudnnAddTensor(
                                handle.raw,
                                one,
                                bias.0,
                                b as *const c_void,
                                one,
                                y.0,
                                out as *mut c_void,
                            )
                            .result()
                        })
                        .map_err(|e| err(format!("a bias add of {dtype:?}: {e:?}")));
                    let _ = free_async(out, probe);
                    added
                }
                Err(e) => Err(err(e)),
            };
            let _ = free_async(b, probe);
            let synced = stream::synchronize(probe).map_err(err);
            added.and(synced)
        })()
    };
    // SAFETY: created above; its work has completed (or the sync failed: nothing more runs).
    unsafe {
        let _ = stream::destroy(probe);
    }
    run
}
