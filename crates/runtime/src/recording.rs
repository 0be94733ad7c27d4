//! Reduce-overhead mode: a plan's replay recorded once as one device graph (a CUDA graph) and
//! launched again for later replays of the plan, with the host work per replay cut to copying
//! the inputs in, one graph launch, and copying the outputs out.
//!
//! A recording is made after [`WARM_REPLAYS`] replays of its plan (kernels compiled, cuBLASLt's
//! algorithms and Burn's autotune settled: none of them may run inside a capture). What holds:
//! - **Inputs that move.** The recording reads its own copy of each graph input; each launch
//!   first copies this replay's inputs into those buffers (in stream order), so new parameter
//!   tensors every step cost a copy, never a re-record.
//! - **Outputs the user holds.** Each launch copies the recording's outputs into new buffers:
//!   the tensors handed out are never the ones a later launch overwrites.
//! - **Scalars.** The scalar table (and the scalar operands of ops run eagerly inside the plan)
//!   is compared with the recorded one at every launch: a changed scalar re-records, logged
//!   with the scalar and both values; past [`RECORD_LIMIT`] recordings a plan stays on the
//!   launch-by-launch replay, with one warning. A plan whose eager ops hold other host scalars
//!   (random seeds, clamp bounds, fill values) is never recorded.
//! - **No allocation inside a recording**: the capture allocates pool pages synchronously,
//!   keeps every buffer it binds, and writes kernel metadata to an arena it owns (the patched
//!   cubecl-cuda, `vendor/cubecl-cuda/src/capture.rs`).
//!
//! Each recording and each fallback is logged under `burn_compile::recordings` and counted.

use crate::InnerDevice;
use crate::counters::COUNTERS;
use crate::executable::{Executable, Launch};
use crate::replay::Placed;
use crate::targets::{GraphRecorder, Recorded};
use burn_backend::DType;
use burn_compile_graph::graph_inputs;
use burn_compile_schedule::{Plan, scalar_operand};
use burn_ir::{BackendIr, OperationIr, TensorId};
use burn_std::stream_id::StreamId;
use rustc_hash::{FxHashMap, FxHashSet};
use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Launch-by-launch replays of a plan before it is recorded.
pub const WARM_REPLAYS: u32 = 2;

/// Recordings of one plan before it stays on the launch-by-launch replay.
pub const RECORD_LIMIT: u32 = 8;

/// Where a plan stands in reduce-overhead mode on one device.
#[derive(Default)]
pub(crate) struct PlanRecording {
    /// Launch-by-launch replays so far.
    replays: u32,
    /// Recordings made.
    records: u32,
    /// Why the plan stays on the launch-by-launch replay, once decided.
    refused: Option<String>,
    /// A capture with marker scalars failed: record with the real ones, guarded.
    no_markers: bool,
    /// The ops run on the inner backend whose host values a recording holds, and how each is
    /// checked: found once per plan, so a replay only reads the values.
    eager_guards: Option<Vec<(u32, EagerGuard)>>,
    current: Option<Current>,
    /// With alternating recordings, those in place of `current`.
    alternating: Alternating,
}

/// A recording and what its launches need from each replay.
struct Current {
    recorded: Arc<dyn Recorded>,
    /// The graph inputs: each tensor's first reader, or the op that declares it (an upload's
    /// `Init`, whose tensor exists before the replay).
    inputs: Vec<Ref>,
    /// Graph inputs the replay frees (consumed or dropped inside the graph).
    freed: Vec<Ref>,
    /// The graph outputs left after the replay: output `pos` of op `op`, with the recording's
    /// own tensor (a layout to copy into a new buffer).
    outputs: Vec<(u32, u8, Box<dyn Any + Send>)>,
    /// Entries of the scalar table each launch writes into the graph's kernels.
    patched: Vec<usize>,
    /// Entries of the scalar table the graph holds as recorded (cuBLASLt's α, kernel scalars
    /// that could not be placed), and their values as bits, then those of the scalar operands
    /// of ops run on the inner backend: a replay with other values records again.
    guarded: Vec<usize>,
    guard_bits: Vec<u64>,
    /// The recording's own inputs: its launches copy each replay's inputs into them (held even
    /// where no launch of the graph binds one).
    _inputs_held: Vec<Box<dyn Any + Send>>,
}

impl PlanRecording {
    /// Gives the recording back to `recorder` (destroyed in stream order).
    pub(crate) fn release(&mut self, recorder: &dyn GraphRecorder) {
        if let Some(current) = self.current.take() {
            recorder.release(current.recorded);
        }
        self.alternating.release(recorder);
    }
}

/// Replays `plan` through its recording; `false` when the replay must run launch by launch
/// (warming up, or no recording can serve it): nothing has changed then.
pub(crate) fn replay<B: BackendIr>(
    inner: &InnerDevice<B>,
    ops: &[OperationIr],
    plan: &Arc<Plan>,
    executable: &Executable,
    table: &[f64],
    walk: impl Fn(&[f64], &Placed<B::FloatTensorPrimitive>),
) -> bool {
    let Some(recorder) = inner.recorder() else {
        return false;
    };
    let mut state = inner.take_recording(plan);
    let replay = ReplayParts {
        ops,
        plan,
        executable,
        table,
        walk: &walk,
    };
    let handled = replay_with(inner, recorder, &mut state, replay);
    inner.put_recording(plan, state);
    handled
}

