//! The inner backend's tensors of one `Compiled<B>` device, and op-by-op execution on them.
//!
//! Replaces burn-router's `Runner` (see `burn-compile-dispatch` for why): tensors are registered
//! under the ids the capture gave them, the lock is taken per op by the execution thread only
//! (recording never touches it), and a panic of the inner backend inside an op leaves the
//! container usable: the tensors the failed op consumed are gone, as they would be in eager Burn,
//! and every other tensor of the device is still there.

use crate::executable::Executable;
use crate::targets::{ConvPass, KernelTarget, MatmulEpilogue, Work, target_for};
use burn_backend::{DType, ExecutionError, TensorData};
use burn_compile_schedule::{
    AttentionGroup, ColumnGroup, FusedGroup, FusedKernel, MatmulGroup, Plan,
};
use burn_ir::{BackendIr, HandleContainer, OperationIr, TensorHandle, TensorId, TensorIr};
use burn_std::Shape;
use burn_std::future::DynFut;
use rustc_hash::{FxHashMap, FxHashSet};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A plan (held) and its executable.
type Lowered = (Arc<Plan>, Arc<Executable>);

/// Executables kept before those of plans no cache holds any more are dropped.
const MAX_UNUSED_EXECUTABLES: usize = 1024;

pub struct InnerDevice<B: BackendIr> {
    device: B::Device,
    handles: Mutex<HandleContainer<B::Handle>>,
    /// Launches generated kernels on the inner tensors, when the inner backend can.
    kernels: Option<Arc<dyn KernelTarget<B::FloatTensorPrimitive>>>,
    /// Kernels that failed: their groups run op by op from then on.
    failed: Mutex<FxHashSet<FusedKernel>>,
    /// Horizontal kernels (by their members' kernels) that failed: their members launch one
    /// by one from then on.
    failed_horizontal: Mutex<FxHashSet<Vec<FusedKernel>>>,
    /// Horizontal column groups (by their members) whose kernel failed: their sums launch one
    /// by one from then on.
    failed_horizontal_columns: Mutex<FxHashSet<Vec<ColumnGroup>>>,
    /// Why kernel builds failed, each warned about once.
    build_failures: Mutex<FxHashSet<String>>,
    /// `CompileConfig::strict` and `inject_kernel_failure` of the device, as last read.
    strict: AtomicBool,
    inject_failure: AtomicBool,
    /// `CompileConfig::attention_autotune` of the device, as last read.
    attention_autotune: AtomicBool,
    /// `CompileConfig::replay_on_device_thread` of the device, as last read.
    device_thread: AtomicBool,
    /// `CompileConfig::vectorize` of the device, as last read.
    vectorize: AtomicBool,
    /// Per attention problem (dims, dtype), how far the timing of the kernel against the parts
    /// has come, or what it decided.
    attention_tuning: Mutex<FxHashMap<([usize; 6], DType), Tuning>>,
    /// The executables of the plans replayed so far, by the plan's address (the plan is held:
    /// its address is not reused while its executable is here).
    executables: Mutex<FxHashMap<usize, Lowered>>,
    /// `RuntimeConfig::reduce_overhead` of the device, as last read.
    reduce_overhead: AtomicBool,
    /// `RuntimeConfig::batched_recording_copies` of the device, as last read.
    batched_recording_copies: AtomicBool,
    /// `RuntimeConfig::alternate_recordings` of the device, as last read.
    alternate_recordings: AtomicBool,
    /// While a step replayed whole runs: its graph's tensor ids → the caller's ids, which name
    /// one value each ([`InnerDevice::value_name`]).
    value_names: Mutex<FxHashMap<TensorId, TensorId>>,
    /// `RuntimeConfig::cudnn` of the device, as last read.
    cudnn: AtomicBool,
    /// Reduce-overhead mode: each replayed plan's recording state, by the plan's address (the
    /// plan is held, as for `executables`).
    recordings: Mutex<FxHashMap<usize, (Arc<Plan>, crate::recording::PlanRecording)>>,
    /// The launch of the executable running now (graphs of a device run one at a time): where
    /// a panic of the inner backend came from.
    current_launch: AtomicUsize,
}

/// The timing of an attention kernel against its parts, one replay of the problem per state.
/// The first run of each side compiles its kernels and is not timed; then [`TIMED_RUNS`]
/// synced runs of each are timed and each side's fastest compared (W1's six layers are six
/// replays of one problem: it is decided in its first two forwards). One run per side could
/// be slowed by anything else the device did then, and a decision lasts for the process: the
/// kernel it may pick instead of the parts can be 25× slower (cubek's on W1, BENCHMARKS.md).
#[derive(Clone, Copy, Debug)]
enum Tuning {
    /// The parts ran `runs` timed runs (the first, untimed, compiled them), the fastest
    /// taking `best`: time them again, or run the kernel once (compiling it).
    TimeParts { runs: u32, best: Duration },
    /// The kernel ran once: time it against the parts' fastest, `parts`.
    TimeKernel {
        parts: Duration,
        runs: u32,
        best: Duration,
    },
    /// `true`: the kernel from now on; `false`: the parts.
    Decided(bool),
}

/// Timed runs of each side of an attention step's tuning.
const TIMED_RUNS: u32 = 3;

impl<B: BackendIr> InnerDevice<B> {
    /// The device's tensors, run by the target of its inner backend (if it has one).
    pub fn new(device: B::Device) -> Self {
        let kernels = target_for::<B::FloatTensorPrimitive>(&device);
        Self::with_target(device, kernels)
    }

    /// The device's tensors, run by `kernels` (none: every op on the inner backend).
    pub fn with_target(
        device: B::Device,
        kernels: Option<Arc<dyn KernelTarget<B::FloatTensorPrimitive>>>,
    ) -> Self {
        Self {
            device,
            handles: Mutex::new(HandleContainer::new()),
            kernels,
            failed: Mutex::new(FxHashSet::default()),
            failed_horizontal: Mutex::new(FxHashSet::default()),
            failed_horizontal_columns: Mutex::new(FxHashSet::default()),
            build_failures: Mutex::new(FxHashSet::default()),
            strict: AtomicBool::new(false),
            inject_failure: AtomicBool::new(false),
            attention_autotune: AtomicBool::new(true),
            device_thread: AtomicBool::new(false),
            vectorize: AtomicBool::new(true),
            attention_tuning: Mutex::new(FxHashMap::default()),
            executables: Mutex::new(FxHashMap::default()),
            reduce_overhead: AtomicBool::new(false),
            batched_recording_copies: AtomicBool::new(false),
            alternate_recordings: AtomicBool::new(false),
            value_names: Mutex::new(FxHashMap::default()),
            cudnn: AtomicBool::new(false),
            recordings: Mutex::new(FxHashMap::default()),
            current_launch: AtomicUsize::new(0),
        }
    }

