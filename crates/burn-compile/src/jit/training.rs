//! Training steps with their optimizer ([`jit_train`]): the optimizer's per-parameter state is
//! part of the step's state, taken out of its record and put back like the model's parameters.

use super::parts::{Kind, Part, PartMap, StepState, map_module};
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
    /// Replaces the record's tensors with `f`'s results, in the order of `model`'s parameters;
    /// `layout` gets which parameters have state.
    fn map_parts(
        model: &M,
        record: Self::Record,
        f: &mut PartMap<B>,
        layout: &mut Vec<usize>,
    ) -> Self::Record;
}

/// The record of an optimizer adaptor over `SO` on the training backend.
type AdaptorRecords<SO, M, X, C> = crate::optim::AdaptorRecords<SO, M, Train<X, C>>;

/// Visits a model's float parameters and maps the optimizer state kept for each.
struct RecordSwap<'a, SO, X, C, M>
where
    X: BackendIr,
    C: CheckpointStrategy,
    SO: SimpleOptimizer<Compiled<X>> + 'a,
    M: AutodiffModule<Train<X, C>>,
{
    record: &'a mut AdaptorRecords<SO, M, X, C>,
    f: &'a mut PartMap<'a, Train<X, C>>,
    /// Which parameters have state.
    layout: &'a mut Vec<usize>,
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
        let Some(record) = self.record.get_mut(&param.id) else {
            self.layout.push(0);
            return;
        };
        let f = &mut *self.f;
        // In place: one lookup, where a removal and an insertion would probe twice (and grow
        // the map again). `f` does not panic but on a broken invariant, which aborts here.
        replace_with::replace_with_or_abort(record, |record| {
            let state = SO::map_state(record.into_state::<D>(), &mut |t| {
                let part = Part {
                    tensor: t.into_primitive().tensor(),
                    kind: Kind::Float,
                    require_grad: false,
                };
                Tensor::from_primitive(TensorPrimitive::Float(f(part).tensor))
            });
            AdaptorRecord::from_state::<D>(state)
        });
        self.layout.push(1);
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
        // graph may update it in place). The adaptor hands its map out only by value: dropped
        // in place here, where `self.clone().load_record(…)` would copy it first.
        replace_with::replace_with_or_abort(self, |optim| optim.load_record(Default::default()));
        record
    }
    fn put_record(&mut self, record: Self::Record) {
        replace_with::replace_with_or_abort(self, |optim| optim.load_record(record));
    }
    fn map_parts(
        model: &M,
        record: Self::Record,
        f: &mut PartMap<Train<X, C>>,
        layout: &mut Vec<usize>,
    ) -> Self::Record {
        map_record::<SO, X, C, M>(model, record, f, layout)
    }
}

impl<SO, X, C, M> StepOptimizer<Train<X, C>, M> for crate::optim::Adaptor<SO, M, Train<X, C>>
where
    X: BackendIr,
    C: CheckpointStrategy,
    SO: StepSimpleOptimizer<Compiled<X>>,
    M: AutodiffModule<Train<X, C>>,
{
    fn take_record(&mut self) -> Self::Record {
        self.take_state()
    }
    fn put_record(&mut self, record: Self::Record) {
        self.put_state(record);
    }
    fn map_parts(
        model: &M,
        record: Self::Record,
        f: &mut PartMap<Train<X, C>>,
        layout: &mut Vec<usize>,
    ) -> Self::Record {
        map_record::<SO, X, C, M>(model, record, f, layout)
    }
}

/// Replaces the tensors of an optimizer record with `f`'s results, in the order of `model`'s
/// parameters; `layout` gets which parameters have state.
fn map_record<SO, X, C, M>(
    model: &M,
    mut record: AdaptorRecords<SO, M, X, C>,
    f: &mut PartMap<Train<X, C>>,
    layout: &mut Vec<usize>,
) -> AdaptorRecords<SO, M, X, C>
where
    X: BackendIr,
    C: CheckpointStrategy,
    SO: StepSimpleOptimizer<Compiled<X>>,
    M: AutodiffModule<Train<X, C>>,
{
    let seen = FxHashSet::with_capacity_and_hasher(record.len(), Default::default());
    model.visit(&mut RecordSwap::<SO, X, C, M> {
        record: &mut record,
        f,
        layout,
        seen,
    });
    record
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
    fn map_parts(self, f: &mut PartMap<B>, layout: &mut Vec<usize>) -> Self {
        let model = map_module(self.model, f);
        let record = O::map_parts(&model, self.record, f, layout);
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
