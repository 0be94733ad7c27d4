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

/// Whether a capture is in progress (the server's launch path asks per launch; library calls
/// prepared outside captures ask before preparing).
pub fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// Whether `stream` is being captured (its capture may also be invalidated already). Asks the
/// driver only while a capture is active: one atomic load otherwise.
pub(crate) fn capturing(stream: CUstream) -> bool {
    if !active() {
        return false;
    }
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: an out-pointer to a local; `stream` is a live stream of the server.
    let r = unsafe { sys::cuStreamIsCapturing(stream, &mut status) };
    r != sys::CUresult::CUDA_SUCCESS
        || status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
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
    moves: Mutex<MoveTable>,
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
            let table = self.moves.get_mut().unwrap_or_else(|e| e.into_inner());
            if table.at != 0 {
                let _ = cudarc::driver::result::free_sync(table.at);
                table.at = 0;
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

/// The copies of one launch, `(dst, src, bytes)` each, as one kernel launch per direction: a
/// small device table of moves (uploaded per launch) read by [`COPY_SOURCE`]. In place of one
/// `cuMemcpyDtoDAsync` per tensor, each a DMA operation of a few microseconds on the GPU however
/// small the tensor: a training step's ~580 small copies took longer than its kernels' gaps.
const COPY_SOURCE: &str = r#"
extern "C" __global__ void burn_compile_copies(const unsigned long long* moves, unsigned int count) {
    unsigned int m = blockIdx.y;
    if (m >= count) return;
    unsigned long long dst = moves[3 * m], src = moves[3 * m + 1], bytes = moves[3 * m + 2];
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long done = 0;
    if (((dst | src) & 15) == 0) {
        uint4* d = (uint4*)dst;
        const uint4* s = (const uint4*)src;
        unsigned long long n = bytes / 16;
        for (unsigned long long i = first; i < n; i += stride) d[i] = s[i];
        done = n * 16;
    }
    unsigned char* d = (unsigned char*)dst;
    const unsigned char* s = (const unsigned char*)src;
    for (unsigned long long i = done + first; i < bytes; i += stride) d[i] = s[i];
}
"#;

/// Threads per block of the copy kernel.
const COPY_THREADS: u32 = 256;
/// Moves per launch of the copy kernel (the grid's `y` limit).
const COPY_MOVES_PER_LAUNCH: usize = 65_535;

/// The copy kernel's PTX (NVRTC, once per process) and its function per CUDA context.
static COPY_PTX: std::sync::OnceLock<Result<std::ffi::CString, String>> =
    std::sync::OnceLock::new();
static COPY_FUNCTIONS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

fn copy_ptx() -> Result<&'static std::ffi::CString, String> {
    COPY_PTX
        .get_or_init(|| {
            let source = std::ffi::CString::new(COPY_SOURCE).expect("no NUL in the source");
            // SAFETY: NVRTC FFI on a NUL-terminated source that outlives the program.
            unsafe {
                let program = cudarc::nvrtc::result::create_program(source.as_c_str(), None)
                    .map_err(|e| format!("NVRTC: {e:?}"))?;
                let options: [&str; 0] = [];
                let compiled = cudarc::nvrtc::result::compile_program(program, &options);
                let ptx = compiled
                    .map_err(|e| format!("NVRTC: {e:?}"))
                    .and_then(|()| {
                        cudarc::nvrtc::result::get_ptx(program).map_err(|e| format!("{e:?}"))
                    });
                let _ = cudarc::nvrtc::result::destroy_program(program);
                let ptx = ptx?;
                let bytes: Vec<u8> = ptx
                    .iter()
                    .map(|c| *c as u8)
                    .take_while(|b| *b != 0)
                    .collect();
                std::ffi::CString::new(bytes).map_err(|e| e.to_string())
            }
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The copy kernel in the current context (the device thread's), loaded on first use.
fn copy_function() -> Result<sys::CUfunction, String> {
    let mut context: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: an out-pointer to a local.
    check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut context) })?;
    let mut functions = COPY_FUNCTIONS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, f)) = functions.iter().find(|(c, _)| *c == context as usize) {
        return Ok(*f as sys::CUfunction);
    }
    let ptx = copy_ptx()?;
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: NUL-terminated PTX; the module lives as long as its context (never unloaded).
    check("cuModuleLoadData", unsafe {
        sys::cuModuleLoadData(&mut module, ptx.as_ptr() as *const std::ffi::c_void)
    })?;
    let mut function: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: the module just loaded defines this entry point (`extern "C"`).
    check("cuModuleGetFunction", unsafe {
        sys::cuModuleGetFunction(&mut function, module, c"burn_compile_copies".as_ptr())
    })?;
    functions.push((context as usize, function as usize));
    Ok(function)
}

