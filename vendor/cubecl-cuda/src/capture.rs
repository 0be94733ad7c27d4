//! burn-compile patch: a stream's launches recorded as a CUDA graph (stream capture), for
//! burn-compile's reduce-overhead mode.
//!
//! [`begin`] and [`end`] are called from external tasks (`crate::external`), on the device thread
//! with the capturing stream, so every launch between them is on that thread, in order. While a
//! capture is active the server changes four things on its launch path, each so that the
//! recorded graph can be launched again later:
//! - every buffer a launch binds is kept (a clone of its binding): the memory pool cannot hand it
//!   to anything else while the recording lives;
//! - a kernel's dynamic metadata is written to an arena owned by the recording (uploaded when the
//!   capture ends), not through pinned staging memory that later launches reuse;
//! - a new page of the memory pool is allocated synchronously (an asynchronous allocation would
//!   become a node of the graph), deallocations wait, and the drop queue records no fence;
//! - a launch that fails fails the recording, not the stream (the capture launched nothing).

use cubecl_runtime::server::Binding;
use cudarc::driver::sys::{self, CUgraph, CUgraphExec, CUstream};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// The capture in progress.
struct Capture {
    kept: Vec<Binding>,
    arena: u64,
    arena_bytes: u64,
    used: u64,
    uploads: Vec<(u64, Vec<u8>)>,
    failure: Option<String>,
    kernels: Vec<CapturedKernel>,
}

/// A kernel launch recorded with its parameters passed by value (grid constants): its node in
/// the graph, its argument count and a copy of its constants (the last argument), which
/// [`Recording::patch`] rewrites.
struct CapturedKernel {
    node: sys::CUgraphNode,
    args: usize,
    constants: Vec<u8>,
}

// SAFETY: the node handle is used on the device thread only (patching is called from external
// tasks); the capture state is behind a mutex.
unsafe impl Send for CapturedKernel {}

static ACTIVE: AtomicBool = AtomicBool::new(false);
static CAPTURE: Mutex<Option<Capture>> = Mutex::new(None);

fn capture() -> std::sync::MutexGuard<'static, Option<Capture>> {
    CAPTURE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether a capture is in progress (the server's launch path asks per launch).
pub(crate) fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// Keeps the buffers of a launch made while capturing.
pub(crate) fn keep<'a>(bindings: impl Iterator<Item = &'a Binding>) {
    if let Some(c) = capture().as_mut() {
        c.kept.extend(bindings.cloned());
    }
}

/// The device address, in the recording's arena, of a launch's dynamic metadata `data`
/// (written there when the capture ends).
pub(crate) fn metadata(data: &[u8]) -> Result<u64, String> {
    let mut guard = capture();
    let c = guard.as_mut().ok_or("no capture in progress")?;
    let at = c.used.next_multiple_of(16);
    if at + data.len() as u64 > c.arena_bytes {
        let reason = format!(
            "the recording's metadata arena ({} bytes) is full",
            c.arena_bytes
        );
        c.failure.get_or_insert(reason.clone());
        return Err(reason);
    }
    c.used = at + data.len() as u64;
    c.uploads.push((c.arena + at, data.to_vec()));
    Ok(c.arena + at)
}

/// Records the kernel just launched on the capturing `stream`: `args` arguments, the last
/// being `constants` (passed by value). Its node is the capture's one current dependency.
pub(crate) fn kernel_launched(stream: CUstream, args: usize, constants: Vec<u8>) {
    #[cfg(cuda_12080)]
    {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut id = 0;
        let mut graph: CUgraph = std::ptr::null_mut();
        let mut deps: *const sys::CUgraphNode = std::ptr::null();
        let mut edges: *const sys::CUgraphEdgeData = std::ptr::null();
        let mut count = 0usize;
        // SAFETY: out-pointers to locals; the dependency array is read before the next call on
        // the stream.
        let r = unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                stream,
                &mut status,
                &mut id,
                &mut graph,
                &mut deps,
                &mut edges,
                &mut count,
            )
        };
        if r == sys::CUresult::CUDA_SUCCESS && count == 1 && !deps.is_null() {
            // SAFETY: `deps` holds `count` (1) nodes.
            let node = unsafe { *deps };
            if let Some(c) = capture().as_mut() {
                c.kernels.push(CapturedKernel {
                    node,
                    args,
                    constants,
                });
            }
        }
    }
    #[cfg(not(cuda_12080))]
    let _ = (stream, args, constants);
}

/// Fails the capture in progress with `reason` (the first reason is kept).
pub(crate) fn fail(reason: String) {
    if let Some(c) = capture().as_mut() {
        c.failure.get_or_insert(reason);
    }
}

fn check(what: &str, r: sys::CUresult) -> Result<(), String> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(format!("{what}: {e:?}")),
    }
}

