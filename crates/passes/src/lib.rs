//! Graph passes of burn-compile. Each pass reads a captured segment (`[OperationIr]`) and returns
//! what it found; none needs a device.

mod cse;
mod dce;

pub use cse::{Duplicate, common_subexpressions};
pub use dce::{Liveness, dead_code};
