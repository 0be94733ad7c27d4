//! Step-level replay ([`jit`]): a step function recorded once, then replayed without running.
//!
//! A call takes the step's inputs apart into tensors (the state's parameters in
//! [`Module::visit`] order, then the inputs' tensors), each with its shape, dtype, whether the
//! caller handed it over (the status the graph will see), and whether it requires a gradient.
//! Those are the guard. The first two calls with a guard run the function under capture; each
//! is one graph, which is kept with its plan. The function's own tensors are renamed on the way
//! in and out (the graph reads and writes ids that belong to the recording alone), so a replay
//! writes nothing a caller holds. When both recordings are one graph of the same key with the
//! same scalars, and nothing ran eagerly in between, later calls with that guard replay the
//! graph: the caller's tensors are bound to its inputs, its outputs to new tensors, and the
//! state and outputs are rebuilt around them. The function does not run.
//!
//! Anything else makes the guard *ineligible*: the reason is logged under
//! `burn_compile::jit` (and returned by [`Jit::ineligible`]) and every call runs the function.

mod parts;
pub(crate) mod recorder;
mod training;

pub use parts::{Kind, Layout, Modules, Part, PartMap, Parts, PartsIter, StepState, StepTensors};
pub use training::{StepOptimizer, StepSimpleOptimizer, Training, jit_train};

use crate::backend::Compiled;
use crate::capture::{BreakReason, CompileClient};
use crate::diagnostics::COUNTERS;
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};
use burn_backend::{AutodiffBackend, Backend, DType, Shape};
use burn_compile_graph::{
    GraphKey, op_name, scalar_differences, scalar_operands, scalar_operands_mut,
};
use burn_compile_runtime::StepBinding;
use burn_compile_schedule::Plan;
use burn_core::module::Module;
use burn_ir::{BackendIr, OperationIr, ScalarIr, TensorId, TensorStatus};
use burn_router::RouterTensor;
use parts::{id_of, placeholder_of, put_parts, rebuild, take_parts};
use rustc_hash::FxHashSet;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The tensor type every kind of a [`StepBackend`] is made of.
pub type StepTensor<B> = RouterTensor<CompileClient<<B as StepBackend>::Captured>>;

/// A backend whose tensors a compiled step can take apart and rebuild: `Compiled<B>` and
/// `Autodiff<Compiled<B>>`.
pub trait StepBackend: Backend {
    /// The backend whose ops are captured.
    type Captured: BackendIr;
    #[doc(hidden)]
    fn float_into_step(tensor: FloatTensor<Self>) -> (StepTensor<Self>, bool);
    #[doc(hidden)]
    fn float_from_step(tensor: StepTensor<Self>, require_grad: bool) -> FloatTensor<Self>;
    #[doc(hidden)]
    fn int_into_step(tensor: IntTensor<Self>) -> StepTensor<Self>;
    #[doc(hidden)]
    fn int_from_step(tensor: StepTensor<Self>) -> IntTensor<Self>;
    #[doc(hidden)]
    fn bool_into_step(tensor: BoolTensor<Self>) -> StepTensor<Self>;
    #[doc(hidden)]
    fn bool_from_step(tensor: StepTensor<Self>) -> BoolTensor<Self>;
}

impl<B: BackendIr> StepBackend for Compiled<B> {
    type Captured = B;
    fn float_into_step(tensor: FloatTensor<Self>) -> (StepTensor<Self>, bool) {
        (tensor, false)
    }
    fn float_from_step(tensor: StepTensor<Self>, _: bool) -> FloatTensor<Self> {
        tensor
    }
    fn int_into_step(tensor: IntTensor<Self>) -> StepTensor<Self> {
        tensor
    }
    fn int_from_step(tensor: StepTensor<Self>) -> IntTensor<Self> {
        tensor
    }
    fn bool_into_step(tensor: BoolTensor<Self>) -> StepTensor<Self> {
        tensor
    }
    fn bool_from_step(tensor: StepTensor<Self>) -> BoolTensor<Self> {
        tensor
    }
}

impl<B: BackendIr, C: CheckpointStrategy> StepBackend for Autodiff<Compiled<B>, C> {
    type Captured = B;
    fn float_into_step(tensor: FloatTensor<Self>) -> (StepTensor<Self>, bool) {
        let require_grad = Self::float_is_require_grad(&tensor);
        (Self::inner(tensor), require_grad)
    }
    fn float_from_step(tensor: StepTensor<Self>, require_grad: bool) -> FloatTensor<Self> {
        let tensor = Self::from_inner(tensor);
        if require_grad {
            Self::float_set_require_grad(tensor, true)
        } else {
            tensor
        }
    }
    fn int_into_step(tensor: IntTensor<Self>) -> StepTensor<Self> {
        tensor
    }
    fn int_from_step(tensor: StepTensor<Self>) -> IntTensor<Self> {
        tensor
    }
    fn bool_into_step(tensor: BoolTensor<Self>) -> StepTensor<Self> {
        tensor
    }
    fn bool_from_step(tensor: StepTensor<Self>) -> BoolTensor<Self> {
        tensor
    }
}

