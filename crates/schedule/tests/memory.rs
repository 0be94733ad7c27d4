//! Memory planning on hand-built graphs: which intermediates share the replay's buffer, in
//! which slots.

use TensorStatus::*;
use burn_backend::DType;
use burn_compile_schedule::{MatmulGroup, Plan, PointwiseKernel, ScheduleOptions, Step, schedule};
use burn_ir::{
    BaseOperationIr, BinaryOpIr, FloatOperationIr, LinearOpIr, ModuleOperationIr,
    NumericOperationIr, OperationIr, ShapeOpIr, TensorIr, TensorStatus, UnaryOpIr,
};

mod support;

fn t(id: u64, shape: &[usize], status: TensorStatus) -> TensorIr {
    support::tensor(id, shape, status, DType::BF16)
}

fn out(id: u64, shape: &[usize]) -> TensorIr {
    t(id, shape, NotInit)
}

/// `x @ w` into tensor `id` of shape `o`.
fn linear(x: TensorIr, w: TensorIr, o: &[usize], id: u64) -> OperationIr {
    OperationIr::Module(ModuleOperationIr::Linear(LinearOpIr {
        x,
        weight: w,
        bias: None,
        out: out(id, o),
    }))
}

fn add(lhs: TensorIr, rhs: TensorIr, id: u64) -> OperationIr {
    let shape = lhs.shape.to_vec();
    OperationIr::NumericFloat(
        DType::BF16,
        NumericOperationIr::Add(BinaryOpIr {
            lhs,
            rhs,
            out: out(id, &shape),
        }),
    )
}

fn mul(lhs: TensorIr, rhs: TensorIr, id: u64) -> OperationIr {
    let shape = lhs.shape.to_vec();
    OperationIr::NumericFloat(
        DType::BF16,
        NumericOperationIr::Mul(BinaryOpIr {
            lhs,
            rhs,
            out: out(id, &shape),
        }),
    )
}

fn exp(input: TensorIr, id: u64) -> OperationIr {
    let shape = input.shape.to_vec();
    OperationIr::Float(
        DType::BF16,
        FloatOperationIr::Exp(UnaryOpIr {
            input,
            out: out(id, &shape),
        }),
    )
}

