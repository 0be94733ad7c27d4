//! The capture client: receives every op of a `Compiled<B>` device (as burn-router's
//! `OperationIr`), buffers it in the calling thread's stream and cuts the stream into graphs at
//! explicit breaks. Each closed graph goes to the runtime, which replays its cached plan.
//!
//! Threads: each thread records into its own stream, so two threads training on one device give
//! each their own stable graphs. When a thread touches a tensor that another thread's pending
//! graph produces or reads, that graph is closed first (`CrossThread`), so every op sees its
//! inputs exactly as eager Burn would. Graphs execute under the device lock, one at a time.

use super::breaks::{BreakReason, GraphBreak, user_location};
use super::period::PeriodDetector;
use crate::config::{CompileConfig, config_for};
use crate::diagnostics;
use crate::dims::Dim;
use crate::plan_cache::{PlanCache, plan_on};
use crate::stance::{Stance, in_eager_region, stance};
use burn_backend::{DType, ExecutionError, Shape, TensorData};
use burn_compile_graph::Segment;
use burn_compile_runtime::{Executor, InnerDevice, execute_one};
use burn_ir::{BackendIr, OperationIr, TensorId, TensorIr};
use burn_router::{RouterTensor, RunnerChannel, RunnerClient, TensorHandle};
use burn_std::future::DynFut;
use burn_std::stream_id::StreamId;
use rustc_hash::FxHashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;

/// The op stream of one thread on one device.
struct Stream {
    segment: Segment,
    period: PeriodDetector,
    /// An error to hand to the user at the next read or sync of this thread (a graph that
    /// could not be compiled under the fail-on-recompile stance, …).
    pending_error: Option<String>,
    /// Its thread has exited; the pending graph runs at the next use of the device.
    orphaned: bool,
    /// The inner backend's stream of its thread, where its graphs run (even when another
    /// thread closes one: a read of a tensor it touched).
    inner_stream: StreamId,
}

impl Stream {
    /// The stream of the calling thread.
    fn new() -> Self {
        Self {
            segment: Segment::new(),
            period: PeriodDetector::default(),
            pending_error: None,
            orphaned: false,
            inner_stream: StreamId::current(),
        }
    }
}

struct State {
    streams: FxHashMap<ThreadId, Stream>,
    /// Which stream last touched a tensor with a pending op. Only kept while more than one
    /// stream exists: a single-threaded program pays nothing for it.
    touched_by: FxHashMap<TensorId, ThreadId>,
    config: CompileConfig,
    /// [`crate::config::generation`] when `config` was read.
    config_generation: u64,
    cache: PlanCache,
    /// Some stream is orphaned (checked on every op: one load).
    orphans: bool,
    /// Tensors with dimensions declared dynamic ([`crate::mark_dynamic`]): their size there
    /// and its [`Dim`], until the tensor is dropped.
    marks: FxHashMap<TensorId, Vec<(u64, Dim)>>,
}

pub(crate) struct Shared<B: BackendIr> {
    executor: Executor<B>,
    device: B::Device,
    state: Mutex<State>,
}

/// Capture client of one `Compiled<B>` device. Cheap to clone.
pub struct CompileClient<B: BackendIr> {
    shared: Arc<Shared<B>>,
}

impl<B: BackendIr> Clone for CompileClient<B> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

thread_local! {
    static THREAD: ThreadId = std::thread::current().id();
}

/// The calling thread's id, without `thread::current()`'s reference count traffic (hot path).
fn current_thread() -> ThreadId {
    THREAD.with(|t| *t)
}

/// Ids of the tensors of `Compiled<B>` devices.
///
/// One counter for all devices: an id names one tensor in the whole process, and taking one
/// touches nothing that the execution thread holds.
static NEXT_TENSOR_ID: AtomicU64 = AtomicU64::new(0);

