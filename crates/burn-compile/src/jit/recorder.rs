//! The graphs the calling thread closes while a step is recorded ([`super::Jit`]).

use crate::capture::GraphBreak;
use burn_compile_graph::GraphKey;
use burn_compile_schedule::Plan;
use burn_ir::OperationIr;
use std::cell::RefCell;
use std::sync::Arc;

/// One graph closed during a recorded step: its ops as the plan replays them.
pub(crate) struct ClosedGraph {
    /// The device it was closed on ([`crate::CompileClient`]'s key).
    pub device: usize,
    pub key: GraphKey,
    pub plan: Arc<Plan>,
    pub ops: Vec<OperationIr>,
    pub ended_by: GraphBreak,
}

thread_local! {
    static RECORDING: RefCell<Option<Vec<ClosedGraph>>> = const { RefCell::new(None) };
}

/// Keeps the graphs this thread closes until [`Session::finish`], or until dropped (a step
/// function that panics stops the recording too).
pub(crate) struct Session(());

/// Starts keeping the graphs this thread closes.
pub(crate) fn start() -> Session {
    RECORDING.with(|r| *r.borrow_mut() = Some(Vec::new()));
    Session(())
}

impl Session {
    /// Stops keeping them; the graphs closed since [`start`].
    pub(crate) fn finish(self) -> Vec<ClosedGraph> {
        RECORDING
            .with(|r| r.borrow_mut().take())
            .unwrap_or_default()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        RECORDING.with(|r| r.borrow_mut().take());
    }
}

/// Called by the capture for every graph the calling thread closes (a copy of its ops is kept
/// only while a step is recorded).
pub(crate) fn closed(
    device: &usize,
    key: GraphKey,
    plan: &Arc<Plan>,
    ops: &[OperationIr],
    ended_by: &GraphBreak,
) {
    RECORDING.with(|r| {
        if let Some(graphs) = r.borrow_mut().as_mut() {
            graphs.push(ClosedGraph {
                device: *device,
                key,
                plan: plan.clone(),
                ops: plan.rewritten(ops).into_owned(),
                ended_by: ended_by.clone(),
            });
        }
    });
}
