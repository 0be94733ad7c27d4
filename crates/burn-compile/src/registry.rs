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

/// Runs at the exit of a thread that recorded ops: its streams are closed and forgotten, so a
/// finished worker costs nothing afterwards.
struct ThreadExit(std::thread::ThreadId);

impl Drop for ThreadExit {
    fn drop(&mut self) {
        for_each(|c| c.thread_exited(self.0));
    }
}

thread_local! {
    static THREAD_EXIT: ThreadExit = ThreadExit(std::thread::current().id());
}

/// Arms the exit hook of the calling thread (once per thread).
pub(crate) fn watch_thread_exit() {
    THREAD_EXIT.with(|_| ());
}