fn new_tensor_id() -> TensorId {
    TensorId::new(NEXT_TENSOR_ID.fetch_add(1, Ordering::Relaxed))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // An inner-backend panic while a graph ran must not make the device unusable.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl<B: BackendIr> CompileClient<B> {
    fn new(device: B::Device) -> Self {
        let config_generation = crate::config::generation();
        let config = config_for(&device);
        #[cfg(feature = "gpu")]
        if burn_compile_runtime::is_cubecl::<B::FloatTensorPrimitive>() {
            burn_compile_runtime::disk::root_cubecl_caches(&config.runtime());
        }
        let shared = Arc::new(Shared {
            executor: Executor::new(device.clone()),
            device,
            state: Mutex::new(State {
                streams: FxHashMap::default(),
                touched_by: FxHashMap::default(),
                config,
                config_generation,
                cache: PlanCache::default(),
                orphans: false,
                marks: FxHashMap::default(),
            }),
        });
        crate::registry::register(shared.clone());
        Self { shared }
    }

    /// Declares the size `size` of tensor `id` dynamic, as `dim` (for the graphs that read it).
    pub(crate) fn mark_dynamic(&self, id: TensorId, size: u64, dim: Dim) {
        let mut state = self.shared.lock_state();
        let marks = state.marks.entry(id).or_default();
        if !marks.contains(&(size, dim.clone())) {
            marks.push((size, dim));
        }
    }

    /// Frees a tensor a read held on to (see `backend::read`), if that reference was the last:
    /// other threads' pending graphs that touch it run first, then its inner tensor is freed
    /// directly (no op recorded, so the caller's graphs stay as they were).
    pub(crate) fn release_held(&self, tensor: TensorIr) {
        if tensor.status != burn_ir::TensorStatus::ReadWrite {
            return;
        }
        let mut state = self.shared.lock_state();
        if let Some(owner) = state.touched_by.remove(&tensor.id) {
            let brk = GraphBreak::new(
                BreakReason::CrossThread,
                Some("a tensor read by another thread is freed".into()),
            );
            self.shared.flush(&mut state, owner, brk, false, false);
        }
        self.shared.executor.wait();
        execute_one(self.shared.executor.inner(), OperationIr::Drop(tensor));
    }

    /// The inner backend's tensors of this device, once the graphs submitted so far have run.
    pub(crate) fn inner(&self) -> &InnerDevice<B> {
        self.shared.executor.wait();
        self.shared.executor.inner()
    }

    /// Closes every pending graph of this device (`reason`), then runs `f` eagerly on the
    /// inner backend's tensors: the escape hatch for ops the capture cannot record.
    pub(crate) fn run_eager<T>(
        &self,
        reason: BreakReason,
        detail: Option<String>,
        f: impl FnOnce(&InnerDevice<B>) -> T,
    ) -> T {
        let mut state = self.shared.lock_state();
        self.shared.flush_all(&mut state, reason, detail);
        diagnostics::COUNTERS
            .eager_ops
            .fetch_add(1, Ordering::Relaxed);
        self.shared.executor.wait();
        f(self.shared.executor.inner())
    }

    /// Registers an inner tensor (a handle) as a new tensor of the device, with a fresh id: an
    /// input of the graphs that use it, like an upload.
    pub(crate) fn register_handle(
        &self,
        handle: B::Handle,
        shape: Shape,
        dtype: DType,
    ) -> RouterTensor<Self> {
        let id = new_tensor_id();
        self.shared.executor.inner().register_handle(id, handle);
        RouterTensor::new(id, shape, dtype, self.clone())
    }

    /// A new tensor of the device with a fresh id, for the inner tensor that a replayed step
    /// will register under it (no op is recorded).
    pub(crate) fn new_tensor(&self, shape: Shape, dtype: DType) -> RouterTensor<Self> {
        self.new_tensor_with_id(shape, dtype).1
    }

    /// A new tensor and its id (reading a tensor's id back costs a clone of it: a replay makes
    /// hundreds).
    pub(crate) fn new_tensor_with_id(
        &self,
        shape: Shape,
        dtype: DType,
    ) -> (TensorId, RouterTensor<Self>) {
        let id = new_tensor_id();
        (id, RouterTensor::new(id, shape, dtype, self.clone()))
    }

    /// Whether capture is enabled on this device (its config as the capture holds it: read
    /// again after a [`crate::configure`], not per call — a compiled step asks at every call).
    pub(crate) fn enabled(&self) -> bool {
        let mut state = self.shared.lock_state();
        self.shared.refresh_config(&mut state);
        state.config.enabled
    }

    /// Which device this client captures for (equal for clones).
    pub(crate) fn device_key(&self) -> usize {
        self.shared.device_key()
    }

    /// Runs a step's recorded graph with `binding` (`jit`): the calling thread's pending ops
    /// close first, then the graph is queued like any other of the thread.
    pub(crate) fn submit_step(
        &self,
        key: burn_compile_graph::GraphKey,
        ops: Arc<Vec<OperationIr>>,
        binding: Arc<burn_compile_runtime::StepBinding>,
        plan: Arc<burn_compile_schedule::Plan>,
    ) {
        let mut state = self.shared.lock_state();
        self.shared.refresh_config(&mut state);
        let thread = current_thread();
        self.shared.flush_current(
            &mut state,
            BreakReason::MarkStep,
            Some("a compiled step is replayed".into()),
            true,
        );
        let stream = state
            .streams
            .get(&thread)
            .map_or_else(StreamId::current, |s| s.inner_stream);
        let asynchronous = state.config.async_execution && !state.config.accuracy_check;
        self.shared
            .executor
            .submit_step(key, ops, binding, plan, thread, stream, asynchronous);
    }

    /// Takes the error waiting for this thread, if any.
    fn take_error(state: &mut State) -> Option<ExecutionError> {
        let stream = state.streams.get_mut(&current_thread())?;
        stream
            .pending_error
            .take()
            .map(|reason| ExecutionError::WithContext { reason })
    }
}