/// What a part looks like to the guard.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Signature {
    kind: Kind,
    shape: Shape,
    dtype: DType,
    /// The caller handed the tensor over (the step's graph may free it).
    owned: bool,
    require_grad: bool,
}

/// A tensor taken from the caller: its id and whether the caller handed it over.
struct Taken {
    id: TensorId,
    owned: bool,
}

/// Takes a part from the caller: the status tells whether the caller still holds the tensor.
fn take<B: StepBackend>(part: Part<B>) -> (Taken, Signature, CompileClient<B::Captured>) {
    let client = part.tensor.client.clone();
    let ir = part.tensor.into_ir();
    let owned = ir.status == TensorStatus::ReadWrite;
    (
        Taken { id: ir.id, owned },
        Signature {
            kind: part.kind,
            shape: ir.shape,
            dtype: ir.dtype,
            owned,
            require_grad: part.require_grad,
        },
        client,
    )
}

/// What a call's structure is compared on: its tensors, the state's own layout (which
/// parameters have optimizer state), the inputs' layout and how many scalars they hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Guard {
    tensors: Vec<Signature>,
    /// How many of `tensors` are the state's.
    state_len: usize,
    state: Vec<usize>,
    inputs: Layout,
    scalars: usize,
}

/// How a scalar input reached a scalar operand: as it is, or rounded to `f32` on the way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rounding {
    Exact,
    F32,
}

impl Rounding {
    fn apply(self, value: f64) -> f64 {
        match self {
            Rounding::Exact => value,
            Rounding::F32 => value as f32 as f64,
        }
    }
}

/// A scalar operand that follows a scalar input of the step: operand `operand` of op `op`
/// takes input `input`'s value on each replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ScalarBinding {
    op: usize,
    operand: usize,
    input: usize,
    rounding: Rounding,
}

/// A graph a step was recorded as, ready to replay.
struct Recording {
    key: GraphKey,
    plan: Arc<Plan>,
    /// The recorded ops, their bound scalar operands holding the values of `scalars`.
    ops: Arc<Vec<OperationIr>>,
    /// A second copy of `ops` for rebinding scalars while a queued replay reads the first.
    spare: Option<Arc<Vec<OperationIr>>>,
    device: usize,
    /// The graph's id for each input part.
    inputs: Vec<TensorId>,
    /// The graph's id for each output part (state, then outputs), with its signature.
    outputs: Vec<(TensorId, Signature)>,
    /// Ids the binding frees after the graph.
    released: Vec<TensorId>,
    output_layout: Layout,
    /// The scalar inputs the ops hold now.
    scalars: Vec<f64>,
    bindings: Vec<ScalarBinding>,
    /// Scalar inputs equal in both recordings: which operands follow them is unknown, so a
    /// call with another value records again.
    pinned: Vec<bool>,
}

impl Recording {
    /// Whether a call with these scalar inputs can replay this recording.
    fn accepts(&self, scalars: &[f64]) -> bool {
        self.pinned
            .iter()
            .zip(&self.scalars)
            .zip(scalars)
            .all(|((pinned, held), new)| !pinned || held.to_bits() == new.to_bits())
    }

    /// Writes the call's scalar inputs into the operands bound to them. While a queued replay
    /// still reads the ops, they are written into a second copy (made once, then the two
    /// alternate), so that a value that changes every call does not copy the ops every call.
    fn bind_scalars(&mut self, scalars: &[f64]) {
        let same = self
            .scalars
            .iter()
            .zip(scalars)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        if same {
            return;
        }
        if Arc::get_mut(&mut self.ops).is_none() {
            // `strong_count` of 1: no queued replay reads the spare copy any more.
            match self.spare.take() {
                Some(spare) if Arc::strong_count(&spare) == 1 => {
                    self.spare = Some(std::mem::replace(&mut self.ops, spare));
                }
                _ => {
                    let copy = Arc::new(self.ops.as_ref().clone());
                    self.spare = Some(std::mem::replace(&mut self.ops, copy));
                }
            }
        }
        let ops = Arc::get_mut(&mut self.ops).expect("a copy no replay reads");
        // Every bound operand is written: the other copy may hold older values.
        for b in &self.bindings {
            let mut operands = scalar_operands_mut(&mut ops[b.op]).expect("bound when recorded");
            *operands[b.operand] = ScalarIr::Float(b.rounding.apply(scalars[b.input]));
        }
        self.scalars = scalars.to_vec();
    }
}

