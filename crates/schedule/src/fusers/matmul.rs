//! Matmul steps: the graph's matrix products, each run by a library matmul (cuBLASLt on CUDA)
//! with what it can fuse as an epilogue.
//!
//! Burn 0.21 records `Linear` as one operation (`x @ W + b`, which eager Burn runs as a matmul
//! and a broadcast add) and its backward as `LinearXBackward` (`dy @ Wᵀ`) and
//! `LinearWeightBackward` (`Σ_batch xᵀ @ dy`); attention's products are plain `Matmul`s. A
//! library matmul runs each as one launch, `D = relu(α · A·B + β · C + bias)`:
//! - a swap of a batched product's last two dimensions is the product transposed, computed
//!   as `rhsᵀ @ lhsᵀ` into the swap's output (a layout, not an epilogue: the call writes the
//!   transposed product contiguous where the swap alone would leave a strided view);
//! - the bias is its epilogue;
//! - a scale of the product (`· s` or `/ s`, a product without a bias) is α;
//! - an add of the (scaled) product and a tensor of its shape and dtype (a residual
//!   connection, or autodiff accumulating a gradient) reads that tensor as C, with β = 1;
//! - a ReLU of all that is the ReLU epilogue (cuBLASLt applies it last, so a ReLU *before* a
//!   residual add is not fused);
//!
//! each only where the product (or the previous epilogue's result) is read by that operation
//! alone. A weight gradient's call may also compute the bias gradient, `Σ_rows dy`
//! (`LinearBiasBackward` of the same `dy`, which autodiff records right after it), where the
//! target accepts it: the library reduces the operand it reads `dy` through over the product's
//! `k` as its epilogue (cuBLASLt's `BGRADA`), so the bias gradient is no step of its own. The transposes are layouts, and the weight gradient's batch sum is folded into the
//! reduction dimension: `LinearWeightBackward`'s own, and the sums over the batch that
//! autodiff appends to the gradient of a broadcast right-hand side (`x @ W.unsqueeze()`, a
//! tied head's `h @ Eᵀ`: `Σ_b x_bᵀ @ dy_b`), taken into the call before its epilogue. Whether a given call can be done (strides, batch broadcasting, a
//! contiguous residual) is only known from the tensors, so the runtime decides per replay and
//! runs the operations themselves when it cannot.

use burn_backend::DType;
use burn_compile_graph::Activation;
use burn_ir::{
    BaseOperationIr, FloatOperationIr, ModuleOperationIr, NumericOperationIr, OperationIr,
    TensorIr, TensorStatus,
};
use serde::{Deserialize, Serialize};

/// What a matmul step computes, named after the operation it replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MatmulKind {
    /// `lhs @ rhs` (batched; `FloatOperationIr::Matmul`).
    Matmul,
    /// `x @ W (+ b)` (`ModuleOperationIr::Linear`).
    Linear,
    /// `dy @ Wᵀ` (`ModuleOperationIr::LinearXBackward`).
    LinearXBackward,
    /// `Σ_batch xᵀ @ dy` (`ModuleOperationIr::LinearWeightBackward`).
    LinearWeightBackward,
}

/// An add fused into a matmul step: the tensor added is the library call's C (β = 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Residual {
    /// The add operation.
    pub op: u32,
    /// Which of the add's inputs (0: lhs, 1: rhs) is the residual (the other is the product).
    pub input: u8,
}