impl<B: BackendIr> Shared<B> {
    fn device_key(&self) -> usize {
        self as *const Self as usize
    }

    /// Locks the device state, first running the graphs left by exited threads.
    fn lock_state(&self) -> MutexGuard<'_, State> {
        let mut state = lock(&self.state);
        if state.orphans {
            self.run_orphans(&mut state);
        }
        state
    }

    /// Picks up a new [`crate::configure`] call (checked at breaks, not per op).
    fn refresh_config(&self, state: &mut State) {
        let generation = crate::config::generation();
        if state.config_generation != generation {
            state.config = config_for(&self.device);
            state.config_generation = generation;
        }
    }

    fn run_orphans(&self, state: &mut State) {
        state.orphans = false;
        let orphans: Vec<ThreadId> = state
            .streams
            .iter()
            .filter(|(_, s)| s.orphaned)
            .map(|(t, _)| *t)
            .collect();
        for thread in orphans {
            let brk = GraphBreak {
                reason: BreakReason::MarkStep,
                detail: Some("thread exit".into()),
                location: None,
            };
            self.flush(state, thread, brk, true, false);
            state.streams.remove(&thread);
        }
        if state.streams.len() <= 1 {
            state.touched_by.clear();
        }
    }

    /// Records one op in the calling thread's stream.
    fn record(&self, op: OperationIr) {
        let mut state = self.lock_state();
        diagnostics::COUNTERS
            .ops_recorded
            .fetch_add(1, Ordering::Relaxed);
        if !state.config.enabled || stance() == Stance::Eager || in_eager_region() {
            let thread = current_thread();
            if state
                .streams
                .get(&thread)
                .is_some_and(|s| !s.segment.is_empty())
            {
                self.flush(
                    &mut state,
                    thread,
                    GraphBreak::new(BreakReason::MarkStep, None),
                    false,
                    true,
                );
            }
            diagnostics::COUNTERS
                .eager_ops
                .fetch_add(1, Ordering::Relaxed);
            self.executor.wait();
            execute_one(self.executor.inner(), op);
            return;
        }

        let thread = current_thread();
        if !state.streams.contains_key(&thread) {
            self.add_stream(&mut state, thread);
        }
        if state.streams.len() > 1 {
            self.close_conflicting(&mut state, thread, &op);
        }

        let state = &mut *state;
        if !state.marks.is_empty()
            && let OperationIr::Drop(t) = &op
        {
            state.marks.remove(&t.id);
        }
        let stream = state.streams.get_mut(&thread).expect("stream exists");
        let shape = stream.segment.push(op);
        let len = stream.segment.len();
        // With a period, cut at the largest whole number of periods that fits the size limit:
        // every graph is then the same run of loop steps.
        let max = state.config.max_graph_ops;
        let limit = match stream.period.period() {
            Some(p) => (max / p).max(1) * p,
            None => max,
        };
        if state.config.detect_period {
            stream.period.push(shape, state.config.max_graph_ops);
        }
        if len >= limit {
            let detail = if state.config.detect_period {
                match stream.period.period() {
                    Some(p) => Some(format!("{} loop periods of {p} ops", limit / p)),
                    None => stream
                        .period
                        .detect(state.config.max_graph_ops)
                        .map(|p| format!("loop period of {p} ops found")),
                }
            } else {
                None
            };
            let detail = detail.or_else(|| Some(format!("{limit} ops")));
            let brk = self.make_break(state, BreakReason::SizeLimit, detail, false);
            self.flush(state, thread, brk, false, true);
        }
    }

    fn add_stream(&self, state: &mut State, thread: ThreadId) {
        crate::registry::watch_thread_exit();
        state.streams.insert(thread, Stream::new());
        if state.streams.len() == 2 {
            // Start tracking: everything the existing stream has pending belongs to it.
            let State {
                streams,
                touched_by,
                ..
            } = state;
            for (owner, stream) in streams.iter() {
                for op in stream.segment.ops() {
                    for t in op.inputs().chain(op.outputs()) {
                        touched_by.insert(t.id, *owner);
                    }
                }
            }
        }
    }

    /// Closes the graphs of other threads that have pending ops on the tensors of `op`.
    fn close_conflicting(&self, state: &mut State, thread: ThreadId, op: &OperationIr) {
        let mut others: Vec<ThreadId> = Vec::new();
        for t in op.inputs().chain(op.outputs()) {
            if let Some(owner) = state.touched_by.insert(t.id, thread)
                && owner != thread
                && !others.contains(&owner)
            {
                others.push(owner);
            }
        }
        for other in others {
            let pending = state
                .streams
                .get(&other)
                .is_some_and(|s| !s.segment.is_empty());
            if pending {
                let location = diagnostics::wanted(state.config.diagnostics)
                    .then(user_location)
                    .flatten();
                let brk = GraphBreak {
                    reason: BreakReason::CrossThread,
                    detail: Some("a tensor of this graph was used by another thread".into()),
                    location,
                };
                self.flush(state, other, brk, false, false);
            }
        }
    }

    /// Closes the calling thread's graph.
    fn flush_current(
        &self,
        state: &mut State,
        reason: BreakReason,
        detail: Option<String>,
        region_end: bool,
    ) {
        let thread = current_thread();
        let brk = self.make_break(state, reason, detail, region_end);
        self.flush(state, thread, brk, region_end, true);
    }

    /// Closes the graphs of every thread (an op run eagerly outside graphs may read tensors
    /// pending in any of them).
    fn flush_all(&self, state: &mut State, reason: BreakReason, detail: Option<String>) {
        let current = current_thread();
        let mut threads: Vec<ThreadId> = state.streams.keys().copied().collect();
        // The caller's own graph first: its location is the one the user is looking at.
        threads.sort_by_key(|t| *t != current);
        let brk = self.make_break(state, reason, detail, false);
        for thread in threads {
            self.flush(state, thread, brk.clone(), false, thread == current);
        }
    }

    fn make_break(
        &self,
        state: &State,
        reason: BreakReason,
        detail: Option<String>,
        region_end: bool,
    ) -> GraphBreak {
        let location = if !region_end && diagnostics::wanted(state.config.diagnostics) {
            user_location()
        } else {
            None
        };
        GraphBreak {
            reason,
            detail,
            location,
        }
    }

    /// Closes the graph of `thread` and runs it through the plan cache.
    fn flush(
        &self,
        state: &mut State,
        thread: ThreadId,
        brk: GraphBreak,
        region_end: bool,
        own_thread: bool,
    ) {
        let State {
            streams,
            touched_by,
            config,
            cache,
            marks,
            ..
        } = state;
        let Some(stream) = streams.get_mut(&thread) else {
            return;
        };
        if stream.segment.is_empty() {
            return;
        }
        let ops = stream.segment.ops();
        if !touched_by.is_empty() {
            for op in ops {
                for t in op.inputs().chain(op.outputs()) {
                    if touched_by.get(&t.id) == Some(&thread) {
                        touched_by.remove(&t.id);
                    }
                }
            }
        }
        let diagnostics_on = diagnostics::wanted(config.diagnostics);
        let inner = self.executor.inner();
        inner.set_kernel_policy(&config.runtime());
        // Planned before the ops leave the segment: the plan cache reads the segment's family
        // and sizes from its key writer, which taking the ops resets.
        // The sizes of this graph declared dynamic: those of the marked tensors it reads.
        let mut declared: Vec<(u64, Dim)> = Vec::new();
        if !marks.is_empty() {
            for op in ops {
                for t in op.inputs() {
                    if let Some(m) = marks.get(&t.id) {
                        for mark in m {
                            if !declared.contains(mark) {
                                declared.push(mark.clone());
                            }
                        }
                    }
                }
            }
        }
        let (plan, mut record, shape_error) = plan_on(
            cache,
            stream.segment.keys(),
            ops,
            config,
            diagnostics_on,
            inner,
            &declared,
        );
        if let Some(message) = shape_error {
            tracing::error!(target: "burn_compile::recompiles", "{message}");
            stream.pending_error.get_or_insert(message);
        }
        let key = record.key;
        if config.dump_graphs && !record.cache_hit {
            crate::incident::dump(&key.to_string(), ops, config);
        }
        // The accuracy check reads the graph's inputs before it runs (it may consume them),
        // then runs it synchronously and compares.
        let check = if config.accuracy_check {
            self.executor.wait();
            match crate::incident::read_inputs(inner, ops) {
                Ok(values) => Some((ops.to_vec(), values)),
                Err(e) => {
                    tracing::warn!(
                        target: "burn_compile::accuracy",
                        "graph {key}: inputs unreadable, not checked ({e})"
                    );
                    None
                }
            }
        } else {
            None
        };
        if own_thread {
            crate::jit::recorder::closed(&self.device_key(), key, &plan, ops, &brk);
        }
        let ops = stream.segment.take_ops();
        self.executor.submit(
            key,
            ops,
            plan,
            thread,
            stream.inner_stream,
            config.async_execution && check.is_none(),
        );
        if let Some((ops, values)) = check {
            let found = crate::incident::check_live::<B>(
                inner,
                &self.device,
                &key.to_string(),
                &ops,
                values,
                config,
            );
            if let Some(report) = found
                && config.strict
            {
                stream
                    .pending_error
                    .get_or_insert(format!("{report} (strict mode)"));
            }
        }
        if let Some(spent) = self.executor.take_spent() {
            stream.segment.recycle(spent);
        }
        if record.cache_hit {
            stream.period.hit();
        } else {
            stream.period.miss();
            if stance() == Stance::FailOnRecompile {
                let why = match &record.recompile {
                    Some(changes) => format!("a recompile: {changes}"),
                    None => "its first compile".to_string(),
                };
                let message = format!(
                    "burn-compile: graph {key} ({} ops) had to be compiled under the \
                     fail-on-recompile stance ({why}; it ended with: {brk}); it ran correctly, eagerly",
                    record.ops
                );
                tracing::error!(target: "burn_compile::recompiles", "{message}");
                stream.pending_error.get_or_insert(message);
            }
        }
        record.ended_by = brk;
        record.region_end = region_end;
        diagnostics::report(record, thread, own_thread);
    }
}