/// The recordings of one guard.
enum Variant {
    /// Recorded once; the next call records again to check the graph repeats.
    Once(Recording),
    Ready(Recording),
    /// The step returned a state of another structure (an optimizer's first step creates its
    /// state): the next call has another guard, this one is not replayed.
    Transient,
    Ineligible(String),
}

/// What the step replays and why not ([`Jit::stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JitStats {
    /// Calls that ran the function under capture to record the step.
    pub recordings: u64,
    /// Calls replayed without running the function.
    pub replays: u64,
    /// Calls that ran the function because their guard is ineligible (or the capture off).
    pub runs: u64,
}

/// The detail of the break that ends a recorded step.
const STEP_END: &str = "end of a compiled step";

/// Guards kept per step at most; a call with a new guard past it runs the function.
const MAX_VARIANTS: usize = 8;

/// The types a step function maps: `(state, inputs) -> (state, outputs)` on backend `B`.
type StepSignature<B, S, I, O> = fn(S, I) -> (S, O, B);

/// A step function compiled whole: see [`jit`] and [`jit_train`].
pub struct Jit<B: StepBackend, S, I, O, F> {
    f: F,
    variants: Vec<(Guard, Variant)>,
    /// The variant the last call replayed, and the client it ran on.
    hot: Option<(usize, CompileClient<B::Captured>)>,
    stats: JitStats,
    warned_full: bool,
    strict: bool,
    _types: PhantomData<StepSignature<B, S, I, O>>,
}

/// Compiles a step function whole: `f(state, inputs) -> (state, outputs)`, where the state is
/// a [`Module`] (a model, or a tuple of a model and anything else that is a module) and inputs
/// and outputs are [`StepTensors`] (tensors, scalars, tuples, `Vec`s). [`Jit::call`] runs `f`
/// under capture on its first calls with a given structure (the guard: every tensor's shape,
/// dtype, ownership and gradient flag), then replays the recorded graph without running `f`.
/// A training step with an optimizer: [`jit_train`].
///
/// What a replay does not do: anything `f` does besides computing tensors — printing, counting,
/// reading values, changing host state. A value computed on the host inside `f` is a constant
/// of the recording; one that changes between calls must come in as a scalar input (`f64` among
/// the inputs), whose operands each replay rewrites. A step whose scalars change otherwise is
/// not replayed (see [`Jit::ineligible`]). Random ops draw fresh values on every replay.
pub fn jit<B, S, I, O, F>(f: F) -> Jit<B, Modules<S>, I, O, F>
where
    B: StepBackend,
    S: Module<B>,
    I: StepTensors<B>,
    O: StepTensors<B>,
    F: FnMut(S, I) -> (S, O),
{
    Jit::new(f)
}

impl<B, S, I, O, F> Jit<B, Modules<S>, I, O, F>
where
    B: StepBackend,
    S: Module<B>,
    I: StepTensors<B>,
    O: StepTensors<B>,
    F: FnMut(S, I) -> (S, O),
{
    /// Runs the step: replayed when its guard's recordings allow, else by calling `f`.
    pub fn call(&mut self, state: S, inputs: I) -> (S, O) {
        let (Modules(state), out) = self.run(Modules(state), inputs, |f, state, inputs| {
            let (state, out) = f(state.0, inputs);
            (Modules(state), out)
        });
        (state, out)
    }
}

