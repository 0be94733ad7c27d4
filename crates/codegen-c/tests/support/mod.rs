//! The code generators' shared fixtures: the kernels the GPU tests snapshot and execute, and
//! the host reference they are compared with.
#![allow(dead_code)]

#[path = "../../../codegen/tests/support/kernels.rs"]
mod kernels;
#[path = "../../../codegen/tests/support/reference.rs"]
pub mod reference;
pub use kernels::*;
