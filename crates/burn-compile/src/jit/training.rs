//! Training steps with their optimizer ([`jit_train`]): the optimizer's per-parameter state is
//! part of the step's state, taken out of its record and put back like the model's parameters.

use super::parts::{Kind, Part, StepState, put_module, swap_in, swap_out, take_module};
use super::{Jit, StepBackend, StepTensors};
use crate::backend::Compiled;
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::{AutodiffBackend, Backend};
use burn_core::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn_ir::BackendIr;
use burn_optim::{Optimizer, SimpleOptimizer, adaptor::OptimizerAdaptor, record::AdaptorRecord};
use burn_tensor::{Tensor, TensorPrimitive};
use rustc_hash::FxHashSet;

/// A [`SimpleOptimizer`] whose per-parameter state a compiled step can take apart: every
/// tensor of the state, mapped in a fixed order.
pub trait StepSimpleOptimizer<B: Backend>: SimpleOptimizer<B> {
    /// `state` with each of its tensors replaced by `f`'s result, in a fixed order. Each
    /// tensor is moved into `f`, never cloned (the step takes it over).
    fn map_state<const D: usize>(
        state: Self::State<D>,
        f: &mut dyn FnMut(Tensor<B, D>) -> Tensor<B, D>,
    ) -> Self::State<D>;
}

macro_rules! burn_adam_state {
    ($optimizer:ty, $state:ident) => {
        impl<B: Backend> StepSimpleOptimizer<B> for $optimizer {
            fn map_state<const D: usize>(
                state: Self::State<D>,
                f: &mut dyn FnMut(Tensor<B, D>) -> Tensor<B, D>,
            ) -> Self::State<D> {
                burn_optim::$state {
                    momentum: map_momentum(state.momentum, f),
                }
            }
        }
    };
}
// Burn's Adam and AdamW: their moments are mapped; their step count stays on the host, so the
// bias corrections computed from it change every call and the step is refused with that reason.
burn_adam_state!(burn_optim::Adam, AdamState);
burn_adam_state!(burn_optim::AdamW, AdamWState);

/// Moves each moment through `f`. The fields are moved, never cloned: a tensor object dropped
/// here would free the tensor the step is taking.
fn map_momentum<B: Backend, const D: usize>(
    state: burn_optim::AdaptiveMomentumState<B, D>,
    f: &mut dyn FnMut(Tensor<B, D>) -> Tensor<B, D>,
) -> burn_optim::AdaptiveMomentumState<B, D> {
    let burn_optim::AdaptiveMomentumState {
        time,
        moment_1,
        moment_2,
        max_moment_2,
    } = state;
    burn_optim::AdaptiveMomentumState {
        time,
        moment_1: f(moment_1),
        moment_2: f(moment_2),
        max_moment_2: max_moment_2.map(f),
    }
}

/// The autodiff backend a training step runs on.
type Train<X, C> = Autodiff<Compiled<X>, C>;

/// An optimizer whose state a compiled training step takes and returns.
pub trait StepOptimizer<B: StepBackend + AutodiffBackend, M: AutodiffModule<B>>:
    Optimizer<M, B>
{
    #[doc(hidden)]
    /// Moves the state out of the optimizer (it keeps none while the step holds it).
    fn take_record(&mut self) -> Self::Record;
    #[doc(hidden)]
    fn put_record(&mut self, record: Self::Record);
    #[doc(hidden)]
    /// Moves the record's tensors into `parts` in the order of `model`'s parameters; `layout`
    /// gets which parameters have state.
    fn take_parts(
        model: &M,
        record: Self::Record,
        parts: &mut Vec<Part<B>>,
        layout: &mut Vec<usize>,
    ) -> Self::Record;
    #[doc(hidden)]
    fn put_parts(
        model: &M,
        record: Self::Record,
        parts: &mut std::vec::IntoIter<Part<B>>,
    ) -> Self::Record;
}

/// The record of an optimizer adaptor over `SO` on the training backend.
type AdaptorRecords<SO, M, X, C> =
    <OptimizerAdaptor<SO, M, Train<X, C>> as Optimizer<M, Train<X, C>>>::Record;

/// Where taken parts go: the parts, and the layout (which parameters have state).
type TakenParts<'a, X, C> = (&'a mut Vec<Part<Train<X, C>>>, &'a mut Vec<usize>);

/// Visits a model's float parameters and maps the optimizer state kept for each.
struct RecordSwap<'a, SO, X, C, M>
where
    X: BackendIr,
    C: CheckpointStrategy,
    SO: SimpleOptimizer<Compiled<X>> + 'a,
    M: AutodiffModule<Train<X, C>>,
{
    record: &'a mut AdaptorRecords<SO, M, X, C>,
    taken: Option<TakenParts<'a, X, C>>,
    put: Option<&'a mut std::vec::IntoIter<Part<Train<X, C>>>>,
    seen: FxHashSet<ParamId>,
}

