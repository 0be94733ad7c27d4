//! Capture: the op stream of a `Compiled<B>` device, cut into graphs at explicit breaks.

mod breaks;
mod client;
mod period;

pub use breaks::{BreakReason, GraphBreak};
pub(crate) use client::AnyClient;
pub use client::{CompileChannel, CompileClient, SameBackendBridge};
