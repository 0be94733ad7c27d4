//! Attention steps on hand-built graphs shaped like Burn 0.21's `MultiHeadAttention`: graph in,
//! exactly these steps out; every part that breaks attention's semantics keeps the parts.

use TensorStatus::*;
use burn_backend::{BoolStore, DType};
use burn_compile_graph::Activation;
use burn_compile_schedule::{AttentionGroup, FusedKernel, ScheduleOptions, Step, schedule};
use burn_ir::{
    BaseOperationIr, CustomOpIr, MaskFillOpIr, OperationIr, ScalarIr, SwapDimsOpIr, TensorIr,
    TensorStatus,
};

mod support;
use support::{div_scalar, exp, matmul, mul_scalar, plan};
include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../snapshots/assert.rs"
));

const B: usize = 2;
const H: usize = 4;
const S: usize = 8;
const D: usize = 16;

fn out(id: u64, shape: &[usize], dtype: DType) -> TensorIr {
    support::tensor(id, shape, NotInit, dtype)
}

fn swap(input: TensorIr, d1: usize, d2: usize, o: u64) -> OperationIr {
    let mut shape = input.shape.to_vec();
    shape.swap(d1, d2);
    let dtype = input.dtype;
    OperationIr::BaseFloat(BaseOperationIr::SwapDims(SwapDimsOpIr {
        input,
        out: out(o, &shape, dtype),
        dim1: d1,
        dim2: d2,
    }))
}

fn softmax(input: TensorIr, dim: usize, o: u64) -> OperationIr {
    let shape = input.shape.to_vec();
    let dtype = input.dtype;
    OperationIr::Custom(CustomOpIr {
        id: Activation::Softmax { dim }.op_id(),
        inputs: vec![input],
        outputs: vec![out(o, &shape, dtype)],
    })
}

/// What may differ from MHA's forward in a test graph.
#[derive(Clone, Copy)]
struct Mha {
    /// `[batch, heads, seq, head_dim]` of q, k and v.
    shape: [usize; 4],
    dtype: DType,
    /// The scale op: `(divide, value)`; MHA divides by √d_k.
    scale: (bool, f64),
    softmax_dim: usize,
    /// Whether the weights are dropped in the graph (MHA returns them; W1 drops them).
    weights_dropped: bool,
    /// A padding mask (`mask_fill`) between the scale and the softmax.
    masked: bool,
    /// q is read (not consumed) by the product, then consumed by an `exp` before `weights @ v`.
    query_consumed_between: bool,
}

const MHA: Mha = Mha {
    shape: [B, H, S, D],
    dtype: DType::F32,
    scale: (true, 4.0), // √16
    softmax_dim: 3,
    weights_dropped: true,
    masked: false,
    query_consumed_between: false,
};

/// q = 1, k = 2, v = 3 (each `[B, H, S, D]`, consumed); then
/// 4 = kᵀ; 5 = q @ kᵀ; 6 = 5 / √D; 7 = softmax(6); 8 = 7 @ v; drop 7; 9 = swap_dims(8, 1, 2).
fn mha(m: Mha) -> Vec<OperationIr> {
    let [b, h, s, d] = m.shape;
    let (qkv, kt, sc) = (&[b, h, s, d][..], &[b, h, d, s][..], &[b, h, s, s][..]);
    let t = |id: u64, shape: &[usize], status: TensorStatus| {
        support::tensor(id, shape, status, m.dtype)
    };
    let q_status = if m.query_consumed_between {
        ReadOnly
    } else {
        ReadWrite
    };
    let mut ops = vec![
        swap(t(2, qkv, ReadWrite), 2, 3, 4),
        matmul(t(1, qkv, q_status), t(4, kt, ReadWrite), 5),
        if m.scale.0 {
            div_scalar(t(5, sc, ReadWrite), m.scale.1, 6)
        } else {
            mul_scalar(t(5, sc, ReadWrite), m.scale.1, 6)
        },
    ];
    let mut scaled = 6;
    if m.masked {
        // The mask is an input of the graph (built before it).
        let mask = support::tensor(61, &[b, 1, 1, s], ReadOnly, DType::Bool(BoolStore::U8));
        ops.push(OperationIr::BaseFloat(BaseOperationIr::MaskFill(
            MaskFillOpIr {
                tensor: t(6, sc, ReadWrite),
                mask,
                value: ScalarIr::Float(-1e30),
                out: out(62, sc, m.dtype),
            },
        )));
        scaled = 62;
    }
    ops.push(softmax(t(scaled, sc, ReadWrite), m.softmax_dim, 7));
    if m.query_consumed_between {
        ops.push(exp(t(1, qkv, ReadWrite), 50));
    }
    ops.push(matmul(t(7, sc, ReadOnly), t(3, qkv, ReadWrite), 8));
    if m.weights_dropped {
        ops.push(OperationIr::Drop(t(7, sc, ReadWrite)));
    }
    ops.push(swap(t(8, qkv, ReadWrite), 1, 2, 9));
    ops
}