impl<SO, X, C, M> ModuleVisitor<Train<X, C>> for RecordSwap<'_, SO, X, C, M>
where
    X: BackendIr,
    C: CheckpointStrategy,
    SO: StepSimpleOptimizer<Compiled<X>>,
    M: AutodiffModule<Train<X, C>>,
{
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Train<X, C>, D>>) {
        if !self.seen.insert(param.id) {
            return;
        }
        let Some(record) = self.record.remove(&param.id) else {
            if let Some((_, layout)) = &mut self.taken {
                layout.push(0);
            }
            return;
        };
        let state = record.into_state::<D>();
        let state = SO::map_state(state, &mut |t: Tensor<Compiled<X>, D>| {
            let part = Part {
                tensor: t.into_primitive().tensor(),
                kind: Kind::Float,
                require_grad: false,
            };
            let part = match (&mut self.taken, &mut self.put) {
                (Some((taken, _)), _) => swap_out(part, taken),
                (None, Some(parts)) => swap_in(part, parts),
                (None, None) => part,
            };
            Tensor::from_primitive(TensorPrimitive::Float(part.tensor))
        });
        if let Some((_, layout)) = &mut self.taken {
            layout.push(1);
        }
        self.record
            .insert(param.id, AdaptorRecord::from_state::<D>(state));
    }
}

impl<SO, X, C, M> StepOptimizer<Train<X, C>, M> for OptimizerAdaptor<SO, M, Train<X, C>>
where
    X: BackendIr,
    C: CheckpointStrategy,
    SO: StepSimpleOptimizer<Compiled<X>>,
    M: AutodiffModule<Train<X, C>>,
{
    fn take_record(&mut self) -> Self::Record {
        let record = self.to_record();
        // The optimizer's own references go, so that the step holds the state alone (and its
        // graph may update it in place).
        let empty = self.clone().load_record(Default::default());
        drop(std::mem::replace(self, empty));
        record
    }
    fn put_record(&mut self, record: Self::Record) {
        // Holds no state here (taken by `take_record`): the clone is cheap.
        *self = self.clone().load_record(record);
    }
    fn take_parts(
        model: &M,
        mut record: Self::Record,
        parts: &mut Vec<Part<Train<X, C>>>,
        layout: &mut Vec<usize>,
    ) -> Self::Record {
        model.visit(&mut RecordSwap::<SO, X, C, M> {
            record: &mut record,
            taken: Some((parts, layout)),
            put: None,
            seen: FxHashSet::default(),
        });
        record
    }
    fn put_parts(
        model: &M,
        mut record: Self::Record,
        parts: &mut std::vec::IntoIter<Part<Train<X, C>>>,
    ) -> Self::Record {
        model.visit(&mut RecordSwap::<SO, X, C, M> {
            record: &mut record,
            taken: None,
            put: Some(parts),
            seen: FxHashSet::default(),
        });
        record
    }
}

/// The state of a training step: the model and its optimizer's record.
pub struct Training<B: AutodiffBackend, M: AutodiffModule<B>, O: Optimizer<M, B>> {
    model: M,
    record: O::Record,
}

impl<B, M, O> StepState<B> for Training<B, M, O>
where
    B: StepBackend + AutodiffBackend,
    M: AutodiffModule<B>,
    O: StepOptimizer<B, M>,
{
    fn take_parts(self, parts: &mut Vec<Part<B>>, layout: &mut Vec<usize>) -> Self {
        let model = take_module(self.model, parts);
        let record = O::take_parts(&model, self.record, parts, layout);
        Training { model, record }
    }
    fn put_parts(self, parts: &mut std::vec::IntoIter<Part<B>>) -> Self {
        let model = put_module(self.model, parts);
        let record = O::put_parts(&model, self.record, parts);
        Training { model, record }
    }
}

/// Compiles a training step whole, with its optimizer: `f(model, &mut optim, inputs) ->
/// (model, outputs)`. As [`jit`](super::jit), and the optimizer's per-parameter state (its
/// moments) is part of the step's state: taken out of the optimizer before the step and put
/// back after, so that a replay updates it. Pass values that change between calls — the
/// learning rate of a schedule — as scalar inputs (`f64` in `inputs`).
///
/// The optimizer must keep its state in tensors ([`StepOptimizer`]): Burn's
/// `OptimizerAdaptor` over [`crate::optim`]'s Adam and AdamW (step count on the device) replays;
/// over Burn's own Adam and AdamW it is refused (their bias corrections come from a step count
/// on the host, a scalar that changes every call) and runs every call.
pub fn jit_train<B, M, O, I, Out, F>(f: F) -> Jit<B, Training<B, M, O>, I, Out, F>
where
    B: StepBackend + AutodiffBackend,
    M: AutodiffModule<B>,
    O: StepOptimizer<B, M>,
    I: StepTensors<B>,
    Out: StepTensors<B>,
    F: FnMut(M, &mut O, I) -> (M, Out),
{
    Jit::new(f)
}

impl<B, M, O, I, Out, F> Jit<B, Training<B, M, O>, I, Out, F>
where
    B: StepBackend + AutodiffBackend,
    M: AutodiffModule<B>,
    O: StepOptimizer<B, M>,
    I: StepTensors<B>,
    Out: StepTensors<B>,
    F: FnMut(M, &mut O, I) -> (M, Out),
{
    /// Runs the training step: replayed when its guard's recordings allow, else by calling
    /// `f`. The optimizer's state comes back updated either way.
    pub fn call(&mut self, model: M, optim: &mut O, inputs: I) -> (M, Out) {
        let record = optim.take_record();
        let (state, out) = self.run(Training { model, record }, inputs, |f, state, inputs| {
            optim.put_record(state.record);
            let (model, out) = f(state.model, &mut *optim, inputs);
            let record = optim.take_record();
            (Training { model, record }, out)
        });
        optim.put_record(state.record);
        (state.model, out)
    }
}
