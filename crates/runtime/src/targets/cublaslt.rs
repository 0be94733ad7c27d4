//! Library matmuls on CUDA through cuBLASLt, in order with CubeCL's kernels.
//!
//! cuBLASLt is loaded at run time (like the CUDA driver). A call is launched like a kernel: an
//! external task of the patched cubecl-cuda (`vendor/README.md`) with the operands as its
//! bindings, so CubeCL's device thread enqueues it on the right stream, after the work that
//! produced its inputs, with no blocking round trip from the thread replaying the plan.
//! Descriptors, layouts and the algorithm are prepared once per call shape, on the device thread
//! (where the CUDA context is current), and cached: a replayed matmul does no heuristic search,
//! and a shape cuBLASLt refuses is known before anything is enqueued (the caller falls back).
//!
//! f32 runs with TF32 tensor cores (`CUBLAS_COMPUTE_32F_FAST_TF32`), as Burn's f32 matmul does;
//! f16/bf16 accumulate in f32; f64 in f64. Operands must be 16-byte aligned (every CubeCL
//! allocation is; a tensor viewed at another offset runs on the inner backend).

use super::MatmulEpilogue;
use crate::disk::DiskCache;
use burn_backend::DType;
use burn_compile_schedule::{Gemm, GemmOperand, MatmulGroup};
use burn_cubecl::cubecl::cuda::CudaRuntime;
use burn_cubecl::cubecl::prelude::CubeCount;
use burn_cubecl::cubecl::server::{Handle as Buffer, KernelArguments};
use burn_cubecl::tensor::CubeTensor;
use burn_std::{Metadata, Shape, Strides};
use cubecl_cuda::external::ExternalTask;
use cudarc::cublaslt::{result, sys};
use rustc_hash::FxHashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

type Tensor = CubeTensor<CudaRuntime>;

/// Workspace per stream: what cuBLAS recommends on Hopper (32 MiB).
const WORKSPACE_BYTES: usize = 32 << 20;

/// The operand alignment every prepared call assumes.
const ALIGNMENT: u32 = 16;

/// cuBLASLt on one process: its handle, workspaces and prepared calls.
pub(crate) struct CuBlasLt {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    handle: Option<Arc<LtHandle>>,
    /// One workspace per device and CubeCL stream: calls on one stream are ordered, calls on
    /// two streams may overlap.
    workspaces: FxHashMap<(u32, u64), Buffer>,
    calls: FxHashMap<CallKey, Arc<Call>>,
    /// Call shapes cuBLASLt refused (reported once; the operations run from then on).
    refused: rustc_hash::FxHashSet<CallKey>,
}

struct LtHandle(sys::cublasLtHandle_t);

// SAFETY: a cuBLASLt handle may be used from any thread; descriptors are only used under
// `Call::lock` (the bias pointer is set per call).
unsafe impl Send for LtHandle {}
unsafe impl Sync for LtHandle {}
unsafe impl Send for Call {}
unsafe impl Sync for Call {}

/// What a prepared call depends on.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct CallKey {
    gemm: Gemm,
    dtype: DType,
    relu: bool,
    /// The bias gradient of A (`Σ_k A`, `m` elements) as a second output (`BGRADA`).
    bias_grad: bool,
}

/// A prepared call: descriptor, layouts (A, B, D) and algorithm.
struct Call {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algo: sys::cublasLtMatmulAlgo_t,
    /// Held while the descriptor's bias pointer is set and the call enqueued.
    lock: Mutex<()>,
}

impl Drop for Call {
    fn drop(&mut self) {
        // SAFETY: created by `prepare`, destroyed once.
        unsafe {
            for l in self.layouts.into_iter().filter(|l| !l.is_null()) {
                let _ = result::destroy_matrix_layout(l);
            }
            let _ = result::destroy_matmul_desc(self.desc);
        }
    }
}

/// How [`CuBlasLt::matmul`] runs a call (`RuntimeConfig`'s `pad_matmul_dims`, `tune_matmuls`
/// and disk cache).
pub(crate) struct CallOptions<'a> {
    /// Operands with a dimension off the vector are padded (`Gemm::padded`).
    pub pad_dims: bool,
    /// A new call shape's algorithm is the fastest of the heuristic's candidates ([`fastest`]).
    pub tune: bool,
    /// Where timed choices are kept for the next process (per GPU and cuBLASLt version): read
    /// only when a call shape is prepared, not on every replayed call.
    pub cache: &'a Mutex<Option<Arc<DiskCache>>>,
}