fn reshape(input: TensorIr, o: &[usize], id: u64) -> OperationIr {
    OperationIr::BaseFloat(BaseOperationIr::Reshape(ShapeOpIr {
        input,
        out: out(id, o),
    }))
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

/// bf16 bytes of a shape.
fn bytes(shape: &[usize]) -> u64 {
    shape.iter().product::<usize>() as u64 * 2
}

#[test]
fn a_chain_of_products_reuses_a_slot_once_its_value_is_consumed() {
    // h1 = x @ w1 [4, 16]; h2 = h1 @ w2 [4, 8]; h3 = h2 @ w3 [4, 16]; y = h3 @ w4 (the output).
    let ops = vec![
        linear(
            t(1, &[4, 8], ReadOnly),
            t(2, &[8, 16], ReadOnly),
            &[4, 16],
            10,
        ),
        linear(
            t(10, &[4, 16], ReadWrite),
            t(3, &[16, 8], ReadOnly),
            &[4, 8],
            11,
        ),
        linear(
            t(11, &[4, 8], ReadWrite),
            t(4, &[8, 16], ReadOnly),
            &[4, 16],
            12,
        ),
        linear(
            t(12, &[4, 16], ReadWrite),
            t(5, &[16, 4], ReadOnly),
            &[4, 4],
            13,
        ),
    ];
    let plan = plan(&ops);
    assert!(plan.steps.iter().all(|s| matches!(s, Step::Matmul { .. })));
    let memory = &plan.memory;
    // h1 is consumed at step 1, so h3 (written at step 2) takes its slot; h2 overlaps both.
    assert_eq!(memory.matmul, vec![Some(0), Some(1), Some(0), None]);
    assert_eq!(memory.slots, vec![bytes(&[4, 16]), bytes(&[4, 8])]);
    assert_eq!(memory.planned(), 3);
    assert_eq!(memory.unplanned_bytes, 2 * bytes(&[4, 16]) + bytes(&[4, 8]));
}

#[test]
fn a_value_an_inner_operation_reads_keeps_its_own_allocation() {
    // The reshape may return a view of h1 whose uses the plan does not follow.
    let ops = vec![
        linear(
            t(1, &[4, 8], ReadOnly),
            t(2, &[8, 16], ReadOnly),
            &[4, 16],
            10,
        ),
        reshape(t(10, &[4, 16], ReadWrite), &[2, 32], 11),
        linear(
            t(11, &[2, 32], ReadWrite),
            t(3, &[32, 4], ReadOnly),
            &[2, 4],
            12,
        ),
    ];
    let plan = plan(&ops);
    assert_eq!(plan.memory.matmul, vec![None, None]);
    assert!(plan.memory.slots.is_empty());
}

#[test]
fn a_graph_output_is_never_planned() {
    // h1 is read by the second product but never consumed: it outlives the graph.
    let ops = vec![
        linear(
            t(1, &[4, 8], ReadOnly),
            t(2, &[8, 16], ReadOnly),
            &[4, 16],
            10,
        ),
        linear(
            t(10, &[4, 16], ReadOnly),
            t(3, &[16, 4], ReadOnly),
            &[4, 4],
            11,
        ),
    ];
    let plan = plan(&ops);
    assert_eq!(plan.memory.matmul, vec![None, None]);
}

#[test]
fn kernel_outputs_and_product_outputs_share_slots_by_liveness() {
    // h1 = x @ w1, h2 = x @ w2, e = exp(h1 · h2) (one kernel), f = e @ w3, y = f @ w4.
    let ops = vec![
        linear(
            t(1, &[4, 8], ReadOnly),
            t(2, &[8, 16], ReadOnly),
            &[4, 16],
            10,
        ),
        linear(
            t(1, &[4, 8], ReadOnly),
            t(3, &[8, 16], ReadOnly),
            &[4, 16],
            11,
        ),
        mul(t(10, &[4, 16], ReadWrite), t(11, &[4, 16], ReadWrite), 12),
        exp(t(12, &[4, 16], ReadWrite), 13),
        linear(
            t(13, &[4, 16], ReadWrite),
            t(4, &[16, 16], ReadOnly),
            &[4, 16],
            14,
        ),
        linear(
            t(14, &[4, 16], ReadWrite),
            t(5, &[16, 4], ReadOnly),
            &[4, 4],
            15,
        ),
    ];
    let plan = plan(&ops);
    assert_eq!(plan.pointwise.len(), 1, "{:?}", plan.steps);
    let memory = &plan.memory;
    // The kernel reads h1 and h2 while writing e: three slots; f (after the kernel) reuses the
    // first free one of the same size.
    assert_eq!(memory.pointwise, vec![vec![Some(2)]]);
    assert_eq!(memory.matmul, vec![Some(0), Some(1), Some(0), None]);
    assert_eq!(memory.slots, vec![bytes(&[4, 16]); 3]);
}

#[test]
fn a_fused_residual_is_freed_by_its_call_whose_output_takes_another_slot() {
    // h1 = x @ w1; y = x @ w2 + h1 (h1 is the call's C); z = y @ w3.
    let ops = vec![
        linear(
            t(1, &[4, 8], ReadOnly),
            t(2, &[8, 16], ReadOnly),
            &[4, 16],
            10,
        ),
        linear(
            t(1, &[4, 8], ReadOnly),
            t(3, &[8, 16], ReadOnly),
            &[4, 16],
            11,
        ),
        add(t(11, &[4, 16], ReadWrite), t(10, &[4, 16], ReadWrite), 12),
        linear(
            t(12, &[4, 16], ReadWrite),
            t(4, &[16, 4], ReadOnly),
            &[4, 4],
            13,
        ),
    ];
    let plan = plan(&ops);
    assert_eq!(plan.matmul[1].residual.map(|r| r.op), Some(2));
    assert_eq!(plan.launches(), 3);
    // y is written while the call reads h1: a slot of its own; z is the graph's output.
    assert_eq!(plan.memory.matmul, vec![Some(0), Some(1), None]);
}

#[test]
fn a_slot_grows_for_a_larger_value_when_none_fits() {
    // h1 [4, 8] is consumed before h3 [4, 32] is written: h3 takes h1's slot, grown.
    let ops = vec![
        linear(
            t(1, &[4, 8], ReadOnly),
            t(2, &[8, 8], ReadOnly),
            &[4, 8],
            10,
        ),
        linear(
            t(10, &[4, 8], ReadWrite),
            t(3, &[8, 16], ReadOnly),
            &[4, 16],
            11,
        ),
        linear(
            t(11, &[4, 16], ReadWrite),
            t(4, &[16, 32], ReadOnly),
            &[4, 32],
            12,
        ),
        linear(
            t(12, &[4, 32], ReadWrite),
            t(5, &[32, 4], ReadOnly),
            &[4, 4],
            13,
        ),
    ];
    let memory = plan(&ops).memory;
    assert_eq!(memory.matmul, vec![Some(0), Some(1), Some(0), None]);
    assert_eq!(memory.slots, vec![bytes(&[4, 32]), bytes(&[4, 16])]);
}