impl<B, S, I, O, F> Jit<B, S, I, O, F>
where
    B: StepBackend,
    S: StepState<B>,
    I: StepTensors<B>,
    O: StepTensors<B>,
{
    fn new(f: F) -> Self {
        Jit {
            f,
            variants: Vec::new(),
            hot: None,
            stats: JitStats::default(),
            warned_full: false,
            strict: false,
            _types: PhantomData,
        }
    }

    /// Strict: a call whose step cannot be replayed panics with the reason (after running the
    /// step once), instead of running it every call; so does a structure past the last one a
    /// step keeps. For a loop that must not silently lose the replay.
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Calls so far: recorded, replayed, run.
    pub fn stats(&self) -> JitStats {
        self.stats.clone()
    }

    /// Why calls are not replayed: one line per input structure that is ineligible.
    pub fn ineligible(&self) -> Vec<String> {
        self.variants
            .iter()
            .filter_map(|(_, v)| match v {
                Variant::Ineligible(why) => Some(why.clone()),
                _ => None,
            })
            .collect()
    }

    /// Takes the call apart, then replays, records or runs it (`call` runs the function).
    fn run(&mut self, state: S, inputs: I, call: impl FnOnce(&mut F, S, I) -> (S, O)) -> (S, O) {
        // The guard the last call replayed is most likely this call's: its state's tensors are
        // exchanged for that replay's fresh outputs in the one pass that takes them, instead of
        // placeholders that a second pass would exchange. Should the guard or anything else
        // differ, the fresh tensors are placeholders like any other.
        let hot = self.hot.take();
        let mut fresh_ids = Vec::new();
        let apart = match &hot {
            Some((slot, client)) if let (guard, Variant::Ready(rec)) = &self.variants[*slot] => {
                // The recording's state outputs are the first of its outputs, as many as the
                // state's tensors in its guard.
                let state_outputs = &rec.outputs[..guard.state_len];
                fresh_ids.reserve_exact(guard.state_len);
                take_apart(
                    state,
                    inputs,
                    guard.tensors.len(),
                    |i, part| match state_outputs.get(i) {
                        Some((_, sig)) => {
                            let (id, tensor) =
                                client.new_tensor_with_id(sig.shape.clone(), sig.dtype);
                            fresh_ids.push(id);
                            Part {
                                tensor,
                                kind: sig.kind,
                                require_grad: sig.require_grad,
                            }
                        }
                        None => placeholder_of(part),
                    },
                )
            }
            _ => take_apart(state, inputs, 0, |_, part| placeholder_of(part)),
        };
        let TakenApart {
            state,
            state_len,
            taken,
            signatures,
            state_layout,
            layout,
            scalars,
            client,
        } = apart;
        let Some(client) = client else {
            // No tensor: nothing to bind; the function runs.
            self.stats.runs += 1;
            let state = put_parts(state, &mut Vec::new().into_iter());
            let rest = Parts {
                tensors: Vec::new(),
                scalars,
            };
            let inputs = I::from_parts(&mut rest.into_iter(), &layout);
            return call(&mut self.f, state, inputs);
        };
        let guard = Guard {
            tensors: signatures,
            state_len,
            state: state_layout,
            inputs: layout,
            scalars: scalars.len(),
        };
        let off = crate::stance::stance() == crate::Stance::Eager || !client.enabled();
        let found = match &hot {
            Some((slot, _)) if self.variants[*slot].0 == guard => Some(*slot),
            _ => self.variants.iter().position(|(g, _)| *g == guard),
        };
        if !off && let Some(i) = found {
            let variant = &mut self.variants[i].1;
            if let Variant::Ready(rec) = &mut *variant
                && rec.device == client.device_key()
            {
                if rec.accepts(&scalars) {
                    rec.bind_scalars(&scalars);
                    self.stats.replays += 1;
                    COUNTERS.step_replays.fetch_add(1, Ordering::Relaxed);
                    // The state holds the replay's outputs already when it was taken for
                    // this recording (the same guard: as many state tensors).
                    let exchanged = hot.as_ref().is_some_and(|(slot, _)| *slot == i);
                    debug_assert!(!exchanged || fresh_ids.len() == state_len);
                    let out = replay(
                        rec,
                        &client,
                        taken,
                        state,
                        state_len,
                        exchanged.then_some(fresh_ids),
                    );
                    self.hot = Some((i, client));
                    return out;
                }
                tracing::debug!(
                    target: "burn_compile::jit",
                    "a scalar input both recordings held equal changed: recording again"
                );
                if let Variant::Ready(rec) = std::mem::replace(variant, Variant::Transient) {
                    *variant = Variant::Once(rec);
                }
            }
        }
        let record = !off
            && match found {
                Some(i) => matches!(self.variants[i].1, Variant::Once(_)),
                None if self.variants.len() < MAX_VARIANTS => true,
                None => {
                    if self.strict {
                        panic!(
                            "a strict compiled step met more than {MAX_VARIANTS} input \
                             structures: new ones would run the function"
                        );
                    }
                    if !self.warned_full {
                        self.warned_full = true;
                        tracing::warn!(
                            target: "burn_compile::jit",
                            "a compiled step met more than {MAX_VARIANTS} input structures; \
                             new ones run the function"
                        );
                    }
                    false
                }
            };
        crate::mark_step();
        let (state, inputs, held) = rebuild_inputs::<B, S, I>(
            &client,
            state,
            state_len,
            &taken,
            &guard.tensors,
            &guard.inputs,
            scalars.clone(),
        );
        if !record {
            self.stats.runs += 1;
            let out = call(&mut self.f, state, inputs);
            drop(held);
            return out;
        }
        self.stats.recordings += 1;
        COUNTERS.step_recordings.fetch_add(1, Ordering::Relaxed);
        let eager_before = COUNTERS.eager_ops.load(Ordering::Relaxed);
        let input_ids: Vec<TensorId> = held.ids.clone();
        let session = recorder::start();
        let (state_out, outputs) = call(&mut self.f, state, inputs);
        let out_layout = outputs.layout();
        close_step();
        let graphs = session.finish();
        let eager = COUNTERS.eager_ops.load(Ordering::Relaxed) - eager_before;
        drop(held);
        // The outputs, renamed to tensors of their own: the graph's ids stay the recording's.
        let mut out_tensors = Vec::new();
        let mut out_state_layout = Vec::new();
        let state_out = take_parts(state_out, &mut out_tensors, &mut out_state_layout);
        let state_out_len = out_tensors.len();
        let mut out_parts = Parts {
            tensors: out_tensors,
            scalars: Vec::new(),
        };
        outputs.into_parts(&mut out_parts);
        let Parts {
            tensors: out_tensors,
            scalars: out_scalars,
        } = out_parts;
        let mut out_taken = Vec::with_capacity(out_tensors.len());
        let mut out_sigs = Vec::with_capacity(out_tensors.len());
        for part in out_tensors {
            let (t, sig, _) = take(part);
            out_taken.push(t);
            out_sigs.push(sig);
        }
        let fresh: Vec<Part<B>> = out_sigs
            .iter()
            .map(|sig| Part {
                tensor: client.new_tensor(sig.shape.clone(), sig.dtype),
                kind: sig.kind,
                require_grad: sig.require_grad,
            })
            .collect();
        {
            let inner = client.inner();
            for (t, f) in out_taken.iter().zip(&fresh) {
                inner.alias(t.id, id_of(&f.tensor));
            }
            let mut freed = FxHashSet::default();
            for t in &out_taken {
                if t.owned && freed.insert(t.id) {
                    inner.release(t.id);
                }
            }
        }
        let transient = state_len != state_out_len || guard.state != out_state_layout;
        let verdict = if transient {
            None
        } else if !out_scalars.is_empty() {
            Some(Err(format!(
                "the step returns {} host value(s) (scalars): a replay cannot compute them; \
                 return tensors",
                out_scalars.len()
            )))
        } else {
            Some(analyse(
                graphs,
                eager,
                client.device_key(),
                &input_ids,
                &out_taken,
                out_sigs,
            ))
        };
        let slot = found.unwrap_or_else(|| {
            self.variants.push((guard, Variant::Transient));
            self.variants.len() - 1
        });
        let previous = std::mem::replace(&mut self.variants[slot].1, Variant::Transient);
        let next = match (verdict, previous) {
            (None, _) => {
                tracing::debug!(
                    target: "burn_compile::jit",
                    "the step returned a state of another structure (an optimizer's first \
                     step): not replayed for this structure"
                );
                Variant::Transient
            }
            (Some(Err(why)), _) => Variant::Ineligible(why),
            (Some(Ok(mut rec)), Variant::Once(first)) => {
                rec.scalars = scalars;
                match repeats(&first, &rec) {
                    Ok((bindings, pinned)) => {
                        rec.output_layout = out_layout.clone();
                        rec.bindings = bindings;
                        rec.pinned = pinned;
                        tracing::debug!(
                            target: "burn_compile::jit",
                            "step recorded: graph {} of {} ops, {} inputs, {} outputs, {} \
                             scalar operands bound",
                            rec.key,
                            rec.ops.len(),
                            rec.inputs.len(),
                            rec.outputs.len(),
                            rec.bindings.len()
                        );
                        Variant::Ready(rec)
                    }
                    Err(why) => Variant::Ineligible(why),
                }
            }
            (Some(Ok(mut rec)), _) => {
                rec.output_layout = out_layout.clone();
                rec.scalars = scalars;
                Variant::Once(rec)
            }
        };
        if let Variant::Ineligible(why) = &next {
            tracing::info!(target: "burn_compile::jit", "step not replayed: {why}");
            if self.strict {
                panic!("a strict compiled step cannot be replayed: {why}");
            }
        }
        self.variants[slot].1 = next;
        rebuild(state_out, state_out_len, fresh, out_scalars, &out_layout)
    }
}

