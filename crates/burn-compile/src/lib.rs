//! # burn-compile
//!
//! `Compiled<B>` is a Burn backend decorator: change `Flex` to `Compiled<Flex>` (or `Cuda` to
//! `Compiled<Cuda>`, also under `Autodiff<…>`) and every op is captured into graphs, cut at
//! explicit, explained breaks, and replayed through cached plans.
//!
//! The pipeline reads in crate order: `backend` + `capture` (this crate) → `graph` → `passes` →
//! `schedule` → `codegen` (backend-free crates) → `runtime` (`burn-compile-runtime`). This crate
//! also holds the plan cache (`plan_cache`: compiles, recompiles, symbolic plans) and what
//! users see: config, `explain`, metrics, logs, incident files (`incident`: a graph replayed
//! offline, compiled against eager).
//!
//! ```no_run
//! use burn::tensor::Tensor;
//! use burn_compile::{Compiled, explain};
//! type B = Compiled<burn_flex::Flex>;
//!
//! let device = Default::default();
//! let x = Tensor::<B, 2>::ones([2, 3], &device);
//! let (y, report) = explain(|| (x.clone() * 2.0).exp().sum().into_scalar());
//! println!("{y} {report}");
//! ```

mod backend;
mod capture;
mod config;
mod diagnostics;
mod dims;
mod disk_cache;
mod explain;
pub mod incident;
pub mod jit;
mod logs;
mod metrics;
pub mod optim;
mod plan_cache;
mod registry;
mod stance;

pub use burn_compile_disk_cache::ImportReport;
pub use burn_compile_runtime::KernelBuild;
pub use burn_compile_runtime::profile::{StepTime, set_replay_profiling, take_replay_profile};
pub use burn_compile_runtime::targets::rules::GpuRules;
pub use capture::{BreakReason, CompileChannel, CompileClient, GraphBreak, SameBackendBridge};
pub use config::{
    CompileConfig, ConfigError, DynamicShapes, Faults, Mode, RecordingCopies, config_for, configure,
};
pub use diagnostics::{GraphRecord, PlannedMemory};
pub use dims::{Dim, DimError, MarkDynamic, mark_dynamic};
pub use disk_cache::{cache_usage, export_cache, import_cache};
pub use explain::{
    Explanation, FullGraphError, explain, explain_plan, fullgraph, mark_step, take_error,
};
pub use jit::{Jit, JitStats, StepBackend, StepTensors, jit, jit_train};
pub use logs::{TOPICS as LOG_TOPICS, init_logs};
pub use metrics::{Metrics, cached_plans, metrics};
pub use stance::{Stance, eager, set_stance, stance};

pub use burn_compile_graph::GraphKey;

pub use backend::{Compiled, QuantizedPrimitive};
/// The trait an inner backend of [`Compiled`] implements (Burn's `burn_ir::BackendIr`), for
/// code generic over `Compiled<X>`.
pub use burn_ir::BackendIr;

/// `Compiled<Wgpu>`: raw CubeBackend on wgpu.
#[cfg(all(feature = "wgpu", not(feature = "wgpu-fusion")))]
pub type Wgpu = burn_wgpu::Wgpu<f32, i32, u32>;

/// `Compiled<WgpuFusion>`: Burn's `Fusion<CubeBackend>` on wgpu as the inner backend (feature
/// `wgpu-fusion`, its own build). Correct, but slower than the raw backend: both queue ops.
#[cfg(feature = "wgpu-fusion")]
pub type WgpuFusion = burn_wgpu::Wgpu<f32, i32, u32>;

/// `Compiled<Cuda>`: raw CubeBackend on CUDA.
#[cfg(feature = "cuda")]
pub type Cuda = burn_cuda::Cuda<f32, i32>;