    /// Whether replays may launch recorded graphs (reduce-overhead mode; CUDA only).
    pub(crate) fn reduce_overhead(&self) -> bool {
        self.reduce_overhead.load(Ordering::Relaxed)
    }

    /// Whether a recorded graph's launch copies only the inputs that moved, batched.
    pub(crate) fn batched_recording_copies(&self) -> bool {
        self.batched_recording_copies.load(Ordering::Relaxed)
    }

    /// Whether a plan's recordings alternate, reading each other's outputs in place.
    pub(crate) fn alternate_recordings(&self) -> bool {
        self.alternate_recordings.load(Ordering::Relaxed)
    }

    /// Names the values of the running step's tensors: `names` maps its graph's ids (the same
    /// at every call of a step replayed whole) to the caller's (one value each); empty after.
    pub(crate) fn name_values(&self, names: FxHashMap<TensorId, TensorId>) {
        *self.value_names.lock().unwrap_or_else(|e| e.into_inner()) = names;
    }

    /// An id naming the value tensor `id` holds now, and no other while it lives: the caller's
    /// id inside a step replayed whole, else `id` itself (a captured graph's ids are new
    /// tensors, never reused).
    pub(crate) fn value_name(&self, id: TensorId) -> TensorId {
        let names = self.value_names.lock().unwrap_or_else(|e| e.into_inner());
        names.get(&id).copied().unwrap_or(id)
    }

    /// What records graphs on this device, if its target has one.
    pub(crate) fn recorder(&self) -> Option<&dyn crate::targets::GraphRecorder> {
        self.kernels.as_deref().and_then(|k| k.recorder())
    }

    /// `plan`'s recording state (taken out while its replay runs; put back after).
    pub(crate) fn take_recording(&self, plan: &Arc<Plan>) -> crate::recording::PlanRecording {
        let mut recordings = self.recordings.lock().unwrap_or_else(|e| e.into_inner());
        match recordings.remove(&(Arc::as_ptr(plan) as usize)) {
            Some((held, state)) if Arc::ptr_eq(&held, plan) => state,
            Some((_, mut stale)) => {
                if let Some(recorder) = self.recorder() {
                    stale.release(recorder);
                }
                Default::default()
            }
            None => Default::default(),
        }
    }

    pub(crate) fn put_recording(&self, plan: &Arc<Plan>, state: crate::recording::PlanRecording) {
        let mut recordings = self.recordings.lock().unwrap_or_else(|e| e.into_inner());
        if recordings.len() >= MAX_UNUSED_EXECUTABLES
            && let Some(recorder) = self.recorder()
        {
            // Recordings of plans no cache holds any more are freed with them.
            recordings.retain(|_, (held, state)| {
                let used = Arc::strong_count(held) > 1;
                if !used {
                    state.release(recorder);
                }
                used
            });
        }
        recordings.insert(Arc::as_ptr(plan) as usize, (plan.clone(), state));
    }

    /// A clone of tensor `id`'s inner handle, if it has one.
    pub(crate) fn handle_ref(&self, id: TensorId) -> Option<B::Handle> {
        self.handles().get_handle_ref(&id).cloned()
    }

    /// Whether `plan` has not run on this device yet (its kernels compile in its first replay).
    pub fn first_replay(&self, plan: &Arc<Plan>) -> bool {
        let executables = self.executables.lock().unwrap_or_else(|e| e.into_inner());
        executables
            .get(&(Arc::as_ptr(plan) as usize))
            .is_none_or(|(held, _)| !Arc::ptr_eq(held, plan))
    }

    /// Launch `i` of the running executable starts.
    pub(crate) fn set_current_launch(&self, i: usize) {
        self.current_launch.store(i, Ordering::Relaxed);
    }

    /// Where a replay of `plan` stopped: its current launch, as `launch N: <listing line>`.
    pub(crate) fn current_launch(&self, plan: &Arc<Plan>) -> String {
        let i = self.current_launch.load(Ordering::Relaxed);
        let executables = self.executables.lock().unwrap_or_else(|e| e.into_inner());
        match executables.get(&(Arc::as_ptr(plan) as usize)) {
            Some((held, executable)) if Arc::ptr_eq(held, plan) => {
                format!("launch {i}: {}", executable.line(i))
            }
            _ => "before its first launch".into(),
        }
    }

    /// The executable of `plan` on this device, lowered at its first replay (`ops`: that
    /// replay's graph).
    pub fn executable(&self, plan: &Arc<Plan>, ops: &[OperationIr]) -> Arc<Executable> {
        let mut executables = self.executables.lock().unwrap_or_else(|e| e.into_inner());
        let address = Arc::as_ptr(plan) as usize;
        if let Some((held, executable)) = executables.get(&address)
            && Arc::ptr_eq(held, plan)
        {
            return executable.clone();
        }
        if executables.len() >= MAX_UNUSED_EXECUTABLES {
            // Plans only this map still holds are gone from every cache (a graph that ran
            // eagerly once, with a plan of its own): their executables go with them.
            executables.retain(|_, (held, _)| Arc::strong_count(held) > 1);
        }
        let executable = Arc::new(Executable::lower(plan, ops));
        executables.insert(address, (plan.clone(), executable.clone()));
        executable
    }

    /// How replays run generated kernels under `config`: what a failed kernel does
    /// (`strict`, `inject_kernel_failure`), the attention autotune, where replays run, whether
    /// kernels are vectorized, and whether convolutions go to cuDNN.
    pub fn set_kernel_policy(&self, config: &crate::RuntimeConfig) {
        self.strict.store(config.strict, Ordering::Relaxed);
        self.inject_failure
            .store(config.inject_kernel_failure, Ordering::Relaxed);
        self.attention_autotune
            .store(config.attention_autotune, Ordering::Relaxed);
        self.device_thread
            .store(config.replay_on_device_thread, Ordering::Relaxed);
        self.vectorize.store(config.vectorize, Ordering::Relaxed);
        self.reduce_overhead
            .store(config.reduce_overhead, Ordering::Relaxed);
        self.batched_recording_copies
            .store(config.batched_recording_copies, Ordering::Relaxed);
        self.alternate_recordings
            .store(config.alternate_recordings, Ordering::Relaxed);
        self.cudnn.store(config.cudnn, Ordering::Relaxed);
        if let Some(target) = &self.kernels {
            target.configure(config);
        }
    }