/// A cuBLASLt error or refusal, as text.
fn err(e: impl std::fmt::Debug) -> String {
    format!("cuBLASLt: {e:?}")
}

impl CuBlasLt {
    /// cuBLASLt, if its library can be loaded on this machine.
    pub fn load() -> Result<Self, String> {
        // `culib` panics with the names it tried when the library is missing.
        // SAFETY: loads the shared library once (cudarc's lazy loader); nothing is called yet.
        std::panic::catch_unwind(|| unsafe {
            sys::culib();
        })
        .map_err(|payload| crate::panic_message(&*payload))?;
        Ok(Self {
            state: Mutex::new(State::default()),
        })
    }

    /// Runs `group` over `inputs` (the operation's inputs, in its order) and its `epilogue`
    /// into a new contiguous tensor of `out_shape` (or `into[0]`), and a fused bias gradient
    /// into a vector of `m` elements (or `into[1]`): the outputs in that order. `Ok(None)`: one
    /// call cannot express the product with these layouts (the caller runs the operations
    /// themselves); `Err`: cuBLASLt refused the call.
    pub fn matmul(
        &self,
        group: &MatmulGroup,
        inputs: &[Tensor],
        epilogue: MatmulEpilogue<'_, Tensor>,
        out_shape: &Shape,
        into: [Option<&Tensor>; 2],
        options: &CallOptions<'_>,
    ) -> Result<Option<Vec<Tensor>>, String> {
        let CallOptions {
            pad_dims,
            tune,
            cache,
        } = *options;
        let bias_grad = group.bias_grad.is_some();
        if inputs.iter().any(|t| t.dtype != group.dtype) {
            return Ok(None);
        }
        // The residual is read as C through D's layout: it must have D's shape, contiguous.
        if let Some(r) = epilogue.residual {
            let fits = r.dtype == group.dtype
                && r.meta.shape().as_slice() == out_shape.as_slice()
                && r.is_contiguous();
            if !fits {
                return Ok(None);
            }
        }
        let layout = |inputs: &[Tensor]| {
            let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.meta.shape().as_slice()).collect();
            let strides: Vec<&[usize]> = inputs.iter().map(|t| &t.meta.strides()[..]).collect();
            group.gemm(&shapes, &strides, out_shape.as_slice())
        };
        // Operands whose batch does not fold into one stride (attention's heads, split by a
        // reshape and a swap) are copied so that it does, by one generated kernel for all of a
        // shape; any other layout cuBLASLt cannot read, contiguous, as the inner backend's
        // matmul does.
        let copied: Vec<Tensor>;
        let (g, inputs) = match layout(inputs) {
            Some(g) => (g, inputs),
            None => {
                let refs: Vec<&Tensor> = inputs.iter().collect();
                copied = crate::profile::part("library matmul", "operand copies", || {
                    let folded = super::batch_folded(&refs);
                    if layout(&folded).is_some() {
                        folded
                    } else {
                        inputs
                            .iter()
                            .map(|t| burn_cubecl::kernel::into_contiguous(t.clone()))
                            .collect()
                    }
                });
                match layout(&copied) {
                    Some(g) => (g, &copied[..]),
                    None => return Ok(None),
                }
            }
        };
        let aligned = |t: &Tensor| {
            t.handle
                .offset_start
                .unwrap_or(0)
                .is_multiple_of(ALIGNMENT as u64)
        };
        if !inputs.iter().chain(epilogue.residual).all(aligned) {
            return Ok(None);
        }
        // A dimension off the vector (GPT-2's 50,257 logits) leaves cuBLASLt only kernels that
        // read one element at a time; with `pad_dims` the call runs on zero-padded copies of
        // its operands into a padded D, whose product part is then copied out (`Gemm::padded`).
        let vector = (ALIGNMENT as usize / group.dtype.size()) as u64;
        // A bias gradient over padded rows would be a padded vector: not padded.
        let padded =
            (pad_dims && epilogue.residual.is_none() && !bias_grad && g.a.input != g.b.input)
                .then(|| g.padded(vector))
                .flatten();
        let padded_inputs: Vec<Tensor>;
        let (g, inputs, padded_d) = match padded {
            Some(mut p) => {
                padded_inputs = crate::profile::part("library matmul", "padding", || {
                    inputs
                        .iter()
                        .enumerate()
                        .map(|(i, t)| {
                            match [(g.a, p.a), (g.b, p.b)]
                                .into_iter()
                                .find(|(o, _)| o.input == i)
                            {
                                Some((o, padded)) => pad_operand(t, o, padded),
                                None => t.clone(),
                            }
                        })
                        .collect()
                });
                // Each operand's leading dimension: its copy's row pitch.
                p.a.ld = padded_inputs[p.a.input].meta.strides()[0] as i64;
                p.b.ld = padded_inputs[p.b.input].meta.strides()[0] as i64;
                let d = burn_cubecl::ops::numeric::empty_device_contiguous_dtype(
                    inputs[0].client.clone(),
                    inputs[0].device.clone(),
                    Shape::from(vec![p.n as usize, p.m as usize]),
                    group.dtype,
                );
                (p, &padded_inputs[..], Some((d, g)))
            }
            None => (g, inputs, None),
        };
        let first = &inputs[0];
        let client = first.client.clone();
        let key = CallKey {
            gemm: g,
            dtype: group.dtype,
            relu: group.relu.is_some(),
            bias_grad,
        };
        let (handle, call, workspace) = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let state = &mut *state;
            if state.refused.contains(&key) {
                return Ok(None);
            }
            // A prepared call implies the handle exists.
            if !state.calls.contains_key(&key) {
                // Once per call shape: on the device thread, where the context is current. No
                // timing while a graph is being captured (its scratch allocations and waits
                // are not for a recording): the heuristic's choice then.
                let existing = state.handle.clone();
                let tune = tune && !cubecl_cuda::capture::active();
                let cache = cache.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let prepared = client
                    .exclusive(move || -> Result<_, String> {
                        let handle = match existing {
                            Some(h) => h,
                            None => Arc::new(LtHandle(result::create_handle().map_err(err)?)),
                        };
                        let call = prepare(handle.0, &key, tune, cache.as_deref())?;
                        Ok((handle, call))
                    })
                    .map_err(err)
                    .and_then(|r| r);
                let (handle, call) = prepared.inspect_err(|_| {
                    state.refused.insert(key);
                })?;
                state.handle = Some(handle);
                state.calls.insert(key, Arc::new(call));
            }
            let stream = burn_cubecl::cubecl::stream_id::StreamId::current().value;
            let workspace = state
                .workspaces
                .entry((first.device.index as u32, stream))
                .or_insert_with(|| client.empty(WORKSPACE_BYTES))
                .clone();
            (
                state.handle.clone().expect("created above"),
                state.calls[&key].clone(),
                workspace,
            )
        };

        // The output: in the memory plan's slot, or reserved by the server inside the call's
        // own task (one device-thread task per matmul, not two) — a handle no client has seen,
        // bound before the bindings are resolved.
        let mut fresh = Vec::new();
        let mut output = |shape: &Shape, into: Option<&Tensor>| match into {
            Some(slot) => super::in_slot(slot, shape.clone(), group.dtype),
            None => {
                let bytes = (shape.num_elements() * group.dtype.size()) as u64;
                let reserved = bytes
                    .next_multiple_of(ALIGNMENT as u64)
                    .max(ALIGNMENT as u64);
                let handle = Buffer::new(
                    burn_cubecl::cubecl::stream_id::StreamId::current(),
                    reserved,
                );
                fresh.push(handle.clone());
                CubeTensor::new_contiguous(
                    client.clone(),
                    first.device.clone(),
                    shape.clone(),
                    handle,
                    group.dtype,
                )
            }
        };
        let out = match &padded_d {
            Some((d, _)) => d.clone(),
            None => output(out_shape, into[0]),
        };
        let bias_grad_out = bias_grad.then(|| output(&Shape::from(vec![g.m as usize]), into[1]));
        let mut buffers = vec![
            inputs[g.a.input].handle.clone().binding(),
            inputs[g.b.input].handle.clone().binding(),
            out.handle.clone().binding(),
            workspace.binding(),
        ];
        // The bias pointer: the bias read, or the bias gradient written.
        if let Some(b) = g.bias {
            buffers.push(inputs[b].handle.clone().binding());
        }
        if let Some(b) = &bias_grad_out {
            buffers.push(b.handle.clone().binding());
        }
        if let Some(r) = epilogue.residual {
            buffers.push(r.handle.clone().binding());
        }
        let scales = Scales {
            dtype: group.dtype,
            alpha: epilogue.alpha,
            bias: g.bias.is_some() || bias_grad,
            residual: epilogue.residual.is_some(),
        };
        let task = ExternalTask::with_outputs(
            Box::new(
                move |stream: cudarc::driver::sys::CUstream, pointers: &[u64]| {
                    enqueue(handle.0, &call, &call.algo, scales, stream, pointers)
                },
            ),
            &fresh,
        );
        crate::profile::part("library matmul", "call", || {
            client.launch(
                Box::new(task),
                CubeCount::Static(1, 1, 1),
                KernelArguments::new().with_buffers(buffers),
            )
        });
        let Some((d, unpadded)) = padded_d else {
            return Ok(Some(std::iter::once(out).chain(bias_grad_out).collect()));
        };
        // The product: the first `n` rows of `m` of the padded D (row-major `[n_pad, m_pad]`),
        // read as the output's shape (its rows fold: one padded row apart), copied contiguous
        // into the plan's slot or a new buffer.
        let rank = out_shape.num_dims();
        let mut strides = vec![1; rank];
        if rank > 1 {
            strides[rank - 2] = g.m as usize;
            for i in (0..rank - 2).rev() {
                strides[i] = strides[i + 1] * out_shape[i + 1];
            }
        }
        debug_assert_eq!(
            out_shape.num_elements() as u64,
            unpadded.m * unpadded.n,
            "the output holds the unpadded product"
        );
        let view = CubeTensor::new(
            client.clone(),
            d.handle.clone(),
            Metadata::new(out_shape.clone(), Strides::from(strides)),
            first.device.clone(),
            group.dtype,
        );
        Ok(Some(vec![crate::profile::part(
            "library matmul",
            "padding",
            || match into[0] {
                Some(slot) => {
                    let out = super::in_slot(slot, out_shape.clone(), group.dtype);
                    burn_cubecl::cubecl::std::tensor::copy_into(
                        &client,
                        view.binding(),
                        out.clone().binding(),
                        group.dtype.into(),
                    );
                    out
                }
                None => burn_cubecl::kernel::into_contiguous(view),
            },
        )]))
    }
}

