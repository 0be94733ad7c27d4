//! Compiled steps (`jit`) on the CPU: replays without running the step function, compared with
//! eager Flex on fresh data each call; and the steps that must not be replayed, refused with
//! their reason and still run.
//!
//! A module of its own: it reads the process-wide metrics, so its tests hold `SERIAL` against
//! each other (they run in parallel threads of the module's process). Tolerances: the forward pass as the
//! differential tests' f32 (`approx_tolerance`); training as `autodiff.rs` (relative 1e-4,
//! absolute 5e-5).

use burn::backend::Autodiff;
use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Distribution, Tensor, TensorData, Tolerance};
use burn_compile::incident::approx_tolerance as tolerance;
use burn_compile::{Compiled, JitStats, metrics};
use burn_flex::Flex;
use std::marker::PhantomData;
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

use crate::support::{float_data, load, weights};

type C = Compiled<Flex>;
type AdC = Autodiff<C>;
type AdF = Autodiff<Flex>;

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    first: Linear<B>,
    second: Linear<B>,
    relu: Relu,
}

impl<B: Backend> Mlp<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            first: LinearConfig::new(12, 24).init(device),
            second: LinearConfig::new(24, 4).init(device),
            relu: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.second
            .forward(self.relu.forward(self.first.forward(x)))
    }
}

/// The same weights on both backends.
fn pair<A: Backend, E: Backend>() -> (Mlp<A>, Mlp<E>) {
    let eager = Mlp::<E>::new(&Default::default());
    let compiled = load(Mlp::<A>::new(&Default::default()), weights(&eager));
    (compiled, eager)
}

fn input<B: Backend>(rows: usize, seed: u64) -> Tensor<B, 2> {
    Tensor::from_data(
        float_data(&[rows, 12], seed, -1.0, 1.0),
        &Default::default(),
    )
}

fn target<B: Backend>(rows: usize, seed: u64) -> Tensor<B, 2> {
    Tensor::from_data(float_data(&[rows, 4], seed, -1.0, 1.0), &Default::default())
}

fn assert_close(what: &str, got: TensorData, want: TensorData, tol: Tolerance<f64>) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    got.convert::<f64>()
        .assert_approx_eq::<f64>(&want.convert::<f64>(), tol);
}

fn training_tolerance() -> Tolerance<f64> {
    Tolerance::relative(1e-4).set_half_precision_absolute(5e-5)
}

/// An inference step: replayed once recorded twice (the function does not run), and every
/// output equals eager Flex's on that call's fresh input; the model comes back with the same
/// values under new tensors, and a clone the caller kept is untouched. The first call's
/// parameters are shared with that clone, the later calls' are handed over: two structures
/// (ownership is part of the guard), so the function runs three times.
#[test]
fn inference_steps_replay_and_match_eager() {
    crate::own_process!(inference_steps_replay_and_match_eager);
    let _serial = serial();
    let (mut model, eager) = pair::<C, Flex>();
    let kept = model.clone();
    let kept_weights = weights(&kept);
    let mut runs = 0;
    let mut step = burn_compile::jit(|model: Mlp<C>, x: Tensor<C, 2>| {
        runs += 1;
        let y = model.forward(x);
        (model, y)
    });
    let before = metrics();
    for call in 0..8 {
        let seed = 100 + call;
        let (next, y) = step.call(model, input::<C>(16, seed));
        model = next;
        let want = eager.forward(input::<Flex>(16, seed));
        assert_close(
            &format!("call {call}"),
            y.into_data(),
            want.into_data(),
            tolerance(DType::F32),
        );
    }
    let stats = step.stats();
    drop(step);
    assert_eq!((stats.recordings, stats.replays, stats.runs), (3, 5, 0));
    assert_eq!(runs, 3, "the function runs only to record");
    let spent = metrics().since(&before);
    assert_eq!((spent.step_recordings, spent.step_replays), (3, 5));
    for (got, want) in weights(&model).into_iter().zip(weights(&eager)) {
        assert_close("weights", got, want, tolerance(DType::F32));
    }
    for (got, want) in weights(&kept).into_iter().zip(kept_weights) {
        assert_eq!(got, want, "a clone the caller kept");
    }
}