/// One library matmul in place of operation `op` and of the epilogue operations that read its
/// result, in this order: scale, residual add, ReLU.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MatmulGroup {
    pub kind: MatmulKind,
    /// The matmul operation.
    pub op: u32,
    /// `SumDim`s over the product's batch dimensions, each the sole reader of the previous
    /// (a plain `Matmul` only): after them every batch dimension is 1, and the call folds the
    /// batch into its reduction (`[batch · k]`) instead of writing one product per entry.
    #[serde(default)]
    pub batch_sums: Vec<u32>,
    /// A `SwapDims` of the product's last two dimensions, the product's sole reader (a plain
    /// `Matmul` only): the call computes `(lhs @ rhs)ᵀ = rhsᵀ @ lhsᵀ` into the swap's output,
    /// contiguous, so the transposed product is never a strided view (autodiff's gradient of
    /// `kᵀ` in attention, `qᵀ @ dS` swapped back: now `dSᵀ @ q`).
    #[serde(default)]
    pub transposed_output: Option<u32>,
    /// A `MulScalar` or `DivScalar` of the product (only without a bias: α does not scale
    /// it): the call's α, read from the recorded operation at replay.
    pub scale: Option<u32>,
    /// An add of the (scaled) product and a tensor of the same shape and dtype.
    pub residual: Option<Residual>,
    /// A ReLU of what comes before it: fused as the epilogue.
    pub relu: Option<u32>,
    /// Whether the product has a bias (a `Linear` with one), fused as the epilogue.
    pub bias: bool,
    /// A `LinearBiasBackward` of a weight gradient's `dy` (`LinearWeightBackward` only), later
    /// in the graph with nothing reading `dy` in between: its output, `Σ_rows dy`, is the call's
    /// second output.
    #[serde(default)]
    pub bias_grad: Option<u32>,
    pub dtype: DType,
}

impl MatmulGroup {
    /// The operations the step replaces, in program order.
    pub fn ops(&self) -> impl Iterator<Item = u32> + '_ {
        self.product_ops().chain(self.bias_grad)
    }

    /// The product and the operations applied to it, in order: the last one's output is the
    /// step's (first) output.
    fn product_ops(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.op)
            .chain(self.batch_sums.iter().copied())
            .chain(self.transposed_output)
            .chain(self.scale)
            .chain(self.residual.map(|r| r.op))
            .chain(self.relu)
    }

    /// The operation whose output is the step's output (the last one applied to the product;
    /// a fused bias gradient's is a second output).
    pub fn output_op(&self) -> u32 {
        self.product_ops().last().expect("a group holds its matmul")
    }

    /// The operations fused after the product (a bias gradient's included).
    pub fn epilogue_ops(&self) -> impl Iterator<Item = u32> + '_ {
        self.ops().skip(1)
    }

    /// Whether anything is fused into the call besides the product.
    pub fn has_epilogue(&self) -> bool {
        self.bias
            || self.bias_grad.is_some()
            || !self.batch_sums.is_empty()
            || self.scale.is_some()
            || self.residual.is_some()
            || self.relu.is_some()
    }

    /// One line for `explain`: what the library call computes and what it fused.
    pub fn summary(&self) -> String {
        let what = match self.kind {
            MatmulKind::Matmul if !self.batch_sums.is_empty() => "matmul, batch sum folded into k",
            MatmulKind::Matmul if self.transposed_output.is_some() => {
                "matmul written transposed (rhsᵀ @ lhsᵀ)"
            }
            MatmulKind::Matmul => "matmul",
            MatmulKind::Linear => "linear",
            MatmulKind::LinearXBackward => "linear dx (dy @ Wᵀ)",
            MatmulKind::LinearWeightBackward => "linear dW (xᵀ @ dy, batch folded into k)",
        };
        let mut epilogue = Vec::new();
        if self.scale.is_some() {
            epilogue.push("scale");
        }
        if self.bias {
            epilogue.push("bias");
        }
        if self.residual.is_some() {
            epilogue.push("residual");
        }
        if self.relu.is_some() {
            epilogue.push("relu");
        }
        if self.bias_grad.is_some() {
            epilogue.push("bias gradient");
        }
        let epilogue = if epilogue.is_empty() {
            String::new()
        } else {
            format!(", epilogue {}", epilogue.join(" + "))
        };
        format!("library matmul: {what}{epilogue}, {:?}", self.dtype)
    }
}

