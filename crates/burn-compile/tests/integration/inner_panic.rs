//! A panic of the inner backend inside a graph reaches the user with eager Burn's message (and
//! the graph and launch it came from), at the next read of the thread that recorded the graph
//! (graphs run on the device's execution thread). The device and its other tensors stay usable after it.

use burn::tensor::{Int, Tensor, TensorData};
use burn_compile::Compiled;
use burn_flex::Flex;
use std::panic::{AssertUnwindSafe, catch_unwind};

fn message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "<non-string panic>".into())
}

/// Selects rows with an out-of-range index: the Tensor API cannot check index values, so the
/// inner backend panics while the op runs.
fn bad_select<B: burn::tensor::backend::Backend>() -> Tensor<B, 2> {
    let device = Default::default();
    let x = Tensor::<B, 2>::from_data(TensorData::new(vec![0.5f32; 12], [4, 3]), &device);
    let index = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![1i64, 9], [2]), &device);
    x.select(0, index) * 2.0
}

#[test]
fn an_inner_backend_panic_is_raised_at_the_read_with_eagers_message() {
    crate::own_process!(an_inner_backend_panic_is_raised_at_the_read_with_eagers_message);
    let eager = catch_unwind(AssertUnwindSafe(|| bad_select::<Flex>().into_data()));
    let eager = message(eager.expect_err("eager Flex panics on an out-of-range index"));

    // A tensor made before the failure, still pending in the same graph as the failing op.
    let device = Default::default();
    let kept = Tensor::<Compiled<Flex>, 1>::from_data([1.0f32, 2.0, 3.0], &device).exp();
    // Recording does not run the op: no panic yet.
    let pending = bad_select::<Compiled<Flex>>();
    burn_compile::mark_step(); // the graph goes to the execution thread and fails there
    let compiled = catch_unwind(AssertUnwindSafe(|| pending.into_data()));
    let compiled = message(compiled.expect_err("the read raises the graph's panic"));
    // Eager Burn's message first (raised with `panic!`, so the panic hook prints it on this
    // thread), then the graph and the launch it came from.
    let (first, rest) = compiled.split_once('\n').unwrap_or((&compiled, ""));
    assert_eq!(first, eager);
    assert!(
        rest.starts_with("(burn-compile: raised by graph ")
            && rest.contains(", launch ")
            && rest.contains("Select"),
        "{compiled}"
    );

    // The device goes on: the tensor made before the failure is intact, new work runs.
    let expected: Vec<f32> = [1.0f32, 2.0, 3.0].iter().map(|v| v.exp()).collect();
    let kept_now = kept.clone().into_data().to_vec::<f32>().unwrap();
    assert_eq!(kept_now, expected);
    let more = (kept * 2.0).sum().into_scalar();
    assert!(
        (more - 2.0 * expected.iter().sum::<f32>()).abs() < 1e-4,
        "{more}"
    );
}
