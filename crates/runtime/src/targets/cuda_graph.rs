//! CUDA: a replay's launches recorded as one CUDA graph (the patched cubecl-cuda's stream
//! capture, `vendor/cubecl-cuda/src/capture.rs`), and launched again with its inputs copied
//! into the recording's own buffers and its outputs copied out of them.
//!
//! With batched copies (`CompileConfig::recording_copies`), an input at the address the last
//! launch copied it from, whose buffer the recording held since, is not copied again (a model's
//! weights at every call), and each direction's copies are one launch of a copy kernel
//! (`Recording::launch_with_copies`) in place of one DMA copy per tensor.
//!
//! Every call goes to CubeCL's device thread as an external task on the recording thread's
//! stream, so the capture sees exactly the launches issued between `begin` and `end` on that
//! stream, in order.

use super::{GraphRecorder, Recorded};
use crate::counters::COUNTERS;
use burn_backend::{DType, ElementConversion};
use burn_cubecl::cubecl::client::ComputeClient;
use burn_cubecl::cubecl::cuda::CudaRuntime;
use burn_cubecl::cubecl::prelude::CubeCount;
use burn_cubecl::cubecl::server::{Handle, KernelArguments};
use burn_cubecl::cubecl::stream_id::StreamId;
use burn_cubecl::tensor::CubeTensor;
use burn_std::{Metadata, Shape, Strides};
use cubecl_cuda::capture::{self, Recording};
use cubecl_cuda::external::ExternalTask;
use cudarc::driver::sys::CUstream;
use std::any::Any;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};

type Tensor = CubeTensor<CudaRuntime>;

/// Bytes of a recording's metadata arena: Burn's own kernels' shapes and strides (the generated
/// kernels have none); a capture that needs more fails with a reason and replays as before.
const METADATA_ARENA_BYTES: u64 = 1 << 20;

/// Alignment of the outputs copied out of a recording (as cuBLASLt's outputs).
const ALIGNMENT: u64 = 256;

pub(super) struct CudaGraphs {
    client: ComputeClient<CudaRuntime>,
}

/// A recording with the device pointers of its own input and output buffers.
struct CudaRecorded {
    recording: Option<Recording>,
    /// (pointer, bytes) of each static input, then of each static output.
    inputs: Vec<(u64, u64)>,
    outputs: Vec<(u64, u64)>,
    /// Per kernel scalar (in `end`'s order): the recorded kernel and byte offset holding it,
    /// its dtype, and the bytes written there last (the capture's markers at first).
    scalars: Mutex<Vec<ScalarSite>>,
    /// The inputs of the last launch, held until the next launch's task has run: no one
    /// writes a buffer in place while another reference to it lives, so an input found at the
    /// address it was copied from holds the values copied then.
    held: Mutex<Vec<Handle>>,
    /// Written by the launch tasks, in stream order: the address each input was last copied
    /// from (0: none).
    sources: Mutex<Vec<u64>>,
}

struct ScalarSite {
    kernel: usize,
    offset: usize,
    dtype: DType,
    written: ScalarBytes,
}

/// `value` as a kernel of `dtype` receives it (`ElementConversion`, as the launch converts):
/// its little-endian bytes, in the first `len` of 8 (no allocation per scalar per launch).
#[derive(Clone, Copy, PartialEq, Eq)]
struct ScalarBytes {
    bytes: [u8; 8],
    len: usize,
}