/// Tensors the caller still holds, passed to the function under ids of their own: one clone
/// each is held while the function runs, so that it sees them shared, as eager Burn would.
struct Held<B: StepBackend> {
    /// The id the function sees for each input part.
    ids: Vec<TensorId>,
    _clones: Vec<StepTensor<B>>,
}

/// Rebuilds the state (its placeholders) and the inputs from the taken tensors. A tensor the
/// caller handed over keeps its id; one the caller still holds is passed as a new tensor that
/// shares its inner tensor, so that a recording never reads or writes an id a caller holds.
fn rebuild_inputs<B: StepBackend, S: StepState<B>, I: StepTensors<B>>(
    client: &CompileClient<B::Captured>,
    state: S,
    state_len: usize,
    taken: &[Taken],
    guard: &[Signature],
    layout: &Layout,
    scalars: Vec<f64>,
) -> (S, I, Held<B>) {
    let inner = taken.iter().any(|t| !t.owned).then(|| client.inner());
    let mut parts = Vec::with_capacity(taken.len());
    let mut held = Held {
        ids: Vec::with_capacity(taken.len()),
        _clones: Vec::new(),
    };
    for (t, sig) in taken.iter().zip(guard) {
        let tensor = if t.owned {
            RouterTensor::new(t.id, sig.shape.clone(), sig.dtype, client.clone())
        } else {
            let shared = client.new_tensor(sig.shape.clone(), sig.dtype);
            inner.expect("waited for").alias(t.id, id_of(&shared));
            held._clones.push(shared.clone());
            shared
        };
        held.ids.push(id_of(&tensor));
        parts.push(Part {
            tensor,
            kind: sig.kind,
            require_grad: sig.require_grad,
        });
    }
    let (state, inputs) = rebuild(state, state_len, parts, scalars, layout);
    (state, inputs, held)
}

