//! A training loop does not grow: a few hundred steps of a small transformer encoder with Adam
//! on `Autodiff<Compiled<Flex>>`; after warm-up the plan caches hold the same plans and resident
//! memory stays within a margin. (The long run, 10,000 steps: `examples/soak.rs`.)

use burn::nn::transformer::{TransformerEncoderConfig, TransformerEncoderInput};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::{Distribution, ElementConversion, Tensor};
use burn_compile::{Compiled, cached_plans, mark_step};
use burn_flex::Flex;

type B = burn::backend::Autodiff<Compiled<Flex>>;

/// Resident memory of this process, in bytes (`VmRSS` of `/proc/self/status`).
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[test]
fn a_training_loop_keeps_its_plans_and_memory_flat() {
    crate::own_process!(a_training_loop_keeps_its_plans_and_memory_flat);
    let device = Default::default();
    let config = TransformerEncoderConfig::new(32, 64, 4, 2).with_dropout(0.0);
    let mut model = config.init::<B>(&device);
    let mut optim = AdamConfig::new().init();
    let x = Tensor::<B, 3>::random([2, 8, 32], Distribution::Default, &device);
    let mut samples = Vec::new();
    for step in 1..=400 {
        let out = model.forward(TransformerEncoderInput::new(x.clone()));
        let loss = out.square().mean();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-3, model, grads);
        mark_step();
        if step % 100 == 0 {
            // The read waits for the step's graphs.
            let loss: f32 = loss.into_scalar().elem();
            assert!(loss.is_finite(), "step {step}: loss {loss}");
            samples.push((step, resident_bytes(), cached_plans()));
        }
    }
    // The step after the first read records one graph of its own (the loss it read is dropped
    // at another point of the op stream), compiled once; from the second sample on every graph
    // has been seen: the same plans, and memory within 32 MiB (a step's graphs or ops kept by
    // mistake would add megabytes per step).
    let (first, last) = (samples[1], samples[samples.len() - 1]);
    assert!(
        samples[1..].iter().all(|s| s.2 == first.2),
        "plans grew: {samples:?}"
    );
    assert!(
        last.1 <= first.1 + (32 << 20),
        "resident memory grew: {samples:?}"
    );
}