impl ScalarBytes {
    fn of(value: f64, dtype: DType) -> Self {
        let mut bytes = [0u8; 8];
        let len = match dtype {
            DType::F64 => {
                bytes.copy_from_slice(&value.to_le_bytes());
                8
            }
            DType::F16 => {
                bytes[..2].copy_from_slice(&half::f16::from_elem(value).to_le_bytes());
                2
            }
            DType::BF16 => {
                bytes[..2].copy_from_slice(&half::bf16::from_elem(value).to_le_bytes());
                2
            }
            _ => {
                bytes[..4].copy_from_slice(&f32::from_elem(value).to_le_bytes());
                4
            }
        };
        Self { bytes, len }
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl CudaRecorded {
    /// The scalars that changed since the last launch, as (kernel, byte offset, bytes): written
    /// before this launch (in its task: launches queued before it keep their values).
    #[allow(clippy::type_complexity)]
    fn scalar_writes(&self, scalars: &[f64]) -> Result<Vec<(usize, usize, Vec<u8>)>, String> {
        let mut writes = Vec::new();
        let mut sites = self.scalars.lock().unwrap_or_else(|e| e.into_inner());
        if sites.len() != scalars.len() {
            return Err("the recording's scalars differ from this replay's".into());
        }
        for (site, value) in sites.iter_mut().zip(scalars) {
            let bytes = ScalarBytes::of(*value, site.dtype);
            if bytes != site.written {
                writes.push((site.kernel, site.offset, bytes.as_slice().to_vec()));
                site.written = bytes;
            }
        }
        Ok(writes)
    }
}

impl Recorded for CudaRecorded {
    fn nodes(&self) -> usize {
        self.recording.as_ref().map_or(0, |r| r.nodes)
    }
}

fn tensor(t: &dyn Any) -> Result<&Tensor, String> {
    t.downcast_ref::<Tensor>()
        .ok_or_else(|| "not a CUDA CubeCL tensor".to_string())
}

/// Bytes a tensor's handle spans from its start.
fn span(t: &Tensor) -> u64 {
    t.handle.size_in_used()
}

/// Bytes from a tensor's first element to the end of its last (its shape through its strides):
/// what a recording copies. Not the handle's span: a pooled buffer may be larger than its
/// tensor, and two tensors of one shape may sit in buffers of different sizes (seen on the GPU
/// suite: 64 and 256 bytes for one `[16]` f32 tensor), which must not cost a new recording.
fn needed(t: &Tensor) -> u64 {
    let (shape, strides) = (t.meta.shape(), t.meta.strides());
    if shape.iter().any(|&d| d == 0) {
        return 0;
    }
    let last: usize = shape
        .iter()
        .zip(strides.iter())
        .map(|(&d, &s)| (d - 1) * s)
        .sum();
    ((last + 1) * t.dtype.size()) as u64
}

impl CudaGraphs {
    pub(super) fn new(client: ComputeClient<CudaRuntime>) -> Self {
        Self { client }
    }

    /// Runs `call` on the device thread, on this thread's stream, with the device pointers of
    /// `buffers`; waits for its result. The task itself returns `Ok`: a failure here is this
    /// recording's, never reported as the stream's error.
    fn on_stream<R: Send + 'static>(
        &self,
        buffers: Vec<Handle>,
        call: impl FnOnce(CUstream, &[u64]) -> R + Send + 'static,
    ) -> Result<R, String> {
        let (send, receive) = mpsc::sync_channel(1);
        let task = ExternalTask::new(Box::new(move |stream, pointers| {
            let _ = send.send(call(stream, pointers));
            Ok(())
        }));
        let bindings = buffers.into_iter().map(|h| h.binding()).collect();
        self.client.launch(
            Box::new(task),
            CubeCount::Static(1, 1, 1),
            KernelArguments::new().with_buffers(bindings),
        );
        // CubeCL batches queued tasks; a blocking call runs everything queued before it.
        self.client
            .exclusive(|| ())
            .map_err(|e| format!("the device thread: {e:?}"))?;
        receive
            .recv()
            .map_err(|_| "the device thread dropped the recording's task".to_string())
    }
}

impl GraphRecorder for CudaGraphs {
    fn like(&self, t: &dyn Any) -> Result<Box<dyn Any + Send>, String> {
        let t = tensor(t)?;
        let mut copy = t.clone();
        copy.handle = self.client.empty(span(t).max(1) as usize);
        Ok(Box::new(copy))
    }

    fn begin(&self) -> Result<(), String> {
        self.on_stream(Vec::new(), |stream, _| {
            capture::begin(stream, METADATA_ARENA_BYTES)
        })?
    }

    fn end(
        &self,
        inputs: &[&dyn Any],
        outputs: &[&dyn Any],
        scalars: &[(f64, DType)],
    ) -> Result<Arc<dyn Recorded>, String> {
        let inputs = inputs
            .iter()
            .map(|t| tensor(*t))
            .collect::<Result<Vec<_>, _>>()?;
        let outputs = outputs
            .iter()
            .map(|t| tensor(*t))
            .collect::<Result<Vec<_>, _>>()?;
        let sizes: Vec<u64> = inputs.iter().chain(&outputs).map(|t| needed(t)).collect();
        let buffers = inputs
            .iter()
            .chain(&outputs)
            .map(|t| t.handle.clone())
            .collect();
        let n = inputs.len();
        // The capture ends first: the pointers of the buffers are then read outside it.
        let ended = self.on_stream(Vec::new(), |stream, _| capture::end(stream))?;
        let recording = ended?;
        let markers: Vec<ScalarBytes> = scalars
            .iter()
            .map(|(v, dtype)| ScalarBytes::of(*v, *dtype))
            .collect();
        let patterns: Vec<Vec<u8>> = markers.iter().map(|m| m.as_slice().to_vec()).collect();
        let sites = match recording.locate(&patterns) {
            Ok(sites) => sites,
            Err(reason) => {
                self.release(Arc::new(CudaRecorded {
                    recording: Some(recording),
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                    scalars: Default::default(),
                    held: Default::default(),
                    sources: Default::default(),
                }));
                return Err(reason);
            }
        };
        let pointers = self.on_stream(buffers, |_, pointers| pointers.to_vec())?;
        let at = |i: usize| (pointers[i], sizes[i]);
        let sites = sites
            .into_iter()
            .zip(scalars.iter().zip(markers))
            .map(|((kernel, offset), ((_, dtype), written))| ScalarSite {
                kernel,
                offset,
                dtype: *dtype,
                written,
            })
            .collect();
        Ok(Arc::new(CudaRecorded {
            recording: Some(recording),
            inputs: (0..n).map(at).collect(),
            outputs: (n..sizes.len()).map(at).collect(),
            scalars: Mutex::new(sites),
            held: Mutex::new(Vec::new()),
            sources: Mutex::new(vec![0; n]),
        }))
    }

