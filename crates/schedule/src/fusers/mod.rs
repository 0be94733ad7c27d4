//! The fusers: each kind of fusion finds its groups among the operations no earlier fuser
//! took, keeps those the target accepts, and claims them for its steps. [`FUSERS`] lists them
//! in the order they are tried. A new kind is a module here and one entry in that list, its
//! code generation, and its lowering in the runtime.

mod attention;
mod column;
mod horizontal;
mod horizontal_columns;
mod kernel;
mod matmul;
mod view_copies;

pub use attention::{AttentionGroup, attention_groups};
pub use column::{ColumnGroup, column_groups, column_layout};
pub use horizontal::{HorizontalGroup, MAX_HORIZONTAL_BUFFERS};
pub use horizontal_columns::{HorizontalColumnGroup, MAX_HELD_BYTES};
pub use kernel::{FusedGroup, Slot, fused_groups, scalar_operand};
pub use matmul::{
    Gemm, GemmOperand, MatmulGroup, MatmulKind, Residual, batch_summed_gemm, gemm, matmul_groups,
    scale_alpha,
};
pub use view_copies::{OperandCopies, operand_copies};

use crate::{ScheduleOptions, Step};
use burn_ir::OperationIr;

/// What the fusers have taken of a segment so far, and the groups the plan will hold.
pub(crate) struct Claims {
    /// Operations a fuser may still take: not dead, not taken by an earlier fuser. Only these
    /// are compared for common subexpressions.
    pub live: Vec<bool>,
    /// Operations that run inside a fused step (no step of their own).
    pub claimed: Vec<bool>,
    /// The steps that run at each position in place of claimed operations.
    pub steps_at: Vec<Vec<Step>>,
    pub attention: Vec<AttentionGroup>,
    pub column: Vec<ColumnGroup>,
    pub matmul: Vec<MatmulGroup>,
    pub fused: Vec<FusedGroup>,
    pub horizontal: Vec<HorizontalGroup>,
    pub horizontal_columns: Vec<HorizontalColumnGroup>,
}

impl Claims {
    pub(crate) fn new(live: Vec<bool>) -> Self {
        let n = live.len();
        Self {
            live,
            claimed: vec![false; n],
            steps_at: vec![Vec::new(); n],
            attention: Vec::new(),
            column: Vec::new(),
            matmul: Vec::new(),
            fused: Vec::new(),
            horizontal: Vec::new(),
            horizontal_columns: Vec::new(),
        }
    }
}

/// One kind of fusion.
pub(crate) trait Fuser: Sync {
    /// Takes this kind's groups among the live operations, as `options` allow: marks their
    /// operations taken (and claimed where they run inside the group's step), places the
    /// group's steps and pushes the groups into `claims`.
    fn fuse(&self, ops: &[OperationIr], options: &ScheduleOptions<'_>, claims: &mut Claims);
}

/// The fusers, in the order they are tried: attention first (its products and softmax are not
/// the other kinds'), library matmuls next (the operations of an epilogue are not a generated
/// kernel's), column sums next (a bias gradient is the matmuls' only where they fuse it), the
/// copies of swapped views that products read, generated kernels next, then the horizontal
/// groups of generated kernels (the copies' among them), and last those of column sums (which
/// move past the others' steps, so see them placed).
pub(crate) static FUSERS: &[&dyn Fuser] = &[
    &attention::AttentionFuser,
    &matmul::MatmulFuser,
    &column::ColumnFuser,
    &view_copies::ViewCopyFuser,
    &kernel::KernelFuser,
    &horizontal::HorizontalFuser,
    &horizontal_columns::HorizontalColumnFuser,
];