    /// The end of a replay of graph `key`: the kernels the target met for the first time in it
    /// are built (all in one build: the CPU target's C unit) and reported. A failed build is a
    /// warning (once per distinct failure; the kernels' ops keep running on the inner backend),
    /// an error when strict.
    pub fn finish_replay(&self, key: burn_compile_graph::GraphKey) {
        let Some(build) = self.kernels.as_deref().and_then(|t| t.finish_replay()) else {
            return;
        };
        if let Some(error) = &build.error {
            let strict = self.strict.load(Ordering::Relaxed);
            let summary = format!("{} kernel(s) of graph {key}", build.kernels);
            let message = failure("a build of generated kernels", error, strict, &summary);
            let first = self
                .build_failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(error.clone());
            if first {
                tracing::warn!(target: "burn_compile::output_code", "{message}");
            }
            crate::counters::count(&crate::counters::COUNTERS.kernel_fallbacks);
        }
        crate::counters::kernels_built(key, build);
    }

    /// Runs `f` (a plan's replay) on the inner backend's device thread when it has one and
    /// `CompileConfig::replay_on_device_thread` is on, else here. A panic of `f` is raised
    /// here, with its payload, as if `f` had run here.
    pub fn on_device_thread<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        let target = self
            .kernels
            .as_deref()
            .filter(|_| self.device_thread.load(Ordering::Relaxed));
        let Some(target) = target else {
            return f();
        };
        let mut f = Some(f);
        let mut result = None;
        target.on_device_thread(&mut || {
            let f = f.take().expect("the target calls the task once");
            result = Some(catch_unwind(AssertUnwindSafe(f)));
        });
        match result.expect("the target calls the task once") {
            Ok(r) => r,
            Err(payload) => resume_unwind(payload),
        }
    }

    /// The buffers of a replay's memory plan (`bytes` per slot), reserved in one call; empty
    /// when there is nothing to plan or the target has no slabs (every output is then
    /// allocated on its own).
    pub fn slab(&self, bytes: &[u64]) -> Vec<B::FloatTensorPrimitive> {
        match &self.kernels {
            Some(target) if !bytes.is_empty() => target.allocate(bytes).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Runs a fused group: its kernel (output `o` written into the slot buffer `into[o]` when
    /// the memory plan gives one), or, when the kernel cannot be compiled or launched, its
    /// operations one by one on the inner backend (after a warning; an error when strict; their
    /// outputs allocated on their own). A kernel the target has not built yet for these layouts
    /// (built at the end of the replay) or whose build failed (warned then) also runs its
    /// operations, silently.
    pub fn fused(
        &self,
        ops: &[OperationIr],
        group: &FusedGroup,
        into: &[Option<&B::FloatTensorPrimitive>],
        scalars: &[f64],
    ) {
        let known_bad = {
            let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
            !failed.is_empty() && failed.contains(&group.kernel)
        };
        let strict = self.strict.load(Ordering::Relaxed);
        let error = if known_bad {
            "it failed before on this device".to_string()
        } else {
            match self.fused_kernel(ops, group, into, scalars) {
                Ok(true) => {
                    crate::counters::count(&crate::counters::COUNTERS.kernels_launched);
                    return;
                }
                Ok(false) => {
                    self.run_ops(ops, group);
                    return;
                }
                Err(e) => e,
            }
        };
        let message = failure("a generated kernel", &error, strict, &group.summary());
        if !known_bad {
            // Warned once per kernel; later replays go straight to the ops.
            tracing::warn!(target: "burn_compile::output_code", "{message}");
            self.failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(group.kernel.clone());
        }
        crate::counters::count(&crate::counters::COUNTERS.kernel_fallbacks);
        self.run_ops(ops, group);
    }

    /// Runs a fused group's operations one by one on the inner backend, in program order. An
    /// input the group does not consume is only read, even where an operation's last use
    /// would free it: a horizontal column group took that free over and runs later.
    fn run_ops(&self, ops: &[OperationIr], group: &FusedGroup) {
        let mut positions: Vec<u32> = group.ops.iter().chain(&group.drops).copied().collect();
        positions.sort_unstable();
        let kept: Vec<burn_ir::TensorId> = group
            .inputs
            .iter()
            .zip(&group.consumed)
            .filter(|(_, consumed)| !**consumed)
            .map(|(slot, _)| slot_input(ops, slot).id)
            .collect();
        for p in positions {
            let mut op = ops[p as usize].clone();
            if !kept.is_empty() {
                op.mark_read_only(&kept);
            }
            crate::replay::execute_one(self, op);
        }
    }

    /// Runs a library matmul step: the library call with its epilogue, or its operations one
    /// by one where the library cannot take these layouts (silently: a layout, not a failure),
    /// or after a refused call (a warning: the target refuses that call shape silently from
    /// then on; an error when strict). `into`: the plan's buffers for the product and for a
    /// fused bias gradient, where it has them. A fused bias gradient the library does not take
    /// for this call shape runs on the inner backend after a call without it.
    pub fn library_matmul(
        &self,
        ops: &[OperationIr],
        group: &MatmulGroup,
        into: [Option<&B::FloatTensorPrimitive>; 2],
        alpha: f64,
    ) {
        let strict = self.strict.load(Ordering::Relaxed);
        let mut error = match self.try_matmul(ops, group, into, alpha) {
            Ok(true) => {
                crate::counters::count(&crate::counters::COUNTERS.kernels_launched);
                return;
            }
            Ok(false) => None,
            Err(e) => Some(e),
        };
        if let Some(bias_grad) = group.bias_grad {
            let product = MatmulGroup {
                bias_grad: None,
                ..group.clone()
            };
            if let Some(e) = &error {
                // Once per call shape: the library refuses it silently from then on.
                tracing::info!(
                    target: "burn_compile::output_code",
                    "burn-compile: {}: the library has no bias-gradient epilogue for this call \
                     ({e}); the bias gradient runs on its own",
                    group.summary()
                );
            }
            match self.try_matmul(ops, &product, [into[0], None], alpha) {
                Ok(true) => {
                    crate::counters::count(&crate::counters::COUNTERS.kernels_launched);
                    // The fused bias gradient did not run as planned.
                    crate::counters::count(&crate::counters::COUNTERS.kernel_fallbacks);
                    crate::replay::execute_one(self, ops[bias_grad as usize].clone());
                    return;
                }
                Ok(false) => error = None,
                Err(e) => error = Some(e),
            }
        }
        if let Some(error) = error {
            let message = failure("a library matmul", &error, strict, &group.summary());
            tracing::warn!(target: "burn_compile::output_code", "{message}");
            crate::counters::count(&crate::counters::COUNTERS.kernel_fallbacks);
        }
        for p in group.ops() {
            crate::replay::execute_one(self, ops[p as usize].clone());
        }
    }

    /// The library call of a matmul step; `Ok(false)` when the library cannot take it.
    fn try_matmul(
        &self,
        ops: &[OperationIr],
        group: &MatmulGroup,
        into: [Option<&B::FloatTensorPrimitive>; 2],
        alpha: f64,
    ) -> Result<bool, String> {
        let target = self.plan_target();
        let op = &ops[group.op as usize];
        let out = ops[group.output_op() as usize]
            .outputs()
            .next()
            .expect("a matmul has an output");
        let bias_grad: Option<&TensorIr> = group.bias_grad.map(|b| {
            ops[b as usize]
                .outputs()
                .next()
                .expect("a bias gradient has an output")
        });
        let tensors: Vec<&TensorIr> = op.inputs().collect();
        let residual: Option<&TensorIr> = group.residual.map(|r| {
            ops[r.op as usize]
                .inputs()
                .nth(r.input as usize)
                .expect("the schedule matched the add's operand")
        });
        let mut handles = self.handles();
        let inputs: Vec<B::FloatTensorPrimitive> = tensors
            .iter()
            .map(|t| float_input::<B>(&mut handles, t))
            .collect();
        let residual_tensor = residual.map(|t| float_input::<B>(&mut handles, t));
        if self.inject_failure.load(Ordering::Relaxed) {
            return Err("failure injected (inject_kernel_failure)".into());
        }
        let epilogue = MatmulEpilogue {
            alpha,
            residual: residual_tensor.as_ref(),
        };
        let work = Work::Matmul {
            group,
            inputs: &inputs,
            epilogue,
            out_shape: &out.shape,
            into,
        };
        let Some(mut results) = target.launch(work)? else {
            return Ok(false);
        };
        drop((inputs, residual_tensor));
        let expected = 1 + bias_grad.is_some() as usize;
        if results.len() != expected {
            return Err(format!(
                "the library matmul returned {} outputs, not {expected}",
                results.len()
            ));
        }
        if let Some(t) = bias_grad {
            let result = results.pop().expect("counted above");
            handles.register_handle(t.id, B::float_tensor_handle(result));
        }
        let result = results.pop().expect("counted above");
        handles.register_handle(out.id, B::float_tensor_handle(result));
        // What the operations consumed (their inputs' last uses) is freed, as it would have
        // been; the products between the fused operations never had a handle.
        let bias_grad_input = group.bias_grad.map(|b| {
            ops[b as usize]
                .inputs()
                .next()
                .expect("the bias gradient's dy")
        });
        for t in tensors.into_iter().chain(residual).chain(bias_grad_input) {
            if t.status == burn_ir::TensorStatus::ReadWrite {
                handles.remove_handle(t.id);
            }
        }
        Ok(true)
    }

    /// Runs an attention step. With `attention_autotune` (the default), the first replays of
    /// each problem time the kernel against the parts (synced runs, see [`Tuning`]) and the
    /// faster one runs from then on; without it, the kernel always.
    pub fn attention(&self, ops: &[OperationIr], group: &AttentionGroup) {
        if !self.attention_autotune.load(Ordering::Relaxed) {
            return self.attention_kernel_or_parts(ops, group);
        }
        let key = (group.dims, group.dtype);
        let state = self
            .attention_tuning
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied();
        let synced = |run: &dyn Fn()| -> Duration {
            // A failed sync is raised by the next read or sync of the program, as eager's.
            let _ = self.sync();
            let start = Instant::now();
            run();
            let _ = self.sync();
            start.elapsed()
        };
        let next = match state {
            Some(Tuning::Decided(true)) => return self.attention_kernel_or_parts(ops, group),
            Some(Tuning::Decided(false)) => return self.attention_parts(ops, group),
            None => {
                self.attention_parts(ops, group);
                Tuning::TimeParts {
                    runs: 0,
                    best: Duration::MAX,
                }
            }
            Some(Tuning::TimeParts { runs, best }) if runs < TIMED_RUNS => {
                let time = synced(&|| self.attention_parts(ops, group));
                Tuning::TimeParts {
                    runs: runs + 1,
                    best: best.min(time),
                }
            }
            Some(Tuning::TimeParts { best: parts, .. }) => {
                match self.attention_kernel(ops, group) {
                    true => Tuning::TimeKernel {
                        parts,
                        runs: 0,
                        best: Duration::MAX,
                    },
                    // No kernel for this problem (or it failed, reported): the parts for good.
                    false => Tuning::Decided(false),
                }
            }
            Some(Tuning::TimeKernel { parts, runs, best }) => {
                let ran = std::cell::Cell::new(false);
                let time = synced(&|| ran.set(self.attention_kernel(ops, group)));
                let kernel = best.min(time);
                if !ran.get() {
                    // It failed (reported): the parts for good.
                    Tuning::Decided(false)
                } else if runs + 1 < TIMED_RUNS {
                    Tuning::TimeKernel {
                        parts,
                        runs: runs + 1,
                        best: kernel,
                    }
                } else {
                    let faster = kernel < parts;
                    tracing::info!(
                        target: "burn_compile::output_code",
                        "burn-compile: {}: kernel {kernel:?}, parts {parts:?} (fastest of \
                         {TIMED_RUNS} runs each): the {} from now on",
                        group.summary(),
                        if faster { "kernel" } else { "parts" }
                    );
                    Tuning::Decided(faster)
                }
            }
        };
        self.attention_tuning
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, next);
    }

    /// Whether every attention step of `plan` has its tuning decided (or the autotune is off):
    /// until then its replays run timed, synced steps, which a recorded graph would skip.
    pub fn tuning_decided(&self, plan: &Plan) -> bool {
        if !self.attention_autotune.load(Ordering::Relaxed) {
            return true;
        }
        let tuning = self
            .attention_tuning
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        plan.attention
            .iter()
            .all(|g| matches!(tuning.get(&(g.dims, g.dtype)), Some(Tuning::Decided(_))))
    }

    /// Whether the attention autotune found the parts of `group`'s problem faster than the
    /// kernel: plans are then built without the attention step.
    pub fn attention_lost(&self, group: &AttentionGroup) -> bool {
        let tuning = self
            .attention_tuning
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        matches!(
            tuning.get(&(group.dims, group.dtype)),
            Some(Tuning::Decided(false))
        )
    }

    /// The parts of an attention step, one by one (in program order, drops included).
    fn attention_parts(&self, ops: &[OperationIr], group: &AttentionGroup) {
        self.in_program_order(ops, group.ops());
    }

    /// Operations `positions` of `ops` on the inner backend, in program order: the steps a
    /// fused step stands for, where its kernel did not run.
    fn in_program_order(&self, ops: &[OperationIr], positions: impl Iterator<Item = u32>) {
        let mut positions: Vec<u32> = positions.collect();
        positions.sort_unstable();
        for p in positions {
            crate::replay::execute_one(self, ops[p as usize].clone());
        }
    }

    /// The attention kernel, or the parts where the target has none for the problem.
    fn attention_kernel_or_parts(&self, ops: &[OperationIr], group: &AttentionGroup) {
        if !self.attention_kernel(ops, group) {
            self.attention_parts(ops, group);
        }
    }

    /// Runs the attention kernel; `false` when it did not run (the target has none for the
    /// problem, silently; or it failed: a warning, an error when strict) and nothing changed.
    fn attention_kernel(&self, ops: &[OperationIr], group: &AttentionGroup) -> bool {
        let strict = self.strict.load(Ordering::Relaxed);
        match self.try_attention(ops, group) {
            Ok(true) => {
                crate::counters::count(&crate::counters::COUNTERS.attention_kernels);
                crate::counters::count(&crate::counters::COUNTERS.kernels_launched);
                true
            }
            Ok(false) => false,
            Err(error) => {
                let message = failure("an attention kernel", &error, strict, &group.summary());
                tracing::warn!(target: "burn_compile::output_code", "{message}");
                crate::counters::count(&crate::counters::COUNTERS.kernel_fallbacks);
                false
            }
        }
    }

    /// The attention kernel of an attention step; `Ok(false)` when the target has none.
    fn try_attention(&self, ops: &[OperationIr], group: &AttentionGroup) -> Result<bool, String> {
        let target = self.plan_target();
        let nth = |op: u32, n: usize| -> &TensorIr {
            ops[op as usize]
                .inputs()
                .nth(n)
                .expect("the schedule matched this operand")
        };
        // q @ kᵀ's left-hand side, the transpose's input, weights @ v's right-hand side.
        let operands = [
            nth(group.scores, 0),
            nth(group.transpose, 0),
            nth(group.context, 1),
        ];
        let out = ops[group.context as usize]
            .outputs()
            .next()
            .expect("a matmul has an output");
        let mut handles = self.handles();
        let [q, k, v] = operands.map(|t| float_input::<B>(&mut handles, t));
        if self.inject_failure.load(Ordering::Relaxed) {
            return Err("failure injected (inject_kernel_failure)".into());
        }
        let work = Work::Attention {
            group,
            q: &q,
            k: &k,
            v: &v,
        };
        let Some(result) = target.launch(work)?.and_then(|mut o| o.pop()) else {
            return Ok(false);
        };
        drop((q, k, v));
        handles.register_handle(out.id, B::float_tensor_handle(result));
        // Operands whose last use was a part are freed, as the parts would have freed them.
        for t in operands {
            if t.status == burn_ir::TensorStatus::ReadWrite {
                handles.remove_handle(t.id);
            }
        }
        Ok(true)
    }

    /// Runs a column-sum step: the target's kernel, or the sums themselves (in program order,
    /// the drops of their intermediates included) where it has none for the input's layout or
    /// the launch failed (a warning; an error when strict).
    pub fn column(&self, ops: &[OperationIr], group: &ColumnGroup) {
        let strict = self.strict.load(Ordering::Relaxed);
        match self.try_column(ops, group) {
            Ok(true) => {
                crate::counters::count(&crate::counters::COUNTERS.column_kernels);
                crate::counters::count(&crate::counters::COUNTERS.kernels_launched);
                return;
            }
            Ok(false) => {}
            Err(error) => {
                let message = failure("a column-sum kernel", &error, strict, &group.summary());
                tracing::warn!(target: "burn_compile::output_code", "{message}");
                crate::counters::count(&crate::counters::COUNTERS.kernel_fallbacks);
            }
        }
        self.in_program_order(ops, group.all_ops());
        if group.frees_input {
            self.handles()
                .remove_handle(slot_input(ops, &group.input).id);
        }
    }

    /// The column-sum kernel of `group`; `Ok(false)` when the target did not take it.
    fn try_column(&self, ops: &[OperationIr], group: &ColumnGroup) -> Result<bool, String> {
        let target = self.plan_target();
        let input = slot_input(ops, &group.input);
        let out = slot_output(ops, &group.output);
        let mut handles = self.handles();
        let tensor = float_input::<B>(&mut handles, input);
        if self.inject_failure.load(Ordering::Relaxed) {
            return Err("failure injected (inject_kernel_failure)".into());
        }
        let work = Work::Column {
            group,
            input: &tensor,
            out_shape: &out.shape,
        };
        let Some(result) = target.launch(work)?.and_then(|mut o| o.pop()) else {
            // Correct either way (the sums run), but a kernel lost: say which, and why.
            tracing::debug!(
                target: "burn_compile::output_code",
                "burn-compile: {} ran as its sums: the target does not read its input \
                 (shape {:?}, {:?}) in that tensor's layout",
                group.summary(),
                input.shape,
                input.dtype
            );
            return Ok(false);
        };
        drop(tensor);
        handles.register_handle(out.id, B::float_tensor_handle(result));
        // The input is freed where its last use was one of the sums, as the sums would have,
        // or where the group took its free over.
        if group.consumed || group.frees_input {
            handles.remove_handle(input.id);
        }
        Ok(true)
    }

    /// The column sums `groups` (of one shape, over independent tensors) as one launch where
    /// the target takes them, else each as [`Self::column`] runs it.
    pub fn horizontal_columns(&self, ops: &[OperationIr], groups: &[&ColumnGroup]) {
        let ran = self.launched_together(
            &self.failed_horizontal_columns,
            || groups.iter().map(|g| (*g).clone()).collect(),
            "a horizontal column-sum kernel",
            "launching its sums one by one instead",
            || {
                format!(
                    "{} column sums launched together, the first {}",
                    groups.len(),
                    groups[0].summary()
                )
            },
            || self.try_horizontal_columns(ops, groups),
        );
        if ran {
            let counters = &crate::counters::COUNTERS;
            for _ in groups {
                crate::counters::count(&counters.column_kernels);
            }
            crate::counters::count(&counters.horizontal_column_kernels);
            return;
        }
        for group in groups {
            self.column(ops, group);
        }
    }

    /// The one launch of a horizontal column group; `Ok(false)` when the target did not take
    /// it.
    fn try_horizontal_columns(
        &self,
        ops: &[OperationIr],
        groups: &[&ColumnGroup],
    ) -> Result<bool, String> {
        let target = self.plan_target();
        let mut handles = self.handles();
        let inputs: Vec<B::FloatTensorPrimitive> = groups
            .iter()
            .map(|g| float_input::<B>(&mut handles, slot_input(ops, &g.input)))
            .collect();
        if self.inject_failure.load(Ordering::Relaxed) {
            return Err("failure injected (inject_kernel_failure)".into());
        }
        let outs: Vec<&TensorIr> = groups.iter().map(|g| slot_output(ops, &g.output)).collect();
        let out_shapes: Vec<&Shape> = outs.iter().map(|t| &t.shape).collect();
        let work = Work::HorizontalColumns {
            groups,
            inputs: &inputs,
            out_shapes: &out_shapes,
        };
        let Some(results) = target.launch(work)? else {
            tracing::debug!(
                target: "burn_compile::output_code",
                "burn-compile: {} column sums launched together ran one by one: the target \
                 does not read one of their inputs in that tensor's layout",
                groups.len()
            );
            return Ok(false);
        };
        drop(inputs);
        for ((group, out), result) in groups.iter().zip(outs).zip(results) {
            handles.register_handle(out.id, B::float_tensor_handle(result));
            // Each input is freed where its last use was its sums, as the sums would have, or
            // where the group took its free over.
            if group.consumed || group.frees_input {
                handles.remove_handle(slot_input(ops, &group.input).id);
            }
        }
        Ok(true)
    }

    /// The kernel target a plan's kernel, library-matmul, attention and column-sum steps run
    /// on: plans hold such steps only where the device has one.
    fn plan_target(&self) -> &dyn KernelTarget<B::FloatTensorPrimitive> {
        self.kernels
            .as_deref()
            .expect("a plan with kernel steps is only built for a kernel target")
    }

    /// The generated-kernel target of the inner backend, if it has one.
    pub fn kernels(&self) -> Option<&dyn KernelTarget<B::FloatTensorPrimitive>> {
        self.kernels.as_deref()
    }

    /// Runs a fused group's kernel in place of its operations (`ops` is the graph it was
    /// scheduled from), then frees what the operations would have freed: inputs consumed in
    /// the group and tensors dropped inside it. `Ok(false)`: the target has no kernel for these
    /// layouts yet (or its build failed); on that and on failure nothing has changed.
    fn fused_kernel(
        &self,
        ops: &[OperationIr],
        group: &FusedGroup,
        into: &[Option<&B::FloatTensorPrimitive>],
        scalars: &[f64],
    ) -> Result<bool, String> {
        let target = self.plan_target();
        let mut handles = self.handles();
        let inputs = kernel_inputs::<B>(&mut handles, ops, group);
        if self.inject_failure.load(Ordering::Relaxed) {
            return Err("failure injected (inject_kernel_failure)".into());
        }
        let vectorize = self.vectorize.load(Ordering::Relaxed);
        // A symbolic group runs over this graph's own sizes (the plan holds those of the graph
        // it was scheduled from).
        let current;
        let shape = if group.symbolic() {
            current = current_shape(group, ops);
            &current
        } else {
            &group.shape
        };
        let work = Work::Kernel {
            kernel: &group.kernel,
            shape,
            inputs: &inputs,
            scalars,
            into,
            vectorize,
            dynamic: &group.dynamic,
        };
        let Some(outputs) = target.launch(work)? else {
            return Ok(false);
        };
        drop(inputs);
        register_outputs::<B>(&mut handles, ops, group, outputs);
        Ok(true)
    }

    /// Runs a horizontal group: its members' kernels as one launch where the target takes
    /// them together, else each member as [`InnerDevice::fused`] runs it (a target with no
    /// horizontal kernel, a member whose kernel is not built yet, or after a failed launch:
    /// warned once per group of kernels; an error when strict).
    pub fn horizontal(&self, ops: &[OperationIr], members: &[Member<'_, B::FloatTensorPrimitive>]) {
        let ran = self.launched_together(
            &self.failed_horizontal,
            || members.iter().map(|m| m.group.kernel.clone()).collect(),
            "a horizontal kernel",
            "launching its kernels one by one instead",
            || {
                format!(
                    "{} kernels launched together, the first {}",
                    members.len(),
                    members[0].group.summary()
                )
            },
            || self.horizontal_kernel(ops, members),
        );
        if ran {
            return;
        }
        for m in members {
            self.fused(ops, m.group, &m.into, m.scalars);
        }
    }

    /// The one launch of a group of members (`launch`), unless it failed before on this device
    /// (`failed` holds the groups, by `key`): `true` when it ran (counted as one launch). A
    /// failure is warned about once, with `instead` for what runs in its place (an error in
    /// strict mode), remembered and counted; on `false` the caller runs the members one by one.
    #[allow(clippy::too_many_arguments)]
    fn launched_together<K: std::hash::Hash + Eq>(
        &self,
        failed: &Mutex<FxHashSet<K>>,
        key: impl Fn() -> K,
        what: &str,
        instead: &str,
        summary: impl FnOnce() -> String,
        launch: impl FnOnce() -> Result<bool, String>,
    ) -> bool {
        let known_bad = {
            let failed = failed.lock().unwrap_or_else(|e| e.into_inner());
            !failed.is_empty() && failed.contains(&key())
        };
        if known_bad {
            return false;
        }
        match launch() {
            Ok(true) => {
                crate::counters::count(&crate::counters::COUNTERS.kernels_launched);
                true
            }
            Ok(false) => false,
            Err(error) => {
                let strict = self.strict.load(Ordering::Relaxed);
                let message = failure(what, &error, strict, &summary())
                    .replace("running its ops on the inner backend instead", instead);
                tracing::warn!(target: "burn_compile::output_code", "{message}");
                failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key());
                crate::counters::count(&crate::counters::COUNTERS.kernel_fallbacks);
                false
            }
        }
    }

    /// The one launch of a horizontal group; `Ok(false)` when the target does not take it.
    fn horizontal_kernel(
        &self,
        ops: &[OperationIr],
        members: &[Member<'_, B::FloatTensorPrimitive>],
    ) -> Result<bool, String> {
        let target = self.plan_target();
        let mut handles = self.handles();
        let inputs: Vec<Vec<B::FloatTensorPrimitive>> = members
            .iter()
            .map(|m| kernel_inputs::<B>(&mut handles, ops, m.group))
            .collect();
        if self.inject_failure.load(Ordering::Relaxed) {
            return Err("failure injected (inject_kernel_failure)".into());
        }
        let vectorize = self.vectorize.load(Ordering::Relaxed);
        let kernels: Vec<Work<'_, B::FloatTensorPrimitive>> = members
            .iter()
            .zip(&inputs)
            .map(|(m, inputs)| Work::Kernel {
                kernel: &m.group.kernel,
                shape: &m.group.shape,
                inputs,
                scalars: m.scalars,
                into: &m.into,
                vectorize,
                dynamic: &m.group.dynamic,
            })
            .collect();
        let Some(outputs) = target.launch(Work::Horizontal { kernels: &kernels })? else {
            return Ok(false);
        };
        drop(kernels);
        drop(inputs);
        let mut outputs = outputs.into_iter();
        for m in members {
            let own: Vec<_> = outputs.by_ref().take(m.group.outputs.len()).collect();
            register_outputs::<B>(&mut handles, ops, m.group, own);
        }
        Ok(true)
    }

    /// The handle container. A panic of the inner backend while it was held leaves it in a
    /// consistent state (each container call is complete or not started), so the poison flag is
    /// ignored.
    fn handles(&self) -> MutexGuard<'_, HandleContainer<B::Handle>> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Executes one (non-custom) op. A float reshape that needs a copy copies with a generated
    /// kernel where the target has one (see [`KernelTarget::reshape_copy`]); a 2-D convolution
    /// runs as a library call where the config asks for it and the target takes it
    /// ([`InnerDevice::library_conv`]).
    pub fn execute(&self, op: &OperationIr) {
        if let OperationIr::BaseFloat(burn_ir::BaseOperationIr::Reshape(desc)) = op
            && self.reshape_copy(desc)
        {
            return;
        }
        if let OperationIr::Module(module) = op
            && self.library_conv(op, module)
        {
            return;
        }
        burn_compile_dispatch::execute::<B>(&mut self.handles(), &self.device, op);
    }

    /// Runs a 2-D convolution pass (`conv2d`, `conv2d_x_backward`, `conv2d_weight_backward`) as
    /// one library call of the target (cuDNN on CUDA) when `RuntimeConfig::cudnn` is on; `false`
    /// when it does not (another op, the option off, no target, or a dtype, layout or shape the
    /// library does not take: silently), or after a failed call (a warning, counted in
    /// `kernel_fallbacks`; an error when strict): nothing changed, the inner backend runs it.
    fn library_conv(&self, op: &OperationIr, module: &burn_ir::ModuleOperationIr) -> bool {
        use burn_ir::ModuleOperationIr as M;
        if !self.cudnn.load(Ordering::Relaxed) {
            return false;
        }
        let Some(target) = self.kernels.as_deref() else {
            return false;
        };
        // The tensors each pass reads (in `Work::Conv2d`'s order), its options and its output.
        let (pass, reads, options, out): (ConvPass, Vec<&TensorIr>, _, &TensorIr) = match module {
            M::Conv2d(d) => (
                ConvPass::Forward,
                [&d.x, &d.weight].into_iter().chain(&d.bias).collect(),
                &d.options,
                &d.out,
            ),
            // Only x's shape is read (the output's).
            M::Conv2dXBackward(d) => (
                ConvPass::Data,
                vec![&d.weight, &d.output_grad],
                &d.options,
                &d.out,
            ),
            // Only the weight's shape is read (the output's).
            M::Conv2dWeightBackward(d) => (
                ConvPass::Filter,
                vec![&d.x, &d.output_grad],
                &d.options,
                &d.out,
            ),
            _ => return false,
        };
        let options: burn_backend::ops::ConvOptions<2> = options.clone().into();
        match self.try_conv(target, op, pass, &reads, &options, out) {
            Ok(taken) => {
                if taken {
                    crate::counters::count(&crate::counters::COUNTERS.library_convs);
                    crate::counters::count(&crate::counters::COUNTERS.kernels_launched);
                }
                taken
            }
            Err(error) => {
                let strict = self.strict.load(Ordering::Relaxed);
                let summary = format!(
                    "conv2d ({pass:?}) of {:?} to {:?}, {:?}, {options:?}",
                    reads.iter().map(|t| &t.shape).collect::<Vec<_>>(),
                    out.shape,
                    out.dtype,
                );
                let message = failure("a library convolution", &error, strict, &summary);
                tracing::warn!(target: "burn_compile::output_code", "{message}");
                crate::counters::count(&crate::counters::COUNTERS.kernel_fallbacks);
                false
            }
        }
    }

    /// The library call of a convolution pass; `Ok(false)` when the target does not take it.
    /// Its output is registered and the op's consumed inputs freed, as the inner backend's
    /// execution of the op would (x of the data pass and the weight of the filter pass too:
    /// their shapes were read).
    fn try_conv(
        &self,
        target: &dyn KernelTarget<B::FloatTensorPrimitive>,
        op: &OperationIr,
        pass: ConvPass,
        reads: &[&TensorIr],
        options: &burn_backend::ops::ConvOptions<2>,
        out: &TensorIr,
    ) -> Result<bool, String> {
        let mut handles = self.handles();
        let inputs: Vec<B::FloatTensorPrimitive> = reads
            .iter()
            .map(|t| float_input::<B>(&mut handles, t))
            .collect();
        if self.inject_failure.load(Ordering::Relaxed) {
            return Err("failure injected (inject_kernel_failure)".into());
        }
        let work = Work::Conv2d {
            pass,
            inputs: &inputs,
            options,
            out_shape: &out.shape,
        };
        let Some(result) = target.launch(work)?.and_then(|mut o| o.pop()) else {
            return Ok(false);
        };
        drop(inputs);
        handles.register_handle(out.id, B::float_tensor_handle(result));
        for t in op.inputs() {
            if t.status == burn_ir::TensorStatus::ReadWrite {
                handles.remove_handle(t.id);
            }
        }
        Ok(true)
    }

    /// Runs `desc` with the target's copy kernel; `false` when it does not take it (no copy
    /// needed, no target or no kernel): nothing changed.
    fn reshape_copy(&self, desc: &burn_ir::ShapeOpIr) -> bool {
        let Some(target) = self.kernels.as_deref() else {
            return false;
        };
        let mut handles = self.handles();
        let input = float_input::<B>(&mut handles, &desc.input);
        let copied = crate::profile::part_if("BaseFloat.Reshape", "generated copy", || {
            let work = Work::ReshapeCopy {
                input: &input,
                shape: &desc.out.shape,
            };
            // A copy that cannot launch leaves the reshape to the inner backend.
            target.launch(work).ok().flatten().and_then(|mut o| o.pop())
        });
        let Some(out) = copied else {
            return false;
        };
        drop(input);
        handles.register_handle(desc.out.id, B::float_tensor_handle(out));
        if desc.input.status == burn_ir::TensorStatus::ReadWrite {
            handles.remove_handle(desc.input.id);
        }
        true
    }

    /// The inner handle of `tensor` (removed from the device when its status is `ReadWrite`).
    pub fn handle(&self, tensor: &TensorIr) -> B::Handle {
        self.handles().get_tensor_handle(tensor).handle
    }

    /// Makes `handle` the inner tensor of `id`.
    pub fn register_handle(&self, id: TensorId, handle: B::Handle) {
        self.handles().register_handle(id, handle);
    }

    /// Makes tensor `to` share the inner tensor of `from` (a handle clone, as `tensor.clone()`
    /// in eager Burn: the backend sees two owners and writes in place into neither).
    pub fn alias(&self, from: TensorId, to: TensorId) {
        let mut handles = self.handles();
        let shared = handles
            .get_handle_ref(&from)
            .expect("a merged op's original output exists when its repeat would run")
            .clone();
        handles.register_handle(to, shared);
    }

    /// Frees tensor `id` (its last use was a dead op).
    pub fn release(&self, id: TensorId) {
        self.handles().remove_handle(id);
    }

    /// Uploads `data` as tensor `id`. The upload itself runs outside the lock.
    pub fn register_data(&self, id: TensorId, data: TensorData) {
        // Signed and unsigned ints are both int tensors (`DType::is_int` is the signed ones).
        let handle = match data.dtype {
            DType::QFloat(_) => B::quantized_tensor_handle(B::q_from_data(data, &self.device)),
            d if d.is_float() => B::float_tensor_handle(B::float_from_data(data, &self.device)),
            d if d.is_bool() => B::bool_tensor_handle(B::bool_from_data(data, &self.device)),
            _ => B::int_tensor_handle(B::int_from_data(data, &self.device)),
        };
        self.register_handle(id, handle);
    }

    /// Starts reading `tensor` to the host, in its own dtype.
    pub fn read(&self, tensor: &TensorIr) -> DynFut<Result<TensorData, ExecutionError>> {
        let handle = burn_ir::TensorHandle {
            handle: self.handle(tensor),
            shape: tensor.shape.clone(),
        };
        match tensor.dtype {
            DType::QFloat(_) => Box::pin(B::q_into_data(B::quantized_tensor(handle))),
            d if d.is_float() => Box::pin(B::float_into_data(B::float_tensor(handle))),
            d if d.is_bool() => Box::pin(B::bool_into_data(B::bool_tensor(handle))),
            _ => Box::pin(B::int_into_data(B::int_tensor(handle))),
        }
    }

    pub fn sync(&self) -> Result<(), ExecutionError> {
        B::sync(&self.device)
    }

    pub fn seed(&self, seed: u64) {
        B::seed(&self.device, seed)
    }

    pub fn dtype_usage(&self, dtype: DType) -> burn_backend::DTypeUsageSet {
        B::dtype_usage(&self.device, dtype)
    }
}

/// The message of a kernel or library call that cannot run; in strict mode, the panic.
fn failure(what: &str, error: &str, strict: bool, summary: &str) -> String {
    let message = format!(
        "burn-compile: {what} cannot run ({error}); {}: {summary}",
        if strict {
            "strict mode, giving up"
        } else {
            "running its ops on the inner backend instead"
        },
    );
    if strict {
        panic!("{message}");
    }
    message
}

/// One member of a horizontal launch: its group, the slot buffers of its outputs (`None`:
/// allocated on their own), its scalars.
pub struct Member<'a, T> {
    pub group: &'a FusedGroup,
    pub into: Vec<Option<&'a T>>,
    pub scalars: &'a [f64],
}

/// The tensor read at `slot`.
fn slot_input<'a>(ops: &'a [OperationIr], slot: &burn_compile_schedule::Slot) -> &'a TensorIr {
    ops[slot.op as usize]
        .inputs()
        .nth(slot.pos as usize)
        .expect("slot within the operation")
}

