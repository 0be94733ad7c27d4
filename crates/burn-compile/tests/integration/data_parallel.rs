//! Data-parallel training through burn-collective (Burn's `collective` feature) on
//! `Compiled<Flex>`: peers in one process, threads on the same Flex device (as burn-collective's
//! own tests), each running forward and backward of its shard of the batch as compiled graphs,
//! the gradients averaged with Burn's `GradientsParams::all_reduce` over the inner
//! `Compiled<Flex>` tensors, then one Adam step each. The mean of equal shards' mean losses is
//! the whole batch's mean loss, so after every step each peer's parameters must equal one eager
//! Flex run on the whole batch.

use crate::own_process;
use crate::support::{Mlp, float_data, weights};
use burn::backend::Autodiff;
use burn::collective::{CollectiveConfig, PeerId, ReduceOperation, finish_collective, register};
use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Tensor, TensorData, Tolerance};
use burn_compile::{BreakReason, Compiled};
use burn_flex::Flex;

type Eager = Autodiff<Flex>;
type Comp = Autodiff<Compiled<Flex>>;

/// Peers, rows of each peer's shard, features in and hidden, training steps.
const PEERS: usize = 2;
const ROWS: usize = 8;
const IN: usize = 16;
const HIDDEN: usize = 32;
const STEPS: usize = 5;
const LR: f64 = 1e-2;

fn initial_weights() -> [TensorData; 4] {
    [
        float_data(&[IN, HIDDEN], 11, -0.3, 0.3),
        float_data(&[HIDDEN], 12, -0.1, 0.1),
        float_data(&[HIDDEN, 1], 13, -0.3, 0.3),
        float_data(&[1], 14, -0.1, 0.1),
    ]
}

/// Step `step`'s batch: `rows` rows from row `first` of a batch of `PEERS · ROWS` (inputs and
/// targets), the same values whichever way the batch is cut.
fn batch(step: usize, first: usize, rows: usize) -> (TensorData, TensorData) {
    let all = PEERS * ROWS;
    let x = float_data(&[all, IN], 100 + step as u64, -1.0, 1.0);
    let y = float_data(&[all, 1], 200 + step as u64, -1.0, 1.0);
    let cut = |d: TensorData, width: usize| {
        let v = d.to_vec::<f32>().expect("f32");
        TensorData::new(
            v[first * width..(first + rows) * width].to_vec(),
            [rows, width],
        )
    };
    (cut(x, IN), cut(y, 1))
}

fn mse<B: Backend>(model: &Mlp<B>, x: Tensor<B, 2>, y: Tensor<B, 2>) -> Tensor<B, 1> {
    let d = model.forward(x) - y;
    (d.clone() * d).mean()
}

/// One eager Flex run on the whole batch: the parameters after each step.
fn whole_batch() -> Vec<Vec<TensorData>> {
    let device = Default::default();
    let mut model = Mlp::<Eager>::new(&initial_weights(), &device);
    let mut optim = AdamConfig::new().init::<Eager, Mlp<Eager>>();
    let mut after = Vec::new();
    for step in 0..STEPS {
        let (x, y) = batch(step, 0, PEERS * ROWS);
        let loss = mse(
            &model,
            Tensor::from_data(x, &device),
            Tensor::from_data(y, &device),
        );
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(LR, model, grads);
        after.push(weights(&model));
    }
    after
}

/// Peer `id` of a data-parallel run on backend `B`: its shard of every step's batch, the
/// gradients averaged over the peers; the parameters after each step and its shard's losses.
fn peer<B: AutodiffBackend>(id: usize, model: Mlp<B>) -> (Vec<Vec<TensorData>>, Vec<f32>) {
    let device: B::Device = Default::default();
    // The peers' models share their parameter ids (the all-reduce pairs gradients by id).
    let mut model = model.fork(&device);
    let me = PeerId::from(id);
    register::<B::InnerBackend>(
        me,
        device.clone(),
        CollectiveConfig::default().with_num_devices(PEERS),
    )
    .expect("register");
    let mut optim = AdamConfig::new().init::<B, Mlp<B>>();
    let (mut after, mut losses) = (Vec::new(), Vec::new());
    for step in 0..STEPS {
        let (x, y) = batch(step, id * ROWS, ROWS);
        let loss = mse(
            &model,
            Tensor::from_data(x, &device),
            Tensor::from_data(y, &device),
        );
        losses.push(loss.clone().into_scalar().elem::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model)
            .all_reduce::<B::InnerBackend>(me, ReduceOperation::Mean)
            .expect("all-reduce");
        model = optim.step(LR, model, grads);
        after.push(weights(&model));
    }
    finish_collective::<B::InnerBackend>(me).expect("finish");
    (after, losses)
}

