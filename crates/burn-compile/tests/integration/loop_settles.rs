//! A loop that never reads to host settles into repeating cached graphs: the size limit finds
//! the loop's period and cuts every period, so every graph after warm-up is a cache hit.
//! (A process of its own: it configures the default device.)

use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_compile::{BreakReason, CompileConfig, Compiled, configure, metrics};
use burn_flex::Flex;

fn update<B: burn::tensor::backend::Backend>(w: Tensor<B, 2>, x: &Tensor<B, 2>) -> Tensor<B, 2> {
    let g = x.clone().matmul(w.clone()).tanh();
    let g = g.transpose().matmul(x.clone()) * 0.01;
    w - g.transpose() + 0.001
}

#[test]
fn a_loop_without_reads_settles_into_cache_hits() {
    crate::own_process!(a_loop_without_reads_settles_into_cache_hits);
    let device = Default::default();
    configure(
        &device,
        CompileConfig {
            max_graph_ops: 61,
            ..Default::default()
        },
    );
    let x_data = TensorData::new((0..32).map(|i| (i as f32 * 0.37).sin()).collect(), [4, 8]);
    let w_data = TensorData::new((0..64).map(|i| (i as f32 * 0.11).cos()).collect(), [8, 8]);

    let start = metrics();
    let x = Tensor::<Compiled<Flex>, 2>::from_data(x_data.clone(), &device);
    let mut w = Tensor::<Compiled<Flex>, 2>::from_data(w_data.clone(), &device);
    for _ in 0..60 {
        w = update(w, &x);
    }
    let before = metrics();
    for _ in 0..60 {
        w = update(w, &x);
    }
    let after = metrics().since(&before);
    let all = metrics().since(&start);
    eprintln!("whole loop: {all:?}");
    // Cut at a fixed size, a step of k ops would give k / gcd(k, 61) distinct graphs; cut at
    // a whole number of periods, the first few graphs differ (warm-up, finding the period) and then one repeats.
    assert!(all.cache_misses <= 4, "too many distinct graphs: {all:?}");
    assert!(after.graphs >= 5, "{after:?}");
    assert_eq!(after.cache_misses, 0, "the loop did not settle: {after:?}");
    assert_eq!(
        after.breaks_of(BreakReason::SizeLimit),
        after.graphs,
        "{after:?}"
    );

    let xe = Tensor::<Flex, 2>::from_data(x_data, &device);
    let mut we = Tensor::<Flex, 2>::from_data(w_data, &device);
    for _ in 0..120 {
        we = update(we, &xe);
    }
    w.into_data()
        .assert_approx_eq::<f32>(&we.into_data(), Tolerance::default());
}
