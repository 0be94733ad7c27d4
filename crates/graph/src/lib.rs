//! The graph stage of burn-compile: a captured segment of Burn operations, its cache key
//! (independent of tensor ids and scalar values) and a readable listing.
//!
//! Everything here is backend-free so that it can be tested, hashed and printed without a device.

mod activation;
mod inputs;
mod key;
mod listing;
mod scalars;
mod segment;

pub use activation::Activation;
pub use inputs::{GraphInput, graph_inputs};
pub use key::{
    DimOwner, GraphKey, KeyWriter, OpShape, first_scalar_difference, scalar_differences,
};
pub use listing::{op_listing, op_name};
pub use scalars::{scalar_operands, scalar_operands_mut};
pub use segment::Segment;