/// The matmul kind of an operation, if it is one.
fn kind_of(op: &OperationIr) -> Option<(MatmulKind, bool, DType)> {
    match op {
        OperationIr::Float(dtype, FloatOperationIr::Matmul(_)) => {
            Some((MatmulKind::Matmul, false, *dtype))
        }
        OperationIr::Module(ModuleOperationIr::Linear(l)) => {
            Some((MatmulKind::Linear, l.bias.is_some(), l.out.dtype))
        }
        OperationIr::Module(ModuleOperationIr::LinearXBackward(l)) => {
            Some((MatmulKind::LinearXBackward, false, l.out.dtype))
        }
        OperationIr::Module(ModuleOperationIr::LinearWeightBackward(l)) => {
            Some((MatmulKind::LinearWeightBackward, false, l.out.dtype))
        }
        _ => None,
    }
}

/// Finds the matmul steps of a graph among its live operations (`live[i]`).
pub fn matmul_groups(ops: &[OperationIr], live: &[bool]) -> Vec<MatmulGroup> {
    let mut groups = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let Some((kind, bias, dtype)) = kind_of(op) else {
            continue;
        };
        if !dtype.is_float() {
            continue;
        }
        let mut group = MatmulGroup {
            kind,
            op: i as u32,
            batch_sums: Vec::new(),
            transposed_output: None,
            scale: None,
            residual: None,
            relu: None,
            bias,
            bias_grad: None,
            dtype,
        };
        let Some(mut out) = op.outputs().next() else {
            continue;
        };
        // The epilogue, in the order cuBLASLt applies it; each step reads the previous one's
        // result (`out`, produced at `at`) as its sole reader.
        let mut at = i;
        if kind == MatmulKind::Matmul
            && let Some((sums, j, o)) = batch_sums(ops, live, op, at, out)
        {
            group.batch_sums = sums;
            (at, out) = (j, o);
        }
        if kind == MatmulKind::Matmul
            && group.batch_sums.is_empty()
            && let Some((j, o)) =
                sole_reader(ops, live, at, out).filter(|(j, _)| swaps_last_two(&ops[*j], out))
        {
            group.transposed_output = Some(j as u32);
            (at, out) = (j, o);
        }
        if !bias
            && let Some((j, o)) =
                sole_reader(ops, live, at, out).filter(|(j, _)| is_scale(&ops[*j], out))
        {
            group.scale = Some(j as u32);
            (at, out) = (j, o);
        }
        // The call runs at the product's place: the residual must exist by then.
        if let Some((j, o)) = sole_reader(ops, live, at, out)
            && let Some(input) = residual_input(&ops[j], out)
            && ops[j]
                .inputs()
                .nth(input as usize)
                .is_some_and(|r| produced_before(ops, r, i))
        {
            group.residual = Some(Residual {
                op: j as u32,
                input,
            });
            (at, out) = (j, o);
        }
        let relu_allowed = matches!(kind, MatmulKind::Matmul | MatmulKind::Linear);
        if relu_allowed
            && let Some((j, _)) = sole_reader(ops, live, at, out)
            && Activation::of(&ops[j]) == Some(Activation::Relu)
        {
            group.relu = Some(j as u32);
        }
        if kind == MatmulKind::LinearWeightBackward {
            group.bias_grad = bias_gradient(ops, live, i);
        }
        groups.push(group);
    }
    groups
}

/// The `LinearBiasBackward` of the `dy` that weight gradient `at` reads: the next operation
/// that reads `dy`, when it is that one (live, of `dy`'s dtype, over at least two dimensions)
/// — so the call, which runs at the weight gradient's place, may compute it early and consume
/// `dy` there.
fn bias_gradient(ops: &[OperationIr], live: &[bool], at: usize) -> Option<u32> {
    let OperationIr::Module(ModuleOperationIr::LinearWeightBackward(w)) = &ops[at] else {
        return None;
    };
    let dy = &w.output_grad;
    let (j, op) = ops
        .iter()
        .enumerate()
        .skip(at + 1)
        .find(|(_, op)| op.inputs().any(|t| t.id == dy.id))?;
    let OperationIr::Module(ModuleOperationIr::LinearBiasBackward(b)) = op else {
        return None;
    };
    let fits = live[j]
        && b.output_grad.id == dy.id
        && b.out.dtype == dy.dtype
        && dy.shape.num_dims() >= 2
        && b.out.shape.num_elements() == dy.shape[dy.shape.num_dims() - 1];
    fits.then_some(j as u32)
}

