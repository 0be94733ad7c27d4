//! [`ActivationOps`] of [`Compiled`]: the trait's default implementations, built from the float
//! ops (burn-router overrides none of them either).

use super::Compiled;
use burn_backend::ops::ActivationOps;
use burn_ir::BackendIr;

impl<B: BackendIr> ActivationOps<Self> for Compiled<B> {}