fn replay_with<B: BackendIr>(
    inner: &InnerDevice<B>,
    recorder: &dyn GraphRecorder,
    state: &mut PlanRecording,
    replay: ReplayParts<'_, B>,
) -> bool {
    if state.refused.is_some() {
        return false;
    }
    let (ops, table) = (replay.ops, replay.table);
    let guards = match &state.eager_guards {
        Some(g) => g,
        None => match eager_guards(replay.executable, ops) {
            Ok(g) => state.eager_guards.insert(g),
            Err(reason) => {
                refuse(state, reason);
                return false;
            }
        },
    };
    let eager = eager_bits(guards, ops);
    if inner.alternate_recordings() && !state.alternating.copy_mode {
        return alternate(inner, recorder, state, replay, eager);
    }
    if let Some(current) = &state.current {
        let now = guard_bits(&current.guarded, table, &eager);
        match changed_scalar(&current.guard_bits, &now) {
            None => match launch(inner, recorder, current, ops, table) {
                Ok(()) => {
                    COUNTERS.graph_launches.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                Err(reason) => {
                    tracing::info!(
                        target: "burn_compile::recordings",
                        "recorded graph not launched ({reason}); recording again"
                    );
                }
            },
            Some(reason) => {
                tracing::info!(
                    target: "burn_compile::recordings",
                    "{reason}: recording again (recording {} of at most {RECORD_LIMIT})",
                    state.records + 1
                );
            }
        }
        state.release(recorder);
    } else {
        // A replay that still tunes is no warm-up: the attention autotune times synced runs,
        // and a graph recorded before its decision would run the undecided variant for good.
        if !inner.tuning_decided(replay.plan) {
            return false;
        }
        state.replays += 1;
        if state.replays <= WARM_REPLAYS {
            return false;
        }
    }
    if !count_record(state) {
        return false;
    }
    let markers = !state.no_markers;
    let launches = replay.executable.launches.len();
    match record(inner, recorder, replay, eager, markers) {
        Ok(current) => {
            COUNTERS.recordings.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                target: "burn_compile::recordings",
                "recorded a graph of {} launches ({} device nodes; {} inputs, {} outputs)",
                launches,
                current.recorded.nodes(),
                current.inputs.len(),
                current.outputs.len()
            );
            state.current = Some(current);
            true
        }
        Err(Failure::Refused(reason)) => {
            refuse(state, reason);
            false
        }
        Err(Failure::Capture(reason) | Failure::Held(reason)) => {
            capture_failed(state, &reason, markers)
        }
    }
}

/// A capture that failed: this replay runs launch by launch (`false`). Markers that could not
/// be placed are the likeliest cause: the next recording holds the real scalars, guarded.
/// A failed capture: this replay runs launch by launch. Marker scalars are what a capture does
/// differently from that replay, so after a failure with them the next recording holds the real
/// scalars (guarded: a changed one records again); a failure without them was not theirs, and
/// the next recording has them again (patched: a learning rate that changes every step does not
/// record every step).
fn capture_failed(state: &mut PlanRecording, reason: &str, markers: bool) -> bool {
    state.no_markers = markers;
    COUNTERS.recording_fallbacks.fetch_add(1, Ordering::Relaxed);
    tracing::info!(
        target: "burn_compile::recordings",
        "recording failed ({reason}); this replay runs launch by launch"
    );
    false
}

/// Counts a recording about to be made; `false` (and the plan refused) past [`RECORD_LIMIT`].
fn count_record(state: &mut PlanRecording) -> bool {
    if state.records >= RECORD_LIMIT {
        refuse(
            state,
            format!(
                "recorded {RECORD_LIMIT} times (the limit): replayed launch by launch from now on"
            ),
        );
        return false;
    }
    state.records += 1;
    true
}

fn refuse(state: &mut PlanRecording, reason: String) {
    COUNTERS.recording_fallbacks.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        target: "burn_compile::recordings",
        "burn-compile: a graph is not recorded ({reason}); it replays launch by launch"
    );
    state.refused = Some(reason);
}

/// How the host value of an op run on the inner backend is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EagerGuard {
    /// Its scalar operand.
    Scalar,
    /// Its [`fingerprint`] (host values the scalar operand does not cover).
    Fingerprint,
}

/// The ops run on the inner backend that hold host values, and how each is checked; an error
/// when one draws random values (its seed is drawn when it runs).
fn eager_guards(
    executable: &Executable,
    ops: &[OperationIr],
) -> Result<Vec<(u32, EagerGuard)>, String> {
    let mut guards = Vec::new();
    for launch in &executable.launches {
        let op = match launch {
            Launch::Eager { op } | Launch::Activation { op, .. } => *op,
            _ => continue,
        };
        if scalar_operand(&ops[op as usize]).is_some() {
            guards.push((op, EagerGuard::Scalar));
            continue;
        }
        let name = executable.op_name(op);
        if name.contains("Random") {
            return Err(format!(
                "op {op} ({name}) draws random values when it runs; a recording would repeat them"
            ));
        }
        if HOST_VALUES.iter().any(|v| name.contains(v)) {
            guards.push((op, EagerGuard::Fingerprint));
        }
    }
    Ok(guards)
}

/// This replay's values of `guards`, as bits.
fn eager_bits(guards: &[(u32, EagerGuard)], ops: &[OperationIr]) -> Vec<u64> {
    guards
        .iter()
        .map(|(op, guard)| {
            let op = &ops[*op as usize];
            match guard {
                EagerGuard::Scalar => scalar_operand(op).map_or(u64::MAX, f64::to_bits),
                EagerGuard::Fingerprint => fingerprint(op),
            }
        })
        .collect()
}

