//! Runtime: cached plans, replayed on the inner backend by the device's executor.

mod activation;
mod cache;
mod executor;

pub(crate) use cache::{PlanCache, execute};
pub(crate) use executor::Executor;