/// A zero-filled copy of operand `o` of `t` (its memory: `o.cols` rows of `o.rows` elements,
/// `o.ld` apart) as `padded.cols` rows of `padded.rows` (the copy's row pitch is its leading
/// dimension).
fn pad_operand(t: &Tensor, o: GemmOperand, padded: GemmOperand) -> Tensor {
    let zeros = burn_cubecl::ops::numeric::zeros_client(
        t.client.clone(),
        t.device.clone(),
        Shape::from(vec![padded.cols as usize, padded.rows as usize]),
        t.dtype,
    );
    let view = |handle: &Buffer, ld: usize| {
        CubeTensor::new(
            t.client.clone(),
            handle.clone(),
            Metadata::new(
                Shape::from(vec![o.cols as usize, o.rows as usize]),
                Strides::from(vec![ld, 1]),
            ),
            t.device.clone(),
            t.dtype,
        )
    };
    let from = view(&t.handle, o.ld as usize);
    let into = view(&zeros.handle, zeros.meta.strides()[0]);
    burn_cubecl::cubecl::std::tensor::copy_into(
        &t.client,
        from.binding(),
        into.binding(),
        t.dtype.into(),
    );
    zeros
}

/// What a call's pointers hold beyond A, B, D and the workspace, and its α and β.
#[derive(Clone, Copy)]
struct Scales {
    dtype: DType,
    alpha: f64,
    /// A bias pointer follows the workspace (the bias read, or the bias gradient written).
    bias: bool,
    /// A residual (C, with β = 1) comes last.
    residual: bool,
}

