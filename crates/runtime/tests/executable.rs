//! The executable of a plan, lowered from hand-built graphs: graph in, exactly these launches
//! out (snapshot), and scalars read from each replay's own ops.

use TensorStatus::*;
use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_backend::{DType, TensorMetadata};
use burn_compile_graph::KeyWriter;
use burn_compile_runtime::targets::{KernelTarget, Lowering, Work};
use burn_compile_runtime::{Binding, Executable, InnerDevice, Launch, ScalarSource, execute};
use burn_flex::{Flex, FlexDevice, FlexTensor};
use burn_ir::{OperationIr, TensorId, TensorIr, TensorStatus};
use std::sync::{Arc, Mutex};

#[path = "../../schedule/tests/support/mod.rs"]
mod support;
use support::{
    add, add_scalar, linear, linear_bias_backward, mul_scalar, plan, plan_with, plan_with_columns,
    plan_with_horizontal_columns, relu, sum_dim,
};
include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../snapshots/assert.rs"
));

fn t(id: u64, shape: &[usize], status: TensorStatus) -> TensorIr {
    support::tensor(id, shape, status, DType::F32)
}

/// A feed-forward block and its residual, then `(y * lr) + 2`: two library matmuls and one
/// generated kernel with two scalars.
fn block(lr: f64) -> Vec<OperationIr> {
    let (x, h) = (&[2, 16, 32][..], &[2, 16, 64][..]);
    vec![
        linear(
            t(1, x, ReadOnly),
            t(10, &[32, 64], ReadOnly),
            Some(t(11, &[64], ReadOnly)),
            2,
        ),
        relu(t(2, h, ReadWrite), 3),
        linear(
            t(3, h, ReadWrite),
            t(12, &[64, 32], ReadOnly),
            Some(t(13, &[32], ReadOnly)),
            5,
        ),
        add(t(5, x, ReadWrite), t(1, x, ReadWrite), 6),
        mul_scalar(t(6, x, ReadWrite), lr, 7),
        add_scalar(t(7, x, ReadWrite), 2.0, 8),
    ]
}

#[test]
fn a_feed_forward_block_lowers_to_two_library_calls_and_one_kernel() {
    let ops = block(0.5);
    let plan = plan(&ops, true, false);
    let executable = Executable::lower(&plan, &ops);
    assert_stage_snapshot!(
        "runtime",
        "feed_forward_block",
        executable.to_string(),
        "block(0.5): relu(linear(x)), linear + x, then * lr + 2"
    );
    // One launch per step of the plan; each library call binds its operands (x, weight, bias;
    // the second its residual too) and one output, the kernel its input and output.
    assert_eq!(executable.launches.len(), plan.steps.len());
    assert_eq!(executable.work(), plan.launches());
    let bound: Vec<(usize, usize)> = executable
        .launches
        .iter()
        .map(|l| match l {
            Launch::Kernel { bindings, .. } | Launch::Matmul { bindings, .. } => (
                bindings
                    .iter()
                    .filter(|b| matches!(b, Binding::Read(_)))
                    .count(),
                bindings
                    .iter()
                    .filter(|b| matches!(b, Binding::Write { .. }))
                    .count(),
            ),
            other => panic!("unexpected launch {other:?}"),
        })
        .collect();
    assert_eq!(bound, vec![(3, 1), (4, 1), (1, 1)]);
    // The hidden activation is written into the replay's buffer; the graph's output is not.
    let Launch::Matmul { bindings, .. } = &executable.launches[0] else {
        unreachable!()
    };
    assert!(matches!(
        bindings.last(),
        Some(Binding::Write { slab: Some(0), .. })
    ));
    assert_eq!(
        executable.scalars,
        vec![ScalarSource::Operand(4), ScalarSource::Operand(5)]
    );
}

/// A recorded scalar (a learning rate) is read from each replay's ops: the executable lowered
/// from a graph with one value replays another graph of the same plan with that graph's value.
#[test]
fn scalars_are_read_from_each_replays_ops_never_frozen() {
    let first = block(0.5);
    let executable = Executable::lower(&plan(&first, true, false), &first);
    assert_eq!(executable.scalar_table(&first), vec![0.5, 2.0]);
    let later = block(0.125);
    assert_eq!(
        plan(&later, true, false),
        plan(&first, true, false),
        "the same plan serves both"
    );
    assert_eq!(executable.scalar_table(&later), vec![0.125, 2.0]);
}