/// A hash of everything `op` holds but its tensor ids (which differ from one replay of a plan
/// to the next): its host values (a clamp's bounds, a fill value, a comparison's scalar).
fn fingerprint(op: &OperationIr) -> u64 {
    use std::hash::{Hash, Hasher};
    const ID: &str = "TensorId { value: ";
    let text = format!("{op:?}");
    let mut hasher = rustc_hash::FxHasher::default();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(ID) {
        rest[..at].hash(&mut hasher);
        rest = rest[at + ID.len()..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    rest.hash(&mut hasher);
    hasher.finish()
}

fn guard_bits(guarded: &[usize], table: &[f64], eager: &[u64]) -> Vec<u64> {
    guarded
        .iter()
        .map(|i| table[*i].to_bits())
        .chain(eager.iter().copied())
        .collect()
}

/// The kernel scalars of `executable`: (table entry, the kernel's dtype).
fn kernel_scalars(plan: &Plan, executable: &Executable) -> Vec<(usize, DType)> {
    let mut entries = Vec::new();
    let kernels = executable.launches.iter().flat_map(|launch| match launch {
        Launch::Horizontal { kernels, .. } => kernels.as_slice(),
        other => std::slice::from_ref(other),
    });
    for launch in kernels {
        if let Launch::Kernel {
            group,
            scalars: (first, len),
            ..
        } = launch
        {
            let dtype = plan.fused[*group as usize].kernel.dtype;
            entries.extend((*first..*first + *len).map(|i| (i as usize, dtype)));
        }
    }
    entries
}

/// Marker values a capture passes for kernel scalars, told apart in the recorded kernels'
/// arguments: `-(1 + k/2^m) · 2^e` with `k` odd below `2^(m-1)`, `m` the dtype's mantissa bits
/// (7 in bf16, 10 in f16: an odd 16-bit pattern, never an even size or stride among the
/// arguments; 7 in f32 and f64, whose patterns are above any size) and `e` in -14..=15 — exact
/// in the kernel's dtype.
const MARKERS: usize = 64 * 30;

fn marker(j: usize, dtype: DType) -> f64 {
    let mantissa = if dtype == DType::F16 { 1024.0 } else { 128.0 };
    let k = (2 * (j % 64) + 1) as f64;
    let e = (j / 64) as i32 - 14;
    -(1.0 + k / mantissa) * 2f64.powi(e)
}

/// Parts of the names of ops that carry host values besides tensors and shapes (guarded by
/// their [`fingerprint`]).
const HOST_VALUES: [&str; 7] = [
    "Scalar",
    "Elem",
    "Clamp",
    "MaskFill",
    "Full",
    "Powi",
    "Remainder",
];

fn changed_scalar(recorded: &[u64], now: &[u64]) -> Option<String> {
    if recorded.len() != now.len() {
        return Some("the number of scalars changed".into());
    }
    recorded.iter().zip(now).position(|(a, b)| a != b).map(|i| {
        format!(
            "scalar {i} changed from {} to {}",
            f64::from_bits(recorded[i]),
            f64::from_bits(now[i])
        )
    })
}

enum Failure {
    /// The plan cannot be recorded, ever.
    Refused(String),
    /// The new recording would write a buffer the program still holds; the replay's tensors
    /// are as before it.
    Held(String),
    /// This capture failed; the replay's tensors are as before it.
    Capture(String),
}

/// A tensor of a replayed graph: input or output `pos` of op `op`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ref {
    op: u32,
    pos: u8,
    output: bool,
}

impl Ref {
    fn id(self, ops: &[OperationIr]) -> TensorId {
        let op = &ops[self.op as usize];
        let t = if self.output {
            op.outputs().nth(self.pos as usize)
        } else {
            op.inputs().nth(self.pos as usize)
        };
        t.expect("a recorded tensor exists in every replay of its plan")
            .id
    }
}

/// A replay's walk of its executable, given the scalar table and the buffers outputs are placed
/// in.
type Walk<'a, B> =
    dyn Fn(&[f64], &Placed<<B as burn_backend::BackendTypes>::FloatTensorPrimitive>) + 'a;

/// What a capture reads in place: `inputs[j]` (in [`graph_inputs`] order), where given, is the
/// buffer of the plan's recordings that holds graph input `j`'s value, read there rather than
/// from a new buffer of this recording (missing: a new buffer, copied into per launch); outputs
/// in `placed` are written into the buffers given there.
struct Keep<'a, B: BackendIr> {
    inputs: &'a [Option<B::Handle>],
    placed: &'a Placed<B::FloatTensorPrimitive>,
}

impl<B: BackendIr> Clone for Keep<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: BackendIr> Copy for Keep<'_, B> {}

/// What one replay hands a recording: its ops, plan, executable, scalar table, and its walk
/// of the executable (with the scalar table given).
struct ReplayParts<'a, B: BackendIr> {
    ops: &'a [OperationIr],
    plan: &'a Plan,
    executable: &'a Executable,
    table: &'a [f64],
    walk: &'a Walk<'a, B>,
}

/// Records one replay: the graph inputs replaced by buffers of the recording's own, the
/// executable walked while the stream is captured, the graph launched once (so this replay's
/// results are computed), and the tensors of the replay put where the walk would have left them.
fn record<B: BackendIr>(
    inner: &InnerDevice<B>,
    recorder: &dyn GraphRecorder,
    replay: ReplayParts<'_, B>,
    eager: Vec<u64>,
    markers: bool,
) -> Result<Current, Failure> {
    // The capture runs on a stream of its own: work the application's threads put on the
    // replay's stream meanwhile (uploads, reads of earlier outputs) is not captured, and a
    // read never waits on a stream that is being captured. Every buffer the capture binds is
    // made on that stream; the graph itself is launched on the replay's stream.
    let replay_stream = StreamId::current();
    let capture_stream = StreamId {
        value: replay_stream.value.wrapping_add(1),
    };
    let none = Placed::default();
    let keep = Keep {
        inputs: &[],
        placed: &none,
    };
    let current =
        capture_stream.executes(|| capture(inner, recorder, &replay, eager, markers, keep))?;
    match launch(inner, recorder, &current, replay.ops, replay.table) {
        Ok(()) => Ok(current),
        Err(reason) => {
            recorder.release(current.recorded);
            Err(Failure::Capture(reason))
        }
    }
}

