//! [`TransactionOps`] of [`Compiled`]: the default transaction, which reads each tensor with
//! `*_into_data` (burn-router overrides nothing either). The first read closes the graphs; the
//! others find nothing pending.

use super::Compiled;
use burn_backend::ops::TransactionOps;
use burn_ir::BackendIr;

impl<B: BackendIr> TransactionOps<Self> for Compiled<B> {}