/// What the replay offered the target, launch by launch: the kind, the tensors bound (inputs;
/// a matmul's residual counted), and a kernel's scalars.
#[derive(Clone, Debug, PartialEq)]
enum Offered {
    Kernel { inputs: usize, scalars: Vec<f64> },
    Horizontal { members: usize },
    Matmul { inputs: usize, residual: bool },
    Column { dims: [usize; 4], input: Vec<usize> },
    HorizontalColumns { members: usize },
}

/// A target that takes every kernel and library matmul when the plan is lowered, records each
/// launch it is offered, and declines it: the replay then runs the launch's ops on the inner
/// backend, so the values are eager Flex's.
#[derive(Default)]
struct Recording(Mutex<Vec<Offered>>);

impl KernelTarget<FlexTensor> for Recording {
    fn lower(&self, work: Lowering<'_>) -> bool {
        !matches!(work, Lowering::Attention(_))
    }

    fn max_kernel_buffers(&self) -> usize {
        usize::MAX
    }

    fn launch(&self, work: Work<'_, FlexTensor>) -> Result<Option<Vec<FlexTensor>>, String> {
        let offered = match work {
            Work::Kernel {
                inputs, scalars, ..
            } => Offered::Kernel {
                inputs: inputs.len(),
                scalars: scalars.to_vec(),
            },
            Work::Matmul {
                inputs, epilogue, ..
            } => Offered::Matmul {
                inputs: inputs.len(),
                residual: epilogue.residual.is_some(),
            },
            Work::Horizontal { kernels } => Offered::Horizontal {
                members: kernels.len(),
            },
            Work::Column { group, input, .. } => Offered::Column {
                dims: group.dims,
                input: input.shape().to_vec(),
            },
            Work::HorizontalColumns { groups, .. } => Offered::HorizontalColumns {
                members: groups.len(),
            },
            Work::Attention { .. } | Work::ReshapeCopy { .. } | Work::Conv2d { .. } => {
                return Ok(None);
            }
        };
        self.0.lock().unwrap().push(offered);
        Ok(None)
    }
}

/// The replay walks the executable: each launch is offered to the target once, with its
/// bindings and its slice of this replay's scalar table; a learning rate that changed between
/// two replays of one plan reaches the kernel changed.
#[test]
fn the_replay_offers_each_launch_once_with_this_replays_scalars() {
    let target = Arc::new(Recording::default());
    let inner = InnerDevice::<Flex>::with_target(FlexDevice, Some(target.clone()));
    let plan = Arc::new(plan(&block(0.5), true, false));
    for (step, lr) in [0.5, 0.125].into_iter().enumerate() {
        let ops = block(lr);
        let inputs: [(u64, &[usize]); 5] = [
            (1, &[2, 16, 32]),
            (10, &[32, 64]),
            (11, &[64]),
            (12, &[64, 32]),
            (13, &[32]),
        ];
        let mut host = Vec::new();
        for (i, (id, shape)) in inputs.into_iter().enumerate() {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n)
                .map(|j| ((j * 7 + i * 3 + step) % 11) as f32 / 11.0 - 0.4)
                .collect();
            host.push(Tensor::<Flex, 1>::from_data(
                TensorData::new(values.clone(), [n]),
                &FlexDevice,
            ));
            inner.register_data(TensorId::new(id), TensorData::new(values, shape.to_vec()));
        }
        target.0.lock().unwrap().clear();
        execute(&inner, KeyWriter::new().key(), ops.clone(), &plan);
        assert_eq!(
            *target.0.lock().unwrap(),
            vec![
                Offered::Matmul {
                    inputs: 3,
                    residual: false
                },
                Offered::Matmul {
                    inputs: 3,
                    residual: true
                },
                Offered::Kernel {
                    inputs: 1,
                    scalars: vec![lr, 2.0]
                },
            ],
            "replay {step}"
        );
        let mut out = ops.last().unwrap().outputs().next().unwrap().clone();
        out.status = ReadWrite;
        let got = burn_std::future::block_on(inner.read(&out)).unwrap();
        // Eager Flex on the same inputs.
        let reshape = |t: Tensor<Flex, 1>, s: [usize; 2]| t.reshape(s);
        let x = reshape(host[0].clone(), [32, 32]);
        let h = burn::tensor::activation::relu(
            x.clone().matmul(reshape(host[1].clone(), [32, 64])) + host[2].clone().reshape([1, 64]),
        );
        let y = h.matmul(reshape(host[3].clone(), [64, 32])) + host[4].clone().reshape([1, 32]);
        let want = ((y + x) * lr + 2.0).reshape([2, 16, 32]).into_data();
        got.assert_approx_eq::<f32>(&want, Tolerance::default());
    }
    assert!(
        !inner.first_replay(&plan),
        "lowered once, at the first replay"
    );
}