/// The capture part of [`record`], on the capture stream.
fn capture<B: BackendIr>(
    inner: &InnerDevice<B>,
    recorder: &dyn GraphRecorder,
    replay: &ReplayParts<'_, B>,
    eager: Vec<u64>,
    markers: bool,
    keep: Keep<'_, B>,
) -> Result<Current, Failure> {
    let ReplayParts {
        ops,
        plan,
        executable,
        table,
        walk,
    } = *replay;
    // Kernel scalars are captured as markers, found in the graph and patched per launch; the
    // rest of the table is guarded.
    let kernel = kernel_scalars(plan, executable);
    let markers = markers && kernel.len() <= MARKERS;
    let (patched, marked, capture_table): (Vec<usize>, Vec<(f64, DType)>, Vec<f64>) = if markers {
        let mut capture_table = table.to_vec();
        let mut marked = Vec::with_capacity(kernel.len());
        for (j, (i, dtype)) in kernel.iter().enumerate() {
            capture_table[*i] = marker(j, *dtype);
            marked.push((marker(j, *dtype), *dtype));
        }
        (
            kernel.iter().map(|(i, _)| *i).collect(),
            marked,
            capture_table,
        )
    } else {
        (Vec::new(), Vec::new(), table.to_vec())
    };
    let guarded: Vec<usize> = (0..table.len()).filter(|i| !patched.contains(i)).collect();
    let guard_bits = guard_bits(&guarded, table, &eager);
    let inputs: Vec<(Ref, TensorId)> = graph_inputs(ops)
        .into_iter()
        .map(|input| {
            let r = Ref {
                op: input.op,
                pos: input.pos,
                output: input.init,
            };
            (r, input.tensor.id)
        })
        .collect();
    let mut originals = Vec::with_capacity(inputs.len());
    for (_, id) in &inputs {
        let Some(original) = inner.handle_ref(*id) else {
            return Err(Failure::Refused(format!(
                "graph input {id:?} has no tensor"
            )));
        };
        originals.push(original);
    }
    let input_ids: FxHashSet<TensorId> = inputs.iter().map(|(_, id)| *id).collect();
    for operation in ops {
        if let Some(t) = operation
            .outputs()
            .find(|t| !input_ids.contains(&t.id) && inner.handle_ref(t.id).is_some())
        {
            return Err(Failure::Refused(format!(
                "tensor {:?}, written inside the graph, exists before its replay",
                t.id
            )));
        }
    }
    let mut statics = Vec::with_capacity(inputs.len());
    for (j, original) in originals.iter().enumerate() {
        if let Some(Some(buffer)) = keep.inputs.get(j) {
            // Read from the recordings' buffer that holds its value. That is the tensor's own
            // buffer only where the tensor was handed out from it; an input copied into a
            // buffer earlier still has its own elsewhere, which its owner may free (and the
            // graph would then read, and copy later values into, memory it does not own).
            inner.register_handle(inputs[j].1, buffer.clone());
            statics.push(buffer.clone());
            continue;
        }
        let made = recorder
            .like(original as &dyn Any)
            .map_err(Failure::Refused)?;
        let own = made
            .downcast::<B::Handle>()
            .map_err(|_| Failure::Refused("a recording buffer of another type".into()))?;
        inner.register_handle(inputs[j].1, (*own).clone());
        statics.push(*own);
    }
    // Puts the replay's inputs back and removes what the walk wrote: the state before it.
    let restore = || {
        for operation in ops {
            for t in operation.outputs().filter(|t| !input_ids.contains(&t.id)) {
                inner.release(t.id);
            }
        }
        for ((_, id), original) in inputs.iter().zip(&originals) {
            inner.register_handle(*id, original.clone());
        }
    };
    if let Err(reason) = recorder.begin() {
        restore();
        return Err(Failure::Capture(reason));
    }
    let walked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        walk(&capture_table, keep.placed)
    }));
    // Output tensors left by the walk, in op order (each id once).
    let mut outputs = Vec::new();
    let mut seen = FxHashSet::default();
    for (op, operation) in ops.iter().enumerate() {
        for (pos, t) in operation.outputs().enumerate() {
            if !input_ids.contains(&t.id)
                && seen.insert(t.id)
                && let Some(h) = inner.handle_ref(t.id)
            {
                outputs.push((op as u32, pos as u8, h));
            }
        }
    }
    let statics_any: Vec<&dyn Any> = statics.iter().map(|s| s as &dyn Any).collect();
    let outputs_any: Vec<&dyn Any> = outputs.iter().map(|(_, _, h)| h as &dyn Any).collect();
    let ended = recorder.end(&statics_any, &outputs_any, &marked);
    if let Err(panic) = walked {
        if let Ok(recorded) = ended {
            recorder.release(recorded);
        }
        restore();
        std::panic::resume_unwind(panic);
    }
    let recorded = match ended {
        Ok(r) => r,
        Err(reason) => {
            restore();
            return Err(Failure::Capture(reason));
        }
    };
    let freed = inputs
        .iter()
        .filter(|(_, id)| inner.handle_ref(*id).is_none())
        .map(|(r, _)| *r)
        .collect();
    // Back to the replay's state before the walk; the launch below then makes its effect.
    restore();
    let current = Current {
        recorded,
        inputs: inputs.iter().map(|(r, _)| *r).collect(),
        freed,
        outputs: outputs
            .into_iter()
            .map(|(op, pos, h)| (op, pos, Box::new(h) as Box<dyn Any + Send>))
            .collect(),
        patched,
        guarded,
        guard_bits,
        _inputs_held: statics
            .into_iter()
            .map(|s| Box::new(s) as Box<dyn Any + Send>)
            .collect(),
    };
    Ok(current)
}

