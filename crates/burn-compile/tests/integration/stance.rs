//! Stances are process-wide, so they get a process of their own and one test that walks through
//! them in order.

use burn::tensor::{Tensor, TensorData};
use burn_compile::{Compiled, Stance, explain, metrics, set_stance, take_error};
use burn_flex::Flex;

type C = Compiled<Flex>;

fn step(x: &Tensor<C, 2>) -> TensorData {
    ((x.clone() * 2.0).exp() + 1.0).sum_dim(1).into_data()
}

/// Activations are recorded as our own custom ops: they must also run with capture off.
fn activations<B: burn::tensor::backend::Backend>(x: Tensor<B, 2>) -> TensorData {
    use burn::tensor::activation::{gelu, relu, softmax};
    (softmax(x.clone(), 1) + relu(x.clone() - 0.25) + gelu(x)).into_data()
}

#[test]
fn stances_eager_and_fail_on_recompile() {
    crate::own_process!(stances_eager_and_fail_on_recompile);
    let device = Default::default();
    let x = Tensor::<C, 2>::from_data(
        TensorData::new(vec![0.1f32, 0.2, 0.3, 0.4], [2, 2]),
        &device,
    );
    let expected = {
        let e = Tensor::<Flex, 2>::from_data(
            TensorData::new(vec![0.1f32, 0.2, 0.3, 0.4], [2, 2]),
            &device,
        );
        ((e * 2.0).exp() + 1.0).sum_dim(1).into_data()
    };

    // Eager: nothing is captured, every op runs as it arrives.
    burn_compile::mark_step(); // the upload of `x` is still a pending graph
    set_stance(Stance::Eager);
    let before = metrics();
    let (out, report) = explain(|| step(&x));
    let delta = metrics().since(&before);
    out.assert_eq(&expected, true);
    assert_eq!(report.graph_count, 0, "{report}");
    assert_eq!(delta.graphs, 0);
    assert!(delta.eager_ops >= 4, "{delta:?}");
    let e = Tensor::<Flex, 2>::from_data(
        TensorData::new(vec![0.1f32, 0.2, 0.3, 0.4], [2, 2]),
        &device,
    );
    activations(x.clone()).assert_eq(&activations(e), true);

    // Default: the first run compiles, the second hits.
    set_stance(Stance::Default);
    step(&x).assert_eq(&expected, true);
    let (out, report) = explain(|| step(&x));
    out.assert_eq(&expected, true);
    assert_eq!(report.cache_misses, 0, "{report}");

    // Fail on recompile: a known graph is fine...
    set_stance(Stance::FailOnRecompile);
    step(&x).assert_eq(&expected, true);
    assert_eq!(take_error(), None);
    // ...a new one (another shape) is an error at the read, and the graph still ran correctly.
    let y = Tensor::<C, 2>::from_data(TensorData::new(vec![1.0f32; 6], [3, 2]), &device);
    let z = (y * 2.0).exp();
    let read = z.clone().try_into_data();
    let err = format!("{:?}", read.expect_err("a recompile must be reported"));
    assert!(err.contains("fail-on-recompile"), "{err}");
    set_stance(Stance::Default);
    let value = z.into_data().to_vec::<f32>().unwrap();
    assert!(
        value.iter().all(|v| (v - 2f32.exp()).abs() < 1e-5),
        "{value:?}"
    );
}
