//! Graphs run on the device's execution thread (asynchronous execution, the default): results,
//! and seeds must be exactly those of eager Burn. (Panics: inner_panic.rs.)

use burn::tensor::{Distribution, Tensor, TensorData};
use burn_compile::Compiled;
use burn_flex::Flex;

type C = Compiled<Flex>;

use crate::support;
use support::matrix;

#[test]
fn graphs_of_two_threads_interleave_on_the_worker_correctly() {
    crate::own_process!(graphs_of_two_threads_interleave_on_the_worker_correctly);
    let device = Default::default();
    let run = |seed: u64| {
        let x = Tensor::<C, 2>::from_data(matrix([8, 8], seed), &Default::default());
        let mut y = x.clone();
        for i in 0..40 {
            y = y.matmul(x.clone()).tanh();
            if i % 10 == 9 {
                burn_compile::mark_step();
            }
        }
        y.into_data()
    };
    let other = std::thread::spawn(move || run(4));
    let mine = run(3);
    let theirs = other.join().unwrap();
    let eager = |seed: u64| {
        let x = Tensor::<Flex, 2>::from_data(matrix([8, 8], seed), &device);
        let mut y = x.clone();
        for _ in 0..40 {
            y = y.matmul(x.clone()).tanh();
        }
        y.into_data()
    };
    mine.assert_eq(&eager(3), true);
    theirs.assert_eq(&eager(4), true);
}

#[test]
fn a_seed_waits_for_the_draws_queued_before_it() {
    crate::own_process!(a_seed_waits_for_the_draws_queued_before_it);
    let device = Default::default();
    let draw = |seeded: &dyn Fn(u64)| -> Vec<TensorData> {
        seeded(11);
        let a = Tensor::<C, 2>::random([16, 16], Distribution::Default, &device);
        let a = (a * 3.0).exp(); // queued, not yet run, when the seed below arrives
        seeded(12);
        let b = Tensor::<C, 2>::random([16, 16], Distribution::Default, &device);
        vec![a.into_data(), b.into_data()]
    };
    let compiled = draw(&|s| <C as burn::tensor::backend::Backend>::seed(&device, s));

    <Flex as burn::tensor::backend::Backend>::seed(&device, 11);
    let a = (Tensor::<Flex, 2>::random([16, 16], Distribution::Default, &device) * 3.0).exp();
    <Flex as burn::tensor::backend::Backend>::seed(&device, 12);
    let b = Tensor::<Flex, 2>::random([16, 16], Distribution::Default, &device);
    compiled[0].assert_eq(&a.into_data(), true);
    compiled[1].assert_eq(&b.into_data(), true);
}

/// The replay profile names the steps a plan ran and counts them (other tests of this module
/// replay too, so counts are at least this test's).
#[test]
fn the_replay_profile_counts_each_kind_of_step_replayed() {
    crate::own_process!(the_replay_profile_counts_each_kind_of_step_replayed);
    let x = Tensor::<C, 2>::from_data(matrix([4, 4], 7), &Default::default());
    burn_compile::set_replay_profiling(true);
    for _ in 0..3 {
        let y = x.clone().matmul(x.clone()).tanh().matmul(x.clone());
        y.into_data();
    }
    burn_compile::set_replay_profiling(false);
    let profile = burn_compile::take_replay_profile();
    let count = |name: &str| profile.iter().find(|s| s.step == name).map(|s| s.count);
    assert!(count("Float.Matmul").is_some_and(|n| n >= 6), "{profile:?}");
    assert!(count("Float.Tanh").is_some_and(|n| n >= 3), "{profile:?}");
    assert!(profile.iter().all(|s| s.count > 0), "{profile:?}");
}

/// A tensor read on one thread while the thread that made it drops its own reference and runs
/// its next graph: the read must still find the tensor. (A regression, seen with burn-train's
/// checkpointer thread reading a model's parameters at an epoch's end: the reader's IR said
/// "read-only, someone else holds it", the owner's drop then freed it before the read ran —
/// `Should have handle for tensor …`.) A race: many rounds, each must read the right values.
#[test]
fn a_read_on_another_thread_survives_the_owners_drop() {
    crate::own_process!(a_read_on_another_thread_survives_the_owners_drop);
    let device = Default::default();
    for round in 0..400 {
        let data = TensorData::new(vec![round as f32; 64], [64]);
        let x = Tensor::<C, 1>::from_data(data, &device) * 2.0;
        let y = x.clone();
        let reader = std::thread::spawn(move || y.into_data());
        drop(x);
        // The owner's next graph runs its drop of `x`.
        let _ = (Tensor::<C, 1>::ones([8], &device) + round as f32).into_data();
        let read = reader.join().expect("the reader's read");
        assert_eq!(read.to_vec::<f32>().unwrap(), vec![2.0 * round as f32; 64]);
    }
}
