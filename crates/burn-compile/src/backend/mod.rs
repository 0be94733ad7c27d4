//! `Compiled<B>`: the backend type of burn-compile.
//!
//! Its tensors are burn-router's (`RouterTensor<CompileClient<B>>`), and almost every op
//! forwards to `BackendRouter<CompileChannel<B>>`, which turns it into an `OperationIr` that the
//! capture client records. Owning the type lets us fill burn-router's gaps:
//!
//! - reads (`*_into_data`) return the data in the tensor's own dtype, like eager Burn (burn-router
//!   converts it to the backend's default element type);
//! - ops burn-router leaves unimplemented (quantized tensors, `rfft`/`irfft`) and ops it could
//!   only do through a host read (`bool_argwhere`, sorts) run eagerly on the inner backend, after
//!   closing the pending graphs with an explained break.
//!
//! One file per op trait; the helpers for eager ops live here.

mod activation;
mod bool_tensor;
mod float_tensor;
mod int_tensor;
mod module;
mod qtensor;
mod transaction;

use crate::capture::{BreakReason, CompileChannel, CompileClient};
use crate::diagnostics;
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor, QuantizedTensor};
use burn_backend::{
    Backend, BackendTypes, DType, DTypeUsageSet, ExecutionError, QTensorPrimitive, Shape,
    TensorData, TensorMetadata,
};
use burn_compile_runtime::InnerDevice;
use burn_ir::{BackendIr, TensorHandle, TensorIr};
use burn_router::{BackendRouter, RouterTensor, RunnerClient};
use burn_std::future::DynFut;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;

/// A Burn backend that captures the ops of the inner backend `B` into graphs and replays them
/// through cached plans. `B` is the raw backend (`Flex`, `NdArray`, `CubeBackend<…>`); any
/// backend implementing `burn_ir::BackendIr` works, Burn's own `Fusion<…>` included.
pub struct Compiled<B>(PhantomData<B>);

/// The burn-router backend every captured op forwards to.
type Router<B> = BackendRouter<CompileChannel<B>>;

/// The tensor primitive of `Compiled<B>` (float, int and bool; a quantized tensor wraps one in
/// [`QuantizedPrimitive`]).
type Primitive<B> = RouterTensor<CompileClient<B>>;

pub use qtensor::QuantizedPrimitive;

impl<B> Clone for Compiled<B> {
    fn clone(&self) -> Self {
        Self(PhantomData)
    }
}

impl<B> Default for Compiled<B> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<B> core::fmt::Debug for Compiled<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("compiled")
    }
}

impl<B: BackendIr> BackendTypes for Compiled<B> {
    type Device = B::Device;
    type FloatTensorPrimitive = Primitive<B>;
    type FloatElem = B::FloatElem;
    type IntTensorPrimitive = Primitive<B>;
    type IntElem = B::IntElem;
    type BoolTensorPrimitive = Primitive<B>;
    type BoolElem = B::BoolElem;
    type QuantizedTensorPrimitive = QuantizedPrimitive<B>;
}

impl<B: BackendIr> Backend for Compiled<B> {
    fn name(device: &Self::Device) -> String {
        Router::<B>::name(device)
    }

    fn seed(device: &Self::Device, seed: u64) {
        Router::<B>::seed(device, seed)
    }

    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        Router::<B>::sync(device)
    }

    fn dtype_usage(device: &Self::Device, dtype: DType) -> DTypeUsageSet {
        Router::<B>::dtype_usage(device, dtype)
    }

    fn device_count(type_id: u16) -> usize {
        Router::<B>::device_count(type_id)
    }
}

/// The capture client of `device`.
fn client<B: BackendIr>(device: &B::Device) -> CompileClient<B> {
    burn_router::get_client::<CompileChannel<B>>(device)
}

