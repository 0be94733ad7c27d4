//! Every capture client of the process, whatever its backend: what `explain`, `fullgraph` and
//! `mark_step` act on.

use crate::capture::AnyClient;
use std::sync::{Arc, Mutex};

static CLIENTS: Mutex<Vec<Arc<dyn AnyClient>>> = Mutex::new(Vec::new());

pub(crate) fn register(client: Arc<dyn AnyClient>) {
    CLIENTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(client);
}

/// Runs `f` on every client (outside the registry lock: flushing runs user-visible work).
pub(crate) fn for_each(mut f: impl FnMut(&dyn AnyClient)) {
    let clients: Vec<Arc<dyn AnyClient>> =
        CLIENTS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for client in clients {
        f(client.as_ref());
    }
}