#[test]
fn multi_head_attention_becomes_one_attention_kernel() {
    let ops = mha(MHA);
    let p = plan(&ops, true, true);
    assert_eq!(
        p.attention,
        vec![AttentionGroup {
            transpose: 0,
            scores: 1,
            scale: 2,
            softmax: 3,
            context: 4,
            drops: vec![5],
            dims: [B, H, S, S, D, D],
            dtype: DType::F32,
        }]
    );
    // The attention kernel at `weights @ v`, then the context's head swap (a view).
    assert_eq!(
        p.steps,
        vec![Step::Attention { group: 0 }, Step::Eager { op: 6 }]
    );
    assert_eq!(p.attention_kernels(), 1);
    assert!(p.matmul.is_empty() && p.fused.is_empty());
    assert_eq!(
        p.kernel_summaries(),
        vec![
            "attention: softmax(q @ kᵀ / √16) @ v in one kernel, 2×4 heads, 8 queries × 8 keys, \
             head dim 16, value dim 16, F32"
        ]
    );
}

#[test]
fn a_multiplication_by_the_inverse_root_is_the_default_scale_too() {
    let ops = mha(Mha {
        scale: (false, 0.25),
        ..MHA
    });
    assert_eq!(plan(&ops, true, true).attention_kernels(), 1);
}

#[test]
fn without_the_attention_option_the_parts_are_library_matmuls_and_a_softmax() {
    let p = plan(&mha(MHA), true, false);
    assert_eq!(p.attention_kernels(), 0);
    assert_eq!(p.library_matmuls().0, 2);
}

/// Each case breaks one condition of the attention op's semantics: the parts stay.
#[test]
fn attention_that_differs_from_the_attention_op_keeps_its_parts() {
    let cases: [(&str, Mha); 5] = [
        (
            "another scale",
            Mha {
                scale: (true, 3.0),
                ..MHA
            },
        ),
        (
            "softmax over the queries",
            Mha {
                softmax_dim: 2,
                ..MHA
            },
        ),
        (
            "the weights outlive the graph (the caller keeps MHA's weights)",
            Mha {
                weights_dropped: false,
                ..MHA
            },
        ),
        (
            "a padding mask",
            Mha {
                masked: true,
                ..MHA
            },
        ),
        (
            "q consumed by another op before the step",
            Mha {
                query_consumed_between: true,
                ..MHA
            },
        ),
    ];
    for (why, m) in cases {
        let p = plan(&mha(m), true, true);
        assert_eq!(p.attention_kernels(), 0, "{why}");
        assert_eq!(p.library_matmuls().0, 2, "{why}: both products still run");
    }
}

#[test]
fn a_target_that_refuses_the_call_keeps_the_parts() {
    let ops = mha(MHA);
    let pointwise: &dyn Fn(&FusedKernel) -> bool = &|_| true;
    let refuse: &dyn Fn(&AttentionGroup) -> bool = &|g| g.dtype != DType::F32;
    let p = schedule(
        &ops,
        ScheduleOptions {
            relu_masks: true,
            dead_code_elimination: true,
            common_subexpressions: true,
            fused: Some(pointwise),
            max_kernel_buffers: usize::MAX,
            horizontal: false,
            matmul: None,
            attention: Some(refuse),
            column: None,
            horizontal_columns: None,
            view_copies: None,
            memory_planning: true,
            symbolic_sizes: &[],
        },
    );
    assert_eq!(p.attention_kernels(), 0);
    assert!(p.steps.contains(&Step::Eager { op: 1 }));
}

/// W1's attention (batch 32, 8 heads of 64, sequence 128, bf16) as the plan runs it: one
/// kernel line and the step list, reviewed as a snapshot.
#[test]
fn w1_attention_snapshot() {
    let ops = mha(Mha {
        shape: [32, 8, 128, 64],
        dtype: DType::BF16,
        scale: (true, 8.0),
        ..MHA
    });
    let p = plan(&ops, true, true);
    let mut text = p.kernel_summaries().join("\n");
    text.push_str(&format!("\nsteps: {:?}\n", p.steps));
    text.push_str(&format!("{:#?}", p.attention));
    assert_stage_snapshot!("schedule", "w1_attention", text);
}
