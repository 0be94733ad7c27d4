//! Runtime: cached plans, replayed on the inner backend by the device's executor.

mod activation;
mod cache;
#[cfg(feature = "cpu")]
mod cpu;
#[cfg(feature = "cuda")]
mod cublaslt;
pub(crate) mod disk;
mod executor;
mod inner;
mod kernels;
pub(crate) mod profile;
pub(crate) mod progress;

pub(crate) use cache::{PlanCache, execute, execute_one, panic_message, plan_on};
pub(crate) use executor::Executor;
#[cfg(test)]
pub(crate) use executor::RAN_ON;
pub(crate) use inner::InnerDevice;
#[cfg(feature = "gpu")]
pub(crate) use kernels::is_cubecl;