/// Enqueues a prepared call on `stream` (on the device thread). `pointers`: A, B, D, the
/// workspace, then the bias and the residual if any.
fn enqueue(
    handle: sys::cublasLtHandle_t,
    call: &Call,
    algo: &sys::cublasLtMatmulAlgo_t,
    scales: Scales,
    stream: cudarc::driver::sys::CUstream,
    pointers: &[u64],
) -> Result<(), String> {
    if pointers.iter().any(|p| !p.is_multiple_of(ALIGNMENT as u64)) {
        return Err(err(format!(
            "an operand is not {ALIGNMENT}-byte aligned: {pointers:x?}"
        )));
    }
    let _guard = call.lock.lock().unwrap_or_else(|e| e.into_inner());
    if scales.bias {
        // The attribute is read from host memory holding the device pointer.
        let bias: &u64 = &pointers[4];
        // SAFETY: the descriptor is alive (the call is held) and used under its lock.
        unsafe {
            result::set_matmul_desc_attribute(
                call.desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                bias as *const u64 as *const c_void,
                std::mem::size_of::<u64>(),
            )
            .map_err(err)?;
        }
    }
    // The scale type is f64 for f64 and f32 otherwise (`types`); the values live on this stack
    // until the call has read them (cuBLASLt reads host scalars when it is enqueued).
    let beta_f64: f64 = if scales.residual { 1.0 } else { 0.0 };
    let (alpha_f32, beta_f32) = (scales.alpha as f32, beta_f64 as f32);
    let (alpha, beta): (*const c_void, *const c_void) = if scales.dtype == DType::F64 {
        (
            &scales.alpha as *const f64 as *const c_void,
            &beta_f64 as *const f64 as *const c_void,
        )
    } else {
        (
            &alpha_f32 as *const f32 as *const c_void,
            &beta_f32 as *const f32 as *const c_void,
        )
    };
    let [a_layout, b_layout, d_layout] = call.layouts;
    let d = pointers[2] as *mut c_void;
    // C has D's layout (the residual was checked to be contiguous of D's shape); without a
    // residual, β = 0 and C is D itself, never read.
    let c = if scales.residual {
        *pointers.last().expect("the residual's pointer") as *const c_void
    } else {
        d as *const c_void
    };
    // SAFETY: the pointers are CubeCL allocations bound to this task (alive until it ran) of
    // the shapes and strides the layouts were built from (`gemm` checked them); the stream is
    // the one CubeCL resolved the bindings on, so the call is ordered with their producers.
    unsafe {
        result::matmul(
            handle,
            call.desc,
            alpha,
            beta,
            pointers[0] as *const c_void,
            a_layout,
            pointers[1] as *const c_void,
            b_layout,
            c,
            d_layout,
            d,
            d_layout,
            algo,
            pointers[3] as *mut c_void,
            WORKSPACE_BYTES,
            stream as sys::cudaStream_t,
        )
        .map_err(err)
    }
}