/// Closes the step's graph on every device of the calling thread.
fn close_step() {
    crate::registry::for_each(|c| {
        c.close_current(BreakReason::MarkStep, Some(STEP_END.into()), true)
    });
}

/// Whether one recording can be replayed, and what the replay binds.
fn analyse(
    mut graphs: Vec<recorder::ClosedGraph>,
    eager: u64,
    device: usize,
    inputs: &[TensorId],
    outputs: &[Taken],
    signatures: Vec<Signature>,
) -> Result<Recording, String> {
    if eager > 0 {
        return Err(format!(
            "{eager} op(s) ran eagerly inside the step (an unsupported op, an eager region, or \
             a read): a replay would skip them"
        ));
    }
    if graphs.len() > 1 {
        let breaks: Vec<String> = graphs[..graphs.len() - 1]
            .iter()
            .map(|g| g.ended_by.to_string())
            .collect();
        return Err(format!(
            "the step is {} graphs, not one: it breaks at {}",
            graphs.len(),
            breaks.join("; ")
        ));
    }
    let Some(graph) = graphs.pop() else {
        return Err("the step recorded no graph (no tensor op, or the capture is off)".into());
    };
    if graph.ended_by.detail.as_deref() != Some(STEP_END) {
        return Err(format!("the step breaks at {}", graph.ended_by));
    }
    if graph.device != device {
        return Err("the step's graph ran on another device than its tensors".into());
    }
    let ops = &graph.ops;
    let input_set: FxHashSet<TensorId> = inputs.iter().copied().collect();
    let mut produced = FxHashSet::default();
    let mut freed = FxHashSet::default();
    let mut external = FxHashSet::default();
    for (i, op) in ops.iter().enumerate() {
        if let OperationIr::Init(_) = op {
            return Err(format!(
                "op {i} uploads host data inside the step ({}): make the tensor outside the \
                 step and pass it in",
                op_name(op)
            ));
        }
        for t in op.inputs() {
            if !produced.contains(&t.id) && !input_set.contains(&t.id) {
                if t.status == TensorStatus::ReadWrite {
                    return Err(format!(
                        "op {i} ({}) frees a tensor the step neither takes nor makes: state the \
                         step function keeps itself (an optimizer's, say) cannot be replayed; \
                         pass it in the state",
                        op_name(op)
                    ));
                }
                external.insert(t.id);
            }
            if t.status == TensorStatus::ReadWrite {
                freed.insert(t.id);
            }
        }
        for t in op.outputs() {
            produced.insert(t.id);
        }
    }
    let output_set: FxHashSet<TensorId> = outputs.iter().map(|t| t.id).collect();
    for id in &output_set {
        if !outputs.iter().any(|t| t.id == *id && t.owned) {
            // Something else holds it too: a replay writes the recording's ids again.
            return Err(
                "the step returns a tensor it also keeps elsewhere (state the step function \
                 holds: a replay could not update it)"
                    .into(),
            );
        }
    }
    for t in outputs {
        if !produced.contains(&t.id) && !input_set.contains(&t.id) {
            return Err("the step returns a tensor it neither takes nor makes".into());
        }
        if freed.contains(&t.id) {
            return Err("the step returns a tensor its graph frees".into());
        }
    }
    let kept: Vec<TensorId> = produced
        .iter()
        .filter(|id| !freed.contains(id) && !output_set.contains(id))
        .copied()
        .collect();
    if !kept.is_empty() {
        return Err(format!(
            "the step keeps {} tensor(s) it makes outside its state and outputs (state the \
             step function keeps itself: a replay could not update it)",
            kept.len()
        ));
    }
    let mut released: Vec<TensorId> = Vec::new();
    let mut seen = FxHashSet::default();
    for id in inputs.iter().chain(outputs.iter().map(|t| &t.id)) {
        if !freed.contains(id) && seen.insert(*id) {
            released.push(*id);
        }
    }
    Ok(Recording {
        key: graph.key,
        plan: graph.plan,
        ops: Arc::new(graph.ops),
        spare: None,
        device,
        inputs: inputs.to_vec(),
        outputs: outputs.iter().map(|t| t.id).zip(signatures).collect(),
        released,
        output_layout: Layout::default(),
        scalars: Vec::new(),
        bindings: Vec::new(),
        pinned: Vec::new(),
    })
}