/// A batch of another size is another guard: recorded twice, then replayed too.
#[test]
fn a_new_batch_shape_records_again() {
    crate::own_process!(a_new_batch_shape_records_again);
    let _serial = serial();
    let (mut model, eager) = pair::<C, Flex>();
    let mut step = burn_compile::jit(|model: Mlp<C>, x: Tensor<C, 2>| {
        let y = model.forward(x);
        (model, y)
    });
    for (call, rows) in [8, 8, 8, 5, 5, 5, 8].into_iter().enumerate() {
        let (next, y) = step.call(model, input::<C>(rows, call as u64));
        model = next;
        let want = eager.forward(input::<Flex>(rows, call as u64));
        assert_close(
            "output",
            y.into_data(),
            want.into_data(),
            tolerance(DType::F32),
        );
    }
    let stats = step.stats();
    assert_eq!((stats.recordings, stats.replays), (4, 3), "{stats:?}");
}

/// One tensor passed twice (a clone and itself): the first is shared, the last handed over,
/// so a replay frees it once; outputs equal eager's.
#[test]
fn a_tensor_passed_twice_replays_and_matches_eager() {
    crate::own_process!(a_tensor_passed_twice_replays_and_matches_eager);
    let _serial = serial();
    let (mut model, eager) = pair::<C, Flex>();
    let mut step = burn_compile::jit(|model: Mlp<C>, (a, b): (Tensor<C, 2>, Tensor<C, 2>)| {
        let y = model.forward(a) + model.forward(b).mul_scalar(2.0);
        (model, y)
    });
    for call in 0..6 {
        let x = input::<C>(6, call);
        let (next, y) = step.call(model, (x.clone(), x));
        model = next;
        let want = eager.forward(input::<Flex>(6, call)).mul_scalar(3.0);
        assert_close(
            &format!("call {call}"),
            y.into_data(),
            want.into_data(),
            tolerance(DType::F32),
        );
    }
    let stats = step.stats();
    assert_eq!((stats.recordings, stats.replays), (2, 4), "{stats:?}");
}

/// One training step: forward, mean squared error, backward, optimizer step.
fn train<B: AutodiffBackend>(
    model: Mlp<B>,
    optim: &mut impl Optimizer<Mlp<B>, B>,
    lr: f64,
    (x, y): (Tensor<B, 2>, Tensor<B, 2>),
) -> (Mlp<B>, Tensor<B, 1>) {
    let loss = MseLoss::new().forward(model.forward(x), y, Reduction::Mean);
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    (optim.step(lr, model, grads), loss)
}

/// `steps` training steps through `jit` and eagerly on Flex from the same weights, each on a
/// fresh batch of `rows`; every loss compared. Returns the step's figures and reasons, and both
/// models.
fn train_against_eager(
    mut optim: impl Optimizer<Mlp<AdC>, AdC>,
    mut eager_optim: impl Optimizer<Mlp<AdF>, AdF>,
    lr: f64,
    steps: u64,
    rows: usize,
) -> (JitStats, Vec<String>, Mlp<AdC>, Mlp<AdF>) {
    let (mut model, mut eager) = pair::<AdC, AdF>();
    let mut step = burn_compile::jit(|model: Mlp<AdC>, batch: (Tensor<AdC, 2>, Tensor<AdC, 2>)| {
        train(model, &mut optim, lr, batch)
    });
    for call in 0..steps {
        let (next, loss) = step.call(model, (input(rows, call), target(rows, 1000 + call)));
        model = next;
        let batch = (input(rows, call), target(rows, 1000 + call));
        let (next, want) = train(eager, &mut eager_optim, lr, batch);
        eager = next;
        assert_close(
            &format!("loss {call}"),
            loss.into_data(),
            want.into_data(),
            training_tolerance(),
        );
    }
    (step.stats(), step.ineligible(), model, eager)
}