/// The cuBLASLt element, compute and scale types of `dtype`.
fn types(
    dtype: DType,
) -> (
    sys::cudaDataType,
    sys::cublasComputeType_t,
    sys::cudaDataType,
) {
    use sys::cublasComputeType_t::*;
    use sys::cudaDataType_t::*;
    match dtype {
        DType::F32 => (CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F),
        DType::F16 => (CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F),
        DType::BF16 => (CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F),
        DType::F64 => (CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F),
        other => unreachable!("`rules::library_matmul_lowers` refused {other:?}"),
    }
}

/// Builds the descriptor and layouts of a call and picks its algorithm: the heuristic's first,
/// or with `tune` the fastest of its candidates ([`fastest`]), found in `cache` when an earlier
/// process timed them on this GPU with this cuBLASLt (and the library still takes it), else
/// timed now and kept there.
fn prepare(
    handle: sys::cublasLtHandle_t,
    key: &CallKey,
    tune: bool,
    cache: Option<&DiskCache>,
) -> Result<Call, String> {
    let g = &key.gemm;
    let (elem, compute, scale) = types(key.dtype);
    let desc = result::create_matmul_desc(compute, scale).map_err(err)?;
    // From here on `call` owns what is created (destroyed on every error path by its drop).
    let layout = |o: &GemmOperand| -> Result<sys::cublasLtMatrixLayout_t, String> {
        let l = result::create_matrix_layout(elem, o.rows, o.cols, o.ld).map_err(err)?;
        set_batch(l, g.batch, o.batch_stride)?;
        Ok(l)
    };
    let mut call = Call {
        desc,
        layouts: [std::ptr::null_mut(); 3],
        // SAFETY: a plain C struct (an array of integers); replaced by the heuristic's choice.
        algo: unsafe { std::mem::zeroed() },
        lock: Mutex::new(()),
    };
    call.layouts[0] = layout(&g.a)?;
    call.layouts[1] = layout(&g.b)?;
    let d = result::create_matrix_layout(elem, g.m, g.n, g.m as i64).map_err(err)?;
    call.layouts[2] = d;
    set_batch(d, g.batch, g.d_batch_stride)?;

    let set = |attr: sys::cublasLtMatmulDescAttributes_t, value: i32| -> Result<(), String> {
        // SAFETY: the descriptor is alive; the attribute takes a 32-bit value.
        unsafe {
            result::set_matmul_desc_attribute(
                desc,
                attr,
                &value as *const i32 as *const c_void,
                std::mem::size_of::<i32>(),
            )
            .map_err(err)
        }
    };
    use sys::cublasLtEpilogue_t::*;
    use sys::cublasLtMatmulDescAttributes_t::*;
    set(CUBLASLT_MATMUL_DESC_TRANSA, g.a.trans as i32)?;
    set(CUBLASLT_MATMUL_DESC_TRANSB, g.b.trans as i32)?;
    let epilogue = match (g.bias.is_some(), key.relu, key.bias_grad) {
        (false, false, true) => CUBLASLT_EPILOGUE_BGRADA,
        (_, _, true) => return Err(err("a bias gradient with a bias or a ReLU")),
        (true, true, _) => CUBLASLT_EPILOGUE_RELU_BIAS,
        (true, false, _) => CUBLASLT_EPILOGUE_BIAS,
        (false, true, _) => CUBLASLT_EPILOGUE_RELU,
        (false, false, _) => CUBLASLT_EPILOGUE_DEFAULT,
    };
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue as i32)?;
    if g.bias.is_some() || key.bias_grad {
        // The heuristic needs a bias pointer to be set; the real one is set per call.
        let ptr: u64 = 256;
        // SAFETY: as above, a 64-bit device pointer.
        unsafe {
            result::set_matmul_desc_attribute(
                desc,
                CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                &ptr as *const u64 as *const c_void,
                std::mem::size_of::<u64>(),
            )
            .map_err(err)?;
        }
    }

    let pref = result::create_matmul_pref().map_err(err)?;
    let chosen = (|| {
        use sys::cublasLtMatmulPreferenceAttributes_t::*;
        let set_pref = |attr, value: *const c_void, size: usize| -> Result<(), String> {
            // SAFETY: the preference is alive; `value` points to `size` bytes of the type the
            // attribute takes.
            unsafe { result::set_matmul_pref_attribute(pref, attr, value, size).map_err(err) }
        };
        let workspace = WORKSPACE_BYTES as u64;
        set_pref(
            CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            &workspace as *const u64 as *const c_void,
            std::mem::size_of::<u64>(),
        )?;
        let align = |attr, bytes: &u32| {
            set_pref(
                attr,
                bytes as *const u32 as *const c_void,
                std::mem::size_of::<u32>(),
            )
        };
        // Algorithms that need more than the alignment every operand has are excluded.
        for attr in [
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
        ] {
            align(attr, &ALIGNMENT)?;
        }
        // SAFETY: plain C structs (integers and a float), filled in by the heuristic.
        let mut found: [sys::cublasLtMatmulHeuristicResult_t; CANDIDATES] =
            unsafe { std::mem::zeroed() };
        let mut count = 0;
        // SAFETY: every object is alive and describes this call; the array holds `CANDIDATES`.
        unsafe {
            sys::cublasLtMatmulAlgoGetHeuristic(
                handle,
                desc,
                call.layouts[0],
                call.layouts[1],
                call.layouts[2],
                call.layouts[2],
                pref,
                CANDIDATES as i32,
                found.as_mut_ptr(),
                &mut count,
            )
            .result()
            .map_err(err)?;
        }
        let found: Vec<_> = found[..count.clamp(0, CANDIDATES as i32) as usize]
            .iter()
            .filter(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .map(|r| r.algo)
            .collect();
        if found.is_empty() {
            return Err(err(sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED));
        }
        Ok(found)
    })();
    // SAFETY: created above, destroyed once.
    unsafe {
        let _ = result::destroy_matmul_pref(pref);
    }
    let candidates = chosen?;
    call.algo = candidates[0];
    if !tune || candidates.len() < 2 {
        return Ok(call);
    }
    let counters = &crate::counters::COUNTERS;
    let stored = cache.and_then(|c| Some((c, stored_key(c, key)?)));
    if let Some((c, k)) = &stored
        && let Some(algo) = stored_algo(c, k, handle, &call)
    {
        call.algo = algo;
        crate::counters::count(&counters.tuned_matmuls);
        if algo.data != candidates[0].data {
            crate::counters::count(&counters.tuned_matmuls_changed);
        }
        return Ok(call);
    }
    {
        match fastest(handle, &call, key, &candidates) {
            Ok(Some(timed)) => {
                tracing::debug!(
                    target: "burn_compile::output_code",
                    "cuBLASLt {:?} m{} n{} k{} batch {}: algorithm {} of {} ({:.1} µs; the \
                     heuristic's first {:.1} µs)",
                    key.dtype,
                    key.gemm.m,
                    key.gemm.n,
                    key.gemm.k,
                    key.gemm.batch,
                    timed.index + 1,
                    candidates.len(),
                    timed.micros,
                    timed.first_micros,
                );
                call.algo = candidates[timed.index];
                crate::counters::count(&counters.tuned_matmuls);
                if timed.index != 0 {
                    crate::counters::count(&counters.tuned_matmuls_changed);
                }
                if let Some((c, k)) = &stored {
                    let bytes: Vec<u8> = call
                        .algo
                        .data
                        .iter()
                        .flat_map(|w| w.to_le_bytes())
                        .collect();
                    crate::disk::put(c, ALGORITHM_ENTRY, k, &bytes);
                }
            }
            Ok(None) => {}
            // Timing is an optimization: the heuristic's choice stands.
            Err(e) => tracing::debug!(
                target: "burn_compile::output_code",
                "cuBLASLt: the algorithms of m{} n{} k{} were not timed ({e}); the heuristic's \
                 first is kept",
                key.gemm.m,
                key.gemm.n,
                key.gemm.k,
            ),
        }
    }
    Ok(call)
}