/// One launch of `current` for the replay of `ops`: this replay's inputs copied in, the graph,
/// its outputs copied into new tensors registered under this replay's ids; the inputs the
/// replay frees are freed.
fn launch<B: BackendIr>(
    inner: &InnerDevice<B>,
    recorder: &dyn GraphRecorder,
    current: &Current,
    ops: &[OperationIr],
    table: &[f64],
) -> Result<(), String> {
    let mut inputs = Vec::with_capacity(current.inputs.len());
    for r in &current.inputs {
        let id = r.id(ops);
        inputs.push(
            inner
                .handle_ref(id)
                .ok_or_else(|| format!("graph input {id:?} has no tensor"))?,
        );
    }
    let inputs_any: Vec<&dyn Any> = inputs.iter().map(|h| h as &dyn Any).collect();
    let outputs_any: Vec<&dyn Any> = current
        .outputs
        .iter()
        .map(|(_, _, h)| h.as_ref() as &dyn Any)
        .collect();
    let start = crate::profile::on().then(std::time::Instant::now);
    let scalars: Vec<f64> = current.patched.iter().map(|i| table[*i]).collect();
    let made = recorder.launch(
        &current.recorded,
        &inputs_any,
        &outputs_any,
        &scalars,
        inner.batched_recording_copies(),
    )?;
    drop(inputs);
    for ((op, pos, _), out) in current.outputs.iter().zip(made) {
        let id = ops[*op as usize]
            .outputs()
            .nth(*pos as usize)
            .expect("a recorded output slot exists in every replay of its plan")
            .id;
        let handle = out
            .downcast::<B::Handle>()
            .map_err(|_| "a recorded output of another type".to_string())?;
        inner.register_handle(id, *handle);
    }
    for r in &current.freed {
        inner.release(r.id(ops));
    }
    if let Some(start) = start {
        crate::profile::record("recorded graph launch", start.elapsed());
    }
    Ok(())
}

/// Alternating recordings (`RuntimeConfig::alternate_recordings`): a plan has up to two
/// recordings, and neither copies its outputs out. Each hands out its own output buffers as the
/// replay's outputs, and each reads an input in place when one of the plan's buffers holds that
/// input's value — in a training loop the other recording's outputs, passed back as the next
/// step's parameters and optimizer state. The second recording writes each output that comes
/// back into the buffer the first reads it from, so the two read each other's outputs: a loop
/// that hands its outputs back copies nothing either way (only new data, such as a batch, is
/// copied into a buffer of the recording's own).
///
/// What holds:
/// - **A buffer is written only while no tensor but the recording holds it**
///   ([`GraphRecorder::unshared`]): a recording whose outputs, or whose inputs to copy into,
///   are held elsewhere is not launched; the other may be, else the replay runs launch by
///   launch (its outputs in new buffers), logged under `burn_compile::recordings`. So an output
///   the program keeps is never overwritten.
/// - **Values are told apart by tensor id**: a buffer records which tensor's value it holds
///   ([`InnerDevice::value_name`]; tensors are immutable and ids never reused), set when an
///   input is copied in and when it is handed out as an output.
#[derive(Default)]
pub(crate) struct Alternating {
    buffers: Vec<Buffer>,
    sides: Vec<Side>,
    /// The side launched last.
    last: usize,
    /// A replay ran launch by launch because every side's buffers were held (logged once).
    blocked_logged: bool,
    /// The plan's graph outputs share buffers (with each other or with its inputs: views): its
    /// recordings copy instead.
    copy_mode: bool,
}

/// A buffer of a plan's recordings: the only handle the recordings keep (so whether anyone
/// else holds it is [`GraphRecorder::unshared`]), and the tensor whose value it holds.
struct Buffer {
    tensor: Box<dyn Any + Send>,
    holds: Option<TensorId>,
    /// `holds` is the tensor the buffer was handed out as (not a copy of an input's value).
    handed: bool,
}

/// One recording of an alternating pair: the buffer of each graph input and output.
struct Side {
    recorded: Arc<dyn Recorded>,
    inputs: Vec<Ref>,
    /// Per graph input, the buffer the recording reads it from.
    reads: Vec<usize>,
    freed: Vec<Ref>,
    /// The graph outputs: output `pos` of op `op`, and the buffer it is written to.
    outputs: Vec<(u32, u8, usize)>,
    patched: Vec<usize>,
    guarded: Vec<usize>,
    guard_bits: Vec<u64>,
}

impl Alternating {
    fn release(&mut self, recorder: &dyn GraphRecorder) {
        for side in self.sides.drain(..) {
            recorder.release(side.recorded);
        }
        // Dropped after the release task is queued: the buffers go back to the pool in stream
        // order, after the graphs' last launches.
        self.buffers.clear();
        self.last = 0;
    }
}

