//! Runtime: cached plans, replayed on the inner backend by the device's executor.

mod activation;
mod cache;
#[cfg(feature = "cpu")]
mod cpu;
#[cfg(feature = "cuda")]
mod cublaslt;
mod executor;
mod inner;
mod kernels;
pub(crate) mod profile;

pub(crate) use cache::{Accepts, PlanCache, execute, execute_one};
pub(crate) use executor::Executor;
#[cfg(test)]
pub(crate) use executor::RAN_ON;
pub(crate) use inner::InnerDevice;
