//! A compiled training step (`burn_compile::jit_train`) beside the same step captured on every
//! call, and eager Flex: the small encoder preset (d 64, 4 heads, 2 layers, batch 4 × 16) on the
//! CPU, trained with Adam (`burn_compile::optim`, its state in tensors) and a learning rate
//! warmed up then decayed along a cosine, passed to the step as a scalar input.
//!
//! ```text
//! cargo run --release -p burn-compile-examples --example jit_step [-- --iters N --rounds N]
//! ```
//!
//! Rounds alternate the three systems; each figure is the median round's mean per call. `host`
//! is the time of a round's first 8 calls on the caller's thread (fewer than the execution
//! thread's queue holds, so none waits for it: what a call costs the host); `step` is the
//! round's time per call up to its final sync. The first losses of the three must agree (relative
//! 1e-4), or the example fails.

use burn::backend::Autodiff;
use burn::module::Module;
use burn::nn::transformer::TransformerEncoder;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_compile::Compiled;
use burn_compile::optim::{Adam, AdamConfig};
use burn_compile_examples::{CollectWeights, encoder_config, forward, input_data, model_with};
use burn_flex::Flex;
use std::process::ExitCode;
use std::time::Instant;

type C = Compiled<Flex>;
type Ad<B> = Autodiff<B>;

const SHAPE: [usize; 3] = [4, 16, 64];

/// The learning rate of step `step`: a linear warm-up over 10 steps to 1e-2, then a cosine
/// decay over 500.
fn lr_at(step: u64) -> f64 {
    let (peak, warmup, decay) = (1e-2, 10, 500);
    if step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    let t = ((step - warmup) as f64 / decay as f64).min(1.0);
    0.5 * peak * (1.0 + (std::f64::consts::PI * t).cos())
}

fn train_step<B: AutodiffBackend>(
    model: TransformerEncoder<B>,
    optim: &mut impl Optimizer<TransformerEncoder<B>, B>,
    lr: f64,
    x: Tensor<B, 3>,
) -> (TransformerEncoder<B>, Tensor<B, 1>) {
    let loss = forward(&model, &x).square().mean();
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    (optim.step(lr, model, grads), loss)
}

type JitOptim = burn_compile::optim::Adaptor<Adam, TransformerEncoder<Ad<C>>, Ad<C>>;

/// Calls timed for the host cost: fewer than the device's queue of graphs holds, so that no
/// call waits for the execution thread.
const HOST_CALLS: usize = 8;