/// The disk cache's kind of entry holding a timed algorithm (cuBLASLt's opaque 64 bytes).
const ALGORITHM_ENTRY: &str = "cublaslt-algorithm";

/// The disk cache key of a call shape's timed algorithm: the shape and epilogue, the GPU's
/// name and cuBLASLt's version (an algorithm is only meaningful to the library that offered
/// it, and the fastest to the GPU it ran on). `None` when the GPU cannot be named. On the
/// device thread (its context current).
fn stored_key(cache: &DiskCache, key: &CallKey) -> Option<String> {
    use cudarc::driver::{result::device, sys as driver};
    let mut dev: driver::CUdevice = 0;
    // SAFETY: an out-pointer to a local; the context is current on this thread.
    unsafe { driver::cuCtxGetDevice(&mut dev) }.result().ok()?;
    let gpu = device::get_name(dev).ok()?;
    // SAFETY: takes no arguments; the library is loaded (a handle exists).
    let version = unsafe { sys::cublasLtGetVersion() };
    let material = format!(
        "{gpu}; cuBLASLt {version}; {:?} {:?} relu {} bias gradient {}",
        key.dtype, key.gemm, key.relu, key.bias_grad
    );
    Some(cache.key(ALGORITHM_ENTRY, material.as_bytes()))
}