impl GraphBreak {
    pub(crate) fn new(reason: BreakReason, detail: Option<String>) -> Self {
        let location = if diagnostics::wanted(false) {
            user_location()
        } else {
            None
        };
        Self {
            reason,
            detail,
            location,
        }
    }
}

/// What the device registry needs from a client, whatever its backend.
pub(crate) trait AnyClient: Send + Sync {
    /// Closes the calling thread's graph on this device.
    fn close_current(&self, reason: BreakReason, detail: Option<String>, region_end: bool);
    /// The thread ended: run its pending graph and forget its stream.
    fn thread_exited(&self, thread: ThreadId);
    /// Error waiting for the calling thread, if any.
    fn take_pending_error(&self) -> Option<String>;
    /// Waits until every closed graph of the device has run (a panic of one the calling
    /// thread recorded is raised here, as at a sync).
    fn wait_idle(&self);
    /// Plans the device's cache holds.
    fn cached_plans(&self) -> usize;
}

impl<B: BackendIr> AnyClient for Shared<B> {
    fn close_current(&self, reason: BreakReason, detail: Option<String>, region_end: bool) {
        let mut state = self.lock_state();
        self.refresh_config(&mut state);
        self.flush_current(&mut state, reason, detail, region_end);
    }

    fn thread_exited(&self, thread: ThreadId) {
        // Its pending ops may produce tensors the thread handed to others, so they must run, but
        // not here: this is a thread-local destructor, and the inner backend may use
        // thread-locals that are already gone. The next thread to use the device runs them.
        let mut state = lock(&self.state);
        if let Some(stream) = state.streams.get_mut(&thread) {
            stream.orphaned = true;
            state.orphans = true;
        }
    }

