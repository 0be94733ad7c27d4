//! Code generation for GPUs: scheduled kernels (`burn-compile-schedule`) become CubeCL kernels,
//! which CubeCL compiles for CUDA and wgpu.
//!
//! [`cuda_source`] and [`wgsl_source`] give a kernel's generated code as text without any device
//! (see [`offline`]): what the snapshots in `snapshots/` hold and what reviewers read.

pub mod launch;
pub mod offline;
pub mod pointwise;
pub mod row;

pub use launch::launch_pointwise;
pub use row::Reduction;

use burn_backend::DType;
use burn_compile_schedule::PointwiseKernel;
use cubecl::prelude::*;
use cubecl::{Compiler, ScalarArgType};
use offline::{CudaCompiler, CudaFlavor, Flavor, OfflineRuntime, StubDevice, WgslFlavor};

/// Units per cube of the pointwise kernels.
pub const POINTWISE_CUBE: u32 = 256;

/// Why a kernel has no generated code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodegenError {
    /// The kernel's element type has no kernel on this target.
    UnsupportedDType { dtype: DType, target: &'static str },
    /// CubeCL refused the kernel.
    Compile(String),
}

impl core::fmt::Display for CodegenError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CodegenError::UnsupportedDType { dtype, target } => {
                write!(f, "no {target} pointwise kernel for {dtype:?}")
            }
            CodegenError::Compile(e) => write!(f, "CubeCL could not compile the kernel: {e}"),
        }
    }
}

impl std::error::Error for CodegenError {}

/// The kernel definition of `kernel` with element type `E`, for the offline runtime `Fl`.
fn define<Fl: Flavor, E: Float + ScalarArgType>(
    kernel: &PointwiseKernel,
) -> (cubecl::prelude::KernelDefinition, StorageType) {
    let client = OfflineRuntime::<Fl>::client(&StubDevice);
    let properties = Fl::device_properties();
    // As `launch_pointwise` launches it: 32-bit addressing is the kernel macro's default.
    let settings = KernelSettings::default()
        .cube_dim(cube_dim(kernel))
        .address_type(AddressType::U32);
    let tensors = |n: usize| -> SequenceCompilationArg<Tensor<E>> {
        (0..n)
            .map(|_| TensorCompilationArg { inplace: None })
            .collect()
    };
    let scalars = || -> SequenceCompilationArg<E> { (0..kernel.scalars).map(|_| ()).collect() };
    let (inputs, outputs) = (kernel.inputs.len(), kernel.outputs as usize);
    if let Some(layout) = &kernel.row {
        // As the device the stub stands for would launch it.
        let reduction = Reduction::for_device(&properties, layout);
        let k = row::row::Row::<E, OfflineRuntime<Fl>>::new(
            settings,
            client,
            tensors(inputs),
            scalars(),
            tensors(outputs),
            kernel.clone(),
            reduction,
        );
        (k.define(), k.address_type())
    } else {
        let k = pointwise::pointwise::Pointwise::<E, OfflineRuntime<Fl>>::new(
            settings,
            client,
            tensors(inputs),
            scalars(),
            tensors(outputs),
            kernel.clone(),
        );
        (k.define(), k.address_type())
    }
}

/// The cube shape a kernel is launched with: 256 units for a pointwise kernel; for a row
/// kernel, the layout's units per row (x) by rows per cube (y).
pub fn cube_dim(kernel: &PointwiseKernel) -> CubeDim {
    match &kernel.row {
        Some(r) => CubeDim::new_2d(r.units, r.rows_per_cube),
        None => CubeDim::new_1d(POINTWISE_CUBE),
    }
}

/// The CUDA C++ source of `kernel`, as CubeCL's CUDA runtime compiles it (unchecked launch, fast
/// math, grid constants).
pub fn cuda_source(kernel: &PointwiseKernel) -> Result<String, CodegenError> {
    let (definition, address) = match kernel.dtype {
        DType::F32 | DType::Flex32 => define::<CudaFlavor, f32>(kernel),
        DType::F16 => define::<CudaFlavor, half::f16>(kernel),
        DType::BF16 => define::<CudaFlavor, half::bf16>(kernel),
        DType::F64 => define::<CudaFlavor, f64>(kernel),
        dtype => {
            return Err(CodegenError::UnsupportedDType {
                dtype,
                target: "CUDA",
            });
        }
    };
    let options = cubecl_cpp::shared::CompilationOptions {
        warp_size: 32,
        supports_features: cubecl_cpp::shared::CppSupportedFeatures {
            fast_math: true,
            grid_constants: true,
            ..Default::default()
        },
    };
    CudaCompiler::default()
        .compile(definition, &options, ExecutionMode::Unchecked, address)
        .map(|k| k.to_string())
        .map_err(|e| CodegenError::Compile(format!("{e:?}")))
}

/// The WGSL source of `kernel`, as CubeCL's wgpu runtime compiles it (unchecked launch).
pub fn wgsl_source(kernel: &PointwiseKernel) -> Result<String, CodegenError> {
    let (definition, address) = match kernel.dtype {
        DType::F32 | DType::Flex32 => define::<WgslFlavor, f32>(kernel),
        dtype => {
            return Err(CodegenError::UnsupportedDType {
                dtype,
                target: "WGSL",
            });
        }
    };
    cubecl_wgpu::WgslCompiler::default()
        .compile(
            definition,
            &cubecl::WgpuCompilationOptions::default(),
            ExecutionMode::Unchecked,
            address,
        )
        .map(|k| k.to_string())
        .map_err(|e| CodegenError::Compile(format!("{e:?}")))
}
