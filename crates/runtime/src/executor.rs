//! Plan execution, on a worker thread of the device.
//!
//! A closed graph does not need to run before the user's program goes on: nothing observes its
//! results until a read, a sync or an eager op. So, like a GPU stream, the capture hands each
//! closed graph to the device's worker and returns at once; recording the next graph on the
//! user's thread overlaps with executing this one. Graphs run one at a time, in the order they
//! were closed, so the inner backend sees exactly eager Burn's op order.
//!
//! A graph runs on the stream of the thread that recorded it, as its ops would have in eager Burn
//! (CubeCL keys streams by thread; the worker takes on the recorder's [`StreamId`]). So the
//! recorder's uploads, its eager ops and its graphs are one ordered stream: a sync of that thread
//! waits for its graphs' GPU work, and memory its graphs free is reused by its next upload only
//! after the work reading it. (On a stream of its own, the worker's replays gave wrong results
//! on wgpu, whose streams run queued work lazily — most likely a buffer a replay freed was
//! overwritten by a later upload before the replay's reads ran; see the GPU test
//! `gpu_outputs_left_unread_while_a_parameter_is_replaced_match_eager`.)
//!
//! Whoever touches the inner backend directly (a read, a sync, a seed, an eager op) first waits
//! for the worker to be idle ([`Executor::wait`]). A panic of the inner backend during a graph is
//! caught on the worker and raised again (its message, then the graph and launch it came from)
//! at the next wait of the thread that recorded the graph (where eager Burn would have panicked,
//! and where the panic hook then prints it; `resume_unwind` printed nothing); that
//! thread's later graphs are dropped unexecuted until then (their inputs may not exist). Other
//! threads' graphs go on.
//!
//! With `CompileConfig::async_execution` off, graphs run on the calling thread instead.

use crate::InnerDevice;
use crate::counters::COUNTERS;
use crate::replay::{StepBinding, execute};
use burn_compile_graph::GraphKey;
use burn_compile_schedule::Plan;
use burn_ir::{BackendIr, OperationIr};
use burn_std::stream_id::StreamId;
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;

struct Job {
    /// The graph's cache key (what a kernel build at its end is reported under).
    key: GraphKey,
    ops: JobOps,
    plan: Arc<Plan>,
    /// The thread that recorded the graph.
    owner: ThreadId,
    /// Its stream, where the graph runs.
    stream: StreamId,
}

/// The ops a job runs: a closed graph's own (handed back emptied), or a step's recording
/// replayed whole with its binding to the caller's tensors.
enum JobOps {
    Graph(Vec<OperationIr>),
    Step(Arc<Vec<OperationIr>>, Arc<StepBinding>),
}

#[derive(Default)]
struct Progress {
    /// Graphs submitted and not yet finished (or dropped).
    pending: usize,
    /// Panics of the inner backend, each waiting to be raised on the thread that recorded the
    /// graph, with where it happened (the graph and its launch).
    panics: Vec<(ThreadId, Box<dyn Any + Send>, String)>,
    /// Emptied op vectors, handed back to the recorder (ops are large; regrowing costs copies).
    spent: Vec<Vec<OperationIr>>,
}

/// Graphs queued to the worker at most: enough for recording to run ahead of execution (a
/// training step is one to a few graphs), bounded so that the queued ops cannot grow without
/// limit between two reads (`examples/soak.rs` found the growth; BENCHMARKS.md, "Soak").
pub const MAX_QUEUED: usize = 16;

struct Shared {
    progress: Mutex<Progress>,
    /// Signalled when the queue empties, and when it has room again.
    idle: Condvar,
}

fn lock(mutex: &Mutex<Progress>) -> MutexGuard<'_, Progress> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the streams graphs run on are recorded ([`record_streams`]).
static RECORD_STREAMS: AtomicBool = AtomicBool::new(false);

/// The threads and streams graphs ran on, in order, while recorded.
static RAN_ON: Mutex<Vec<(ThreadId, StreamId)>> = Mutex::new(Vec::new());