/// Times `iters` calls of `call` (results kept alive, one sync at the end): (host ms, step ms)
/// per call. Host: the mean time of the first [`HOST_CALLS`] calls, made after a sync.
fn time<B: Backend, T>(iters: usize, mut call: impl FnMut(u64) -> T) -> (f64, f64) {
    let device = Default::default();
    B::sync(&device).expect("sync");
    let mut outs = Vec::with_capacity(iters);
    let start = Instant::now();
    let mut host = None;
    for i in 0..iters {
        outs.push(call(i as u64));
        if i + 1 == HOST_CALLS.min(iters) {
            host = Some(start.elapsed().as_secs_f64() * 1e3 / (i + 1) as f64);
        }
    }
    burn_compile::mark_step();
    B::sync(&device).expect("sync");
    let step = start.elapsed().as_secs_f64() * 1e3 / iters as f64;
    drop(outs);
    (host.unwrap_or(0.0), step)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Args {
    iters: usize,
    rounds: usize,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        iters: 30,
        rounds: 7,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{flag} needs a number"))
        };
        match flag.as_str() {
            "--iters" => args.iters = value()?,
            "--rounds" => args.rounds = value()?,
            _ => {
                return Err(format!(
                    "unknown flag {flag}; usage: jit_step [--iters N] [--rounds N]"
                ));
            }
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let config = encoder_config(SHAPE[2], 128, 4, 2);
    let device = Default::default();
    let weights = {
        let mut collect = CollectWeights(Vec::new());
        config.init::<Flex>(&device).visit(&mut collect);
        collect.0
    };
    let x = |seed: u64| input_data(SHAPE, seed);

    // Training: three systems from the same weights.
    let mut eager = Some(model_with::<Ad<Flex>>(&config, &weights, &device));
    let mut eager_optim = AdamConfig::new().init();
    let mut compiled = Some(model_with::<Ad<C>>(&config, &weights, &device));
    let mut compiled_optim = AdamConfig::new().init();
    let mut jitted = Some(model_with::<Ad<C>>(&config, &weights, &device));
    let mut jit_optim: JitOptim = AdamConfig::new().init();
    let mut step = burn_compile::jit_train(
        |model: TransformerEncoder<Ad<C>>,
         optim: &mut JitOptim,
         (x, lr): (Tensor<Ad<C>, 3>, f64)| train_step(model, optim, lr, x),
    );
    // Each system's step count, for its learning rate.
    let mut steps = [0u64; 3];
    let mut lr = |system: usize| {
        steps[system] += 1;
        lr_at(steps[system] - 1)
    };

    // The first losses agree.
    let mut first = [Vec::new(), Vec::new(), Vec::new()];
    for seed in 0..3 {
        let model = eager.take().unwrap();
        let (m, l) = train_step(
            model,
            &mut eager_optim,
            lr(0),
            Tensor::from_data(x(seed), &device),
        );
        eager = Some(m);
        first[0].push(l.into_scalar());
        let model = compiled.take().unwrap();
        let (m, l) = train_step(
            model,
            &mut compiled_optim,
            lr(1),
            Tensor::from_data(x(seed), &device),
        );
        compiled = Some(m);
        first[1].push(l.into_scalar());
        let (m, l) = step.call(
            jitted.take().unwrap(),
            &mut jit_optim,
            (Tensor::from_data(x(seed), &device), lr(2)),
        );
        jitted = Some(m);
        first[2].push(l.into_scalar());
    }
    let agree = first[0].iter().enumerate().all(|(i, want)| {
        [first[1][i], first[2][i]]
            .iter()
            .all(|got| ((got - want) / want).abs() <= 1e-4)
    });
    println!(
        "first losses: eager {:?}, compiled {:?}, jit {:?}",
        first[0], first[1], first[2]
    );

    let (mut e, mut c, mut j) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..args.rounds {
        e.push(time::<Ad<Flex>, _>(args.iters, |i| {
            let seed = 10 + round as u64 * 1000 + i;
            let model = eager.take().unwrap();
            let (m, l) = train_step(
                model,
                &mut eager_optim,
                lr(0),
                Tensor::from_data(x(seed), &device),
            );
            eager = Some(m);
            l
        }));
        c.push(time::<Ad<C>, _>(args.iters, |i| {
            let seed = 10 + round as u64 * 1000 + i;
            let model = compiled.take().unwrap();
            let (m, l) = train_step(
                model,
                &mut compiled_optim,
                lr(1),
                Tensor::from_data(x(seed), &device),
            );
            compiled = Some(m);
            l
        }));
        j.push(time::<Ad<C>, _>(args.iters, |i| {
            let seed = 10 + round as u64 * 1000 + i;
            let (m, l) = step.call(
                jitted.take().unwrap(),
                &mut jit_optim,
                (Tensor::from_data(x(seed), &device), lr(2)),
            );
            jitted = Some(m);
            l
        }));
    }
    let stats = step.stats();
    let refused = step.ineligible();
    let fig = |v: &[(f64, f64)]| {
        (
            median(v.iter().map(|t| t.0).collect()),
            median(v.iter().map(|t| t.1).collect()),
        )
    };
    let (e, c, j) = (fig(&e), fig(&c), fig(&j));
    println!(
        "training step (Adam, scheduled lr), small preset on Flex ({} rounds × {} steps, median round):",
        args.rounds, args.iters
    );
    println!(
        "  eager Flex       host {:7.3} ms  step {:7.3} ms",
        e.0, e.1
    );
    println!(
        "  Compiled         host {:7.3} ms  step {:7.3} ms",
        c.0, c.1
    );
    println!(
        "  Compiled + jit   host {:7.3} ms  step {:7.3} ms",
        j.0, j.1
    );
    println!(
        "  step time: jit/compiled {:.2}, jit/eager {:.2}; host time: jit/compiled {:.3}",
        j.1 / c.1,
        j.1 / e.1,
        j.0 / c.0
    );
    println!(
        "  jit calls: {} recorded, {} replayed, {} run{}",
        stats.recordings,
        stats.replays,
        stats.runs,
        if refused.is_empty() {
            String::new()
        } else {
            format!(" (refused: {})", refused.join("; "))
        }
    );
    if !agree {
        eprintln!("the first losses differ by more than 1e-4 (relative)");
        return ExitCode::FAILURE;
    }
    if stats.replays == 0 {
        eprintln!("the step was never replayed");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