fn alternate<B: BackendIr>(
    inner: &InnerDevice<B>,
    recorder: &dyn GraphRecorder,
    state: &mut PlanRecording,
    replay: ReplayParts<'_, B>,
    eager: Vec<u64>,
) -> bool {
    let (ops, table) = (replay.ops, replay.table);
    let alt = &mut state.alternating;
    if alt.sides.is_empty() {
        if !inner.tuning_decided(replay.plan) {
            return false;
        }
        state.replays += 1;
        if state.replays <= WARM_REPLAYS {
            return false;
        }
    } else {
        let changed = alt.sides.iter().find_map(|side| {
            changed_scalar(&side.guard_bits, &guard_bits(&side.guarded, table, &eager))
        });
        if let Some(reason) = changed {
            tracing::info!(
                target: "burn_compile::recordings",
                "{reason}: recording again (recording {} of at most {RECORD_LIMIT})",
                state.records + 1
            );
            alt.release(recorder);
        } else {
            match launch_any(inner, recorder, alt, ops, table) {
                Ok(true) => {
                    COUNTERS.graph_launches.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                Ok(false) if alt.sides.len() >= 2 => {
                    // Both recordings write buffers the program still holds, not as outputs
                    // it was handed (a view of one, or an input being copied from).
                    COUNTERS.recording_fallbacks.fetch_add(1, Ordering::Relaxed);
                    if !alt.blocked_logged {
                        alt.blocked_logged = true;
                        tracing::info!(
                            target: "burn_compile::recordings",
                            "both recordings of a graph write buffers the program still holds; \
                             this replay and others like it run launch by launch"
                        );
                    }
                    return false;
                }
                Ok(false) => {}
                Err(reason) => {
                    tracing::info!(
                        target: "burn_compile::recordings",
                        "recorded graph not launched ({reason}); recording again"
                    );
                    alt.release(recorder);
                }
            }
        }
    }
    if !count_record(state) {
        return false;
    }
    let markers = !state.no_markers;
    let launches = replay.executable.launches.len();
    let alt = &mut state.alternating;
    match record_side(inner, recorder, alt, replay, eager, markers) {
        Ok(s) => {
            COUNTERS.recordings.fetch_add(1, Ordering::Relaxed);
            COUNTERS.graph_launches.fetch_add(1, Ordering::Relaxed);
            let side = &alt.sides[s];
            let in_place = side
                .outputs
                .iter()
                .filter(|(_, _, b)| alt.sides.iter().any(|o| o.reads.contains(b)))
                .count();
            tracing::info!(
                target: "burn_compile::recordings",
                "recorded graph {} of {} ({} launches, {} device nodes; {} inputs, {} outputs, \
                 {} of them where the other recording reads them)",
                s + 1,
                alt.sides.len(),
                launches,
                side.recorded.nodes(),
                side.inputs.len(),
                side.outputs.len(),
                in_place
            );
            alt.last = s;
            true
        }
        Err(Failure::Refused(reason)) => {
            alt.release(recorder);
            refuse(state, reason);
            false
        }
        Err(Failure::Capture(reason)) => capture_failed(state, &reason, markers),
        Err(Failure::Held(reason)) => {
            // A new recording's buffers are its own or the other's copies of inputs: one
            // held elsewhere is a view shared by two of its tensors, for good.
            alt.release(recorder);
            alt.copy_mode = true;
            COUNTERS.recording_fallbacks.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                target: "burn_compile::recordings",
                "a graph's recordings cannot alternate ({reason}: a view shared by two of its \
                 tensors); recorded with copies from its next replay"
            );
            false
        }
    }
}

/// Side `s` made ready to launch for the replay of `ops`: the inputs to copy into its buffers
/// (this replay's tensors), the value names of all its inputs, and the buffers it would write
/// that a tensor of the program still holds.
struct Prepared<H> {
    copies: Vec<(usize, H)>,
    names: Vec<TensorId>,
    blocked: Vec<usize>,
}

fn prepare<B: BackendIr>(
    inner: &InnerDevice<B>,
    recorder: &dyn GraphRecorder,
    alt: &Alternating,
    s: usize,
    ops: &[OperationIr],
) -> Result<Prepared<B::Handle>, String> {
    let side = &alt.sides[s];
    let mut names = Vec::with_capacity(side.inputs.len());
    let mut copies = Vec::new();
    for (j, r) in side.inputs.iter().enumerate() {
        let id = r.id(ops);
        let name = inner.value_name(id);
        names.push(name);
        if alt.buffers[side.reads[j]].holds != Some(name) {
            let tensor = inner
                .handle_ref(id)
                .ok_or_else(|| format!("graph input {id:?} has no tensor"))?;
            copies.push((j, tensor));
        }
    }
    let blocked = side
        .outputs
        .iter()
        .map(|(_, _, b)| *b)
        .chain(copies.iter().map(|(j, _)| side.reads[*j]))
        .filter(|b| !recorder.unshared(alt.buffers[*b].tensor.as_ref()))
        .collect();
    Ok(Prepared {
        copies,
        names,
        blocked,
    })
}

/// Launches side `s` for the replay of `ops` as `prepared`; with `moves`, the outputs of earlier
/// calls still held in the buffers it writes are first moved into buffers of their own.
/// `Ok(false)` when a buffer it writes is still held (nothing has changed then). Its outputs are
/// registered under this replay's ids (its own buffers), and the inputs the replay frees are
/// freed.
#[allow(clippy::too_many_arguments)]
fn launch_side<B: BackendIr>(
    inner: &InnerDevice<B>,
    recorder: &dyn GraphRecorder,
    alt: &mut Alternating,
    s: usize,
    ops: &[OperationIr],
    table: &[f64],
    prepared: Prepared<B::Handle>,
    moves: bool,
) -> Result<bool, String> {
    let Prepared {
        copies,
        names,
        blocked,
    } = prepared;
    if !blocked.is_empty() {
        if !moves {
            return Ok(false);
        }
        for b in blocked {
            if !move_out(inner, recorder, &mut alt.buffers[b])? {
                return Ok(false);
            }
        }
    }
    let side = &alt.sides[s];
    let start = crate::profile::on().then(std::time::Instant::now);
    let scalars: Vec<f64> = side.patched.iter().map(|i| table[*i]).collect();
    let sources: Vec<(usize, &dyn Any)> = copies.iter().map(|(j, t)| (*j, t as &dyn Any)).collect();
    recorder.launch_in_place(&side.recorded, &sources, &scalars)?;
    drop(sources);
    for (j, _) in copies {
        let buffer = &mut alt.buffers[side.reads[j]];
        buffer.holds = Some(names[j]);
        buffer.handed = false;
    }
    for (op, pos, b) in &side.outputs {
        let id = ops[*op as usize]
            .outputs()
            .nth(*pos as usize)
            .expect("a recorded output slot exists in every replay of its plan")
            .id;
        let buffer = &mut alt.buffers[*b];
        let tensor = buffer
            .tensor
            .downcast_ref::<B::Handle>()
            .ok_or("a recording buffer of another type")?;
        inner.register_handle(id, tensor.clone());
        buffer.holds = Some(inner.value_name(id));
        buffer.handed = true;
    }
    for r in &side.freed {
        inner.release(r.id(ops));
    }
    if let Some(start) = start {
        crate::profile::record("recorded graph launch", start.elapsed());
    }
    Ok(true)
}

