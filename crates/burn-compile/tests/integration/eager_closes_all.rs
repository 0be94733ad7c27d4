//! An eager op closes every thread's pending graph on the device. In a process of its own: run beside other tests, the eager op would cut their graphs too and
//! break their structural assertions (graph counts, merged ops).

use burn::tensor::{Tensor, Tolerance};
use burn_compile::{Compiled, explain};
use burn_flex::Flex;

type C = Compiled<Flex>;

use crate::support;

use support::matrix as data;

/// An eager op closes every thread's pending graph (it may read their tensors): a graph closed
/// that way by another thread still belongs to its owner's `explain` region, which reports it.
#[test]
fn a_graph_another_thread_closes_is_reported_to_its_owners_explain() {
    crate::own_process!(a_graph_another_thread_closes_is_reported_to_its_owners_explain);
    use std::sync::mpsc::channel;
    let (recorded, wait_recorded) = channel();
    let (closed, wait_closed) = channel();
    let owner = std::thread::spawn(move || {
        let device = Default::default();
        let x = Tensor::<C, 2>::from_data(data([4, 4], 71), &device);
        let (y, report) = explain(|| {
            let y = (x.clone() * 2.0).exp();
            recorded.send(()).unwrap();
            // Meanwhile the other thread runs an op eagerly, which closes this graph.
            wait_closed.recv().unwrap();
            y
        });
        (y.into_data(), report)
    });
    wait_recorded.recv().unwrap();
    let device = Default::default();
    // A sort runs eagerly on the inner backend (a data-dependent op the capture does not hold).
    let _ = Tensor::<C, 2>::from_data(data([2, 3], 72), &device)
        .sort(1)
        .into_data();
    closed.send(()).unwrap();
    let (y, report) = owner.join().unwrap();
    let ops: usize = report.ops_per_graph.iter().sum();
    assert!(report.graph_count >= 1 && ops >= 2, "{report}");
    let x = Tensor::<Flex, 2>::from_data(data([4, 4], 71), &Default::default());
    y.assert_approx_eq::<f32>(&(x * 2.0).exp().into_data(), Tolerance::default());
}