    fn launch(
        &self,
        recorded: &Arc<dyn Recorded>,
        inputs: &[&dyn Any],
        outputs: &[&dyn Any],
        scalars: &[f64],
        batched: bool,
    ) -> Result<Vec<Box<dyn Any + Send>>, String> {
        let recorded = recorded.clone();
        let own = (recorded.as_ref() as &dyn Any)
            .downcast_ref::<CudaRecorded>()
            .ok_or("not a CUDA recording")?;
        if own.inputs.len() != inputs.len() || own.outputs.len() != outputs.len() {
            return Err("the recording's inputs or outputs differ from this replay's".into());
        }
        let writes = own.scalar_writes(scalars)?;
        let mut bindings = Vec::with_capacity(inputs.len() + outputs.len());
        let mut handles = Vec::with_capacity(inputs.len());
        for (t, (_, bytes)) in inputs.iter().zip(&own.inputs) {
            let t = tensor(*t)?;
            if needed(t) != *bytes || span(t) < *bytes {
                return Err(format!(
                    "an input holds {} bytes in a buffer of {}, {bytes} when recorded",
                    needed(t),
                    span(t)
                ));
            }
            bindings.push(t.handle.clone());
            if batched {
                handles.push(t.handle.clone());
            }
        }
        let mut fresh = Vec::with_capacity(outputs.len());
        let mut made: Vec<Box<dyn Any + Send>> = Vec::with_capacity(outputs.len());
        for (t, (_, bytes)) in outputs.iter().zip(&own.outputs) {
            let t = tensor(*t)?;
            let handle = Handle::new(
                StreamId::current(),
                bytes.next_multiple_of(ALIGNMENT).max(ALIGNMENT),
            );
            let mut out = t.clone();
            out.handle = handle.clone();
            bindings.push(handle.clone());
            fresh.push(handle);
            made.push(Box::new(out));
        }
        let n = inputs.len();
        // The last launch's inputs are handed to this launch's task, which drops them after its
        // comparison; this launch's are held in their place. Swapped and submitted under one
        // lock, so the tasks run in the order the inputs were held.
        let mut held = own.held.lock().unwrap_or_else(|e| e.into_inner());
        let previous = std::mem::replace(&mut *held, handles);
        let task_recorded = Arc::clone(&recorded);
        let call = move |stream: CUstream, pointers: &[u64]| -> Result<(), String> {
            let own = (task_recorded.as_ref() as &dyn Any)
                .downcast_ref::<CudaRecorded>()
                .expect("checked above");
            let mut sources = own.sources.lock().unwrap_or_else(|e| e.into_inner());
            let mut moves = Vec::with_capacity(n);
            for ((source, src), (dst, bytes)) in
                sources.iter_mut().zip(&pointers[..n]).zip(&own.inputs)
            {
                if batched && *source == *src {
                    continue;
                }
                // Unheld (copies each), an address says nothing at the next launch.
                *source = if batched { *src } else { 0 };
                moves.push((*dst, *src, *bytes));
            }
            drop(previous);
            let kept = (n - moves.len()) as u64;
            COUNTERS
                .recording_inputs_copied
                .fetch_add(moves.len() as u64, Ordering::Relaxed);
            COUNTERS
                .recording_inputs_kept
                .fetch_add(kept, Ordering::Relaxed);
            let launched = (|| {
                let recording = own.recording.as_ref().ok_or("the recording was released")?;
                recording.patch(&writes)?;
                let outputs: Vec<(u64, u64, u64)> = pointers[n..]
                    .iter()
                    .zip(&own.outputs)
                    .map(|(dst, (src, bytes))| (*dst, *src, *bytes))
                    .collect();
                if batched {
                    recording.launch_with_copies(stream, &moves, &outputs)
                } else {
                    capture::copy_each(stream, &moves)?;
                    recording.launch(stream)?;
                    capture::copy_each(stream, &outputs)
                }
            })();
            if launched.is_err() {
                // Nothing is known of the recording's inputs: the next launch copies them all.
                sources.iter_mut().for_each(|s| *s = 0);
            }
            launched
        };
        let bindings = bindings.into_iter().map(|h| h.binding()).collect();
        let task = ExternalTask::with_outputs(Box::new(call), &fresh);
        self.client.launch(
            Box::new(task),
            CubeCount::Static(1, 1, 1),
            KernelArguments::new().with_buffers(bindings),
        );
        drop(held);
        Ok(made)
    }

