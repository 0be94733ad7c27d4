//! Declared dynamic dimensions: torch.export's `Dim` and torch.compile's `mark_dynamic`.
//!
//! A user who knows that a dimension varies (a batch, a sequence length) declares it with a
//! name and a range. The graphs that read the marked tensor then take that size as a runtime
//! value from their first compile (no specialized compile first, under any
//! [`DynamicShapes`](crate::DynamicShapes) but `Never`), and a size outside the range is an
//! error, never a silent recompile: [`mark_dynamic`] refuses it at once, and a later graph of
//! the family whose size left the range runs eagerly and hands the error to the next read or
//! sync (and to [`crate::take_error`]).

use crate::backend::Compiled;
use burn_ir::BackendIr;
use burn_tensor::{Int, Tensor};

/// A named dynamic dimension with its inclusive range of sizes.
///
/// Sizes 0 and 1 are never runtime values (a 1 broadcasts, a 0 is empty: plans specialize on
/// them), so a range starts at 2 or more.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Dim {
    pub name: String,
    pub min: u64,
    pub max: u64,
}

impl Dim {
    /// The dimension `name` of sizes `min..=max`.
    pub fn new(name: impl Into<String>, min: u64, max: u64) -> Self {
        Self {
            name: name.into(),
            min,
            max,
        }
    }

    /// Whether `size` is within the range.
    pub fn contains(&self, size: u64) -> bool {
        (self.min..=self.max).contains(&size)
    }
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` ({}..={})", self.name, self.min, self.max)
    }
}

/// Why [`mark_dynamic`] refused a declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DimError {
    /// The tensor has no such axis.
    Axis { axis: usize, rank: usize },
    /// The range is empty or includes 0 or 1.
    Range(Dim),
    /// The tensor's size along the axis is outside the range.
    OutOfRange { dim: Dim, axis: usize, size: u64 },
}

impl std::fmt::Display for DimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DimError::Axis { axis, rank } => {
                write!(f, "mark_dynamic: axis {axis} of a tensor of rank {rank}")
            }
            DimError::Range(dim) => write!(
                f,
                "mark_dynamic: dimension {dim} has an empty range or one below 2 (sizes 0 and 1 \
                 are always specialized)"
            ),
            DimError::OutOfRange { dim, axis, size } => write!(
                f,
                "mark_dynamic: dimension {dim} is {size} on axis {axis} of this tensor, outside \
                 its declared range"
            ),
        }
    }
}

impl std::error::Error for DimError {}

/// A tensor of a `Compiled` backend whose dimensions can be declared dynamic: float and int
/// tensors of `Compiled<B>`. (Under `Autodiff<Compiled<B>>`, declare on `tensor.inner()`: it
/// is the same tensor.)
pub trait MarkDynamic {
    #[doc(hidden)]
    fn declare(&self, axis: usize, dim: Dim) -> Result<(), DimError>;
}

fn declare<B: BackendIr>(
    primitive: burn_router::RouterTensor<crate::CompileClient<B>>,
    axis: usize,
    dim: Dim,
) -> Result<(), DimError> {
    let client = primitive.client.clone();
    // A clone of the user's tensor: its ir is read-only and taking it frees nothing.
    let ir = primitive.into_ir();
    let rank = ir.shape.num_dims();
    if axis >= rank {
        return Err(DimError::Axis { axis, rank });
    }
    if dim.min < 2 || dim.min > dim.max {
        return Err(DimError::Range(dim));
    }
    let size = ir.shape[axis] as u64;
    if !dim.contains(size) {
        return Err(DimError::OutOfRange { dim, axis, size });
    }
    client.mark_dynamic(ir.id, size, dim);
    Ok(())
}

impl<B: BackendIr, const D: usize> MarkDynamic for Tensor<Compiled<B>, D> {
    fn declare(&self, axis: usize, dim: Dim) -> Result<(), DimError> {
        declare(self.clone().into_primitive().tensor(), axis, dim)
    }
}

impl<B: BackendIr, const D: usize> MarkDynamic for Tensor<Compiled<B>, D, Int> {
    fn declare(&self, axis: usize, dim: Dim) -> Result<(), DimError> {
        declare(self.clone().into_primitive(), axis, dim)
    }
}

/// Declares axis `axis` of `tensor` dynamic, as `dim`: the graphs reading this tensor take its
/// size there as a runtime value of their plan from their first compile (guarded by `dim`'s
/// range), and their later sizes reuse that plan. Errors when the axis does not exist, the
/// range is empty or below 2, or the tensor's size is outside it.
///
/// ```ignore
/// let seq = Dim::new("seq", 2, 512);
/// burn_compile::mark_dynamic(&tokens, 1, seq)?;
/// ```
pub fn mark_dynamic(tensor: &impl MarkDynamic, axis: usize, dim: Dim) -> Result<(), DimError> {
    tensor.declare(axis, dim)
}
