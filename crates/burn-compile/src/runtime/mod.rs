//! Runtime: cached plans, replayed on the inner backend.

mod cache;

pub(crate) use cache::PlanCache;