/// Position of each tensor by first appearance in `ops` (how graph keys number them).
fn ordinals(ops: &[OperationIr]) -> rustc_hash::FxHashMap<TensorId, u32> {
    let mut map = rustc_hash::FxHashMap::default();
    for op in ops {
        for t in op.inputs().chain(op.outputs()) {
            let next = map.len() as u32;
            map.entry(t.id).or_insert(next);
        }
    }
    map
}

/// Whether a second recording repeats the first: the same graph, each input and output in
/// the same place of it, and the same scalars except those that follow a scalar input of the
/// step. Returns those operands' bindings and which scalar inputs stay pinned.
fn repeats(
    first: &Recording,
    second: &Recording,
) -> Result<(Vec<ScalarBinding>, Vec<bool>), String> {
    if first.key != second.key {
        return Err(format!(
            "the step's graph changed between calls ({} then {}): its ops depend on host \
             values",
            first.key, second.key
        ));
    }
    let (a, b) = (ordinals(&first.ops), ordinals(&second.ops));
    let same = |x: &TensorId, y: &TensorId| a.get(x) == b.get(y);
    let inputs = first
        .inputs
        .iter()
        .zip(&second.inputs)
        .all(|(x, y)| same(x, y));
    let outputs = first
        .outputs
        .iter()
        .zip(&second.outputs)
        .all(|((x, _), (y, _))| same(x, y));
    if !inputs || !outputs || first.outputs.len() != second.outputs.len() {
        return Err("the step's inputs or outputs took other places in its graph".into());
    }
    let bindings = bind_scalars(first, second)?;
    let pinned = first
        .scalars
        .iter()
        .zip(&second.scalars)
        .map(|(x, y)| x.to_bits() == y.to_bits())
        .collect();
    Ok((bindings, pinned))
}

/// The scalar operands that differ between two recordings, each bound to the one scalar input
/// whose values it held in both (as they were, or rounded to `f32`).
fn bind_scalars(first: &Recording, second: &Recording) -> Result<Vec<ScalarBinding>, String> {
    let unbound = |i: usize| {
        format!(
            "a scalar of op {i} ({}) changed between calls and follows none of the step's \
             scalar inputs: host values (a learning rate, an optimizer's step count) are \
             constants of a replay. Pass a changing value as a scalar input (`f64` among the \
             inputs) and keep optimizer state in tensors (`burn_compile::optim`: Burn's own \
             Adam and AdamW count their steps on the host)",
            op_name(&second.ops[i.min(second.ops.len() - 1)])
        )
    };
    let mut bindings = Vec::new();
    for i in scalar_differences(&first.ops, &second.ops) {
        let operands = first
            .ops
            .get(i)
            .and_then(scalar_operands)
            .zip(second.ops.get(i).and_then(scalar_operands));
        let Some((x, y)) = operands.filter(|(x, y)| x.len() == y.len()) else {
            return Err(unbound(i));
        };
        for (operand, (x, y)) in x.iter().zip(&y).enumerate() {
            if x == y {
                continue;
            }
            let mut found = Vec::new();
            for input in 0..first.scalars.len().min(second.scalars.len()) {
                let rounding = [Rounding::Exact, Rounding::F32].into_iter().find(|r| {
                    *x == ScalarIr::Float(r.apply(first.scalars[input]))
                        && *y == ScalarIr::Float(r.apply(second.scalars[input]))
                });
                if let Some(rounding) = rounding {
                    found.push(ScalarBinding {
                        op: i,
                        operand,
                        input,
                        rounding,
                    });
                }
            }
            match found.as_slice() {
                [] => return Err(unbound(i)),
                [binding] => bindings.push(*binding),
                _ => {
                    return Err(format!(
                        "a scalar of op {i} ({}) follows {} scalar inputs of the step (their \
                         values were equal): pass distinct values to the calls that record",
                        op_name(&second.ops[i]),
                        found.len()
                    ));
                }
            }
        }
    }
    Ok(bindings)
}