/// SGD at a fixed learning rate: 20 steps replayed from the third; losses and parameters equal
/// eager Flex's.
#[test]
fn sgd_training_steps_replay_and_match_eager() {
    crate::own_process!(sgd_training_steps_replay_and_match_eager);
    let _serial = serial();
    let sgd = || SgdConfig::new();
    let (stats, why, model, eager) = train_against_eager(
        sgd().init::<AdC, Mlp<AdC>>(),
        sgd().init::<AdF, Mlp<AdF>>(),
        0.05,
        20,
        16,
    );
    assert_eq!((stats.recordings, stats.replays), (2, 18), "{why:?}");
    for (got, want) in weights(&model).into_iter().zip(weights(&eager)) {
        assert_close("parameters", got, want, training_tolerance());
    }
}

/// Parameters the caller replaces between steps (a checkpoint loaded) are what the next replay
/// reads.
#[test]
fn parameters_replaced_between_steps_are_picked_up() {
    crate::own_process!(parameters_replaced_between_steps_are_picked_up);
    let _serial = serial();
    let (mut model, _) = pair::<C, Flex>();
    let mut step = burn_compile::jit(|model: Mlp<C>, x: Tensor<C, 2>| {
        let y = model.forward(x);
        (model, y)
    });
    for call in 0..3 {
        model = step.call(model, input::<C>(4, call)).0;
    }
    let other = Mlp::<Flex>::new(&Default::default());
    let model = load(model, weights(&other));
    let (_, y) = step.call(model, input::<C>(4, 7));
    assert_eq!(step.stats().replays, 2);
    assert_close(
        "output",
        y.into_data(),
        other.forward(input::<Flex>(4, 7)).into_data(),
        tolerance(DType::F32),
    );
}

/// Random ops draw fresh values on every replay: two replays of the same input give other
/// dropout masks, each keeping about half of the values.
#[test]
fn random_ops_draw_fresh_values_on_each_replay() {
    crate::own_process!(random_ops_draw_fresh_values_on_each_replay);
    let _serial = serial();
    let mut step = burn_compile::jit(|state: PhantomData<C>, x: Tensor<C, 2>| {
        let mask = x.random_like(Distribution::Bernoulli(0.5));
        (state, x * mask)
    });
    let ones = || Tensor::<C, 2>::ones([100, 100], &Default::default());
    let masks: Vec<Vec<f32>> = (0..5)
        .map(|_| {
            step.call(PhantomData, ones())
                .1
                .into_data()
                .to_vec::<f32>()
                .unwrap()
        })
        .collect();
    assert_eq!(step.stats().replays, 3);
    for m in &masks {
        let kept = m.iter().filter(|v| **v == 1.0).count() as f64 / m.len() as f64;
        // 10,000 draws: the fraction's standard deviation is 0.005.
        assert!((kept - 0.5).abs() < 0.03, "kept {kept}");
    }
    assert_ne!(masks[3], masks[4], "two replays drew the same mask");
}

/// Adam keeps its moments inside the optimizer, which the step function holds: a replay could
/// not update them, so the step is refused (with that reason) and every call runs it; the
/// results are eager's.
#[test]
fn a_step_keeping_state_outside_its_arguments_is_refused_and_runs() {
    crate::own_process!(a_step_keeping_state_outside_its_arguments_is_refused_and_runs);
    let _serial = serial();
    let adam = || AdamConfig::new();
    let (stats, why, _, _) = train_against_eager(
        adam().init::<AdC, Mlp<AdC>>(),
        adam().init::<AdF, Mlp<AdF>>(),
        1e-2,
        4,
        8,
    );
    assert_eq!(stats.replays, 0);
    let why = why.join("\n");
    assert!(why.contains("outside its state and outputs"), "{why}");
}