    fn take_pending_error(&self) -> Option<String> {
        let mut state = lock(&self.state);
        let stream = state.streams.get_mut(&current_thread())?;
        stream.pending_error.take()
    }

    fn wait_idle(&self) {
        self.executor.wait();
    }

    fn cached_plans(&self) -> usize {
        lock(&self.state).cache.len()
    }
}

impl<B: BackendIr> RunnerClient for CompileClient<B> {
    type Device = B::Device;

    fn register_op(&self, op: OperationIr) {
        self.shared.record(op);
    }

    fn read_tensor_async(&self, tensor: TensorIr) -> DynFut<Result<TensorData, ExecutionError>> {
        let mut state = self.shared.lock_state();
        self.shared.refresh_config(&mut state);
        self.shared
            .flush_current(&mut state, BreakReason::HostRead, None, false);
        // The tensor may come from another thread's pending graph, which the per-tensor
        // tracking tells once two streams exist: a reader that never recorded an op gets its
        // stream here, as it would at its first op.
        let me = current_thread();
        if !state.streams.is_empty() && !state.streams.contains_key(&me) {
            self.shared.add_stream(&mut state, me);
        }
        if state.streams.len() > 1 {
            let owner = state.touched_by.get(&tensor.id).copied();
            if let Some(owner) = owner {
                let brk = GraphBreak::new(
                    BreakReason::CrossThread,
                    Some("read by another thread".into()),
                );
                self.shared.flush(&mut state, owner, brk, false, false);
            }
        }
        if let Some(err) = Self::take_error(&mut state) {
            return Box::pin(async move { Err(err) });
        }
        drop(state);
        self.shared.executor.wait();
        self.shared.executor.inner().read(&tensor)
    }

