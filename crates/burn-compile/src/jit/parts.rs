//! A step's values taken apart into tensors (and host scalars) in a fixed order, and rebuilt.

use super::{StepBackend, StepTensor};
use burn_backend::TensorMetadata;
use burn_core::module::{Module, ModuleMapper, Param};
use burn_ir::TensorId;
use burn_router::RouterTensor;
use burn_tensor::{Bool, Float, Int, Tensor, TensorPrimitive};

/// Puts the first `state_len` of `tensors` back into `state` and the rest, with `scalars`, into
/// a value shaped like `like`: the inverse of taking a step's state, then a value, apart.
pub(super) fn rebuild<B: StepBackend, S: StepState<B>, V: StepTensors<B>>(
    state: S,
    state_len: usize,
    tensors: Vec<Part<B>>,
    scalars: Vec<f64>,
    like: &Layout,
) -> (S, V) {
    let mut tensors = tensors.into_iter();
    let state_parts: Vec<Part<B>> = tensors.by_ref().take(state_len).collect();
    let state = put_parts(state, &mut state_parts.into_iter());
    let rest = Parts {
        tensors: tensors.collect(),
        scalars,
    };
    (state, V::from_parts(&mut rest.into_iter(), like))
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
    pub(super) tensor: StepTensor<B>,
    pub(super) kind: Kind,
    pub(super) require_grad: bool,
}