/// A host read inside the step cuts it into graphs: refused, run every time.
#[test]
fn a_host_read_inside_the_step_is_refused() {
    crate::own_process!(a_host_read_inside_the_step_is_refused);
    let _serial = serial();
    let mut step = burn_compile::jit(|state: PhantomData<C>, x: Tensor<C, 2>| {
        let total: f32 = x.clone().sum().into_scalar();
        (state, x.mul_scalar(total))
    });
    for call in 0..4 {
        let x = input::<C>(3, call);
        let want = {
            let x = input::<Flex>(3, call);
            let total: f32 = x.clone().sum().into_scalar();
            x.mul_scalar(total)
        };
        let got = step.call(PhantomData, x).1;
        assert_close(
            "output",
            got.into_data(),
            want.into_data(),
            tolerance(DType::F32),
        );
    }
    assert_eq!(step.stats().replays, 0);
    let why = step.ineligible().join("\n");
    assert!(why.contains("host_read"), "{why}");
}

/// A scalar that changes between the two recording calls (a learning rate from a schedule) is
/// host state a replay cannot follow: refused, naming the op.
#[test]
fn a_scalar_changing_between_calls_is_refused() {
    crate::own_process!(a_scalar_changing_between_calls_is_refused);
    let _serial = serial();
    let mut scale = 1.0f32;
    let mut step = burn_compile::jit(|state: PhantomData<C>, x: Tensor<C, 2>| {
        scale *= 2.0;
        (state, x.mul_scalar(scale))
    });
    for call in 0..4 {
        let got = step.call(PhantomData, input::<C>(3, call)).1;
        let want = input::<Flex>(3, call).mul_scalar(2f32.powi(call as i32 + 1));
        assert_close(
            "output",
            got.into_data(),
            want.into_data(),
            tolerance(DType::F32),
        );
    }
    assert_eq!(step.stats().replays, 0);
    let why = step.ineligible().join("\n");
    assert!(
        why.contains("a scalar of op") && why.contains("MulScalar"),
        "{why}"
    );
}

/// A learning rate with a warm-up and a cosine decay, as a training loop schedules it.
fn scheduled_lr(step: u64, steps: u64) -> f64 {
    let (peak, floor, warmup) = (1e-2, 1e-4, 5);
    if step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    let t = (step - warmup) as f64 / (steps - warmup) as f64;
    floor + 0.5 * (peak - floor) * (1.0 + (std::f64::consts::PI * t).cos())
}

/// `steps` training steps through `jit_train` (the optimizer's state part of the step, the
/// learning rate a scalar input), without `jit` on the same compiled backend, and eagerly on
/// Flex, from the same weights and batches; every loss compared.
fn train_with_optimizer_against_eager<O, E>(
    mut optim: O,
    mut plain_optim: O,
    mut eager_optim: E,
    lr: impl Fn(u64) -> f64,
    steps: u64,
) -> (JitStats, Vec<String>, Mlp<AdC>, Mlp<AdF>)
where
    O: burn_compile::jit::StepOptimizer<AdC, Mlp<AdC>>,
    E: Optimizer<Mlp<AdF>, AdF>,
{
    let (mut model, mut eager) = pair::<AdC, AdF>();
    let mut plain = model.clone();
    let mut step = burn_compile::jit_train(
        |model: Mlp<AdC>, optim: &mut O, (batch, lr): ((Tensor<AdC, 2>, Tensor<AdC, 2>), f64)| {
            train(model, optim, lr, batch)
        },
    );
    let rows = 16;
    for call in 0..steps {
        let batch = || (input(rows, call), target(rows, 1000 + call));
        let (next, loss) = step.call(model, &mut optim, (batch(), lr(call)));
        model = next;
        let (next, plain_loss) = train(plain, &mut plain_optim, lr(call), batch());
        plain = next;
        let batch = (input(rows, call), target(rows, 1000 + call));
        let (next, want) = train(eager, &mut eager_optim, lr(call), batch);
        eager = next;
        let want = want.into_data();
        assert_close(
            &format!("loss {call} (jit)"),
            loss.into_data(),
            want.clone(),
            training_tolerance(),
        );
        assert_close(
            &format!("loss {call} (compiled)"),
            plain_loss.into_data(),
            want,
            training_tolerance(),
        );
    }
    (step.stats(), step.ineligible(), model, eager)
}