    fn sync(&self) -> Result<(), ExecutionError> {
        let mut state = self.shared.lock_state();
        self.shared.refresh_config(&mut state);
        // The calling thread's graph only: other threads' pending ops are unobservable until
        // they read, and closing them here would cut their graphs at arbitrary points.
        self.shared
            .flush_current(&mut state, BreakReason::Sync, None, false);
        if let Some(err) = Self::take_error(&mut state) {
            return Err(err);
        }
        drop(state);
        self.shared.executor.wait();
        // The graphs ran on this thread's stream (burn-compile-runtime, executor.rs): syncing it
        // waits for them.
        self.shared.executor.inner().sync()
    }

    fn create_empty_handle(&self) -> TensorId {
        new_tensor_id()
    }

    fn register_tensor_data(&self, data: TensorData) -> RouterTensor<Self> {
        // An upload is an input of the graph, not a break: the new tensor has a fresh id.
        let id = new_tensor_id();
        let (shape, dtype) = (data.shape.clone(), data.dtype);
        self.shared.executor.inner().register_data(id, data);
        RouterTensor::new(id, shape, dtype, self.clone())
    }

    fn device(&self) -> Self::Device {
        self.shared.device.clone()
    }

    fn seed(&self, seed: u64) {
        let mut state = self.shared.lock_state();
        // As for sync: random ops of other threads interleave with this seed as they would
        // in eager Burn, in an order no program can rely on.
        self.shared
            .flush_current(&mut state, BreakReason::Seed, None, false);
        drop(state);
        // Random draws already submitted must use the generator before the new seed.
        self.shared.executor.wait();
        self.shared.executor.inner().seed(seed);
    }

