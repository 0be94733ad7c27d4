//! Back-pressure: a program that records graphs faster than the execution thread runs them
//! waits for room in its queue, and the wait is counted apart from the program's own work. (A
//! process of its own: the counters are the process's, and no other test may queue graphs
//! while it checks that a reading program never waits.)

use burn::tensor::{Tensor, TensorData, backend::Backend};
use burn_compile::Compiled;
use burn_flex::Flex;

type C = Compiled<Flex>;

use crate::support;
use support::matrix;

/// A program that records faster than its graphs run waits for room in the execution thread's
/// queue; the wait is counted (`metrics().queue_waits`, `queue_wait_time`), so that a
/// benchmark can tell a call's host work from the time it waited for the device. A program
/// that reads each result never waits there.
#[test]
fn recording_ahead_of_the_execution_thread_waits_and_the_wait_is_counted() {
    crate::own_process!(recording_ahead_of_the_execution_thread_waits_and_the_wait_is_counted);
    let device = Default::default();
    let eager = chain::<Flex>(&device, false);

    let before = burn_compile::metrics();
    chain::<C>(&device, true).assert_eq(&eager, true);
    let reading = burn_compile::metrics().since(&before);
    assert_eq!(
        reading.queue_waits, 0,
        "a program reading each result never runs ahead"
    );

    let before = burn_compile::metrics();
    chain::<C>(&device, false).assert_eq(&eager, true);
    let ahead = burn_compile::metrics().since(&before);
    // 48 graphs recorded in well under the time one 256³ product takes on the worker.
    assert!(ahead.queue_waits > 0, "{ahead:?}");
    assert!(!ahead.queue_wait_time.is_zero(), "{ahead:?}");
}

/// 48 steps of `y = tanh(y · x)`, each ended by `mark_step`; `read_each` reads every step's
/// result back (a program that never runs ahead).
fn chain<B: Backend>(device: &B::Device, read_each: bool) -> TensorData {
    let x = Tensor::<B, 2>::from_data(matrix([256, 256], 5), device) / 64.0;
    let mut y = x.clone();
    for _ in 0..48 {
        y = y.matmul(x.clone()).tanh();
        if read_each {
            let _ = y.clone().into_data();
        }
        burn_compile::mark_step();
    }
    y.into_data()
}