/// Two parameter updates (`g · lr + p · 0.9`, shapes [4, 8] and [8]): two kernels of one
/// program, launched together.
fn two_updates(lr: f64) -> Vec<OperationIr> {
    let mut ops = Vec::new();
    for (base, shape) in [(10u64, &[4, 8][..]), (20, &[8][..])] {
        ops.extend([
            mul_scalar(t(base, shape, ReadWrite), lr, base + 2),
            mul_scalar(t(base + 1, shape, ReadOnly), 0.9, base + 3),
            add(
                t(base + 2, shape, ReadWrite),
                t(base + 3, shape, ReadWrite),
                base + 4,
            ),
        ]);
    }
    ops
}

/// A horizontal group lowers to one launch holding its members' kernel launches, each with
/// its own bindings and its own scalars in the table.
#[test]
fn a_horizontal_group_lowers_to_one_launch_of_its_members() {
    let ops = two_updates(0.1);
    let plan = plan_with(&ops, false, false, true, usize::MAX);
    let executable = Executable::lower(&plan, &ops);
    assert_stage_snapshot!(
        "runtime",
        "horizontal_updates",
        executable.to_string(),
        "two_updates(0.1): g · lr + p · 0.9 over [4, 8] and [8]"
    );
    assert_eq!(executable.work(), 1);
    let Launch::Horizontal { kernels, .. } = &executable.launches[0] else {
        panic!("{executable}")
    };
    assert_eq!(kernels.len(), 2);
    assert_eq!(executable.scalar_table(&ops), vec![0.1, 0.9, 0.1, 0.9]);
}

/// The replay offers a horizontal group to the target as one launch; declined (this target
/// takes nothing), each member is offered as its own kernel, and the values are eager Flex's.
#[test]
fn a_declined_horizontal_launch_falls_back_to_its_members() {
    let target = Arc::new(Recording::default());
    let inner = InnerDevice::<Flex>::with_target(FlexDevice, Some(target.clone()));
    let ops = two_updates(0.25);
    let plan = Arc::new(plan_with(&ops, false, false, true, usize::MAX));
    let mut want = Vec::new();
    for (id, shape) in [
        (10u64, vec![4, 8]),
        (11, vec![4, 8]),
        (20, vec![8]),
        (21, vec![8]),
    ] {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|j| ((j * 5 + id as usize) % 13) as f32 - 6.0)
            .collect();
        want.push(values.clone());
        inner.register_data(TensorId::new(id), TensorData::new(values, shape));
    }
    execute(&inner, KeyWriter::new().key(), ops.clone(), &plan);
    assert_eq!(
        *target.0.lock().unwrap(),
        vec![
            Offered::Horizontal { members: 2 },
            Offered::Kernel {
                inputs: 2,
                scalars: vec![0.25, 0.9]
            },
            Offered::Kernel {
                inputs: 2,
                scalars: vec![0.25, 0.9]
            },
        ]
    );
    for (k, out_id) in [14u64, 24].into_iter().enumerate() {
        let (g, p) = (&want[2 * k], &want[2 * k + 1]);
        let expected: Vec<f32> = g.iter().zip(p).map(|(g, p)| g * 0.25 + p * 0.9).collect();
        let shape = if k == 0 { vec![4, 8] } else { vec![8] };
        let out = t(out_id, &shape, ReadWrite);
        let got = burn_std::future::block_on(inner.read(&out)).unwrap();
        got.assert_approx_eq::<f32>(&TensorData::new(expected, shape), Tolerance::default());
    }
}