    fn dtype_usage(&self, dtype: DType) -> burn_backend::DTypeUsageSet {
        self.shared.executor.inner().dtype_usage(dtype)
    }
}

/// Transfers tensors between devices of the same inner backend.
pub struct SameBackendBridge<B> {
    _b: PhantomData<B>,
}

impl<B: BackendIr> burn_router::MultiBackendBridge for SameBackendBridge<B> {
    type TensorHandle = B::Handle;
    type Device = B::Device;

    fn change_backend_float(handle: B::Handle, shape: Shape, device: &B::Device) -> B::Handle {
        let tensor = B::float_tensor(burn_ir::TensorHandle { handle, shape });
        B::float_tensor_handle(B::float_to_device(tensor, device))
    }

    fn change_backend_int(handle: B::Handle, shape: Shape, device: &B::Device) -> B::Handle {
        let tensor = B::int_tensor(burn_ir::TensorHandle { handle, shape });
        B::int_tensor_handle(B::int_to_device(tensor, device))
    }

    fn change_backend_bool(handle: B::Handle, shape: Shape, device: &B::Device) -> B::Handle {
        let tensor = B::bool_tensor(burn_ir::TensorHandle { handle, shape });
        B::bool_tensor_handle(B::bool_to_device(tensor, device))
    }
}

/// burn-router channel of `Compiled<B>`: one [`CompileClient`] per device.
pub struct CompileChannel<B> {
    _b: PhantomData<B>,
}

impl<B> Clone for CompileChannel<B> {
    fn clone(&self) -> Self {
        Self { _b: PhantomData }
    }
}

impl<B: BackendIr> RunnerChannel for CompileChannel<B> {
    type Device = B::Device;
    type Bridge = SameBackendBridge<B>;
    type Client = CompileClient<B>;
    type FloatElem = B::FloatElem;
    type IntElem = B::IntElem;
    type BoolElem = B::BoolElem;

    fn name(device: &Self::Device) -> String {
        format!("compiled<{}>", B::name(device))
    }