/// Launches a side for this replay: the first (after the last launched) that writes no buffer
/// still held; else, with two sides, the one with the fewest held buffers, after moving the
/// outputs they hold out. `Ok(false)`: none launched (with fewer than two sides, record one).
fn launch_any<B: BackendIr>(
    inner: &InnerDevice<B>,
    recorder: &dyn GraphRecorder,
    alt: &mut Alternating,
    ops: &[OperationIr],
    table: &[f64],
) -> Result<bool, String> {
    let n = alt.sides.len();
    let mut fewest: Option<(usize, usize)> = None;
    for k in 1..=n {
        let s = (alt.last + k) % n;
        let prepared = prepare(inner, recorder, alt, s, ops)?;
        let held = prepared.blocked.len();
        if held == 0 {
            if launch_side(inner, recorder, alt, s, ops, table, prepared, false)? {
                alt.last = s;
                return Ok(true);
            }
        } else if fewest.is_none_or(|(_, h)| held < h) {
            fewest = Some((s, held));
        }
    }
    let Some((s, _)) = fewest.filter(|_| n >= 2) else {
        return Ok(false);
    };
    let prepared = prepare(inner, recorder, alt, s, ops)?;
    if launch_side(inner, recorder, alt, s, ops, table, prepared, true)? {
        alt.last = s;
        return Ok(true);
    }
    Ok(false)
}

/// Moves the tensor `buffer` was handed out as, if the program still holds it, into a copy of
/// its own; whether no tensor holds `buffer` after that.
fn move_out<B: BackendIr>(
    inner: &InnerDevice<B>,
    recorder: &dyn GraphRecorder,
    buffer: &mut Buffer,
) -> Result<bool, String> {
    let Some(id) = buffer.holds.filter(|_| buffer.handed) else {
        return Ok(false);
    };
    if inner.handle_ref(id).is_none() {
        return Ok(false);
    }
    let copy = recorder
        .copy_of(buffer.tensor.as_ref())?
        .downcast::<B::Handle>()
        .map_err(|_| "a copy of another type".to_string())?;
    // The tensor keeps its id and values; only its buffer changes.
    inner.register_handle(id, *copy);
    buffer.holds = None;
    buffer.handed = false;
    COUNTERS
        .recording_outputs_moved
        .fetch_add(1, Ordering::Relaxed);
    Ok(recorder.unshared(buffer.tensor.as_ref()))
}