/// The `SumDim`s that sum every batch dimension of `product` (the output of `matmul`, at
/// `at`), each the sole reader of the previous: their positions, and the last one's position
/// and output. Only where both operands have the product's batch dimensions (a broadcast
/// operand's batch does not fold into the reduction) and some batch dimension is summed.
fn batch_sums<'a>(
    ops: &'a [OperationIr],
    live: &[bool],
    matmul: &OperationIr,
    at: usize,
    product: &'a TensorIr,
) -> Option<(Vec<u32>, usize, &'a TensorIr)> {
    let rank = product.shape.num_dims();
    let batch = &product.shape.as_slice()[..rank.checked_sub(2)?];
    if batch.iter().all(|d| *d == 1)
        || matmul
            .inputs()
            .any(|t| t.shape.num_dims() != rank || &t.shape.as_slice()[..rank - 2] != batch)
    {
        return None;
    }
    let (mut sums, mut at, mut out) = (Vec::new(), at, product);
    while out.shape.as_slice()[..rank - 2].iter().any(|d| *d != 1) {
        let (j, o) = sole_reader(ops, live, at, out)?;
        let OperationIr::NumericFloat(_, NumericOperationIr::SumDim(d)) = &ops[j] else {
            return None;
        };
        let mut summed = out.shape.as_slice().to_vec();
        *summed.get_mut(d.axis)? = 1;
        if d.axis >= rank - 2 || o.shape.as_slice() != summed || o.dtype != out.dtype {
            return None;
        }
        sums.push(j as u32);
        (at, out) = (j, o);
    }
    Some((sums, at, out))
}

/// The first operation after position `at` (where `t` is produced) that reads `t`, when that
/// operation is live, reads it as its last use (so nothing else does) and produces one tensor:
/// its position and output.
fn sole_reader<'a>(
    ops: &'a [OperationIr],
    live: &[bool],
    at: usize,
    t: &TensorIr,
) -> Option<(usize, &'a TensorIr)> {
    for (j, op) in ops.iter().enumerate().skip(at + 1) {
        let reads: Vec<&TensorIr> = op.inputs().filter(|i| i.id == t.id).collect();
        if reads.is_empty() {
            continue;
        }
        let consumes = reads.len() == 1 && reads[0].status == TensorStatus::ReadWrite;
        let mut outputs = op.outputs();
        let out = outputs.next()?;
        return (live[j] && consumes && outputs.next().is_none()).then_some((j, out));
    }
    None
}

/// Whether `t` is an input of the graph or produced by an operation before position `at`.
fn produced_before(ops: &[OperationIr], t: &TensorIr, at: usize) -> bool {
    ops.iter()
        .position(|op| op.outputs().any(|o| o.id == t.id))
        .is_none_or(|p| p < at)
}

/// `op` swaps the last two dimensions of `t` (of rank 3 or more: a batched product's).
fn swaps_last_two(op: &OperationIr, t: &TensorIr) -> bool {
    let OperationIr::BaseFloat(BaseOperationIr::SwapDims(s)) = op else {
        return false;
    };
    let rank = t.shape.num_dims();
    let dims = (s.dim1.min(s.dim2), s.dim1.max(s.dim2));
    s.input.id == t.id && rank >= 3 && dims == (rank - 2, rank - 1)
}

/// `op` multiplies or divides `t` by a scalar, in `t`'s dtype.
fn is_scale(op: &OperationIr, t: &TensorIr) -> bool {
    match op {
        OperationIr::NumericFloat(
            dtype,
            NumericOperationIr::MulScalar(d) | NumericOperationIr::DivScalar(d),
        ) => d.lhs.id == t.id && *dtype == t.dtype && d.out.dtype == t.dtype,
        _ => false,
    }
}

/// The position of the other input when `op` adds `t` and a tensor of `t`'s shape and dtype.
fn residual_input(op: &OperationIr, t: &TensorIr) -> Option<u8> {
    let OperationIr::NumericFloat(_, NumericOperationIr::Add(d)) = op else {
        return None;
    };
    let (input, other) = if d.lhs.id == t.id {
        (1, &d.rhs)
    } else {
        (0, &d.lhs)
    };
    let fits = other.id != t.id
        && other.shape == t.shape
        && other.dtype == t.dtype
        && d.out.shape == t.shape
        && d.out.dtype == t.dtype;
    fits.then_some(input)
}