/// Adam with a warm-up and cosine schedule, 50 steps: the optimizer's first step creates its
/// state (a structure of its own, not replayed), the next two record, the other 47 replay with
/// each call's learning rate; losses and parameters equal eager Flex's (the same optimizer)
/// and compiled steps without `jit`.
#[test]
fn adam_with_a_schedule_replays_and_matches_eager() {
    crate::own_process!(adam_with_a_schedule_replays_and_matches_eager);
    let _serial = serial();
    let adam = || burn_compile::optim::AdamConfig::new();
    let steps = 50;
    let (stats, why, model, eager) = train_with_optimizer_against_eager(
        adam().init::<AdC, Mlp<AdC>>(),
        adam().init::<AdC, Mlp<AdC>>(),
        adam().init::<AdF, Mlp<AdF>>(),
        |call| scheduled_lr(call, steps),
        steps,
    );
    assert_eq!(
        (stats.recordings, stats.replays, stats.runs),
        (3, 47, 0),
        "{why:?}"
    );
    // After 50 Adam steps a parameter near zero may differ by a few 1e-9: Adam divides each
    // gradient by its own running magnitude, so rounding in a tiny gradient moves the parameter
    // by a fraction of the learning rate (CI: 4.4e-5 against 4.4e-5 + 5e-9). Hence an absolute
    // floor.
    for (got, want) in weights(&model).into_iter().zip(weights(&eager)) {
        assert_close("parameters", got, want, Tolerance::rel_abs(1e-4, 1e-6));
    }
}

/// AdamW (decoupled weight decay, its learning rate bound too) replays as Adam does.
#[test]
fn adamw_with_a_schedule_replays_and_matches_eager() {
    crate::own_process!(adamw_with_a_schedule_replays_and_matches_eager);
    let _serial = serial();
    let adamw = || burn_compile::optim::AdamWConfig::new().with_weight_decay(0.1);
    let (stats, why, _, _) = train_with_optimizer_against_eager(
        adamw().init::<AdC, Mlp<AdC>>(),
        adamw().init::<AdC, Mlp<AdC>>(),
        adamw().init::<AdF, Mlp<AdF>>(),
        |call| scheduled_lr(call, 12),
        12,
    );
    assert_eq!((stats.recordings, stats.replays), (3, 9), "{why:?}");
}

/// `burn_compile::optim`'s Adam is Burn's update with the bias corrections computed on the
/// device: 10 eager steps of each on Flex agree within f32 rounding.
#[test]
fn device_adam_follows_burns_adam() {
    crate::own_process!(device_adam_follows_burns_adam);
    let (mut ours, _) = pair::<AdF, AdF>();
    let mut burns = ours.clone();
    let mut our_optim = burn_compile::optim::AdamConfig::new().init::<AdF, Mlp<AdF>>();
    let mut burn_optim = AdamConfig::new().init::<AdF, Mlp<AdF>>();
    for call in 0..10 {
        let batch = || (input(8, call), target(8, 1000 + call));
        let (next, a) = train(ours, &mut our_optim, 1e-2, batch());
        ours = next;
        let (next, b) = train(burns, &mut burn_optim, 1e-2, batch());
        burns = next;
        assert_close("loss", a.into_data(), b.into_data(), training_tolerance());
    }
    // Parameters near zero differ by a few 1e-8 (powers of the betas multiplied on the device
    // against `powi` on the host).
    for (got, want) in weights(&ours).into_iter().zip(weights(&burns)) {
        assert_close("parameters", got, want, Tolerance::rel_abs(1e-4, 1e-6));
    }
}

