//! Graph keys are independent of tensor ids and scalar values, and specific to structure, shapes,
//! dtypes and statuses. Backend-free: graphs are built by hand.

use burn_backend::{DType, Shape};
use burn_compile_graph::{
    KeyWriter, Segment, first_scalar_difference, op_listing, scalar_differences, scalar_operands,
    scalar_operands_mut,
};
use burn_ir::{
    BinaryOpIr, FloatOperationIr, NumericOperationIr, OperationIr, ScalarIr, ScalarOpIr, TensorId,
    TensorIr, TensorStatus, UnaryOpIr,
};
include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../snapshots/assert.rs"
));

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
    assert_stage_snapshot!("graph", "listing_mul_exp_add", listing);
}

fn segment(ops: Vec<OperationIr>) -> Segment {
    let mut segment = Segment::new();
    for op in ops {
        segment.push(op);
    }
    segment
}

/// A key writer over `ops` that also keeps the sizes' owners.
fn with_owners(ops: Vec<OperationIr>) -> KeyWriter {
    let mut writer = KeyWriter::with_owners();
    for op in ops {
        writer.push(&op);
    }
    writer
}

#[test]
fn sizes_leave_the_family_and_are_listed_with_their_owners() {
    let a = segment(graph([1, 2, 3, 4], 0.5, [4, 8]));
    let b = segment(graph([11, 12, 13, 14], 0.25, [6, 8]));
    // Same program, other sizes: one family, two exact keys.
    assert_eq!(a.keys().family(), b.keys().family());
    assert_ne!(a.key(), b.key());
    // Every dimension of every tensor the ops name, in walk order: 7 tensors named (the mul
    // and the exp name 2 each, the add 3) × 2 dims.
    assert_eq!(a.keys().dims().len(), 14);
    // Recording keeps no owners; a writer asked for them has one per size, the same sizes.
    assert!(a.keys().dim_owners().is_empty());
    let owned = with_owners(graph([1, 2, 3, 4], 0.5, [4, 8]));
    assert_eq!(owned.dims(), a.keys().dims());
    assert_eq!(owned.key(), a.key());
    assert_eq!(owned.dims().len(), owned.dim_owners().len());
    let changed: Vec<_> = a
        .keys()
        .dims()
        .iter()
        .zip(b.keys().dims())
        .zip(owned.dim_owners())
        .filter(|((x, y), _)| x != y)
        .map(|(_, owner)| *owner)
        .collect();
    // Only dimension 0 changed, of every tensor, each owned by the op that names it.
    assert_eq!(changed.len(), 7);
    assert!(changed.iter().all(|o| o.axis == 0 && !o.is_slice_bound()));
    assert_eq!(changed.iter().filter(|o| o.op == 0).count(), 2);
    // The first op names x (#0) and a (#1); the add's output is the fifth tensor (#4).
    assert_eq!(changed[0].tensor, 0);
    assert!(changed.iter().any(|o| o.op == 2 && o.tensor == 4));
}

#[test]
fn a_new_rank_or_dtype_is_another_family() {
    let base = segment(graph([1, 2, 3, 4], 0.5, [4, 8]));
    let mut half = graph([1, 2, 3, 4], 0.5, [4, 8]);
    if let OperationIr::NumericFloat(dtype, _) = &mut half[0] {
        *dtype = DType::F16;
    }
    assert_ne!(base.keys().family(), segment(half).keys().family());
}

#[test]
fn a_drop_keys_no_sizes() {
    let drop = |shape| OperationIr::Drop(t(9, shape, TensorStatus::ReadWrite));
    let mut small = graph([1, 2, 3, 4], 0.5, [4, 8]);
    small.insert(0, drop([2, 2]));
    let mut large = graph([1, 2, 3, 4], 0.5, [4, 8]);
    large.insert(0, drop([7, 5]));
    let (small, large) = (segment(small), segment(large));
    assert_eq!(small.key(), large.key());
    assert_eq!(small.keys().dims().len(), 14, "the drop adds no size");
}

#[test]
fn scalar_differences_are_found_at_their_op_whatever_the_ids() {
    let a = graph([1, 2, 3, 4], 0.5, [4, 8]);
    assert_eq!(
        first_scalar_difference(&a, &graph([51, 52, 53, 54], 0.5, [4, 8])),
        None
    );
    assert_eq!(
        first_scalar_difference(&a, &graph([51, 52, 53, 54], 0.25, [4, 8])),
        Some(0)
    );
    // The same value as another kind of scalar is another scalar.
    let mut int = graph([1, 2, 3, 4], 0.5, [4, 8]);
    if let OperationIr::NumericFloat(_, NumericOperationIr::MulScalar(op)) = &mut int[0] {
        op.rhs = ScalarIr::Int(0);
    }
    assert_eq!(
        first_scalar_difference(&graph([1, 2, 3, 4], 0.0, [4, 8]), &int),
        Some(0)
    );
    // A shorter recording differs where it ends.
    assert_eq!(first_scalar_difference(&a, &a[..2]), Some(2));
}

#[test]
fn every_scalar_difference_is_listed_and_its_operand_rewritable() {
    let a = graph([1, 2, 3, 4], 0.5, [4, 8]);
    let mut b = graph([1, 2, 3, 4], 0.25, [4, 8]);
    b.push(b[0].clone());
    // Op 0 differs in value, op 3 exists in one recording only.
    assert_eq!(scalar_differences(&a, &b), vec![0, 3]);
    assert_eq!(scalar_operands(&b[0]), Some(vec![ScalarIr::Float(0.25)]));
    assert_eq!(scalar_operands(&b[1]), None, "exp has no scalar");
    for s in scalar_operands_mut(&mut b[0]).unwrap() {
        *s = ScalarIr::Float(0.5);
    }
    assert_eq!(scalar_differences(&a, &b[..3]), Vec::<usize>::new());
}