    fn init_client(device: &Self::Device) -> Self::Client {
        CompileClient::new(device.clone())
    }

    fn get_tensor_handle(tensor: &TensorIr, client: &Self::Client) -> TensorHandle<Self::Bridge> {
        client.run_eager(BreakReason::DeviceTransfer, None, |inner| {
            inner.handle(tensor)
        })
    }

    fn register_tensor(
        client: &Self::Client,
        handle: TensorHandle<Self::Bridge>,
        shape: Shape,
        dtype: DType,
    ) -> RouterTensor<Self::Client> {
        client.register_handle(handle, shape, dtype)
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::Tensor;
    use burn_compile_runtime::{record_streams, streams_ran_on};
    use burn_flex::Flex;
    use burn_std::stream_id::StreamId;

    type C = crate::Compiled<Flex>;

    /// A graph runs on its recorder's stream, on the execution thread: a GPU runtime then orders
    /// it with the recorder's uploads, and a sync of the recorder waits for it.
    #[test]
    fn graphs_run_on_the_stream_of_the_thread_that_recorded_them() {
        record_streams();
        let record = || {
            let device = Default::default();
            let x = Tensor::<C, 2>::ones([4, 4], &device);
            let y = (x * 2.0).exp();
            // The graph closes and goes to the worker (asynchronous execution, the default).
            crate::mark_step();
            y.into_data();
            (std::thread::current().id(), StreamId::current())
        };
        let (me, mine) = record();
        let (them, theirs) = std::thread::spawn(record).join().unwrap();
        assert_ne!(mine, theirs);
        let ran = streams_ran_on();
        for (recorder, stream) in [(me, mine), (them, theirs)] {
            let on: Vec<_> = ran.iter().filter(|(_, s)| *s == stream).collect();
            assert!(!on.is_empty(), "no graph ran on {stream}: {ran:?}");
            // On the worker, not the recorder: the stream travelled with the graph (unless
            // `BURN_COMPILE_ASYNC=0` runs graphs on their recorder).
            let device: burn::tensor::Device<Flex> = Default::default();
            let asynchronous = crate::config::config_for(&device).async_execution;
            assert!(
                !asynchronous || on.iter().all(|(thread, _)| *thread != recorder),
                "{ran:?}"
            );
        }
    }

    /// A graph closed by another thread (it reads a tensor the graph produces) still runs on
    /// its recorder's stream: the recorder's uploads are on that stream. Also a regression: a
    /// reader that had never recorded an op did not close the recorder's graph at all, and the
    /// read panicked ("Should have handle for tensor").
    #[test]
    fn a_graph_closed_by_another_thread_runs_on_its_recorders_stream() {
        let (barrier, waiting) = (
            std::sync::Arc::new(std::sync::Barrier::new(2)),
            std::sync::mpsc::channel(),
        );
        let (send, receive) = waiting;
        let b = barrier.clone();
        let recorder = std::thread::spawn(move || {
            let device = Default::default();
            let x = Tensor::<C, 2>::ones([3, 5], &device);
            // Pending in this thread's graph until someone reads it.
            let y = (x * 3.0).exp();
            send.send((y, StreamId::current())).unwrap();
            // Alive while the other thread reads (its graph is not orphaned).
            b.wait();
        });
        record_streams();
        let (y, theirs) = receive.recv().unwrap();
        let before = streams_ran_on().len();
        let got = y.into_data();
        barrier.wait();
        recorder.join().unwrap();
        let ran = streams_ran_on()[before..].to_vec();
        assert!(
            ran.iter().any(|(_, s)| *s == theirs),
            "the graph ran on {ran:?}, not on its recorder's {theirs}"
        );
        got.assert_approx_eq::<f32>(
            &Tensor::<Flex, 2>::full([3, 5], 3f32.exp(), &Default::default()).into_data(),
            Default::default(),
        );
    }
}