/// A device table of copy moves, grown to the largest launch (three `u64` per move).
#[derive(Default)]
struct MoveTable {
    at: u64,
    moves: usize,
}

impl Recording {
    /// Launches the graph on `stream` between two copy-kernel launches: `before` (into the
    /// recording's inputs) and `after` (out of its outputs), each `(dst, src, bytes)`. One
    /// upload of the moves and three launches, whatever the number of copies; one
    /// `cuMemcpyDtoDAsync` per copy where the copy kernel cannot be built (logged once).
    pub fn launch_with_copies(
        &self,
        stream: CUstream,
        before: &[(u64, u64, u64)],
        after: &[(u64, u64, u64)],
    ) -> Result<(), String> {
        let function = match copy_function() {
            Ok(f) => f,
            Err(reason) => {
                static WARNED: AtomicBool = AtomicBool::new(false);
                if !WARNED.swap(true, Ordering::Relaxed) {
                    log::warn!("burn-compile: no copy kernel ({reason}): one copy per tensor");
                }
                copy_each(stream, before)?;
                self.launch(stream)?;
                return copy_each(stream, after);
            }
        };
        let moves = before.len() + after.len();
        let mut table = self.moves.lock().unwrap_or_else(|e| e.into_inner());
        if table.moves < moves {
            if table.at != 0 {
                // SAFETY: the old table; the free waits for the launches that read it.
                let _ = unsafe { cudarc::driver::result::free_sync(table.at) };
                table.at = 0;
            }
            // SAFETY: a plain device allocation, freed with the recording.
            table.at = unsafe { cudarc::driver::result::malloc_sync(moves * 24) }
                .map_err(|e| format!("the copy table: {e}"))?;
            table.moves = moves;
        }
        let words: Vec<u64> = before
            .iter()
            .chain(after)
            .flat_map(|(dst, src, bytes)| [*dst, *src, *bytes])
            .collect();
        if !words.is_empty() {
            // SAFETY: `words` fits the table; a copy from pageable memory is staged before the
            // call returns, so `words` may be dropped after it. Ordered on `stream` after the
            // last launch's copy kernels, which read the table's previous contents.
            check("cuMemcpyHtoDAsync", unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    table.at,
                    words.as_ptr() as *const std::ffi::c_void,
                    words.len() * 8,
                    stream,
                )
            })?;
        }
        copy_kernel(function, stream, table.at, before)?;
        self.launch(stream)?;
        copy_kernel(function, stream, table.at + before.len() as u64 * 24, after)
    }
}

/// Launches the copy kernel over `moves`, whose table starts at device address `at`.
fn copy_kernel(
    function: sys::CUfunction,
    stream: CUstream,
    at: u64,
    moves: &[(u64, u64, u64)],
) -> Result<(), String> {
    for (chunk, part) in moves.chunks(COPY_MOVES_PER_LAUNCH).enumerate() {
        let largest = part.iter().map(|m| m.2).max().unwrap_or(0);
        // About eight 16-byte words per thread for the largest move, at most 64 blocks each.
        let per_block = COPY_THREADS as u64 * 16 * 8;
        let blocks = largest.div_ceil(per_block).clamp(1, 64) as u32;
        let mut table = at + (chunk * COPY_MOVES_PER_LAUNCH * 24) as u64;
        let mut count = part.len() as u32;
        let mut params = [
            &mut table as *mut u64 as *mut std::ffi::c_void,
            &mut count as *mut u32 as *mut std::ffi::c_void,
        ];
        // SAFETY: the kernel takes (const u64*, u32), given by address; the table holds
        // `count` moves between live device buffers.
        check("cuLaunchKernel (copies)", unsafe {
            sys::cuLaunchKernel(
                function,
                blocks,
                count,
                1,
                COPY_THREADS,
                1,
                1,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })?;
    }
    Ok(())
}

/// Each `(dst, src, bytes)` as its own `cuMemcpyDtoDAsync` on `stream`.
pub fn copy_each(stream: CUstream, moves: &[(u64, u64, u64)]) -> Result<(), String> {
    for (dst, src, bytes) in moves {
        // SAFETY: both addresses are live buffers of at least `bytes` (the caller's); the copy
        // is ordered on `stream`.
        check("cuMemcpyDtoDAsync", unsafe {
            sys::cuMemcpyDtoDAsync_v2(*dst, *src, *bytes as usize, stream)
        })?;
    }
    Ok(())
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
        moves: Mutex::new(MoveTable::default()),
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
