//! Graph passes of burn-compile. Each pass reads a captured segment (`[OperationIr]`) and returns
//! what it found (a rewrite, as edits the plan applies to each replayed segment); none needs a
//! device.

mod cse;
mod dce;
mod relu_masks;

pub use cse::{Duplicate, common_subexpressions};
pub use dce::{Liveness, dead_code};
pub use relu_masks::{InputRewrite, apply_rewrites, relu_backward_reads_output, rewritten};