/// The value of a fused scale as the call's α: `· s` is `s`, `/ s` is `1 / s`.
pub fn scale_alpha(op: &OperationIr) -> Option<f64> {
    match op {
        OperationIr::NumericFloat(_, NumericOperationIr::MulScalar(d)) => Some(d.rhs.elem::<f64>()),
        OperationIr::NumericFloat(_, NumericOperationIr::DivScalar(d)) => {
            Some(1.0 / d.rhs.elem::<f64>())
        }
        _ => None,
    }
}

/// One operand of a [`Gemm`], as cuBLASLt describes it: a column-major matrix of `rows` ×
/// `cols` with leading dimension `ld`, used transposed when `trans`, and `batch_stride`
/// elements between the matrices of a batch (0: one matrix for every batch entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmOperand {
    /// Index of the tensor among the step's inputs (in the operation's input order).
    pub input: usize,
    pub trans: bool,
    pub rows: u64,
    pub cols: u64,
    pub ld: i64,
    pub batch_stride: i64,
}

/// A matmul step as one column-major library call `D = op(A) · op(B) (+ bias)`, `m × n`,
/// reduction `k`, `batch` times; `D` is the step's contiguous row-major output read as
/// column-major (`n` columns of `m`), so `A` is the row-major right-hand side and `B` the
/// left-hand side. Computed from the tensors' shapes and strides at replay; `None` where one
/// call cannot express the product (an operand that is neither row- nor column-contiguous,
/// batch dimensions that neither match nor broadcast as a whole, rows that do not fold).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gemm {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u32,
    pub a: GemmOperand,
    pub b: GemmOperand,
    /// The bias (a `[m]` vector, contiguous), by input index.
    pub bias: Option<usize>,
    /// `D`'s batch stride (`m · n`; 0 when `batch` is 1).
    pub d_batch_stride: i64,
}

/// A row-major matrix view: `shape = [rows, cols]`, `strides` in elements, of input `input`.
#[derive(Clone, Copy, Debug)]
struct View {
    input: usize,
    shape: [usize; 2],
    strides: [usize; 2],
}

impl View {
    /// The view as a cuBLASLt operand. Row-major `[r, c]` with `strides [ld, 1]` is
    /// column-major `c × r` with `ld`: the transpose of the row-major matrix, with no data
    /// moved (`trans: false`, since the column-major product computes `Dᵀ`). A
    /// column-contiguous view (`strides [1, ld]`, e.g. a swapped `Wᵀ`) is the row-major view of
    /// its transpose, used transposed.
    fn operand(&self, batch_stride: i64) -> Option<GemmOperand> {
        let row_major = |v: &View, trans: bool| {
            let [r, c] = v.shape;
            // A dimension of size 1 has no meaningful stride.
            let ld = if r == 1 { c.max(1) } else { v.strides[0] };
            (ld >= c.max(1)).then_some(GemmOperand {
                input: v.input,
                trans,
                rows: c as u64,
                cols: r as u64,
                ld: ld as i64,
                batch_stride,
            })
        };
        let [r, c] = self.shape;
        let [sr, sc] = self.strides;
        if sc == 1 || c == 1 {
            row_major(self, false)
        } else if sr == 1 || r == 1 {
            row_major(&self.transposed(), true)
        } else {
            None
        }
    }

    fn transposed(self) -> Self {
        Self {
            input: self.input,
            shape: [self.shape[1], self.shape[0]],
            strides: [self.strides[1], self.strides[0]],
        }
    }
}

