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

pub(crate) mod recorder;

use crate::backend::Compiled;
use crate::capture::{BreakReason, CompileClient};
use crate::diagnostics::COUNTERS;
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};
use burn_backend::{AutodiffBackend, Backend, DType, Shape, TensorMetadata};
use burn_compile_graph::{GraphKey, first_scalar_difference, op_name};
use burn_compile_runtime::StepBinding;
use burn_compile_schedule::Plan;
use burn_core::module::{Module, ModuleMapper, Param};
use burn_ir::{BackendIr, OperationIr, TensorId, TensorStatus};
use burn_router::RouterTensor;
use burn_tensor::{Bool, Float, Int, Tensor, TensorPrimitive};
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

/// Which kind of tensor a part is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Float,
    Int,
    Bool,
}

/// One tensor of a step's inputs or outputs, taken apart.
pub struct Part<B: StepBackend> {
    tensor: StepTensor<B>,
    kind: Kind,
    require_grad: bool,
}

impl<B: StepBackend> Part<B> {
    fn float<const D: usize>(tensor: Tensor<B, D>) -> Self {
        let (tensor, require_grad) = B::float_into_step(tensor.into_primitive().tensor());
        Self {
            tensor,
            kind: Kind::Float,
            require_grad,
        }
    }
    fn into_float<const D: usize>(self) -> Tensor<B, D> {
        Tensor::from_primitive(TensorPrimitive::Float(B::float_from_step(
            self.tensor,
            self.require_grad,
        )))
    }
    fn int<const D: usize>(tensor: Tensor<B, D, Int>) -> Self {
        Self {
            tensor: B::int_into_step(tensor.into_primitive()),
            kind: Kind::Int,
            require_grad: false,
        }
    }
    fn into_int<const D: usize>(self) -> Tensor<B, D, Int> {
        Tensor::from_primitive(B::int_from_step(self.tensor))
    }
    fn bool<const D: usize>(tensor: Tensor<B, D, Bool>) -> Self {
        Self {
            tensor: B::bool_into_step(tensor.into_primitive()),
            kind: Kind::Bool,
            require_grad: false,
        }
    }
    fn into_bool<const D: usize>(self) -> Tensor<B, D, Bool> {
        Tensor::from_primitive(B::bool_from_step(self.tensor))
    }
}

/// The tensors of a step's inputs or outputs, in a fixed order: plain tensors, tuples of them,
/// `Vec`s and `Option`s of them. Implement it for a batch struct by listing its tensors.
pub trait StepTensors<B: StepBackend>: Sized {
    /// Moves the tensors into `parts`, in order.
    fn into_parts(self, parts: &mut Vec<Part<B>>);
    /// Rebuilds the value from parts in the same order (`like`: the layout of a value of the
    /// same structure, for `Vec` lengths and `Option`s).
    fn from_parts(parts: &mut std::vec::IntoIter<Part<B>>, like: &Layout) -> Self;
    /// The layout [`StepTensors::from_parts`] needs to rebuild this value.
    fn layout(&self) -> Layout;
}

/// Lengths of the `Vec`s and presence of the `Option`s of a value, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Layout(Vec<usize>);

macro_rules! tensor_parts {
    ($kind:ty, $take:ident, $make:ident) => {
        impl<B: StepBackend, const D: usize> StepTensors<B> for Tensor<B, D, $kind> {
            fn into_parts(self, parts: &mut Vec<Part<B>>) {
                parts.push(Part::$take(self));
            }
            fn from_parts(parts: &mut std::vec::IntoIter<Part<B>>, _: &Layout) -> Self {
                parts.next().expect("a part per tensor").$make()
            }
            fn layout(&self) -> Layout {
                Layout::default()
            }
        }
    };
}
tensor_parts!(Float, float, into_float);
tensor_parts!(Int, int, into_int);
tensor_parts!(Bool, bool, into_bool);

impl<B: StepBackend> StepTensors<B> for () {
    fn into_parts(self, _: &mut Vec<Part<B>>) {}
    fn from_parts(_: &mut std::vec::IntoIter<Part<B>>, _: &Layout) -> Self {}
    fn layout(&self) -> Layout {
        Layout::default()
    }
}