/// Starts capturing `stream` (relaxed mode: the synchronous allocations above are allowed),
/// with a metadata arena of `arena_bytes`. Called on the device thread, from an external task.
pub fn begin(stream: CUstream, arena_bytes: u64) -> Result<(), String> {
    let mut guard = capture();
    if guard.is_some() {
        return Err("a capture is already in progress on this process".into());
    }
    // SAFETY: a plain device allocation, freed by the recording or below.
    let arena = unsafe { cudarc::driver::result::malloc_sync(arena_bytes.max(16) as usize) }
        .map_err(|e| format!("the recording's metadata arena: {e}"))?;
    // SAFETY: `stream` is the device thread's current stream (an external task's argument).
    let r = unsafe {
        sys::cuStreamBeginCapture_v2(
            stream,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        )
    };
    if let Err(e) = check("cuStreamBeginCapture", r) {
        // SAFETY: allocated above, never used.
        unsafe {
            let _ = cudarc::driver::result::free_sync(arena);
        }
        return Err(e);
    }
    *guard = Some(Capture {
        kept: Vec::new(),
        arena,
        arena_bytes,
        used: 0,
        uploads: Vec::new(),
        failure: None,
        kernels: Vec::new(),
    });
    ACTIVE.store(true, Ordering::Release);
    Ok(())
}

/// A recorded graph, instantiated, with every buffer its launches bind.
pub struct Recording {
    exec: CUgraphExec,
    graph: CUgraph,
    arena: u64,
    /// Nodes of the graph.
    pub nodes: usize,
    kept: Vec<Binding>,
    kernels: Mutex<Vec<CapturedKernel>>,
}

// SAFETY: the graph handles are used on the device thread only (launch and destroy are called
// from external tasks); the bindings are reference counts.
unsafe impl Send for Recording {}
unsafe impl Sync for Recording {}

impl Recording {
    /// Launches the graph on `stream` (the device thread's current stream, from an external
    /// task).
    pub fn launch(&self, stream: CUstream) -> Result<(), String> {
        // SAFETY: `exec` is a live instantiated graph; `stream` a live stream.
        check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(self.exec, stream) })
    }

    /// Where each of `patterns` lies in the recorded kernels' constants, as (kernel, byte
    /// offset), searched at offsets aligned to the pattern's length; an error unless each
    /// occurs exactly once (a pattern a kernel did not take, or one that also matches other
    /// constants, cannot be patched).
    pub fn locate(&self, patterns: &[Vec<u8>]) -> Result<Vec<(usize, usize)>, String> {
        let kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        let mut found = Vec::with_capacity(patterns.len());
        for (i, pattern) in patterns.iter().enumerate() {
            let width = pattern.len().max(1);
            let mut sites = kernels.iter().enumerate().flat_map(|(k, kernel)| {
                kernel
                    .constants
                    .chunks_exact(width)
                    .enumerate()
                    .filter(|(_, chunk)| *chunk == pattern.as_slice())
                    .map(move |(at, _)| (k, at * width))
            });
            match (sites.next(), sites.next()) {
                (Some(site), None) => found.push(site),
                (None, _) => return Err(format!("scalar {i} is in no recorded kernel")),
                (Some(_), Some(_)) => {
                    return Err(format!("scalar {i} matches several recorded constants"));
                }
            }
        }
        Ok(found)
    }

    /// Writes each `(kernel, offset, bytes)` into that kernel's constants and updates its
    /// node in the launched graph. Called on the device thread (an external task) before
    /// [`Recording::launch`]; launches made before keep their values.
    pub fn patch(&self, writes: &[(usize, usize, Vec<u8>)]) -> Result<(), String> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        let mut touched = Vec::new();
        for (k, at, bytes) in writes {
            let kernel = kernels.get_mut(*k).ok_or("no such recorded kernel")?;
            kernel
                .constants
                .get_mut(*at..*at + bytes.len())
                .ok_or("a write past a kernel's constants")?
                .copy_from_slice(bytes);
            if !touched.contains(k) {
                touched.push(*k);
            }
        }
        for k in touched {
            self.update(&mut kernels[k])?;
        }
        Ok(())
    }

    #[cfg(cuda_12080)]
    fn update(&self, kernel: &mut CapturedKernel) -> Result<(), String> {
        // SAFETY: a zeroed plain C struct, filled by the driver from the captured node.
        let mut params: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
        check("cuGraphKernelNodeGetParams", unsafe {
            sys::cuGraphKernelNodeGetParams_v2(kernel.node, &mut params)
        })?;
        if params.kernelParams.is_null() || kernel.args == 0 {
            return Err("a recorded kernel node without its arguments".into());
        }
        // The captured arguments (kept by the driver with the graph), the constants replaced.
        let mut args: Vec<*mut std::ffi::c_void> = (0..kernel.args - 1)
            // SAFETY: the node was launched with `args` arguments.
            .map(|i| unsafe { *params.kernelParams.add(i) })
            .collect();
        args.push(kernel.constants.as_mut_ptr() as *mut std::ffi::c_void);
        params.kernelParams = args.as_mut_ptr();
        params.extra = std::ptr::null_mut();
        // SAFETY: `exec` was instantiated from the graph holding `node`; the driver copies the
        // arguments before returning.
        check("cuGraphExecKernelNodeSetParams", unsafe {
            sys::cuGraphExecKernelNodeSetParams_v2(self.exec, kernel.node, &params)
        })
    }

    #[cfg(not(cuda_12080))]
    fn update(&self, _kernel: &mut CapturedKernel) -> Result<(), String> {
        Err("patching a recorded kernel needs CUDA 12.8 or later".into())
    }

    /// Frees the graph and its arena. Called on the device thread (an external task), where the
    /// context is current; a graph launched before runs to its end.
    pub fn destroy(mut self) {
        self.release();
    }

    fn release(&mut self) {
        // SAFETY: each handle is destroyed once (nulled after).
        unsafe {
            if !self.exec.is_null() {
                sys::cuGraphExecDestroy(self.exec);
                self.exec = std::ptr::null_mut();
            }
            if !self.graph.is_null() {
                sys::cuGraphDestroy(self.graph);
                self.graph = std::ptr::null_mut();
            }
            if self.arena != 0 {
                let _ = cudarc::driver::result::free_sync(self.arena);
                self.arena = 0;
            }
        }
        self.kept.clear();
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.release();
    }
}