/// The stride that steps through `shape`'s dimensions as one (row-major order), if they fold:
/// `Some(0)` when they hold one element.
fn folded_stride(shape: &[usize], strides: &[usize]) -> Option<usize> {
    let dims: Vec<(usize, usize)> = shape
        .iter()
        .zip(strides)
        .filter(|(d, _)| **d > 1)
        .map(|(d, s)| (*d, *s))
        .collect();
    for pair in dims.windows(2) {
        let ((_, outer), (inner_len, inner)) = (pair[0], pair[1]);
        if outer != inner * inner_len {
            return None;
        }
    }
    Some(dims.last().map_or(0, |(_, s)| *s))
}

/// The view of a `[…, r, c]` tensor as one `[Π…·r, c]` matrix, if its rows fold.
fn rows_folded(input: usize, shape: &[usize], strides: &[usize]) -> Option<View> {
    let rank = shape.len();
    let rows: usize = shape[..rank - 1].iter().product();
    let row_stride = folded_stride(&shape[..rank - 1], &strides[..rank - 1])?;
    Some(View {
        input,
        shape: [rows, shape[rank - 1]],
        strides: [row_stride, strides[rank - 1]],
    })
}

/// The last two dimensions of a tensor as a matrix.
fn last_two(input: usize, shape: &[usize], strides: &[usize]) -> View {
    let r = shape.len();
    View {
        input,
        shape: [shape[r - 2], shape[r - 1]],
        strides: [strides[r - 2], strides[r - 1]],
    }
}

impl MatmulGroup {
    /// The library call for this step over tensors of these `shapes` and `strides` (the
    /// operation's inputs, in its order), producing a contiguous `out` shape (the step's
    /// output: after its batch sums, if any).
    pub fn gemm(&self, shapes: &[&[usize]], strides: &[&[usize]], out: &[usize]) -> Option<Gemm> {
        if self.transposed_output.is_some() {
            // `(lhs @ rhs)ᵀ = rhsᵀ @ lhsᵀ`: the operands in the other order, each its last two
            // dimensions swapped (a view), into the swap's contiguous output; the call's
            // operands then name the operation's inputs again.
            let swapped = |v: &[usize]| {
                let mut v = v.to_vec();
                let rank = v.len();
                if rank >= 2 {
                    v.swap(rank - 2, rank - 1);
                }
                v
            };
            let (lhs, rhs) = (*shapes.first()?, *shapes.get(1)?);
            let (ls, rs) = (*strides.first()?, *strides.get(1)?);
            let shapes = [swapped(rhs), swapped(lhs)];
            let strides = [swapped(rs), swapped(ls)];
            let mut g = gemm(
                MatmulKind::Matmul,
                &[&shapes[0], &shapes[1]],
                &[&strides[0], &strides[1]],
                out,
            )?;
            g.a.input = 1 - g.a.input;
            g.b.input = 1 - g.b.input;
            return Some(g);
        }
        if self.batch_sums.is_empty() {
            gemm(self.kind, shapes, strides, out)
        } else {
            batch_summed_gemm(shapes, strides, out)
        }
    }
}

/// `Σ_batch lhs_b @ rhs_b` as one product over the folded batch: `lhs [.., m, k]` read as
/// `[m, batch · k]`, `rhs [.., k, n]` as `[batch · k, n]`, into `out [1.., m, n]`. `None` where
/// the lhs's batch and reduction do not fold into one stride (a contiguous lhs of more than one
/// row: its reduction is the innermost dimension, its batch the outermost) or the operands'
/// batches differ.
pub fn batch_summed_gemm(shapes: &[&[usize]], strides: &[&[usize]], out: &[usize]) -> Option<Gemm> {
    let (l, r) = (*shapes.first()?, *shapes.get(1)?);
    let rank = out.len();
    if rank < 3 || l.len() != rank || r.len() != rank || l[..rank - 2] != r[..rank - 2] {
        return None;
    }
    if out[..rank - 2].iter().any(|d| *d != 1) {
        return None;
    }
    // The lhs's columns: its batch dimensions, then k, as one.
    let (ls, k) = (strides[0], l[rank - 1]);
    let mut cols: Vec<usize> = l[..rank - 2].to_vec();
    cols.push(k);
    let mut col_strides: Vec<usize> = ls[..rank - 2].to_vec();
    col_strides.push(ls[rank - 1]);
    let lhs = View {
        input: 0,
        shape: [l[rank - 2], cols.iter().product()],
        strides: [ls[rank - 2], folded_stride(&cols, &col_strides)?],
    };
    let rhs = rows_folded(1, r, strides[1])?;
    product(lhs, rhs, 1, 0, 0, None, out)
}