/// Records a side for this replay and launches it (so this replay's results are computed);
/// returns its index. An input whose value a buffer holds is read there; an output that the
/// existing side's outputs show comes back as input `j` is written where that side reads
/// input `j`.
fn record_side<B: BackendIr>(
    inner: &InnerDevice<B>,
    recorder: &dyn GraphRecorder,
    alt: &mut Alternating,
    replay: ReplayParts<'_, B>,
    eager: Vec<u64>,
    markers: bool,
) -> Result<usize, Failure> {
    let ops = replay.ops;
    let buffers_before = alt.buffers.len();
    let inputs = graph_inputs(ops);
    let holding: FxHashMap<TensorId, usize> = alt
        .buffers
        .iter()
        .enumerate()
        .filter_map(|(b, buffer)| buffer.holds.map(|h| (h, b)))
        .collect();
    let reads: Vec<Option<usize>> = inputs
        .iter()
        .map(|input| holding.get(&inner.value_name(input.tensor.id)).copied())
        .collect();
    let kept = reads
        .iter()
        .map(|b| {
            b.map(|b| {
                alt.buffers[b]
                    .tensor
                    .downcast_ref::<B::Handle>()
                    .cloned()
                    .ok_or_else(|| Failure::Refused("a recording buffer of another type".into()))
            })
            .transpose()
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Where the outputs go: an output of another side read here as input `j` is the value
    // of input `j` at the next replay, so this side writes it where that side reads `j`.
    let mut placed = Placed::<B::FloatTensorPrimitive>::default();
    let mut targets: FxHashMap<TensorId, usize> = FxHashMap::default();
    for other in &alt.sides {
        for (j, b) in reads.iter().enumerate() {
            let Some(b) = b else { continue };
            let Some((op, pos, _)) = other.outputs.iter().find(|o| o.2 == *b) else {
                continue;
            };
            let target = other.reads[j];
            if reads.contains(&Some(target)) {
                continue;
            }
            let Some(out) = ops[*op as usize].outputs().nth(*pos as usize) else {
                continue;
            };
            if placed.contains_key(&out.id) || targets.values().any(|t| *t == target) {
                continue;
            }
            let Some(slot) =
                recorder.slot(alt.buffers[target].tensor.as_ref(), &out.shape, out.dtype)
            else {
                continue;
            };
            let Ok(slot) = slot.downcast::<B::FloatTensorPrimitive>() else {
                continue;
            };
            placed.insert(out.id, *slot);
            targets.insert(out.id, target);
        }
    }
    let replay_stream = StreamId::current();
    let capture_stream = StreamId {
        value: replay_stream.value.wrapping_add(1),
    };
    let keep = Keep {
        inputs: &kept,
        placed: &placed,
    };
    let current =
        capture_stream.executes(|| capture(inner, recorder, &replay, eager, markers, keep));
    drop(placed);
    let current = current?;
    // The buffers of the new side: those it reads in place, its own copies of the others, and
    // its outputs — in the buffers placed for them where the kernels wrote there.
    let Current {
        recorded,
        inputs: refs,
        freed,
        outputs,
        patched,
        guarded,
        guard_bits,
        _inputs_held: statics,
    } = current;
    let mut new_reads = Vec::with_capacity(statics.len());
    for (j, own) in statics.into_iter().enumerate() {
        match reads[j] {
            Some(b) => new_reads.push(b),
            None => {
                new_reads.push(alt.buffers.len());
                alt.buffers.push(Buffer {
                    tensor: own,
                    holds: None,
                    handed: false,
                });
            }
        }
    }
    // Where the placed outputs were written: in their buffers, unless their kernel could not
    // take one (it ran as its ops, or the target allocated its output).
    let placed_at: Vec<(usize, usize)> = outputs
        .iter()
        .enumerate()
        .filter_map(|(o, (op, pos, _))| {
            let id = ops[*op as usize].outputs().nth(*pos as usize)?.id;
            targets.get(&id).map(|t| (o, *t))
        })
        .collect();
    let mut landed = vec![None; outputs.len()];
    if !placed_at.is_empty() {
        let pairs: Vec<&dyn Any> = placed_at
            .iter()
            .flat_map(|(o, t)| {
                [
                    outputs[*o].2.as_ref() as &dyn Any,
                    alt.buffers[*t].tensor.as_ref() as &dyn Any,
                ]
            })
            .collect();
        let at = match recorder.addresses(&pairs) {
            Ok(at) => at,
            Err(reason) => {
                drop(pairs);
                recorder.release(recorded);
                alt.buffers.truncate(buffers_before);
                return Err(Failure::Capture(reason));
            }
        };
        for (k, (o, t)) in placed_at.iter().enumerate() {
            if at[2 * k] == at[2 * k + 1] {
                landed[*o] = Some(*t);
            }
        }
    }
    let mut new_outputs = Vec::with_capacity(outputs.len());
    for ((op, pos, tensor), landed) in outputs.into_iter().zip(landed) {
        let b = match landed {
            Some(target) => target,
            None => {
                alt.buffers.push(Buffer {
                    tensor,
                    holds: None,
                    handed: false,
                });
                alt.buffers.len() - 1
            }
        };
        new_outputs.push((op, pos, b));
    }
    let s = alt.sides.len();
    alt.sides.push(Side {
        recorded,
        inputs: refs,
        reads: new_reads,
        freed,
        outputs: new_outputs,
        patched,
        guarded,
        guard_bits,
    });
    let launched = prepare(inner, recorder, alt, s, ops)
        .and_then(|p| launch_side(inner, recorder, alt, s, ops, replay.table, p, false));
    let failure = match launched {
        Ok(true) => return Ok(s),
        Ok(false) => Failure::Held("a buffer of the new recording is held elsewhere".into()),
        Err(reason) => Failure::Capture(reason),
    };
    let side = alt.sides.pop().expect("pushed above");
    recorder.release(side.recorded);
    alt.buffers.truncate(buffers_before);
    Err(failure)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn_backend::Shape;
    use burn_ir::{NumericOperationIr, ScalarIr, ScalarOpIr, TensorIr, TensorStatus};

    fn t(id: u64) -> TensorIr {
        TensorIr {
            id: TensorId::new(id),
            shape: Shape::from(vec![4, 4]),
            status: TensorStatus::ReadOnly,
            dtype: DType::F32,
        }
    }

    fn lower_elem(lhs: u64, s: f64, out: u64) -> OperationIr {
        OperationIr::NumericFloat(
            DType::F32,
            NumericOperationIr::LowerElem(ScalarOpIr {
                lhs: t(lhs),
                rhs: ScalarIr::Float(s),
                out: t(out),
            }),
        )
    }

    #[cfg(feature = "gpu")]
    /// Markers survive every kernel dtype exactly, and each dtype's bit patterns are distinct
    /// (and odd in 16 bits: never an even size or stride of a kernel's arguments).
    #[test]
    fn markers_are_exact_and_distinct_in_every_kernel_dtype() {
        let mut bf16 = FxHashSet::default();
        let mut f16 = FxHashSet::default();
        let mut f32s = FxHashSet::default();
        for j in 0..MARKERS {
            let (b, h, f) = (
                marker(j, DType::BF16),
                marker(j, DType::F16),
                marker(j, DType::F32),
            );
            assert_eq!(half::bf16::from_f64(b).to_f64(), b, "bf16, marker {j}");
            assert_eq!(half::f16::from_f64(h).to_f64(), h, "f16, marker {j}");
            assert_eq!(f as f32 as f64, f, "f32, marker {j}");
            assert_eq!(half::bf16::from_f64(b).to_bits() % 2, 1);
            assert_eq!(half::f16::from_f64(h).to_bits() % 2, 1);
            assert!(bf16.insert(half::bf16::from_f64(b).to_bits()));
            assert!(f16.insert(half::f16::from_f64(h).to_bits()));
            assert!(f32s.insert((f as f32).to_bits()));
        }
    }

    /// An op's fingerprint ignores its tensor ids (new every replay) and sees its host values.
    #[test]
    fn fingerprints_see_host_values_not_tensor_ids() {
        let a = fingerprint(&lower_elem(1, 0.5, 2));
        assert_eq!(a, fingerprint(&lower_elem(7, 0.5, 123456)));
        assert_ne!(a, fingerprint(&lower_elem(1, 0.25, 2)));
    }

    /// Graph inputs: each tensor read before any op of the graph wrote it, once, at its first
    /// reader.
    #[test]
    fn graph_inputs_are_first_reads_of_tensors_not_written_in_the_graph() {
        let ops = vec![
            lower_elem(1, 0.5, 2),
            lower_elem(2, 0.5, 3),
            lower_elem(1, 1.0, 4),
        ];
        let inputs = graph_inputs(&ops);
        assert_eq!(inputs.len(), 1);
        assert_eq!((inputs[0].op, inputs[0].pos, inputs[0].init), (0, 0, false));
        assert_eq!(inputs[0].tensor.id, TensorId::new(1));
    }

    #[test]
    fn a_changed_guarded_scalar_is_named_with_both_values() {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(changed_scalar(&bits(&[1.0, 2.0]), &bits(&[1.0, 2.0])), None);
        assert_eq!(
            changed_scalar(&bits(&[1.0, 2.0]), &bits(&[1.0, 3.0])).as_deref(),
            Some("scalar 1 changed from 2 to 3")
        );
    }
}
