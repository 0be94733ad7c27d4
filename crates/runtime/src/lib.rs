//! # burn-compile-runtime
//!
//! The last stage of burn-compile's pipeline (capture → graph → passes → schedule → codegen →
//! runtime): a device's plans replayed on its inner backend's tensors.
//!
//! - [`Executor`] runs the graphs of one device on a worker thread, in the order they closed.
//! - [`InnerDevice`] holds the inner backend's tensors under the ids the capture gave them and
//!   runs each step of a plan on them ([`replay`]).
//! - [`targets`]: what launches generated kernels on the inner backend's own tensors — CubeCL on
//!   wgpu and CUDA (cuBLASLt for CUDA's matmuls, cuDNN for its convolutions when asked), C on
//!   the CPU.
//!
//! The capture depends on this crate; this crate knows nothing of the capture.

mod activation;
mod config;
pub mod counters;
pub mod disk;
pub mod executable;
mod executor;
mod inner;
mod panics;
pub mod profile;
pub mod progress;
pub mod recording;
pub mod replay;
pub mod targets;

pub use config::{RuntimeConfig, default_cache_dir};
pub use counters::KernelBuild;
pub use executable::{Binding, Executable, Launch, ScalarSource};
pub use executor::{Executor, record_streams, streams_ran_on};
pub use inner::InnerDevice;
pub use panics::{panic_message, panic_text};
pub use replay::{StepBinding, execute, execute_one, execute_ops};
#[cfg(feature = "gpu")]
pub use targets::is_cubecl;