/// Records, from now on, which thread and stream each graph runs on ([`streams_ran_on`]): a
/// test's evidence that graphs run on their recorder's stream.
pub fn record_streams() {
    RECORD_STREAMS.store(true, Ordering::Relaxed);
}

/// The threads and streams graphs ran on since [`record_streams`], in order.
pub fn streams_ran_on() -> Vec<(ThreadId, StreamId)> {
    RAN_ON.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Runs `plan` with `stream` as this thread's stream; returns a graph's emptied op vector.
fn run_on<B: BackendIr>(
    stream: StreamId,
    inner: &InnerDevice<B>,
    key: GraphKey,
    ops: JobOps,
    plan: &Arc<Plan>,
) -> Option<Vec<OperationIr>> {
    stream.executes(|| {
        if RECORD_STREAMS.load(Ordering::Relaxed) {
            RAN_ON
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((std::thread::current().id(), StreamId::current()));
        }
        let run = || match ops {
            JobOps::Graph(ops) => Some(execute(inner, key, ops, plan)),
            JobOps::Step(ops, binding) => {
                binding.execute(inner, key, &ops, plan);
                None
            }
        };
        if inner.first_replay(plan) {
            // Its kernels compile now (NVRTC, autotune, a C build): a spinner if that is slow.
            let what = format!("first run of graph {key} (compiling its kernels)");
            crate::progress::long_work(&what, run)
        } else {
            run()
        }
    })
}

/// Executes the plans of one device.
pub struct Executor<B: BackendIr> {
    inner: Arc<InnerDevice<B>>,
    shared: Arc<Shared>,
    /// The worker's queue, started at the first asynchronous graph.
    queue: Mutex<Option<Sender<Job>>>,
}

impl<B: BackendIr> Executor<B> {
    pub fn new(device: B::Device) -> Self {
        Self {
            inner: Arc::new(InnerDevice::new(device)),
            shared: Arc::new(Shared {
                progress: Mutex::new(Progress::default()),
                idle: Condvar::new(),
            }),
            queue: Mutex::new(None),
        }
    }

    /// Runs `plan` over `ops` (graph `key`), recorded by thread `owner` whose inner stream is
    /// `stream`: queued to the worker when `asynchronous`, else now (after the queued graphs).
    pub fn submit(
        &self,
        key: GraphKey,
        ops: Vec<OperationIr>,
        plan: Arc<Plan>,
        owner: ThreadId,
        stream: StreamId,
        asynchronous: bool,
    ) {
        let job = Job {
            key,
            ops: JobOps::Graph(ops),
            plan,
            owner,
            stream,
        };
        self.submit_job(job, asynchronous)
    }

    /// Runs a step's recorded graph (`ops`, planned as `plan`) bound to the caller's tensors
    /// by `binding`, in order with the device's other graphs (see [`Executor::submit`]).
    #[allow(clippy::too_many_arguments)]
    pub fn submit_step(
        &self,
        key: GraphKey,
        ops: Arc<Vec<OperationIr>>,
        binding: Arc<StepBinding>,
        plan: Arc<Plan>,
        owner: ThreadId,
        stream: StreamId,
        asynchronous: bool,
    ) {
        let job = Job {
            key,
            ops: JobOps::Step(ops, binding),
            plan,
            owner,
            stream,
        };
        self.submit_job(job, asynchronous)
    }

    fn submit_job(&self, job: Job, asynchronous: bool) {
        if !asynchronous {
            self.wait();
            let inner = &self.inner;
            let Job {
                key,
                ops,
                plan,
                stream,
                ..
            } = job;
            let spent = inner.on_device_thread(|| run_on(stream, inner, key, ops, &plan));
            if let Some(spent) = spent {
                lock(&self.shared.progress).spent.push(spent);
            }
            return;
        }
        {
            // Back-pressure: a program that records faster than its graphs run (a CPU training
            // loop that never reads) waits here, instead of queueing every step's ops.
            // The wait is counted: the time a program spends here is the device's, not the
            // host work of its calls (`metrics().queue_wait_time`).
            let mut progress = lock(&self.shared.progress);
            if progress.pending >= MAX_QUEUED {
                let start = std::time::Instant::now();
                while progress.pending >= MAX_QUEUED {
                    progress = self
                        .shared
                        .idle
                        .wait(progress)
                        .unwrap_or_else(|e| e.into_inner());
                }
                let waited = start.elapsed().as_nanos() as u64;
                COUNTERS.queue_waits.fetch_add(1, Ordering::Relaxed);
                COUNTERS
                    .queue_wait_nanos
                    .fetch_add(waited, Ordering::Relaxed);
            }
            progress.pending += 1;
        }
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let sender = queue.get_or_insert_with(|| self.start_worker());
        // The worker catches every panic of a graph, so it lives as long as its queue.
        sender
            .send(job)
            .expect("burn-compile: the execution thread is gone");
    }

    fn start_worker(&self) -> Sender<Job> {
        let (sender, receiver) = channel::<Job>();
        let inner = self.inner.clone();
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name("burn-compile-exec".into())
            .spawn(move || {
                for job in receiver {
                    let failed = lock(&shared.progress)
                        .panics
                        .iter()
                        .any(|(t, _, _)| *t == job.owner);
                    let result = if failed {
                        // An earlier graph of this thread panicked: its outputs do not exist.
                        Ok(None)
                    } else {
                        catch_unwind(AssertUnwindSafe(|| {
                            let (ops, plan) = (job.ops, &job.plan);
                            Some(inner.on_device_thread(|| {
                                run_on(job.stream, &inner, job.key, ops, plan)
                            }))
                        }))
                    };
                    let mut progress = lock(&shared.progress);
                    match result {
                        Ok(Some(Some(spent))) if progress.spent.len() < 4 => {
                            progress.spent.push(spent)
                        }
                        Ok(_) => {}
                        Err(payload) => {
                            let at =
                                format!("graph {}, {}", job.key, inner.current_launch(&job.plan));
                            tracing::error!(
                                target: "burn_compile::graphs",
                                "the inner backend panicked in {at} ({}); raised at the next \
                                 read or sync of the thread that recorded the graph",
                                crate::panic_message(&*payload)
                            );
                            progress.panics.push((job.owner, payload, at))
                        }
                    }
                    progress.pending -= 1;
                    if progress.pending == 0 || progress.pending + 1 == MAX_QUEUED {
                        shared.idle.notify_all();
                    }
                }
            })
            .expect("burn-compile: cannot start the execution thread");
        sender
    }

    /// Waits until every submitted graph has run; raises here the panic of a graph that this
    /// thread recorded, if one panicked.
    pub fn wait(&self) {
        let mut progress = lock(&self.shared.progress);
        while progress.pending > 0 {
            progress = self
                .shared
                .idle
                .wait(progress)
                .unwrap_or_else(|e| e.into_inner());
        }
        if progress.panics.is_empty() {
            return;
        }
        let me = std::thread::current().id();
        if let Some(i) = progress.panics.iter().position(|(t, _, _)| *t == me) {
            let (_, payload, at) = progress.panics.swap_remove(i);
            drop(progress);
            // A string message is raised again with `panic!`, so the panic hook prints it here,
            // on the user's thread, first line eager Burn's message; then where it happened.
            // (`resume_unwind` prints nothing.)
            match crate::panic_text(&*payload) {
                Some(message) => {
                    panic!("{message}\n(burn-compile: raised by {at}, on the execution thread)")
                }
                None => resume_unwind(payload),
            }
        }
    }

    /// An emptied op vector to record the next graph into, if one came back.
    pub fn take_spent(&self) -> Option<Vec<OperationIr>> {
        lock(&self.shared.progress).spent.pop()
    }

    /// The inner backend's tensors. Call [`Executor::wait`] before using them.
    pub fn inner(&self) -> &InnerDevice<B> {
        &self.inner
    }
}