/// Copies each `(dst, src, bytes)` between device buffers, in stream order on `stream`, in one
/// batched driver call (CUDA 12.8 or later): one host call in place of one per copy. Called on
/// the device thread (an external task).
pub fn copy_batch(stream: CUstream, copies: &[(u64, u64, u64)]) -> Result<(), String> {
    if copies.is_empty() {
        return Ok(());
    }
    #[cfg(cuda_12080)]
    {
        let mut dsts: Vec<sys::CUdeviceptr> = copies.iter().map(|c| c.0).collect();
        let mut srcs: Vec<sys::CUdeviceptr> = copies.iter().map(|c| c.1).collect();
        let mut sizes: Vec<usize> = copies.iter().map(|c| c.2 as usize).collect();
        // SAFETY: a zeroed plain C struct (no location hints: they apply to managed and
        // pageable memory only), sources read in stream order.
        let mut attributes: sys::CUmemcpyAttributes = unsafe { std::mem::zeroed() };
        attributes.srcAccessOrder =
            sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        let mut first = [0usize];
        // SAFETY: three arrays of `copies.len()` entries, one attribute applying from copy 0;
        // every address is a live device buffer of at least its size (the caller's bindings).
        #[cfg(cuda_13000)]
        let r = unsafe {
            sys::cuMemcpyBatchAsync_v2(
                dsts.as_mut_ptr(),
                srcs.as_mut_ptr(),
                sizes.as_mut_ptr(),
                copies.len(),
                &mut attributes,
                first.as_mut_ptr(),
                1,
                stream,
            )
        };
        #[cfg(not(cuda_13000))]
        let r = {
            let mut failed = 0usize;
            unsafe {
                sys::cuMemcpyBatchAsync(
                    dsts.as_mut_ptr(),
                    srcs.as_mut_ptr(),
                    sizes.as_mut_ptr(),
                    copies.len(),
                    &mut attributes,
                    first.as_mut_ptr(),
                    1,
                    &mut failed,
                    stream,
                )
            }
        };
        check("cuMemcpyBatchAsync", r)
    }
    #[cfg(not(cuda_12080))]
    {
        let _ = stream;
        Err("batched copies need CUDA 12.8 or later".into())
    }
}

/// Ends the capture of `stream`: the recorded graph, instantiated, or why it cannot be used.
pub fn end(stream: CUstream) -> Result<Recording, String> {
    ACTIVE.store(false, Ordering::Release);
    let c = capture().take().ok_or("no capture in progress")?;
    let mut graph: CUgraph = std::ptr::null_mut();
    // SAFETY: `stream` is the stream `begin` started capturing.
    let ended = check("cuStreamEndCapture", unsafe {
        sys::cuStreamEndCapture(stream, &mut graph)
    });
    let mut recording = Recording {
        exec: std::ptr::null_mut(),
        graph,
        arena: c.arena,
        nodes: 0,
        kept: c.kept,
        kernels: Mutex::new(c.kernels),
    };
    if let Some(failure) = c.failure {
        return Err(failure);
    }
    ended?;
    for (at, data) in &c.uploads {
        // SAFETY: `at` lies in the arena (bounds checked when reserved); nothing reads it yet.
        unsafe { cudarc::driver::result::memcpy_htod_sync(*at, data) }
            .map_err(|e| format!("the recording's metadata upload: {e}"))?;
    }
    let mut nodes = 0usize;
    // SAFETY: a null node array asks for the count only.
    check("cuGraphGetNodes", unsafe {
        sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut nodes)
    })?;
    recording.nodes = nodes;
    let mut exec: CUgraphExec = std::ptr::null_mut();
    // SAFETY: `graph` is the captured graph.
    check("cuGraphInstantiate", unsafe {
        sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0)
    })?;
    recording.exec = exec;
    Ok(recording)
}