impl<B: StepBackend, T: StepTensors<B>> StepTensors<B> for Vec<T> {
    fn into_parts(self, parts: &mut Vec<Part<B>>) {
        for t in self {
            t.into_parts(parts);
        }
    }
    fn from_parts(parts: &mut std::vec::IntoIter<Part<B>>, like: &Layout) -> Self {
        let mut layouts = like.0.iter();
        let n = *layouts.next().expect("a Vec's length");
        let inner = Layout(layouts.copied().collect());
        (0..n).map(|_| T::from_parts(parts, &inner)).collect()
    }
    fn layout(&self) -> Layout {
        // Elements of one Vec share their layout (checked by the guard: it compares shapes).
        let mut l = vec![self.len()];
        if let Some(first) = self.first() {
            l.extend(first.layout().0);
        }
        Layout(l)
    }
}

macro_rules! tuple_tensors {
    ($($t:ident $i:tt),+) => {
        impl<B: StepBackend, $($t: StepTensors<B>),+> StepTensors<B> for ($($t,)+) {
            fn into_parts(self, parts: &mut Vec<Part<B>>) {
                $(self.$i.into_parts(parts);)+
            }
            fn from_parts(parts: &mut std::vec::IntoIter<Part<B>>, like: &Layout) -> Self {
                let _ = like;
                ($($t::from_parts(parts, &Layout::default()),)+)
            }
            fn layout(&self) -> Layout {
                let mut l = Vec::new();
                $(l.extend(self.$i.layout().0);)+
                Layout(l)
            }
        }
    };
}
tuple_tensors!(A 0);
tuple_tensors!(A 0, C 1);
tuple_tensors!(A 0, C 1, D 2);
tuple_tensors!(A 0, C 1, D 2, E 3);
tuple_tensors!(A 0, C 1, D 2, E 3, F 4);

/// Moves a module's parameter tensors out (into `taken`, leaving placeholders), or puts the
/// parts of `put` into the placeholders.
struct Swap<B: StepBackend> {
    taken: Vec<Part<B>>,
    put: Option<std::vec::IntoIter<Part<B>>>,
    count: usize,
}

impl<B: StepBackend> Swap<B> {
    fn swap(&mut self, part: Part<B>) -> Part<B> {
        self.count += 1;
        match &mut self.put {
            None => {
                // The placeholder names the same tensor; it is disposed of without an op when
                // swapped out again (`dispose`).
                let placeholder = placeholder_of(&part);
                self.taken.push(part);
                placeholder
            }
            Some(parts) => {
                dispose(part.tensor);
                parts.next().expect("a part per parameter")
            }
        }
    }
}

/// The id of a tensor (burn-router keeps it private): read from a clone's IR, which leaves the
/// reference count as it was.
fn id_of<C: burn_router::RunnerClient>(tensor: &RouterTensor<C>) -> TensorId {
    tensor.clone().into_ir().id
}

/// A tensor object dropped without recording a drop: its id stays registered.
fn dispose<C: burn_router::RunnerClient>(tensor: RouterTensor<C>) {
    // `into_ir` takes a sole owner's reference without a drop op.
    let _ = tensor.into_ir();
}

fn placeholder_of<B: StepBackend>(part: &Part<B>) -> Part<B> {
    let t = &part.tensor;
    Part {
        tensor: RouterTensor::new(id_of(t), t.shape(), t.dtype(), t.client.clone()),
        kind: part.kind,
        require_grad: part.require_grad,
    }
}

impl<B: StepBackend> ModuleMapper<B> for Swap<B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        Param::from_mapped_value(id, self.swap(Part::float(tensor)).into_float(), mapper)
    }
    fn map_int<const D: usize>(
        &mut self,
        param: Param<Tensor<B, D, Int>>,
    ) -> Param<Tensor<B, D, Int>> {
        let (id, tensor, mapper) = param.consume();
        Param::from_mapped_value(id, self.swap(Part::int(tensor)).into_int(), mapper)
    }
    fn map_bool<const D: usize>(
        &mut self,
        param: Param<Tensor<B, D, Bool>>,
    ) -> Param<Tensor<B, D, Bool>> {
        let (id, tensor, mapper) = param.consume();
        Param::from_mapped_value(id, self.swap(Part::bool(tensor)).into_bool(), mapper)
    }
}