/// Replays `rec` on the caller's tensors; rebuilds the state (placeholders) and outputs. With
/// `exchanged`, the state holds the outputs already: these are their ids.
fn replay<B: StepBackend, S: StepState<B>, O: StepTensors<B>>(
    rec: &Recording,
    client: &CompileClient<B::Captured>,
    taken: Vec<Taken>,
    state: S,
    state_len: usize,
    exchanged: Option<Vec<TensorId>>,
) -> (S, O) {
    // Each id at most once: a tensor passed twice is two objects sharing one count, and the
    // first one taken saw the other (not handed over), so only the last is owned.
    let consumed: Vec<TensorId> = taken.iter().filter(|t| t.owned).map(|t| t.id).collect();
    debug_assert_eq!(
        consumed.iter().collect::<FxHashSet<_>>().len(),
        consumed.len(),
        "a tensor consumed twice"
    );
    let made = exchanged.as_ref().map_or(0, Vec::len);
    let mut fresh: Vec<Part<B>> = Vec::with_capacity(rec.outputs.len() - made);
    let mut outputs = Vec::with_capacity(rec.outputs.len());
    if let Some(ids) = &exchanged {
        outputs.extend(
            rec.outputs
                .iter()
                .map(|(graph_id, _)| *graph_id)
                .zip(ids.iter().copied()),
        );
    }
    for (graph_id, sig) in &rec.outputs[made..] {
        let (id, tensor) = client.new_tensor_with_id(sig.shape.clone(), sig.dtype);
        outputs.push((*graph_id, id));
        fresh.push(Part {
            tensor,
            kind: sig.kind,
            require_grad: sig.require_grad,
        });
    }
    let binding = StepBinding {
        inputs: taken
            .iter()
            .map(|t| t.id)
            .zip(rec.inputs.iter().copied())
            .collect(),
        consumed,
        outputs,
        released: rec.released.clone(),
    };
    client.submit_step(
        rec.key,
        rec.ops.clone(),
        Arc::new(binding),
        rec.plan.clone(),
    );
    if exchanged.is_some() {
        let rest = Parts {
            tensors: fresh,
            scalars: Vec::new(),
        };
        return (
            state,
            O::from_parts(&mut rest.into_iter(), &rec.output_layout),
        );
    }
    rebuild(state, state_len, fresh, Vec::new(), &rec.output_layout)
}

/// A call taken apart: the state with a replacement in each tensor's place, the tensors taken
/// from the caller (the state's, then the inputs'), and what the guard compares.
struct TakenApart<B: StepBackend, S> {
    state: S,
    state_len: usize,
    taken: Vec<Taken>,
    signatures: Vec<Signature>,
    state_layout: Vec<usize>,
    layout: Layout,
    scalars: Vec<f64>,
    /// The first tensor's client (none without tensors).
    client: Option<CompileClient<B::Captured>>,
}

/// Takes a call apart in one pass over the state: the `i`th of its tensors is replaced by
/// `replacement(i, &tensor)`. `capacity`: how many tensors to expect (a replay knows them from
/// its guard: a training step's hundreds would otherwise grow the list a few times).
fn take_apart<B: StepBackend, S: StepState<B>, I: StepTensors<B>>(
    state: S,
    inputs: I,
    capacity: usize,
    mut replacement: impl FnMut(usize, &Part<B>) -> Part<B>,
) -> TakenApart<B, S> {
    let mut tensors = Vec::with_capacity(capacity);
    let mut state_layout = Vec::new();
    let state = state.map_parts(
        &mut |part| {
            let replaced = replacement(tensors.len(), &part);
            tensors.push(part);
            replaced
        },
        &mut state_layout,
    );
    let state_len = tensors.len();
    let layout = inputs.layout();
    let mut parts = Parts {
        tensors,
        scalars: Vec::new(),
    };
    inputs.into_parts(&mut parts);
    let Parts { tensors, scalars } = parts;
    let mut taken = Vec::with_capacity(tensors.len());
    let mut signatures = Vec::with_capacity(tensors.len());
    let mut client = None;
    for part in tensors {
        let (t, sig, c) = take(part);
        taken.push(t);
        signatures.push(sig);
        client.get_or_insert(c);
    }
    TakenApart {
        state,
        state_len,
        taken,
        signatures,
        state_layout,
        layout,
        scalars,
        client,
    }
}