/// The algorithm kept under `stored_key`, if there is one and cuBLASLt still takes it for this
/// call (within the workspace).
fn stored_algo(
    cache: &DiskCache,
    stored_key: &str,
    handle: sys::cublasLtHandle_t,
    call: &Call,
) -> Option<sys::cublasLtMatmulAlgo_t> {
    let bytes = crate::disk::get(cache, ALGORITHM_ENTRY, stored_key)?;
    if bytes.len() != 64 {
        return None;
    }
    // SAFETY: a plain C struct of eight integers, each set below.
    let mut algo: sys::cublasLtMatmulAlgo_t = unsafe { std::mem::zeroed() };
    for (word, chunk) in algo.data.iter_mut().zip(bytes.chunks_exact(8)) {
        *word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
    }
    // SAFETY: plain C struct, filled in by the check.
    let mut checked: sys::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
    // SAFETY: the call's descriptor and layouts are alive; the pointers are to locals.
    let status = unsafe {
        sys::cublasLtMatmulAlgoCheck(
            handle,
            call.desc,
            call.layouts[0],
            call.layouts[1],
            call.layouts[2],
            call.layouts[2],
            &algo,
            &mut checked,
        )
    };
    let taken = status == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
        && checked.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
        && checked.workspaceSize <= WORKSPACE_BYTES;
    taken.then_some(algo)
}

/// Algorithms the heuristic is asked for per call shape (its best estimates, in order).
const CANDIDATES: usize = 8;

/// Timed launches of each candidate (after one untimed).
const TIMED_RUNS: usize = 10;

/// Scratch memory a timing may allocate; a larger call keeps the heuristic's choice.
const MAX_SCRATCH_BYTES: usize = 1 << 30;

/// The fastest candidate, when the timing ran.
struct Timed {
    index: usize,
    micros: f32,
    first_micros: f32,
}