impl<B: StepBackend> Part<B> {
    pub(super) fn float<const D: usize>(tensor: Tensor<B, D>) -> Self {
        let (tensor, require_grad) = B::float_into_step(tensor.into_primitive().tensor());
        Self {
            tensor,
            kind: Kind::Float,
            require_grad,
        }
    }
    pub(super) fn into_float<const D: usize>(self) -> Tensor<B, D> {
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

/// A value's tensors and host scalars, each in order.
pub struct Parts<B: StepBackend> {
    pub(super) tensors: Vec<Part<B>>,
    pub(super) scalars: Vec<f64>,
}

impl<B: StepBackend> Default for Parts<B> {
    fn default() -> Self {
        Self {
            tensors: Vec::new(),
            scalars: Vec::new(),
        }
    }
}

/// [`Parts`] being put back into a value.
pub struct PartsIter<B: StepBackend> {
    pub(super) tensors: std::vec::IntoIter<Part<B>>,
    pub(super) scalars: std::vec::IntoIter<f64>,
}

impl<B: StepBackend> Parts<B> {
    pub(super) fn into_iter(self) -> PartsIter<B> {
        PartsIter {
            tensors: self.tensors.into_iter(),
            scalars: self.scalars.into_iter(),
        }
    }
}

/// The tensors and host scalars of a step's inputs or outputs, in a fixed order: plain
/// tensors, `f64`/`f32` values (a learning rate), tuples of them, `Vec`s of them. Implement it
/// for a batch struct by listing its tensors.
///
/// A scalar input is how a value that changes between calls — a scheduled learning rate —
/// reaches a replayed step: the scalar operands that follow it in the recordings are rewritten
/// with each call's value.
pub trait StepTensors<B: StepBackend>: Sized {
    /// Moves the tensors and scalars into `parts`, in order.
    fn into_parts(self, parts: &mut Parts<B>);
    /// Rebuilds the value from parts in the same order (`like`: the layout of a value of the
    /// same structure, for `Vec` lengths).
    fn from_parts(parts: &mut PartsIter<B>, like: &Layout) -> Self;
    /// The layout [`StepTensors::from_parts`] needs to rebuild this value.
    fn layout(&self) -> Layout;
}

/// Lengths of the `Vec`s of a value, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Layout(pub(super) Vec<usize>);

macro_rules! tensor_parts {
    ($kind:ty, $take:ident, $make:ident) => {
        impl<B: StepBackend, const D: usize> StepTensors<B> for Tensor<B, D, $kind> {
            fn into_parts(self, parts: &mut Parts<B>) {
                parts.tensors.push(Part::$take(self));
            }
            fn from_parts(parts: &mut PartsIter<B>, _: &Layout) -> Self {
                parts.tensors.next().expect("a part per tensor").$make()
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

macro_rules! scalar_parts {
    ($t:ty) => {
        impl<B: StepBackend> StepTensors<B> for $t {
            fn into_parts(self, parts: &mut Parts<B>) {
                parts.scalars.push(self as f64);
            }
            fn from_parts(parts: &mut PartsIter<B>, _: &Layout) -> Self {
                parts.scalars.next().expect("a part per scalar") as $t
            }
            fn layout(&self) -> Layout {
                Layout::default()
            }
        }
    };
}
scalar_parts!(f64);
scalar_parts!(f32);

impl<B: StepBackend> StepTensors<B> for () {
    fn into_parts(self, _: &mut Parts<B>) {}
    fn from_parts(_: &mut PartsIter<B>, _: &Layout) -> Self {}
    fn layout(&self) -> Layout {
        Layout::default()
    }
}

impl<B: StepBackend, T: StepTensors<B>> StepTensors<B> for Vec<T> {
    fn into_parts(self, parts: &mut Parts<B>) {
        for t in self {
            t.into_parts(parts);
        }
    }
    fn from_parts(parts: &mut PartsIter<B>, like: &Layout) -> Self {
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
            fn into_parts(self, parts: &mut Parts<B>) {
                $(self.$i.into_parts(parts);)+
            }
            fn from_parts(parts: &mut PartsIter<B>, like: &Layout) -> Self {
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

/// What each tensor of a step's state is replaced with, given the tensor.
pub type PartMap<'a, B> = dyn FnMut(Part<B>) -> Part<B> + 'a;

/// The state a step takes and returns: its tensors passed through a function in a fixed order,
/// each replaced by what it returns (a placeholder while the step holds the tensor, the step's
/// output after it).
pub trait StepState<B: StepBackend>: Sized {
    /// Replaces each tensor with `f`'s result, in order; `layout` gets what else the guard
    /// compares.
    fn map_parts(self, f: &mut PartMap<B>, layout: &mut Vec<usize>) -> Self;
}

/// Moves the state's tensors into `parts`, leaving placeholders.
pub(super) fn take_parts<B: StepBackend, S: StepState<B>>(
    state: S,
    parts: &mut Vec<Part<B>>,
    layout: &mut Vec<usize>,
) -> S {
    state.map_parts(&mut |part| swap_out(part, parts), layout)
}

/// Puts the next parts into the state's placeholders, in the same order.
pub(super) fn put_parts<B: StepBackend, S: StepState<B>>(
    state: S,
    parts: &mut std::vec::IntoIter<Part<B>>,
) -> S {
    state.map_parts(&mut |part| swap_in(part, parts), &mut Vec::new())
}

/// A step's state that is a [`Module`] (a model, or a tuple of modules).
pub struct Modules<M>(pub M);

impl<B: StepBackend, M: Module<B>> StepState<B> for Modules<M> {
    fn map_parts(self, f: &mut PartMap<B>, _: &mut Vec<usize>) -> Self {
        Modules(map_module(self.0, f))
    }
}

/// Replaces each of a module's parameter tensors with a function's result.
struct Swap<'a, B: StepBackend> {
    f: &'a mut PartMap<'a, B>,
}

/// Moves `part` into `taken` and returns its placeholder: a tensor object naming the same
/// tensor, disposed of without an op when swapped back ([`swap_in`]).
fn swap_out<B: StepBackend>(part: Part<B>, taken: &mut Vec<Part<B>>) -> Part<B> {
    let placeholder = placeholder_of(&part);
    taken.push(part);
    placeholder
}

/// Replaces a placeholder with the next part.
fn swap_in<B: StepBackend>(
    placeholder: Part<B>,
    parts: &mut std::vec::IntoIter<Part<B>>,
) -> Part<B> {
    dispose(placeholder.tensor);
    parts
        .next()
        .expect("a part per tensor of the recorded structure")
}

/// The id of a tensor (burn-router keeps it private): read from a clone's IR, which leaves the
/// reference count as it was.
pub(super) fn id_of<C: burn_router::RunnerClient>(tensor: &RouterTensor<C>) -> TensorId {
    tensor.clone().into_ir().id
}

/// A tensor object dropped without recording a drop: its id stays registered.
fn dispose<C: burn_router::RunnerClient>(tensor: RouterTensor<C>) {
    // `into_ir` takes a sole owner's reference without a drop op.
    let _ = tensor.into_ir();
}

/// A placeholder is never computed with, nor asked whether it requires a gradient (the taken
/// part carries that): it is not made an autodiff leaf, which would register a root in
/// autodiff's graph for every parameter at every call.
pub(super) fn placeholder_of<B: StepBackend>(part: &Part<B>) -> Part<B> {
    let t = &part.tensor;
    Part {
        tensor: RouterTensor::new(id_of(t), t.shape(), t.dtype(), t.client.clone()),
        kind: part.kind,
        require_grad: false,
    }
}

impl<B: StepBackend> ModuleMapper<B> for Swap<'_, B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        Param::from_mapped_value(id, (self.f)(Part::float(tensor)).into_float(), mapper)
    }
    fn map_int<const D: usize>(
        &mut self,
        param: Param<Tensor<B, D, Int>>,
    ) -> Param<Tensor<B, D, Int>> {
        let (id, tensor, mapper) = param.consume();
        Param::from_mapped_value(id, (self.f)(Part::int(tensor)).into_int(), mapper)
    }
    fn map_bool<const D: usize>(
        &mut self,
        param: Param<Tensor<B, D, Bool>>,
    ) -> Param<Tensor<B, D, Bool>> {
        let (id, tensor, mapper) = param.consume();
        Param::from_mapped_value(id, (self.f)(Part::bool(tensor)).into_bool(), mapper)
    }
}

/// Replaces each of a module's parameter tensors (in [`Module::visit`] order) with `f`'s result.
pub(super) fn map_module<B: StepBackend, M: Module<B>>(module: M, f: &mut PartMap<B>) -> M {
    module.map(&mut Swap { f })
}