/// The tensor written at `slot`.
fn slot_output<'a>(ops: &'a [OperationIr], slot: &burn_compile_schedule::Slot) -> &'a TensorIr {
    ops[slot.op as usize]
        .outputs()
        .nth(slot.pos as usize)
        .expect("slot within the operation")
}

/// A fused group's kernel ran: its outputs are registered, the inputs it consumed and its
/// drops freed.
fn register_outputs<B: BackendIr>(
    handles: &mut HandleContainer<B::Handle>,
    ops: &[OperationIr],
    group: &FusedGroup,
    outputs: Vec<B::FloatTensorPrimitive>,
) {
    for (slot, out) in group.outputs.iter().zip(outputs) {
        let t = slot_output(ops, slot);
        handles.register_handle(t.id, B::float_tensor_handle(out));
    }
    for (slot, consumed) in group.inputs.iter().zip(&group.consumed) {
        if *consumed {
            handles.remove_handle(slot_input(ops, slot).id);
        }
    }
    for d in &group.drops {
        if let OperationIr::Drop(t) = &ops[*d as usize] {
            // A dropped intermediate of the group was never materialized: nothing to free.
            handles.remove_handle(t.id);
        }
    }
}

/// The inputs of `group`'s kernel, in kernel order; one the group reads through a swap
/// (`FusedGroup::swapped_inputs`) as that view, by the inner backend's own `swap_dims`
/// (metadata only).
fn kernel_inputs<B: BackendIr>(
    handles: &mut HandleContainer<B::Handle>,
    ops: &[OperationIr],
    group: &FusedGroup,
) -> Vec<B::FloatTensorPrimitive> {
    let mut inputs: Vec<B::FloatTensorPrimitive> = group
        .inputs
        .iter()
        .map(|slot| float_input::<B>(handles, slot_input(ops, slot)))
        .collect();
    for &(input, a, b) in &group.swapped_inputs {
        let t = &mut inputs[input as usize];
        *t = B::float_swap_dims(t.clone(), a as usize, b as usize);
    }
    inputs
}

