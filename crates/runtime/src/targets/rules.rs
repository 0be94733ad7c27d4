//! Which work each CubeCL target takes, as rules of the work alone. The live targets decide
//! with them (and with what only the device knows: whether cuBLASLt loaded, what an attention
//! autotune found); [`GpuRules`] lets a plan be built for a GPU where there is none
//! (`burn-compile-plan`), so a change to the fusers can be counted against W1's CUDA plan on
//! any machine.

use super::Lowering;
use burn_backend::DType;
use burn_compile_schedule::MatmulGroup;

/// Element types with CubeCL kernels on CUDA.
pub const CUDA_DTYPES: &[DType] = &[DType::F32, DType::F16, DType::BF16, DType::F64];
/// Element types with kernels on wgpu (WGSL: f32 only).
pub const WGPU_DTYPES: &[DType] = &[DType::F32];

/// Whether a CubeCL target with kernels for `dtypes` generates `work` (no library matmul).
pub fn cube_lowers(dtypes: &[DType], work: Lowering<'_>) -> bool {
    match work {
        Lowering::Kernel(kernel) | Lowering::ViewCopy(kernel) => dtypes.contains(&kernel.dtype),
        Lowering::Attention(group) => dtypes.contains(&group.dtype),
        Lowering::Column(group) => dtypes.contains(&group.dtype),
        Lowering::HorizontalColumns(group) => dtypes.contains(&group.dtype) && group.dims[3] == 1,
        Lowering::Matmul(_) => false,
    }
}

/// Whether cuBLASLt has a matmul for `group` (its dtype). A fused bias gradient only in f16
/// and bf16: in f32 the call computes on TF32 tensor cores, and its bias gradient sums the
/// TF32-rounded `dy` (measured on an H100: ~2 % off eager's f32 sum over 4096 rows), where a
/// column sum adds the f32 values.
pub fn library_matmul_lowers(group: &MatmulGroup) -> bool {
    let dtype = matches!(
        group.dtype,
        DType::F32 | DType::F16 | DType::BF16 | DType::F64
    );
    let bias_grad = group.bias_grad.is_none() || matches!(group.dtype, DType::F16 | DType::BF16);
    dtype && bias_grad
}

/// A GPU target's rules, for planning without its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuRules {
    /// CUDA with cuBLASLt loaded: CubeCL kernels for [`CUDA_DTYPES`], library matmuls.
    Cuda,
    /// wgpu: f32 kernels, no library matmul, at most `max_kernel_buffers` buffers a kernel
    /// (the adapter's storage buffers per shader less the runtime's own binding).
    Wgpu { max_kernel_buffers: usize },
}

impl GpuRules {
    /// Whether this target takes `work` (an attention step as its first compile would: before
    /// any autotune has timed it against its parts).
    pub fn lowers(self, work: Lowering<'_>) -> bool {
        match (self, work) {
            (Self::Cuda, Lowering::Matmul(group)) => library_matmul_lowers(group),
            (Self::Cuda, work) => cube_lowers(CUDA_DTYPES, work),
            (Self::Wgpu { .. }, work) => cube_lowers(WGPU_DTYPES, work),
        }
    }

    /// Buffers a generated kernel may bind.
    pub fn max_kernel_buffers(self) -> usize {
        match self {
            // CubeCL-CUDA's 1024 bindings less the runtime's own (`CubeTarget::new`).
            Self::Cuda => 1023,
            Self::Wgpu { max_kernel_buffers } => max_kernel_buffers,
        }
    }
}