/// The device Adam's update of a parameter is one generated kernel over the parameter's shape
/// (beside one over its one-element step-count tensors): its one-element ops are recorded
/// first, so that they do not cut the parameter-shaped ops into three kernels (found on W1's
/// training step: 230 launches where Burn's Adam took 171). The one-element kernels of all
/// parameters are one launch, as are the updates (W1-small's jit step: 188 launches before,
/// 166 after, where the plain step with Burn's Adam takes 163).
#[test]
fn device_adams_update_of_a_parameter_is_one_kernel() {
    crate::own_process!(device_adams_update_of_a_parameter_is_one_kernel);
    // Counts kernels: not while another test holds the stance at eager.
    let _serial = serial();
    let (mut model, _) = pair::<AdC, AdF>();
    let mut optim = burn_compile::optim::AdamConfig::new().init::<AdC, Mlp<AdC>>();
    let batch = |call| (input(8, call), target(8, 1000 + call));
    // The first step creates the optimizer's state; the second is the steady one.
    let (next, loss) = train(model, &mut optim, 1e-2, batch(0));
    loss.into_data();
    model = next;
    let (_, report) = burn_compile::explain(|| {
        let (next, loss) = train(model, &mut optim, 1e-2, batch(1));
        loss.into_data();
        next
    });
    let kernels: Vec<&String> = report.graphs.iter().flat_map(|g| &g.kernels).collect();
    for shape in ["[12, 24]", "[24, 4]"] {
        let over: Vec<_> = kernels
            .iter()
            .filter(|k| k.contains(&format!("over {shape} ")))
            .collect();
        assert_eq!(over.len(), 1, "parameter {shape}: {over:#?}\n{report}");
    }
    let one_element = kernels
        .iter()
        .filter(|k| k.contains("over [1, 1] ") || k.contains("over [1] "))
        .count();
    assert_eq!(one_element, 4, "one per parameter\n{report}");
    // Each parameter's update reads its corrections right after them, so the corrections
    // cannot wait for the last parameter's: they are launched together at the first one's
    // place, the updates at the last one's.
    let horizontal: Vec<_> = kernels
        .iter()
        .filter(|k| k.starts_with("horizontal kernel of 4 pointwise kernels"))
        .collect();
    assert_eq!(horizontal.len(), 2, "{horizontal:#?}\n{report}");
    assert!(
        horizontal.iter().any(|k| k.ends_with(", 4 elements")),
        "the four one-element kernels are one launch: {horizontal:#?}"
    );
}

/// Burn's own Adam counts its steps on the host: its bias corrections change every call and
/// follow no input, so the step is refused with that reason, and every call runs it (equal to
/// eager).
#[test]
fn burns_adam_is_refused_for_its_host_step_count() {
    crate::own_process!(burns_adam_is_refused_for_its_host_step_count);
    let _serial = serial();
    let (stats, why, _, _) = train_with_optimizer_against_eager(
        AdamConfig::new().init::<AdC, Mlp<AdC>>(),
        AdamConfig::new().init::<AdC, Mlp<AdC>>(),
        AdamConfig::new().init::<AdF, Mlp<AdF>>(),
        |_| 1e-2,
        6,
    );
    assert_eq!(stats.replays, 0);
    let why = why.join("\n");
    assert!(
        why.contains("follows none of the step's scalar inputs") && why.contains("step count"),
        "{why}"
    );
}