/// A bias gradient and a layer norm's γ gradient (`[2, 3, 4]` summed over its first two
/// dimensions, one at a time): two column sums, the second in place of both of its sums.
fn gradient_sums() -> Vec<OperationIr> {
    vec![
        linear_bias_backward(t(1, &[2, 3, 4], ReadOnly), 2),
        sum_dim(t(1, &[2, 3, 4], ReadWrite), 0, 3),
        sum_dim(t(3, &[1, 3, 4], ReadWrite), 1, 4),
    ]
}

/// Replays `plan` of [`gradient_sums`] over `values` with a target that declines every launch,
/// checks both results against eager Flex's, and returns what the target was offered.
fn replay_gradient_sums(plan: &Arc<burn_compile_schedule::Plan>, values: Vec<f32>) -> Vec<Offered> {
    let ops = gradient_sums();
    let target = Arc::new(Recording::default());
    let inner = InnerDevice::<Flex>::with_target(FlexDevice, Some(target.clone()));
    inner.register_data(TensorId::new(1), TensorData::new(values.clone(), [2, 3, 4]));
    execute(&inner, KeyWriter::new().key(), ops, plan);
    let x = Tensor::<Flex, 3>::from_data(TensorData::new(values, [2, 3, 4]), &FlexDevice);
    let want = x.sum_dim(0).sum_dim(1);
    let bias = burn_std::future::block_on(inner.read(&t(2, &[4], ReadWrite))).unwrap();
    bias.assert_approx_eq::<f32>(&want.clone().reshape([4]).into_data(), Tolerance::default());
    let gamma = burn_std::future::block_on(inner.read(&t(4, &[1, 1, 4], ReadWrite))).unwrap();
    gamma.assert_approx_eq::<f32>(&want.into_data(), Tolerance::default());
    target.0.lock().unwrap().clone()
}

/// Column sums lower to one launch each binding the first sum's input and the last sum's
/// output; offered to a target that declines them, the sums run on the inner backend and give
/// eager Flex's values.
#[test]
fn column_sums_lower_to_one_launch_each_and_fall_back_to_the_sums() {
    let ops = gradient_sums();
    let plan = Arc::new(plan_with_columns(&ops));
    let executable = Executable::lower(&plan, &ops);
    assert_stage_snapshot!(
        "runtime",
        "column_sums",
        executable.to_string(),
        "gradient_sums(): a bias gradient of [2, 3, 4], then the same tensor summed over 0 and 1"
    );
    assert_eq!(executable.launches.len(), 2);
    let values: Vec<f32> = (0..24).map(|j| ((j * 5) % 7) as f32 - 3.0).collect();
    let column = Offered::Column {
        dims: [1, 6, 4, 1],
        input: vec![2, 3, 4],
    };
    assert_eq!(
        replay_gradient_sums(&plan, values),
        vec![column.clone(), column]
    );
}

/// The same sums launched together (one shape, independent results): one launch holding both
/// column launches; offered to a target that declines it, each sum is offered on its own, and
/// declined again, they run on the inner backend with eager Flex's values.
#[test]
fn column_sums_of_one_shape_lower_to_one_launch_and_fall_back_one_by_one() {
    let ops = gradient_sums();
    let plan = Arc::new(plan_with_horizontal_columns(&ops));
    let executable = Executable::lower(&plan, &ops);
    assert_stage_snapshot!(
        "runtime",
        "horizontal_column_sums",
        executable.to_string(),
        "gradient_sums() with column sums of one shape launched together"
    );
    assert_eq!(executable.launches.len(), 1);
    let values: Vec<f32> = (0..24).map(|j| ((j * 3) % 5) as f32 - 2.0).collect();
    let column = Offered::Column {
        dims: [1, 6, 4, 1],
        input: vec![2, 3, 4],
    };
    assert_eq!(
        replay_gradient_sums(&plan, values),
        vec![
            Offered::HorizontalColumns { members: 2 },
            column.clone(),
            column
        ]
    );
}
