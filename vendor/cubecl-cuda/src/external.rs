//! burn-compile patch: work of an external CUDA library (cuBLASLt) enqueued in order with
//! CubeCL's kernels, without a blocking round trip to the device thread.
//!
//! An [`ExternalTask`] is launched like a kernel (`ComputeClient::launch` with the buffers it
//! uses as bindings); the server recognises it, resolves the bindings on the current stream
//! (cross-stream fences included, as for a kernel) and calls it with that stream and the
//! buffers' device pointers, on the device thread, where the CUDA context is current.

use crate::CudaCompiler;
use cubecl_common::backtrace::BackTrace;
use cubecl_core::ir::{ElemType, StorageType, UIntKind};
use cubecl_runtime::compiler::{CompilationError, Compiler, CubeTask};
use cubecl_runtime::id::KernelId;
use cubecl_runtime::kernel::{CompiledKernel, KernelMetadata};
use cubecl_runtime::memory_management::ManagedMemoryHandle;
use cubecl_runtime::server::{ExecutionMode, Handle};
use std::sync::Mutex;

/// What an external task runs: the stream, then the device pointer of each binding (in order).
pub type ExternalCall =
    Box<dyn FnOnce(cudarc::driver::sys::CUstream, &[u64]) -> Result<(), String> + Send>;

/// A call into an external library, launched as a kernel.
pub struct ExternalTask {
    call: Mutex<Option<ExternalCall>>,
    /// Buffers the task writes that are not yet reserved: reserved by the server just before
    /// the call, in the same device-thread task (a separate `ComputeClient::empty` would be a
    /// task of its own).
    outputs: Mutex<Vec<(ManagedMemoryHandle, u64)>>,
}

impl ExternalTask {
    pub fn new(call: ExternalCall) -> Self {
        Self {
            call: Mutex::new(Some(call)),
            outputs: Mutex::new(Vec::new()),
        }
    }

    /// Like [`ExternalTask::new`], with `outputs`: handles made with `Handle::new` and never
    /// given to a client, which the server reserves before resolving the bindings. They must
    /// be among the task's bindings, and must not be used by anything launched before it.
    pub fn with_outputs(call: ExternalCall, outputs: &[Handle]) -> Self {
        Self {
            call: Mutex::new(Some(call)),
            outputs: Mutex::new(
                outputs
                    .iter()
                    .map(|h| (h.memory.clone(), h.size()))
                    .collect(),
            ),
        }
    }

    /// The buffers to reserve before the call (once).
    pub(crate) fn take_outputs(&self) -> Vec<(ManagedMemoryHandle, u64)> {
        std::mem::take(&mut *self.outputs.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The call (once).
    pub(crate) fn take(&self) -> Option<ExternalCall> {
        self.call.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The name the server recognises an external task by (a type of this crate: unique).
    pub(crate) fn task_name() -> &'static str {
        core::any::type_name::<Self>()
    }
}

impl KernelMetadata for ExternalTask {
    fn id(&self) -> KernelId {
        KernelId::new::<Self>()
    }

    fn address_type(&self) -> StorageType {
        StorageType::Scalar(ElemType::UInt(UIntKind::U32))
    }
}

impl CubeTask<CudaCompiler> for ExternalTask {
    fn compile(
        &self,
        _compiler: &mut CudaCompiler,
        _options: &<CudaCompiler as Compiler>::CompilationOptions,
        _mode: ExecutionMode,
        _address_type: StorageType,
    ) -> Result<CompiledKernel<CudaCompiler>, CompilationError> {
        Err(CompilationError::Generic {
            reason: "an external task is called, not compiled".into(),
            backtrace: BackTrace::capture(),
        })
    }
}

/// burn-compile patch: host time of the server's launch path, by part, for burn-compile's
/// replay profile (`BURN_COMPILE_PROFILE_REPLAY=1`). Off by default: one relaxed load per
/// launch.
pub mod profile {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Instant;

    /// The parts of `launch_checked` that are timed, in order.
    pub const PARTS: [&str; 8] = [
        "kernel: id, streams and bindings",
        "kernel: metadata upload",
        "kernel: resources",
        "kernel: compile lookup and launch",
        "kernel: whole",
        "external: output reservation",
        "external: streams and pointers",
        "external: call",
    ];

    static ON: AtomicBool = AtomicBool::new(false);
    static NANOS: [AtomicU64; PARTS.len()] = [const { AtomicU64::new(0) }; PARTS.len()];
    static COUNTS: [AtomicU64; PARTS.len()] = [const { AtomicU64::new(0) }; PARTS.len()];

    /// Turns the timing on or off.
    pub fn set_enabled(on: bool) {
        ON.store(on, Ordering::Relaxed);
    }

    /// A start time when timing.
    #[inline]
    pub(crate) fn start() -> Option<Instant> {
        ON.load(Ordering::Relaxed).then(Instant::now)
    }

    /// Adds the time since `start` to part `part` (an index of [`PARTS`]).
    #[inline]
    pub(crate) fn stop(part: usize, start: Option<Instant>) {
        if let Some(start) = start {
            NANOS[part].fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            COUNTS[part].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `(part, count, nanoseconds)` of each part timed since the last call; resets them.
    pub fn take() -> Vec<(&'static str, u64, u64)> {
        PARTS
            .iter()
            .enumerate()
            .map(|(i, name)| {
                (
                    *name,
                    COUNTS[i].swap(0, Ordering::Relaxed),
                    NANOS[i].swap(0, Ordering::Relaxed),
                )
            })
            .filter(|(_, count, _)| *count > 0)
            .collect()
    }
}