    fn unshared(&self, t: &dyn Any) -> bool {
        tensor(t).is_ok_and(|t| t.handle.can_mut())
    }

    fn copy_of(&self, t: &dyn Any) -> Result<Box<dyn Any + Send>, String> {
        let source = tensor(t)?;
        let made = self.like(t)?;
        let copy = tensor(made.as_ref())?;
        let bytes = needed(source);
        let buffers = vec![copy.handle.clone(), source.handle.clone()];
        let task = ExternalTask::new(Box::new(move |stream, pointers: &[u64]| {
            capture::copy_each(stream, &[(pointers[0], pointers[1], bytes)])
        }));
        let bindings = buffers.into_iter().map(|h| h.binding()).collect();
        self.client.launch(
            Box::new(task),
            CubeCount::Static(1, 1, 1),
            KernelArguments::new().with_buffers(bindings),
        );
        Ok(made)
    }

    fn addresses(&self, tensors: &[&dyn Any]) -> Result<Vec<u64>, String> {
        let buffers = tensors
            .iter()
            .map(|t| tensor(*t).map(|t| t.handle.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        self.on_stream(buffers, |_, pointers| pointers.to_vec())
    }

    fn slot(&self, t: &dyn Any, shape: &Shape, dtype: DType) -> Option<Box<dyn Any + Send>> {
        let t = tensor(t).ok()?;
        if t.dtype != dtype || t.meta.shape() != shape || !t.is_contiguous() || t.qparams.is_some()
        {
            return None;
        }
        let bytes = span(t) as usize;
        Some(Box::new(Tensor::new(
            t.client.clone(),
            t.handle.clone(),
            Metadata::new(Shape::new([bytes]), Strides::new(&[1])),
            t.device.clone(),
            DType::U8,
        )))
    }

    fn launch_in_place(
        &self,
        recorded: &Arc<dyn Recorded>,
        copies: &[(usize, &dyn Any)],
        scalars: &[f64],
    ) -> Result<(), String> {
        let recorded = recorded.clone();
        let own = (recorded.as_ref() as &dyn Any)
            .downcast_ref::<CudaRecorded>()
            .ok_or("not a CUDA recording")?;
        let writes = own.scalar_writes(scalars)?;
        let mut bindings = Vec::with_capacity(copies.len());
        let mut targets = Vec::with_capacity(copies.len());
        for (j, t) in copies {
            let t = tensor(*t)?;
            let (dst, bytes) = *own
                .inputs
                .get(*j)
                .ok_or("an input index past the recording's inputs")?;
            if needed(t) != bytes || span(t) < bytes {
                return Err(format!(
                    "an input holds {} bytes in a buffer of {}, {bytes} when recorded",
                    needed(t),
                    span(t)
                ));
            }
            bindings.push(t.handle.clone().binding());
            targets.push((dst, bytes));
        }
        let n = (own.inputs.len() - copies.len()) as u64;
        COUNTERS
            .recording_inputs_copied
            .fetch_add(copies.len() as u64, Ordering::Relaxed);
        COUNTERS
            .recording_inputs_kept
            .fetch_add(n, Ordering::Relaxed);
        let task_recorded = Arc::clone(&recorded);
        let call = move |stream: CUstream, pointers: &[u64]| -> Result<(), String> {
            let own = (task_recorded.as_ref() as &dyn Any)
                .downcast_ref::<CudaRecorded>()
                .expect("checked above");
            let recording = own.recording.as_ref().ok_or("the recording was released")?;
            recording.patch(&writes)?;
            if targets.is_empty() {
                return recording.launch(stream);
            }
            let moves: Vec<(u64, u64, u64)> = targets
                .iter()
                .zip(pointers)
                .map(|((dst, bytes), src)| (*dst, *src, *bytes))
                .collect();
            recording.launch_with_copies(stream, &moves, &[])
        };
        let task = ExternalTask::new(Box::new(call));
        self.client.launch(
            Box::new(task),
            CubeCount::Static(1, 1, 1),
            KernelArguments::new().with_buffers(bindings),
        );
        Ok(())
    }

    fn release(&self, recorded: Arc<dyn Recorded>) {
        // Dropped on the device thread, in stream order after the graph's last launch: the
        // graph and its arena are freed where the context is current.
        let task = ExternalTask::new(Box::new(move |_, _| {
            drop(recorded);
            Ok(())
        }));
        self.client.launch(
            Box::new(task),
            CubeCount::Static(1, 1, 1),
            KernelArguments::new(),
        );
    }
}
