//! `async_execution: false`: graphs run on the thread that closes them. Same results and the
//! same panics as eager Burn. (A process of its own: it configures the default device.)

use burn::tensor::{Int, Tensor, TensorData};
use burn_compile::{CompileConfig, Compiled, configure};
use burn_flex::Flex;
use std::panic::{AssertUnwindSafe, catch_unwind};

type C = Compiled<Flex>;

fn step<B: burn::tensor::backend::Backend>(x: Tensor<B, 2>) -> TensorData {
    let mut y = x.clone();
    for _ in 0..20 {
        y = (y.matmul(x.clone()) * 0.5).tanh() + 0.25;
    }
    y.into_data()
}

fn bad_select<B: burn::tensor::backend::Backend>() {
    let device = Default::default();
    let x = Tensor::<B, 2>::from_data(TensorData::new(vec![1.0f32; 12], [4, 3]), &device);
    let index = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![0i64, 7], [2]), &device);
    let _ = x.select(0, index).into_data();
}

#[test]
fn synchronous_execution_matches_eager() {
    crate::own_process!(synchronous_execution_matches_eager);
    let device = Default::default();
    configure(
        &device,
        CompileConfig {
            async_execution: false,
            ..Default::default()
        },
    );
    let data = TensorData::new((0..36).map(|i| (i as f32 * 0.3).sin()).collect(), [6, 6]);
    let compiled = step(Tensor::<C, 2>::from_data(data.clone(), &device));
    let eager = step(Tensor::<Flex, 2>::from_data(data, &device));
    compiled.assert_eq(&eager, true);

    let eager = catch_unwind(AssertUnwindSafe(bad_select::<Flex>)).expect_err("eager panics");
    let compiled = catch_unwind(AssertUnwindSafe(bad_select::<C>)).expect_err("compiled panics");
    let text = |p: Box<dyn std::any::Any + Send>| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
    };
    assert_eq!(text(compiled), text(eager));
}