/// Reads a tensor in its own dtype (burn-router's reads convert to the default element type).
/// The graphs close and the read starts now; the future only waits for the data.
///
/// A reference is held until the read has taken the inner tensor: the read's IR is then
/// read-only, and no other thread's drop of the last other reference can free the tensor
/// between the IR and the read (that thread's next graph may run in between; the other thread
/// may not have recorded anything yet, so no check of who records could rule it out). If the
/// held reference was the last, the tensor is freed right after the read, as a read of the
/// last reference would have consumed it; no op is recorded, so graphs stay as they were.
fn read<B: BackendIr>(tensor: Primitive<B>) -> DynFut<Result<TensorData, ExecutionError>> {
    let client = tensor.client.clone();
    let held = tensor.clone();
    let data = client.read_tensor_async(tensor.into_ir());
    client.release_held(held.into_ir());
    data
}

/// Runs `f` eagerly on the inner backend, after closing every pending graph of the device with
/// `reason` (`op` names the op in the break's detail). Turn the tensors into `TensorIr` (with
/// `into_ir`) before calling: dropping a tensor inside `f` would record an op while the capture
/// is locked.
fn eager<B: BackendIr, T>(
    client: &CompileClient<B>,
    reason: BreakReason,
    op: &str,
    f: impl FnOnce(&Eager<'_, B>) -> T,
) -> T {
    client.run_eager(reason, Some(op.to_string()), |inner| {
        f(&Eager { inner, client })
    })
}

/// Runs `f` eagerly on the inner backend without closing any graph: for ops whose tensor inputs
/// are all quantized. The capture records no op that produces or reads a quantized tensor (only
/// its drop), so no pending graph can involve them; the outputs get fresh ids, like uploads.
fn eager_quantized<B: BackendIr, T>(
    client: &CompileClient<B>,
    f: impl FnOnce(&Eager<'_, B>) -> T,
) -> T {
    diagnostics::COUNTERS
        .eager_ops
        .fetch_add(1, Ordering::Relaxed);
    f(&Eager::new(client))
}

/// Access to the inner backend's tensors during an eager op.
struct Eager<'a, B: BackendIr> {
    inner: &'a InnerDevice<B>,
    client: &'a CompileClient<B>,
}

impl<'a, B: BackendIr> Eager<'a, B> {
    /// Direct access to the device's inner tensors, closing no graph: only to register new
    /// tensors, or within [`eager`]/[`eager_quantized`].
    fn new(client: &'a CompileClient<B>) -> Self {
        Self {
            inner: client.inner(),
            client,
        }
    }

    fn handle(&self, tensor: &TensorIr) -> TensorHandle<B::Handle> {
        TensorHandle {
            handle: self.inner.handle(tensor),
            shape: tensor.shape.clone(),
        }
    }

    /// The inner float tensor of `tensor` (consumed when its status is `ReadWrite`).
    fn float(&self, tensor: &TensorIr) -> FloatTensor<B> {
        B::float_tensor(self.handle(tensor))
    }

    fn int(&self, tensor: &TensorIr) -> IntTensor<B> {
        B::int_tensor(self.handle(tensor))
    }

    fn bool(&self, tensor: &TensorIr) -> BoolTensor<B> {
        B::bool_tensor(self.handle(tensor))
    }

    fn quantized(&self, tensor: &TensorIr) -> QuantizedTensor<B> {
        B::quantized_tensor(self.handle(tensor))
    }

    /// Registers an inner tensor (as a handle) as a new tensor of the device.
    fn register(&self, handle: B::Handle, shape: Shape, dtype: DType) -> Primitive<B> {
        self.client.register_handle(handle, shape, dtype)
    }

    fn register_float(&self, tensor: FloatTensor<B>) -> Primitive<B> {
        let (shape, dtype) = (tensor.shape(), tensor.dtype());
        self.register(B::float_tensor_handle(tensor), shape, dtype)
    }

    fn register_int(&self, tensor: IntTensor<B>) -> Primitive<B> {
        let (shape, dtype) = (tensor.shape(), tensor.dtype());
        self.register(B::int_tensor_handle(tensor), shape, dtype)
    }

    fn register_quantized(&self, tensor: QuantizedTensor<B>) -> QuantizedPrimitive<B> {
        let (shape, dtype) = (tensor.shape(), tensor.dtype());
        let (acc, propagation) = (tensor.acc_precision(), tensor.propagation());
        let tensor = self.register(B::quantized_tensor_handle(tensor), shape, dtype);
        QuantizedPrimitive::new(tensor, acc, propagation)
    }
}