/// Times each candidate algorithm of `call` on scratch operands of its shape (zeros), on a
/// stream of its own, and waits: the index of the fastest. On the device thread, never while
/// a graph is captured. `Ok(None)`: too large to time, or no candidate ran.
fn fastest(
    handle: sys::cublasLtHandle_t,
    call: &Call,
    key: &CallKey,
    candidates: &[sys::cublasLtMatmulAlgo_t],
) -> Result<Option<Timed>, String> {
    use cudarc::driver::result::{event, free_async, malloc_async, memset_d8_async, stream};
    use cudarc::driver::sys::CUevent_flags;
    let g = &key.gemm;
    let elem = key.dtype.size();
    let operand = |o: &GemmOperand| {
        let last = (o.cols.max(1) - 1) as i64 * o.ld + o.rows as i64;
        (last + (g.batch.max(1) as i64 - 1) * o.batch_stride) as usize * elem
    };
    let d_bytes = (g.m * g.n) as usize * elem
        + (g.batch.max(1) as usize - 1) * g.d_batch_stride as usize * elem;
    let bias = g.bias.is_some() || key.bias_grad;
    let mut sizes = vec![operand(&g.a), operand(&g.b), d_bytes, WORKSPACE_BYTES];
    if bias {
        sizes.push(g.m as usize * elem);
    }
    if sizes.iter().sum::<usize>() > MAX_SCRATCH_BYTES {
        return Ok(None);
    }
    let scales = Scales {
        dtype: key.dtype,
        alpha: 1.0,
        bias,
        residual: false,
    };
    // The device's queued work (the replay that met this shape, other streams) would share
    // the SMs with the timed calls: wait for it first.
    cudarc::driver::result::ctx::synchronize().map_err(err)?;
    let timing = stream::create(stream::StreamKind::NonBlocking).map_err(err)?;
    let mut buffers = Vec::new();
    let mut events = Vec::new();
    // SAFETY: the stream, buffers and events are this function's own: the buffers are freed on
    // the stream, which is waited for before anything is destroyed; every call is enqueued on
    // it with pointers to buffers of the sizes its layouts read and write.
    let run = unsafe {
        (|| -> Result<Option<Timed>, String> {
            for bytes in &sizes {
                let b = malloc_async(timing, *bytes).map_err(err)?;
                buffers.push(b);
                memset_d8_async(b, 0, *bytes, timing).map_err(err)?;
            }
            for _ in 0..2 {
                events.push(event::create(CUevent_flags::CU_EVENT_DEFAULT).map_err(err)?);
            }
            let mut best: Option<(usize, f32)> = None;
            let mut first = f32::NAN;
            for (i, algo) in candidates.iter().enumerate() {
                // A candidate the library refuses to enqueue is skipped.
                if enqueue(handle, call, algo, scales, timing, &buffers).is_err() {
                    continue;
                }
                event::record(events[0], timing).map_err(err)?;
                for _ in 0..TIMED_RUNS {
                    enqueue(handle, call, algo, scales, timing, &buffers)?;
                }
                event::record(events[1], timing).map_err(err)?;
                stream::synchronize(timing).map_err(err)?;
                let micros =
                    event::elapsed(events[0], events[1]).map_err(err)? * 1e3 / TIMED_RUNS as f32;
                if i == 0 {
                    first = micros;
                }
                if best.is_none_or(|(_, b)| micros < b) {
                    best = Some((i, micros));
                }
            }
            Ok(best.map(|(index, micros)| Timed {
                index,
                micros,
                first_micros: first,
            }))
        })()
    };
    // SAFETY: as above; after the wait nothing of this function's is in flight.
    unsafe {
        for b in buffers {
            let _ = free_async(b, timing);
        }
        let _ = stream::synchronize(timing);
        for e in events {
            let _ = event::destroy(e);
        }
        let _ = stream::destroy(timing);
    }
    run
}

fn set_batch(layout: sys::cublasLtMatrixLayout_t, batch: u32, stride: i64) -> Result<(), String> {
    if batch <= 1 {
        return Ok(());
    }
    use sys::cublasLtMatrixLayoutAttribute_t::*;
    let count = batch as i32;
    // SAFETY: the layout is alive; count is a 32-bit and the stride a 64-bit attribute.
    unsafe {
        result::set_matrix_layout_attribute(
            layout,
            CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
            &count as *const i32 as *const c_void,
            std::mem::size_of::<i32>(),
        )
        .map_err(err)?;
        result::set_matrix_layout_attribute(
            layout,
            CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
            &stride as *const i64 as *const c_void,
            std::mem::size_of::<i64>(),
        )
        .map_err(err)
    }
}
