//! Graph keys are independent of tensor ids and scalar values, and specific to structure, shapes,
//! dtypes and statuses. Backend-free: graphs are built by hand.

use burn_backend::{DType, Shape};
use burn_compile_graph::{Segment, op_listing};
use burn_ir::{
    BinaryOpIr, FloatOperationIr, NumericOperationIr, OperationIr, ScalarIr, ScalarOpIr, TensorId,
    TensorIr, TensorStatus, UnaryOpIr,
};

fn t(id: u64, shape: [usize; 2], status: TensorStatus) -> TensorIr {
    TensorIr {
        id: TensorId::new(id),
        shape: Shape::new(shape),
        status,
        dtype: DType::F32,
    }
}

/// `y = exp(x * s) + w`, with the given ids, scalar and shape.
fn graph(ids: [u64; 4], scalar: f64, shape: [usize; 2]) -> Vec<OperationIr> {
    let [x, w, a, b] = ids;
    use TensorStatus::*;
    vec![
        OperationIr::NumericFloat(
            DType::F32,
            NumericOperationIr::MulScalar(ScalarOpIr {
                lhs: t(x, shape, ReadOnly),
                rhs: ScalarIr::Float(scalar),
                out: t(a, shape, NotInit),
            }),
        ),
        OperationIr::Float(
            DType::F32,
            FloatOperationIr::Exp(UnaryOpIr {
                input: t(a, shape, ReadWrite),
                out: t(b, shape, NotInit),
            }),
        ),
        OperationIr::NumericFloat(
            DType::F32,
            NumericOperationIr::Add(BinaryOpIr {
                lhs: t(b, shape, ReadWrite),
                rhs: t(w, shape, ReadOnly),
                out: t(x + 100, shape, NotInit),
            }),
        ),
    ]
}

fn key(ops: Vec<OperationIr>) -> burn_compile_graph::GraphKey {
    let mut segment = Segment::new();
    for op in ops {
        segment.push(op);
    }
    segment.key()
}

#[test]
fn same_structure_with_other_ids_and_scalars_has_the_same_key() {
    let step1 = key(graph([1, 2, 3, 4], 0.5, [4, 8]));
    let step2 = key(graph([51, 52, 53, 54], 0.25, [4, 8]));
    assert_eq!(step1, step2);
}

#[test]
fn shapes_and_wiring_change_the_key() {
    let base = key(graph([1, 2, 3, 4], 0.5, [4, 8]));
    assert_ne!(base, key(graph([1, 2, 3, 4], 0.5, [4, 9])));
    // `x` and `w` swapped roles: the wiring differs although the op list reads the same.
    let mut swapped = graph([1, 2, 3, 4], 0.5, [4, 8]);
    if let OperationIr::NumericFloat(_, NumericOperationIr::Add(add)) = &mut swapped[2] {
        add.rhs.id = TensorId::new(1);
    }
    assert_ne!(base, key(swapped));
}

#[test]
fn statuses_change_the_key() {
    let base = key(graph([1, 2, 3, 4], 0.5, [4, 8]));
    let mut read_only = graph([1, 2, 3, 4], 0.5, [4, 8]);
    if let OperationIr::Float(_, FloatOperationIr::Exp(exp)) = &mut read_only[1] {
        exp.input.status = TensorStatus::ReadOnly;
    }
    assert_ne!(base, key(read_only));
}

#[test]
fn a_taken_segment_starts_a_fresh_key() {
    let mut segment = Segment::new();
    for op in graph([1, 2, 3, 4], 0.5, [4, 8]) {
        segment.push(op);
    }
    let first = segment.key();
    assert_eq!(segment.take_ops().len(), 3);
    assert!(segment.is_empty());
    for op in graph([9, 8, 7, 6], 2.0, [4, 8]) {
        segment.push(op);
    }
    assert_eq!(segment.key(), first);
}

#[test]
fn listing_names_ops_and_renumbers_ids() {
    let listing = op_listing(&graph([71, 72, 73, 74], 0.5, [4, 8]));
    insta::with_settings!({ snapshot_path => "../../../snapshots/graph" }, {
        insta::assert_snapshot!("listing_mul_exp_add", listing);
    });
}
