//! Example programs live beside this crate: `cargo run -p burn-compile-examples --example …`.