/// Every peer of a data-parallel run on `B`, each on a thread of its own.
fn data_parallel<B: AutodiffBackend>() -> Vec<(Vec<Vec<TensorData>>, Vec<f32>)> {
    let model = Mlp::<B>::new(&initial_weights(), &Default::default());
    std::thread::scope(|s| {
        let peers: Vec<_> = (0..PEERS)
            .map(|id| {
                let model = model.clone();
                s.spawn(move || peer::<B>(id, model))
            })
            .collect();
        peers
            .into_iter()
            .map(|p| p.join().expect("a peer panicked"))
            .collect()
    })
}

/// Adam divides by sqrt(v): a gradient entry near zero whose last bits differ (shard sums in
/// another order than the whole batch's) moves its weight by up to 2·lr either way, so the
/// absolute floor is lr-sized; a wrong all-reduce (a sum, not a mean, or one shard) is off by
/// the whole update.
fn tolerance() -> Tolerance<f32> {
    Tolerance::rel_abs(1e-4, 2e-4)
}

#[test]
fn data_parallel_compiled_peers_train_like_one_device_on_the_whole_batch() {
    own_process!(data_parallel_compiled_peers_train_like_one_device_on_the_whole_batch);
    let want = whole_batch();
    let before = burn_compile::metrics();
    let peers = data_parallel::<Comp>();
    let m = burn_compile::metrics().since(&before);
    for (id, (after, losses)) in peers.iter().enumerate() {
        assert_eq!(losses.len(), STEPS);
        assert!(
            losses.iter().all(|l| l.is_finite()),
            "peer {id}: {losses:?}"
        );
        for (step, (got, want)) in after.iter().zip(&want).enumerate() {
            for (p, (g, w)) in got.iter().zip(want).enumerate() {
                if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    g.assert_approx_eq::<f32>(w, tolerance());
                })) {
                    panic!(
                        "peer {id}, step {step}, parameter {p}: compiled data-parallel \
                         differs from one device on the whole batch: {e:?}"
                    );
                }
            }
        }
    }
    // Every peer applied the same averaged gradients (their Adam steps may run on different
    // kernels, eager or generated, as each peer's plans compile: a few ULPs apart).
    for (a, b) in peers[0].0[STEPS - 1].iter().zip(&peers[1].0[STEPS - 1]) {
        a.assert_approx_eq::<f32>(b, Tolerance::rel_abs(1e-6, 1e-7));
    }
    assert!(m.graphs > 0, "the peers ran compiled graphs: {m:?}");
    assert_eq!(m.compile_fallbacks, 0, "no graph fell back to eager: {m:?}");
    // The all-reduce's first read of a peer's gradients closes that peer's graph, and the
    // peers' optimizer steps close the server's: a few breaks per step, not one per parameter
    // (4 parameters × 2 peers would be 8 per step).
    let cross = m.breaks_of(BreakReason::CrossThread);
    println!("cross-thread breaks over {STEPS} steps: {cross}");
    assert!(
        cross <= (STEPS * (PEERS + 2)) as u64,
        "{cross} cross-thread breaks in {STEPS} steps: {m:?}"
    );
}

/// The same run on eager Flex peers (burn-collective's own path): the reference the compiled
/// peers are held to is itself right.
#[test]
fn data_parallel_eager_peers_train_like_one_device_on_the_whole_batch() {
    own_process!(data_parallel_eager_peers_train_like_one_device_on_the_whole_batch);
    let want = whole_batch();
    for (id, (after, _)) in data_parallel::<Eager>().iter().enumerate() {
        for (g, w) in after[STEPS - 1].iter().zip(&want[STEPS - 1]) {
            if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                g.assert_approx_eq::<f32>(w, tolerance())
            })) {
                panic!("eager peer {id}: {e:?}");
            }
        }
    }
}