/// A learning rate equal in both recordings pins the replay to that value (which operands
/// follow it is unknown); the first call with another value records again and binds it, and
/// later values replay. Losses equal eager's throughout.
#[test]
fn a_learning_rate_held_then_changed_records_once_more() {
    crate::own_process!(a_learning_rate_held_then_changed_records_once_more);
    let _serial = serial();
    let adam = || burn_compile::optim::AdamConfig::new();
    let lrs = [1e-2, 1e-2, 1e-2, 1e-2, 1e-2, 5e-3, 2e-3, 1e-3];
    let (stats, why, _, _) = train_with_optimizer_against_eager(
        adam().init::<AdC, Mlp<AdC>>(),
        adam().init::<AdC, Mlp<AdC>>(),
        adam().init::<AdF, Mlp<AdF>>(),
        |call| lrs[call as usize],
        lrs.len() as u64,
    );
    // Call 0 creates the state, 1 and 2 record (pinned), 3 and 4 replay, 5 records again,
    // 6 and 7 replay with their own rates.
    assert_eq!((stats.recordings, stats.replays), (4, 4), "{why:?}");
}

/// A training step through `jit_train` with the device Adam, one call per entry of `rows` (a
/// batch of that many rows), beside eager Flex from the same weights; every loss compared.
/// Before call `keep`, the caller clones the model and checks after the call that the clone
/// still holds the weights it had; `before_call(call)` runs before each call. Returns the
/// step's figures after each call, and its reasons.
fn train_batches_against_eager(
    rows: &[usize],
    keep: Option<usize>,
    before_call: &mut dyn FnMut(usize),
) -> (Vec<JitStats>, Vec<String>) {
    let (mut model, mut eager) = pair::<AdC, AdF>();
    let mut optim = burn_compile::optim::AdamConfig::new().init::<AdC, Mlp<AdC>>();
    let mut eager_optim = burn_compile::optim::AdamConfig::new().init::<AdF, Mlp<AdF>>();
    let mut step = burn_compile::jit_train(
        |model: Mlp<AdC>, optim: &mut _, batch: (Tensor<AdC, 2>, Tensor<AdC, 2>)| {
            train(model, optim, 1e-2, batch)
        },
    );
    let mut stats = Vec::with_capacity(rows.len());
    for (call, &rows) in rows.iter().enumerate() {
        before_call(call);
        let seed = call as u64;
        let kept = (keep == Some(call)).then(|| {
            let kept = model.clone();
            let values = weights(&kept);
            (kept, values)
        });
        let batch = (input(rows, seed), target(rows, 1000 + seed));
        let (next, loss) = step.call(model, &mut optim, batch);
        model = next;
        let batch = (input(rows, seed), target(rows, 1000 + seed));
        let (next, want) = train(eager, &mut eager_optim, 1e-2, batch);
        eager = next;
        assert_close(
            &format!("loss {call} ({rows} rows)"),
            loss.into_data(),
            want.into_data(),
            training_tolerance(),
        );
        if let Some((kept, values)) = kept {
            for (got, want) in weights(&kept).into_iter().zip(values) {
                assert_eq!(got, want, "a clone the caller kept before call {call}");
            }
        }
        stats.push(step.stats());
    }
    for (got, want) in weights(&model).into_iter().zip(weights(&eager)) {
        assert_close("parameters", got, want, Tolerance::rel_abs(1e-4, 1e-6));
    }
    (stats, step.ineligible())
}

/// Batches of two sizes in turn, once each is recorded: every call replays a recording other
/// than the last call's (a replay takes the state apart for the recording the last call
/// replayed, so each of these calls finds it took it apart for the wrong one). Losses and
/// parameters equal eager's.
#[test]
fn training_batches_of_two_sizes_in_turn_replay_and_match_eager() {
    crate::own_process!(training_batches_of_two_sizes_in_turn_replay_and_match_eager);
    let _serial = serial();
    let rows = [16, 16, 16, 8, 8, 8, 16, 8, 16, 8, 16, 8];
    let (stats, why) = train_batches_against_eager(&rows, None, &mut |_| {});
    let stats = stats.last().expect("calls");
    // 16 rows: the state's creation, then two recordings; 8 rows: two recordings.
    assert_eq!(
        (stats.recordings, stats.replays, stats.runs),
        (5, 7, 0),
        "{why:?}"
    );
}