/// The library call for a matmul step of `kind` over tensors of these `shapes` and `strides`
/// (the operation's inputs, in its order), producing a contiguous `out` shape.
pub fn gemm(
    kind: MatmulKind,
    shapes: &[&[usize]],
    strides: &[&[usize]],
    out: &[usize],
) -> Option<Gemm> {
    let (lhs, rhs, batch, lhs_batch, rhs_batch, bias) = match kind {
        MatmulKind::Linear => {
            // x [.., K] folded to [M, K]; W [K, N]; b [N].
            let x = rows_folded(0, shapes[0], strides[0])?;
            let w = last_two(1, shapes[1], strides[1]);
            let bias = match shapes.get(2) {
                Some(b) if b.len() == 1 && (b[0] == 1 || strides[2][0] == 1) => Some(2),
                Some(_) => return None,
                None => None,
            };
            (x, w, 1, 0, 0, bias)
        }
        MatmulKind::LinearXBackward => {
            // dy [.., N] folded to [M, N]; Wᵀ: W [K, N] read transposed.
            let dy = rows_folded(1, shapes[1], strides[1])?;
            let w = last_two(0, shapes[0], strides[0]).transposed();
            (dy, w, 1, 0, 0, None)
        }
        MatmulKind::LinearWeightBackward => {
            // xᵀ [K_in, R] @ dy [R, N]: the batch sum is the reduction over all rows R.
            let x = rows_folded(0, shapes[0], strides[0])?.transposed();
            let dy = rows_folded(1, shapes[1], strides[1])?;
            if x.shape[1] != dy.shape[0] {
                return None;
            }
            (x, dy, 1, 0, 0, None)
        }
        MatmulKind::Matmul => {
            let (l, r) = (shapes[0], shapes[1]);
            let rank = out.len();
            if l.len() != rank || r.len() != rank {
                return None;
            }
            let out_batch = &out[..rank - 2];
            let batch: usize = out_batch.iter().product();
            // Each operand's batch dimensions match the output's (strided) or are all 1
            // (one matrix for every entry).
            let batch_stride = |shape: &[usize], s: &[usize]| -> Option<usize> {
                let b = &shape[..rank - 2];
                if b == out_batch {
                    folded_stride(b, &s[..rank - 2])
                } else if b.iter().all(|d| *d == 1) {
                    Some(0)
                } else {
                    None
                }
            };
            let lb = batch_stride(l, strides[0])?;
            let rb = batch_stride(r, strides[1])?;
            // A shared right-hand side and a left-hand side whose batch folds into its rows
            // is one plain product (what `x @ W` on a batch of rows is).
            let folded = (batch > 1 && rb == 0 && l[..rank - 2] == *out_batch)
                .then(|| rows_folded(0, l, strides[0]))
                .flatten();
            let rhs = last_two(1, r, strides[1]);
            match folded {
                Some(x) => (x, rhs, 1, 0, 0, None),
                None => (last_two(0, l, strides[0]), rhs, batch, lb, rb, None),
            }
        }
    };
    product(lhs, rhs, batch, lhs_batch, rhs_batch, bias, out)
}

/// The call computing `lhs @ rhs` (`batch` times, the operands `lhs_batch` and `rhs_batch`
/// elements apart) into a contiguous `out`, if the views are operands cuBLASLt can read.
fn product(
    lhs: View,
    rhs: View,
    batch: usize,
    lhs_batch: usize,
    rhs_batch: usize,
    bias: Option<usize>,
    out: &[usize],
) -> Option<Gemm> {
    let [m_rows, k] = lhs.shape;
    let [k_rhs, n] = rhs.shape;
    if k != k_rhs || k == 0 || m_rows == 0 || n == 0 {
        return None;
    }
    let out_elems: usize = out.iter().product();
    if out_elems != batch * m_rows * n {
        return None;
    }
    let batch = u32::try_from(batch).ok()?;
    Some(Gemm {
        m: n as u64,
        n: m_rows as u64,
        k: k as u64,
        batch,
        a: rhs.operand(rhs_batch as i64)?,
        b: lhs.operand(lhs_batch as i64)?,
        bias,
        d_batch_stride: if batch > 1 { (m_rows * n) as i64 } else { 0 },
    })
}

