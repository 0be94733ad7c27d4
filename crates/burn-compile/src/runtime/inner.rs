//! The inner backend's tensors of one `Compiled<B>` device, and op-by-op execution on them.
//!
//! Replaces burn-router's `Runner` (see `burn-compile-dispatch` for why): tensors are registered
//! under the ids the capture gave them, the lock is taken per op by the execution thread only
//! (recording never touches it), and a panic of the inner backend inside an op leaves the
//! container usable: the tensors the failed op consumed are gone, as they would be in eager Burn,
//! and every other tensor of the device is still there.

use burn_backend::{DType, ExecutionError, TensorData};
use burn_ir::{BackendIr, HandleContainer, OperationIr, TensorId, TensorIr};
use burn_std::future::DynFut;
use std::sync::{Mutex, MutexGuard};

pub(crate) struct InnerDevice<B: BackendIr> {
    device: B::Device,
    handles: Mutex<HandleContainer<B::Handle>>,
}

impl<B: BackendIr> InnerDevice<B> {
    pub fn new(device: B::Device) -> Self {
        Self {
            device,
            handles: Mutex::new(HandleContainer::new()),
        }
    }

    /// The handle container. A panic of the inner backend while it was held leaves it in a
    /// consistent state (each container call is complete or not started), so the poison flag is
    /// ignored.
    fn handles(&self) -> MutexGuard<'_, HandleContainer<B::Handle>> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Executes one (non-custom) op.
    pub fn execute(&self, op: &OperationIr) {
        burn_compile_dispatch::execute::<B>(&mut self.handles(), &self.device, op);
    }

    /// The inner handle of `tensor` (removed from the device when its status is `ReadWrite`).
    pub fn handle(&self, tensor: &TensorIr) -> B::Handle {
        self.handles().get_tensor_handle(tensor).handle
    }

    /// Makes `handle` the inner tensor of `id`.
    pub fn register_handle(&self, id: TensorId, handle: B::Handle) {
        self.handles().register_handle(id, handle);
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