/// A model the caller clones between replays: that call's parameters are shared, another
/// structure, recorded (the replays update parameters in place, which would write the clone);
/// the clone keeps its values, and the calls after it, the clone gone, replay again.
#[test]
fn a_model_cloned_between_replays_is_not_written_by_the_next_call() {
    crate::own_process!(a_model_cloned_between_replays_is_not_written_by_the_next_call);
    let _serial = serial();
    let (stats, why) = train_batches_against_eager(&[16; 8], Some(5), &mut |_| {});
    let stats = stats.last().expect("calls");
    assert_eq!(
        (stats.recordings, stats.replays, stats.runs),
        (4, 4, 0),
        "{why:?}"
    );
}

/// The eager stance turns a replaying step off: its calls run the function eagerly (the state
/// taken apart for a replay is put back as it was), and once the stance is back the step
/// replays again. Losses equal eager's throughout.
#[test]
fn a_replaying_step_runs_its_function_under_the_eager_stance() {
    crate::own_process!(a_replaying_step_runs_its_function_under_the_eager_stance);
    let _serial = serial();
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            burn_compile::set_stance(burn_compile::Stance::Default);
        }
    }
    let _restore = Restore;
    let (stats, why) = train_batches_against_eager(&[8; 9], None, &mut |call| {
        burn_compile::set_stance(if (5..7).contains(&call) {
            burn_compile::Stance::Eager
        } else {
            burn_compile::Stance::Default
        })
    });
    let seen: Vec<_> = stats
        .iter()
        .map(|s| (s.recordings, s.replays, s.runs))
        .collect();
    assert!(why.is_empty(), "{why:?}");
    // Calls 0-2 record, 3 and 4 replay, 5 and 6 run (eager), 7 and 8 replay.
    assert_eq!(seen[4], (3, 2, 0), "{seen:?}");
    assert_eq!(seen[6], (3, 2, 2), "{seen:?}");
    assert_eq!(seen[8], (3, 4, 2), "{seen:?}");
}

/// Strict: a step that cannot be replayed panics with the reason instead of running on.
#[test]
fn a_strict_step_panics_when_refused() {
    crate::own_process!(a_strict_step_panics_when_refused);
    let _serial = serial();
    let mut step = burn_compile::jit(|state: PhantomData<C>, x: Tensor<C, 2>| {
        let total: f32 = x.clone().sum().into_scalar();
        (state, x.mul_scalar(total))
    })
    .strict(true);
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        step.call(PhantomData, input::<C>(3, 0));
    }))
    .expect_err("a strict step that breaks at a read panics");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("strict compiled step") && message.contains("host_read"),
        "{message}"
    );
}

/// A scalar input binds only the operands that follow it: a multiplier passed in replays with
/// each call's value, while the same step's constant stays.
#[test]
fn a_scalar_input_is_rewritten_on_each_replay() {
    crate::own_process!(a_scalar_input_is_rewritten_on_each_replay);
    let _serial = serial();
    let mut step = burn_compile::jit(|state: PhantomData<C>, (x, scale): (Tensor<C, 2>, f64)| {
        (state, x.mul_scalar(scale).add_scalar(0.5))
    });
    for call in 0..6 {
        let scale = 1.5 + call as f64;
        let got = step.call(PhantomData, (input::<C>(3, call), scale)).1;
        let want = input::<Flex>(3, call).mul_scalar(scale).add_scalar(0.5);
        assert_close(
            &format!("call {call}"),
            got.into_data(),
            want.into_data(),
            tolerance(DType::F32),
        );
    }
    assert_eq!(step.stats().replays, 4);
}