/// Takes the state's parameter tensors out, leaving placeholders.
fn take_state<B: StepBackend, S: Module<B>>(state: S) -> (S, Vec<Part<B>>) {
    let mut swap = Swap {
        taken: Vec::new(),
        put: None,
        count: 0,
    };
    let state = state.map(&mut swap);
    (state, swap.taken)
}

/// Puts `parts` into the placeholders of `state` (from [`take_state`]).
fn put_state<B: StepBackend, S: Module<B>>(state: S, parts: Vec<Part<B>>) -> S {
    let n = parts.len();
    let mut swap = Swap {
        taken: Vec::new(),
        put: Some(parts.into_iter()),
        count: 0,
    };
    let state = state.map(&mut swap);
    assert_eq!(swap.count, n, "a state of the recorded structure");
    state
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

/// A graph a step was recorded as, ready to replay.
struct Recording {
    key: GraphKey,
    plan: Arc<Plan>,
    ops: Arc<Vec<OperationIr>>,
    device: usize,
    /// The graph's id for each input part.
    inputs: Vec<TensorId>,
    /// The graph's id for each output part (state, then outputs), with its signature.
    outputs: Vec<(TensorId, Signature)>,
    /// Ids the binding frees after the graph.
    released: Vec<TensorId>,
    output_layout: Layout,
}

/// The recordings of one guard.
enum Variant {
    /// Recorded once; the next call records again to check the graph repeats.
    Once(Recording),
    Ready(Recording),
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

/// A step function compiled whole: see [`jit`].
pub struct Jit<B, S, I, O, F> {
    f: F,
    variants: Vec<(Vec<Signature>, Layout, Variant)>,
    stats: JitStats,
    warned_full: bool,
    _types: PhantomData<StepSignature<B, S, I, O>>,
}

/// Compiles a step function whole: `f(state, inputs) -> (state, outputs)`, where the state is
/// a [`Module`] (a model, or a tuple of a model and anything else that is a module) and inputs
/// and outputs are [`StepTensors`] (tensors, tuples, `Vec`s). [`Jit::call`] runs `f` under
/// capture on its first calls with a given structure (the guard: every tensor's shape, dtype,
/// ownership and gradient flag), then replays the recorded graph without running `f`.
///
/// What a replay does not do: anything `f` does besides computing tensors — printing, counting,
/// reading values, changing host state such as an optimizer's step counter or a learning-rate
/// schedule. Values such as the learning rate are constants of the recording; a step whose
/// scalars change between its two recording calls is not replayed (see
/// [`Jit::ineligible`]). Random ops draw fresh values on every replay.
pub fn jit<B, S, I, O, F>(f: F) -> Jit<B, S, I, O, F>
where
    B: StepBackend,
    S: Module<B>,
    I: StepTensors<B>,
    O: StepTensors<B>,
    F: FnMut(S, I) -> (S, O),
{
    Jit {
        f,
        variants: Vec::new(),
        stats: JitStats::default(),
        warned_full: false,
        _types: PhantomData,
    }
}

impl<B, S, I, O, F> Jit<B, S, I, O, F>
where
    B: StepBackend,
    S: Module<B>,
    I: StepTensors<B>,
    O: StepTensors<B>,
    F: FnMut(S, I) -> (S, O),
{
    /// Runs the step: replayed when its guard's recordings allow, else by calling `f`.
    pub fn call(&mut self, state: S, inputs: I) -> (S, O) {
        let (state, state_parts) = take_state(state);
        let layout = inputs.layout();
        let mut parts = state_parts;
        let state_len = parts.len();
        inputs.into_parts(&mut parts);
        let mut taken = Vec::with_capacity(parts.len());
        let mut guard = Vec::with_capacity(parts.len());
        let mut client = None;
        for part in parts {
            let (t, sig, c) = take(part);
            taken.push(t);
            guard.push(sig);
            client.get_or_insert(c);
        }
        let Some(client) = client else {
            // No tensor: nothing to bind; the function runs.
            self.stats.runs += 1;
            let inputs = I::from_parts(&mut Vec::new().into_iter(), &layout);
            return (self.f)(put_state(state, Vec::new()), inputs);
        };
        let off = crate::stance::stance() == crate::Stance::Eager
            || !crate::config::config_for(&burn_router::RunnerClient::device(&client)).enabled;
        let found = self
            .variants
            .iter()
            .position(|(g, l, _)| *g == guard && *l == layout);
        if !off
            && let Some(i) = found
            && let Variant::Ready(rec) = &self.variants[i].2
            && rec.device == client.device_key()
        {
            self.stats.replays += 1;
            COUNTERS.step_replays.fetch_add(1, Ordering::Relaxed);
            return replay(rec, &client, taken, state, state_len);
        }
        let record = !off
            && match found {
                Some(i) => matches!(self.variants[i].2, Variant::Once(_)),
                None if self.variants.len() < MAX_VARIANTS => true,
                None => {
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
        let (state, inputs, held) =
            rebuild_inputs::<B, S, I>(&client, state, state_len, &taken, &guard, &layout);
        if !record {
            self.stats.runs += 1;
            let out = (self.f)(state, inputs);
            drop(held);
            return out;
        }
        self.stats.recordings += 1;
        COUNTERS.step_recordings.fetch_add(1, Ordering::Relaxed);
        let eager_before = COUNTERS.eager_ops.load(Ordering::Relaxed);
        let input_ids: Vec<TensorId> = held.ids.clone();
        let session = recorder::start();
        let (state_out, outputs) = (self.f)(state, inputs);
        let out_layout = outputs.layout();
        close_step();
        let graphs = session.finish();
        let eager = COUNTERS.eager_ops.load(Ordering::Relaxed) - eager_before;
        drop(held);
        // The outputs, renamed to tensors of their own: the graph's ids stay the recording's.
        let (state_out, mut out_parts) = take_state(state_out);
        let state_out_len = out_parts.len();
        outputs.into_parts(&mut out_parts);
        let mut out_taken = Vec::with_capacity(out_parts.len());
        let mut out_sigs = Vec::with_capacity(out_parts.len());
        for part in out_parts {
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
        let verdict = analyse(
            graphs,
            eager,
            client.device_key(),
            &input_ids,
            (state_len, state_out_len),
            &out_taken,
            out_sigs,
        );
        let slot = found.unwrap_or_else(|| {
            self.variants
                .push((guard, layout, Variant::Ineligible(String::new())));
            self.variants.len() - 1
        });
        let previous = std::mem::replace(
            &mut self.variants[slot].2,
            Variant::Ineligible(String::new()),
        );
        let next = match (verdict, previous) {
            (Err(why), _) => {
                tracing::info!(target: "burn_compile::jit", "step not replayed: {why}");
                Variant::Ineligible(why)
            }
            (Ok(mut rec), Variant::Once(first)) => match repeats(&first, &rec) {
                Ok(()) => {
                    rec.output_layout = out_layout.clone();
                    tracing::debug!(
                        target: "burn_compile::jit",
                        "step recorded: graph {} of {} ops, {} inputs, {} outputs",
                        rec.key,
                        rec.ops.len(),
                        rec.inputs.len(),
                        rec.outputs.len()
                    );
                    Variant::Ready(rec)
                }
                Err(why) => {
                    tracing::info!(target: "burn_compile::jit", "step not replayed: {why}");
                    Variant::Ineligible(why)
                }
            },
            (Ok(mut rec), _) => {
                rec.output_layout = out_layout.clone();
                Variant::Once(rec)
            }
        };
        self.variants[slot].2 = next;
        let mut fresh = fresh.into_iter();
        let state_parts: Vec<Part<B>> = fresh.by_ref().take(state_out_len).collect();
        let state_out = put_state(state_out, state_parts);
        let rest: Vec<Part<B>> = fresh.collect();
        let outputs = O::from_parts(&mut rest.into_iter(), &out_layout);
        (state_out, outputs)
    }

    /// Calls so far: recorded, replayed, run.
    pub fn stats(&self) -> JitStats {
        self.stats.clone()
    }

    /// Why calls are not replayed: one line per input structure that is ineligible.
    pub fn ineligible(&self) -> Vec<String> {
        self.variants
            .iter()
            .filter_map(|(_, _, v)| match v {
                Variant::Ineligible(why) => Some(why.clone()),
                _ => None,
            })
            .collect()
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
fn rebuild_inputs<B: StepBackend, S: Module<B>, I: StepTensors<B>>(
    client: &CompileClient<B::Captured>,
    state: S,
    state_len: usize,
    taken: &[Taken],
    guard: &[Signature],
    layout: &Layout,
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
    let mut parts = parts.into_iter();
    let state_parts: Vec<Part<B>> = parts.by_ref().take(state_len).collect();
    let state = put_state(state, state_parts);
    let rest: Vec<Part<B>> = parts.collect();
    let inputs = I::from_parts(&mut rest.into_iter(), layout);
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
    (state_in, state_out): (usize, usize),
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
    if state_in != state_out {
        return Err(format!(
            "the step returns a state of {state_out} parameter tensors for one of {state_in}"
        ));
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
        device,
        inputs: inputs.to_vec(),
        outputs: outputs.iter().map(|t| t.id).zip(signatures).collect(),
        released,
        output_layout: Layout::default(),
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

/// Whether a second recording repeats the first: the same graph, the same scalars, and each
/// input and output in the same place of it.
fn repeats(first: &Recording, second: &Recording) -> Result<(), String> {
    if first.key != second.key {
        return Err(format!(
            "the step's graph changed between calls ({} then {}): its ops depend on host \
             values",
            first.key, second.key
        ));
    }
    if let Some(i) = first_scalar_difference(&first.ops, &second.ops) {
        return Err(format!(
            "a scalar of op {i} ({}) changed between calls: host values such as a learning \
             rate or an optimizer's step count are constants of a replay",
            op_name(&second.ops[i])
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
    Ok(())
}

/// Replays `rec` on the caller's tensors; rebuilds the state (placeholders) and outputs.
fn replay<B: StepBackend, S: Module<B>, O: StepTensors<B>>(
    rec: &Recording,
    client: &CompileClient<B::Captured>,
    taken: Vec<Taken>,
    state: S,
    state_len: usize,
) -> (S, O) {
    let mut consumed = Vec::new();
    for t in &taken {
        if t.owned && !consumed.contains(&t.id) {
            consumed.push(t.id);
        }
    }
    let fresh: Vec<Part<B>> = rec
        .outputs
        .iter()
        .map(|(_, sig)| Part {
            tensor: client.new_tensor(sig.shape.clone(), sig.dtype),
            kind: sig.kind,
            require_grad: sig.require_grad,
        })
        .collect();
    let binding = StepBinding {
        inputs: taken
            .iter()
            .map(|t| t.id)
            .zip(rec.inputs.iter().copied())
            .collect(),
        consumed,
        outputs: rec
            .outputs
            .iter()
            .map(|(id, _)| *id)
            .zip(fresh.iter().map(|p| id_of(&p.tensor)))
            .collect(),
        released: rec.released.clone(),
    };
    client.submit_step(
        rec.key,
        rec.ops.clone(),
        Arc::new(binding),
        rec.plan.clone(),
    );
    let mut fresh = fresh.into_iter();
    let state_parts: Vec<Part<B>> = fresh.by_ref().take(state_len).collect();
    let state = put_state(state, state_parts);
    let rest: Vec<Part<B>> = fresh.collect();
    let outputs = O::from_parts(&mut rest.into_iter(), &rec.output_layout);
    (state, outputs)
}