impl Gemm {
    /// The same product over its dimensions padded with zeros to multiples of `vector`
    /// elements (16 bytes' worth), where one of `m`, `n` or `k` is not one: cuBLASLt's
    /// vectorized kernels need each matrix's contiguous dimension to be such a multiple (GPT-2's
    /// 50,257 logits leave it only kernels that read one element at a time). Each operand is
    /// then a zero-filled copy of `cols` rows of `rows` elements (its leading dimension, the
    /// copy's row pitch, is set when the copy is made); `D` is `m × n` of the padded sizes,
    /// whose first `n` rows of `m` are the product. `None` where nothing needs padding, or for
    /// a batched call or one with a bias (a padded bias would be one more copy).
    pub fn padded(&self, vector: u64) -> Option<Gemm> {
        let pad = |d: u64| d.next_multiple_of(vector);
        let aligned = [self.m, self.n, self.k].iter().all(|d| d % vector == 0);
        if aligned || vector <= 1 || self.batch != 1 || self.bias.is_some() {
            return None;
        }
        let operand = |o: GemmOperand| GemmOperand {
            rows: pad(o.rows),
            cols: pad(o.cols),
            ld: pad(o.rows) as i64,
            batch_stride: 0,
            ..o
        };
        Some(Gemm {
            m: pad(self.m),
            n: pad(self.n),
            k: pad(self.k),
            a: operand(self.a),
            b: operand(self.b),
            ..*self
        })
    }
}

impl std::fmt::Display for GemmOperand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "input {} ({}), {}×{} ld {}",
            self.input,
            if self.trans { "T" } else { "N" },
            self.rows,
            self.cols,
            self.ld
        )?;
        if self.batch_stride != 0 {
            write!(f, ", batch stride {}", self.batch_stride)?;
        }
        Ok(())
    }
}

/// The call as cuBLASLt receives it (column-major), for snapshots and logs.
impl std::fmt::Display for Gemm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "m {} n {} k {}", self.m, self.n, self.k)?;
        if self.batch > 1 {
            write!(f, " × batch {}", self.batch)?;
        }
        write!(
            f,
            "\n  A: {}\n  B: {}\n  D: {}×{} ld {}",
            self.a, self.b, self.m, self.n, self.m
        )?;
        if self.batch > 1 {
            write!(f, ", batch stride {}", self.d_batch_stride)?;
        }
        if let Some(b) = self.bias {
            write!(f, "\n  bias: input {b} ({} elements)", self.m)?;
        }
        Ok(())
    }
}

/// A product through the target's library matmul, with its epilogue.
pub(crate) struct MatmulFuser;

impl super::Fuser for MatmulFuser {
    fn fuse(
        &self,
        ops: &[OperationIr],
        options: &crate::ScheduleOptions<'_>,
        claims: &mut super::Claims,
    ) {
        let Some(accepts) = options.matmul else {
            return;
        };
        for mut group in matmul_groups(ops, &claims.live) {
            if !accepts(&group) {
                // A target without the bias-gradient epilogue may still take the product (the
                // column sums then take the bias gradient).
                match group.bias_grad.take() {
                    Some(_) if accepts(&group) => {}
                    _ => continue,
                }
            }
            // No later fuser takes the group's operations; the epilogue's run inside the call
            // (the others, e.g. a view the call reads through, keep their own steps).
            for i in group.ops() {
                claims.live[i as usize] = false;
            }
            for i in group.epilogue_ops() {
                claims.claimed[i as usize] = true;
            }
            let at = claims.matmul.len() as u32;
            claims.steps_at[group.op as usize].push(crate::Step::Matmul { group: at });
            claims.matmul.push(group);
        }
    }
}
