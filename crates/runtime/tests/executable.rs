//! The executable of a plan, lowered from hand-built graphs: graph in, exactly these launches
//! out (snapshot), and scalars read from each replay's own ops.

use TensorStatus::*;
use burn_backend::{DType, Shape};
use burn_compile_graph::Activation;
use burn_compile_runtime::{Binding, Executable, Launch, ScalarSource};
use burn_compile_schedule::{MatmulGroup, Plan, PointwiseKernel, ScheduleOptions, schedule};
use burn_ir::{
    BinaryOpIr, CustomOpIr, LinearOpIr, ModuleOperationIr, NumericOperationIr, OperationIr,
    ScalarIr, ScalarOpIr, TensorId, TensorIr, TensorStatus,
};

fn t(id: u64, shape: &[usize], status: TensorStatus) -> TensorIr {
    TensorIr {
        id: TensorId::new(id),
        shape: Shape::from(shape.to_vec()),
        status,
        dtype: DType::F32,
    }
}

fn linear(x: TensorIr, w: TensorIr, b: TensorIr, o: &[usize], id: u64) -> OperationIr {
    OperationIr::Module(ModuleOperationIr::Linear(LinearOpIr {
        x,
        weight: w,
        bias: Some(b),
        out: t(id, o, NotInit),
    }))
}

fn relu(input: TensorIr, id: u64) -> OperationIr {
    let out = t(id, &input.shape.to_vec(), NotInit);
    OperationIr::Custom(CustomOpIr {
        id: Activation::Relu.op_id(),
        inputs: vec![input],
        outputs: vec![out],
    })
}

fn numeric(op: NumericOperationIr) -> OperationIr {
    OperationIr::NumericFloat(DType::F32, op)
}

fn scalar(lhs: TensorIr, s: f64, id: u64) -> ScalarOpIr {
    let out = t(id, &lhs.shape.to_vec(), NotInit);
    ScalarOpIr {
        lhs,
        rhs: ScalarIr::Float(s),
        out,
    }
}

/// A feed-forward block and its residual, then `(y * lr) + 2`: two library matmuls and one
/// generated kernel with two scalars.
fn block(lr: f64) -> Vec<OperationIr> {
    let (x, h) = (&[2, 16, 32][..], &[2, 16, 64][..]);
    vec![
        linear(
            t(1, x, ReadOnly),
            t(10, &[32, 64], ReadOnly),
            t(11, &[64], ReadOnly),
            h,
            2,
        ),
        relu(t(2, h, ReadWrite), 3),
        linear(
            t(3, h, ReadWrite),
            t(12, &[64, 32], ReadOnly),
            t(13, &[32], ReadOnly),
            x,
            5,
        ),
        numeric(NumericOperationIr::Add(BinaryOpIr {
            lhs: t(5, x, ReadWrite),
            rhs: t(1, x, ReadWrite),
            out: t(6, x, NotInit),
        })),
        numeric(NumericOperationIr::MulScalar(scalar(
            t(6, x, ReadWrite),
            lr,
            7,
        ))),
        numeric(NumericOperationIr::AddScalar(scalar(
            t(7, x, ReadWrite),
            2.0,
            8,
        ))),
    ]
}

fn plan(ops: &[OperationIr]) -> Plan {
    let pointwise: &dyn Fn(&PointwiseKernel) -> bool = &|_| true;
    let library: &dyn Fn(&MatmulGroup) -> bool = &|_| true;
    schedule(
        ops,
        ScheduleOptions {
            dead_code_elimination: true,
            common_subexpressions: true,
            pointwise: Some(pointwise),
            max_kernel_buffers: usize::MAX,
            matmul: Some(library),
            attention: None,
            memory_planning: true,
            symbolic_sizes: &[],
        },
    )
}

#[test]
fn a_feed_forward_block_lowers_to_two_library_calls_and_one_kernel() {
    let ops = block(0.5);
    let plan = plan(&ops);
    let executable = Executable::lower(&plan, &ops);
    insta::with_settings!({ snapshot_path => "../../../snapshots/runtime", description => "block(0.5): relu(linear(x)), linear + x, then * lr + 2" }, {
        insta::assert_snapshot!("feed_forward_block", executable.to_string());
    });
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
    let executable = Executable::lower(&plan(&first), &first);
    assert_eq!(executable.scalar_table(&first), vec![0.5, 2.0]);
    let later = block(0.125);
    assert_eq!(plan(&later), plan(&first), "the same plan serves both");
    assert_eq!(executable.scalar_table(&later), vec![0.125, 2.0]);
}
