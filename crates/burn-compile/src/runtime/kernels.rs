//! Generated kernels on the inner backend's own tensors.
//!
//! A plan's fused steps need a target that launches generated kernels on the inner backend's
//! float tensors: a CubeCL backend (`CubeBackend` on wgpu or CUDA, whose tensors are
//! `CubeTensor`s). Other inner backends (Flex, NdArray, Burn's own `Fusion`) have no target
//! here, so their plans run every op on the inner backend. The target is found from the float
//! tensor type, so `Compiled<B>` needs no bound beyond Burn's own.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
use burn_backend::DType;
use burn_compile_schedule::PointwiseKernel;
use burn_std::Shape;
use std::sync::Arc;

/// Launches generated kernels on tensors of type `T` (the inner backend's float tensors).
pub(crate) trait KernelTarget<T>: Send + Sync {
    /// Whether this target has a kernel for `kernel` (its dtype, mainly).
    fn accepts(&self, kernel: &PointwiseKernel) -> bool;

    /// Runs `kernel` over `shape`: `inputs` in kernel order, `scalars` in kernel order. Returns
    /// the outputs, newly allocated, contiguous (of `shape`, or of its row shape for a row
    /// kernel's row outputs), or why the kernel could not be compiled or launched.
    fn pointwise(
        &self,
        kernel: &PointwiseKernel,
        shape: &Shape,
        inputs: &[T],
        scalars: &[f64],
    ) -> Result<Vec<T>, String>;
}

/// The kernel target of an inner backend whose float tensors are `T`, if it has one.
pub(crate) fn target_for<T: 'static>() -> Option<Arc<dyn KernelTarget<T>>> {
    #[cfg(feature = "wgpu")]
    if let Some(t) = cube::target::<T, burn_wgpu::WgpuRuntime>(&[DType::F32]) {
        return Some(t);
    }
    #[cfg(feature = "cuda")]
    if let Some(t) = cube::target::<T, burn_cuda_runtime::CudaRuntime>(&[
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
    ]) {
        return Some(t);
    }
    None
}

#[cfg(feature = "cuda")]
mod burn_cuda_runtime {
    pub use burn_cubecl::cubecl::cuda::CudaRuntime;
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod cube {
    use super::KernelTarget;
    use burn_backend::{DType, ElementConversion};
    use burn_compile_codegen::launch_pointwise;
    use burn_compile_schedule::PointwiseKernel;
    use burn_cubecl::CubeRuntime;
    use burn_cubecl::cubecl::ScalarArgType;
    use burn_cubecl::cubecl::prelude::{Float, TensorArg};
    use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
    use burn_cubecl::tensor::CubeTensor;
    use burn_std::Shape;
    use std::any::{Any, TypeId};
    use std::marker::PhantomData;
    use std::sync::Arc;

    struct CubeTarget<R> {
        /// Element types with kernels on this runtime (WGSL: f32 only).
        dtypes: &'static [DType],
        runtime: PhantomData<fn() -> R>,
    }

    /// The target of `CubeTensor<R>`, as a target of `T` when `T` is that type.
    pub fn target<T: 'static, R: CubeRuntime>(
        dtypes: &'static [DType],
    ) -> Option<Arc<dyn KernelTarget<T>>> {
        if TypeId::of::<T>() != TypeId::of::<CubeTensor<R>>() {
            return None;
        }
        let target: Arc<dyn KernelTarget<CubeTensor<R>>> = Arc::new(CubeTarget::<R> {
            dtypes,
            runtime: PhantomData,
        });
        // `T` is `CubeTensor<R>`: the downcast is the identity.
        let any: Box<dyn Any> = Box::new(target);
        any.downcast::<Arc<dyn KernelTarget<T>>>().ok().map(|t| *t)
    }

    fn launch<R: CubeRuntime, E: Float + ScalarArgType + ElementConversion>(
        kernel: &PointwiseKernel,
        inputs: &[CubeTensor<R>],
        scalars: &[f64],
        outputs: &[CubeTensor<R>],
        len: usize,
    ) {
        let args = |ts: &[CubeTensor<R>]| -> Vec<TensorArg<R>> {
            ts.iter().map(|t| t.clone().into_tensor_arg()).collect()
        };
        let scalars = scalars.iter().map(|s| E::from_elem(*s)).collect();
        let client = &inputs[0].client;
        // SAFETY: the schedule built the kernel from these tensors' shapes (each input broadcasts
        // to `shape`, the outputs have it and are contiguous) and dtype (dispatched below).
        unsafe {
            launch_pointwise::<R, E>(client, kernel, args(inputs), scalars, args(outputs), len)
        };
    }

    impl<R: CubeRuntime> KernelTarget<CubeTensor<R>> for CubeTarget<R> {
        fn accepts(&self, kernel: &PointwiseKernel) -> bool {
            self.dtypes.contains(&kernel.dtype)
        }

        fn pointwise(
            &self,
            kernel: &PointwiseKernel,
            shape: &Shape,
            inputs: &[CubeTensor<R>],
            scalars: &[f64],
        ) -> Result<Vec<CubeTensor<R>>, String> {
            // Every group reads at least one tensor (its first operation's input).
            let first = &inputs[0];
            let outputs: Vec<CubeTensor<R>> = (0..kernel.outputs as usize)
                .map(|o| {
                    // A row kernel's row outputs have the row shape `[R…, 1]`.
                    let mut out_shape = shape.clone();
                    if kernel.row.as_ref().is_some_and(|r| r.row_outputs[o]) {
                        let last = out_shape.num_dims() - 1;
                        out_shape[last] = 1;
                    }
                    empty_device_contiguous_dtype(
                        first.client.clone(),
                        first.device.clone(),
                        out_shape,
                        kernel.dtype,
                    )
                })
                .collect();
            let len = shape.num_elements();
            // CubeCL compiles a kernel at its first launch and panics when the compiler
            // refuses it: that is a failed compile, reported to the caller (which falls back).
            let launched =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match kernel.dtype {
                    DType::F32 => launch::<R, f32>(kernel, inputs, scalars, &outputs, len),
                    DType::F16 => launch::<R, half::f16>(kernel, inputs, scalars, &outputs, len),
                    DType::BF16 => launch::<R, half::bf16>(kernel, inputs, scalars, &outputs, len),
                    DType::F64 => launch::<R, f64>(kernel, inputs, scalars, &outputs, len),
                    dtype => unreachable!("the plan only keeps accepted kernels, not {dtype:?}"),
                }));
            launched.map(|_| outputs).map_err(|payload| {
                payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "the kernel launch panicked".into())
            })
        }
    }
}