/// The inner float tensor of `t`, read (its handle stays registered).
fn float_input<B: BackendIr>(
    handles: &mut HandleContainer<B::Handle>,
    t: &TensorIr,
) -> B::FloatTensorPrimitive {
    let handle = handles.get_handle(&t.id, &burn_ir::TensorStatus::ReadOnly);
    B::float_tensor(TensorHandle {
        handle,
        shape: t.shape.clone(),
    })
}

/// The iteration shape of a symbolic group in the graph being replayed: each dimension from a
/// tensor of the group that spans it (a full output, a row output's leading dimensions, or an
/// input not broadcast along it); the plan's size where none does (a dimension no symbolic
/// size reaches: the guards keep it).
fn current_shape(group: &FusedGroup, ops: &[OperationIr]) -> burn_std::Shape {
    let input = |slot: &burn_compile_schedule::Slot| {
        ops[slot.op as usize]
            .inputs()
            .nth(slot.pos as usize)
            .expect("slot within the operation")
    };
    let output = |slot: &burn_compile_schedule::Slot| {
        ops[slot.op as usize]
            .outputs()
            .nth(slot.pos as usize)
            .expect("slot within the operation")
    };
    let mut shape = group.shape.clone();
    let rank = shape.num_dims();
    let row_outputs = group.kernel.row.as_ref().map(|r| &r.row_outputs);
    for d in 0..rank {
        let full = group.outputs.iter().enumerate().find_map(|(o, slot)| {
            let row_output = row_outputs.is_some_and(|r| r[o]);
            (!row_output || d + 1 < rank).then(|| output(slot).shape[d])
        });
        let size = full.or_else(|| {
            group
                .inputs
                .iter()
                .zip(&group.kernel.inputs)
                .find(|(_, broadcast)| !broadcast[d])
                .map(|(slot, _)| input(slot).shape[d])
        });
        if let Some(size) = size {
            shape[d] = size;
        } else {
            debug_assert!(!group.is_dynamic(d), "a symbolic dimension no tensor spans");
        }
    }
    shape
}
