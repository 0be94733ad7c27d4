//! CPU code generation: a scheduled kernel (pointwise or row) as one C function.
//!
//! The CPU path is ours, like Inductor's C++/OpenMP backend: CubeCL's own CPU runtime needs an
//! LLVM downloaded at build time. Each kernel becomes a plain C function specialized on its
//! iteration shape and its inputs' strides — constants of the source, so the C compiler sees
//! array walks it can unroll and vectorize — laid out as rows × columns (the last dimension):
//!
//! - rows run in parallel (an OpenMP `parallel for`) when the kernel has enough elements to
//!   repay waking the threads ([`PARALLEL_ELEMENTS`]); a pointwise kernel with few rows splits
//!   its columns instead;
//! - each reduction over the row is one `omp simd` loop over the columns with its accumulator;
//!   reductions that need nothing from each other share one loop (a layer norm's two means do
//!   not: the variance needs the mean);
//! - values computed from the columns are recomputed in every loop that needs them rather than
//!   kept in memory (a softmax reads its row three times, writes it once), and values of the
//!   row (a reduction, what is computed from reductions, an input broadcast along the row) are
//!   locals of the row, computed once.
//!
//! Every kernel of a graph goes into one translation unit ([`c_unit`]), built once into a
//! shared object. The ABI of a kernel function is
//! `void name(const void *const *in, void *const *out, const double *scalars)`: inputs and
//! outputs in kernel order (outputs contiguous, a row output one value per row), scalars as
//! doubles, converted once per call.

use burn_backend::DType;
use burn_compile_schedule::{BinaryOp, Constant, Instr, PointwiseKernel, ReduceOp, UnaryOp};
use std::fmt::Write;

/// Kernels of at least this many elements run their rows on all threads (OpenMP); smaller ones
/// run on the caller's thread, where waking the pool costs more than the work.
pub const PARALLEL_ELEMENTS: usize = 1 << 15;

/// A large pointwise kernel with fewer rows than this splits each row's columns among the
/// threads rather than its rows (which would leave threads idle).
pub const SPLIT_COLUMNS_BELOW_ROWS: usize = 16;

/// Why a kernel has no C code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodegenError {
    /// An element type with no C arithmetic here (half types run on the inner backend).
    Dtype(DType),
    /// A layout that does not match the kernel (wrong rank or input count).
    Layout(String),
}

impl std::fmt::Display for CodegenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CodegenError::Dtype(d) => write!(f, "no C kernels for {d:?}"),
            CodegenError::Layout(why) => write!(f, "layout does not fit the kernel: {why}"),
        }
    }
}

impl std::error::Error for CodegenError {}

/// The C element type of a kernel and the suffix of its `math.h` functions.
struct Ctype {
    name: &'static str,
    /// `f` for float (`expf`), empty for double.
    suffix: &'static str,
}

impl Ctype {
    fn of(dtype: DType) -> Result<Ctype, CodegenError> {
        match dtype {
            DType::F32 | DType::Flex32 => Ok(Ctype {
                name: "float",
                suffix: "f",
            }),
            DType::F64 => Ok(Ctype {
                name: "double",
                suffix: "",
            }),
            other => Err(CodegenError::Dtype(other)),
        }
    }

    /// A literal of this type.
    fn lit(&self, v: f64) -> String {
        let mut s = format!("{v:?}");
        if !s.contains(['.', 'e', 'E']) {
            s.push_str(".0");
        }
        format!("{s}{}", self.suffix)
    }

    fn call(&self, f: &str, args: &str) -> String {
        format!("{f}{}({args})", self.suffix)
    }
}

/// Whether each register is a value of the row (computed once per row) and after how many
/// rounds of reductions it is known.
struct Stages {
    row: Vec<bool>,
    stage: Vec<u32>,
    /// Instruction defining each register.
    instr_of: Vec<usize>,
}

fn stages(k: &PointwiseKernel, row_broadcast: &[bool]) -> Stages {
    let mut s = Stages {
        row: Vec::new(),
        stage: Vec::new(),
        instr_of: Vec::new(),
    };
    for (i, instr) in k.program.iter().enumerate() {
        let (row, stage) = match *instr {
            Instr::Load { input } => (row_broadcast[input as usize], 0),
            Instr::Scalar { .. } | Instr::Const { .. } => (true, 0),
            Instr::Unary { a, .. } => (s.row[a as usize], s.stage[a as usize]),
            Instr::Binary { a, b, .. } => (
                s.row[a as usize] && s.row[b as usize],
                s.stage[a as usize].max(s.stage[b as usize]),
            ),
            Instr::Reduce { a, .. } => (true, s.stage[a as usize] + 1),
            Instr::Store { .. } => continue,
        };
        s.instr_of.push(i);
        s.row.push(row);
        s.stage.push(stage);
    }
    s
}

/// Registers (of the column loop: not values of the row) that `targets` need, in program
/// order.
fn column_closure(k: &PointwiseKernel, st: &Stages, targets: &[usize]) -> Vec<usize> {
    let mut need = vec![false; st.row.len()];
    let mut stack: Vec<usize> = targets.iter().copied().filter(|r| !st.row[*r]).collect();
    while let Some(r) = stack.pop() {
        if need[r] {
            continue;
        }
        need[r] = true;
        let operands: Vec<u16> = match k.program[st.instr_of[r]] {
            Instr::Unary { a, .. } => vec![a],
            Instr::Binary { a, b, .. } => vec![a, b],
            _ => vec![],
        };
        stack.extend(
            operands
                .into_iter()
                .map(usize::from)
                .filter(|o| !st.row[*o] && !need[*o]),
        );
    }
    (0..need.len()).filter(|r| need[*r]).collect()
}

/// The C expression of register `r`'s instruction (its operands are registers `r<k>`).
fn expr(t: &Ctype, instr: &Instr, load: impl Fn(u16) -> String) -> String {
    let reg = |a: u16| format!("r{a}");
    match *instr {
        Instr::Load { input } => load(input),
        Instr::Scalar { index } => format!("({})s[{index}]", t.name),
        Instr::Const { value } => match value {
            Constant::One => t.lit(1.0),
        },
        Instr::Unary { op, a } => {
            let x = reg(a);
            match op {
                UnaryOp::Exp => t.call("exp", &x),
                UnaryOp::Log => t.call("log", &x),
                UnaryOp::Sqrt => t.call("sqrt", &x),
                UnaryOp::Tanh => t.call("tanh", &x),
                UnaryOp::Erf => t.call("erf", &x),
                UnaryOp::Recip => format!("{} / {x}", t.lit(1.0)),
                UnaryOp::Abs => t.call("fabs", &x),
                UnaryOp::Cos => t.call("cos", &x),
                UnaryOp::Sin => t.call("sin", &x),
                UnaryOp::Relu => format!("({x} > {z} ? {x} : {z})", z = t.lit(0.0)),
                UnaryOp::Sigmoid => format!(
                    "{one} / ({one} + {})",
                    t.call("exp", &format!("-{x}")),
                    one = t.lit(1.0)
                ),
                // Burn's exact GELU: x · (1 + erf(x / √2)) / 2.
                UnaryOp::Gelu => format!(
                    "{x} * ({} + {}) * {}",
                    t.lit(1.0),
                    t.call(
                        "erf",
                        &format!("{x} * {}", t.lit(std::f64::consts::FRAC_1_SQRT_2))
                    ),
                    t.lit(0.5)
                ),
            }
        }
        Instr::Binary { op, a, b } => {
            let (x, y) = (reg(a), reg(b));
            match op {
                BinaryOp::Add => format!("{x} + {y}"),
                BinaryOp::Sub => format!("{x} - {y}"),
                BinaryOp::Mul => format!("{x} * {y}"),
                BinaryOp::Div => format!("{x} / {y}"),
                BinaryOp::Powf => t.call("pow", &format!("{x}, {y}")),
            }
        }
        Instr::Reduce { .. } | Instr::Store { .. } => unreachable!("not an expression"),
    }
}

/// The C function `name` computing `kernel` over `shape`, its inputs read with `strides` (one
/// list per input, in elements from the pointer the caller passes for it; negative in a
/// flipped view; a broadcast dimension's stride is never used).
pub fn c_function(
    name: &str,
    kernel: &PointwiseKernel,
    shape: &[usize],
    strides: &[Vec<isize>],
) -> Result<String, CodegenError> {
    let t = Ctype::of(kernel.dtype)?;
    let rank = shape.len();
    if rank != kernel.rank as usize {
        return Err(CodegenError::Layout(format!(
            "rank {rank} for a kernel of rank {}",
            kernel.rank
        )));
    }
    if strides.len() != kernel.inputs.len() || strides.iter().any(|s| s.len() != rank) {
        return Err(CodegenError::Layout(format!(
            "{} stride lists for {} inputs of rank {rank}",
            strides.len(),
            kernel.inputs.len()
        )));
    }
    let cols = shape.last().copied().unwrap_or(1);
    let rows: usize = shape.iter().take(rank.saturating_sub(1)).product();
    // The stride an input walks along dimension `d` (0 where it is broadcast).
    let stride = |i: usize, d: usize| {
        if kernel.inputs[i][d] {
            0
        } else {
            strides[i][d]
        }
    };
    let row_broadcast: Vec<bool> = (0..kernel.inputs.len())
        .map(|i| rank == 0 || stride(i, rank - 1) == 0 || cols == 1)
        .collect();
    let st = stages(kernel, &row_broadcast);
    let row_outputs: Vec<bool> = match &kernel.row {
        Some(layout) => layout.row_outputs.clone(),
        None => vec![false; kernel.outputs as usize],
    };
    let load = |input: u16| {
        let i = input as usize;
        if row_broadcast[i] {
            format!("in{i}[o{i}]")
        } else {
            match stride(i, rank - 1) {
                1 => format!("in{i}[o{i} + c]"),
                s => format!("in{i}[o{i} + c * {s}]"),
            }
        }
    };
    let define = |out: &mut String, indent: &str, r: usize| {
        let instr = &kernel.program[st.instr_of[r]];
        let _ = writeln!(
            out,
            "{indent}const {} r{r} = {};",
            t.name,
            expr(&t, instr, load)
        );
    };

    let mut c = String::new();
    let _ = writeln!(
        c,
        "/* {} over {shape:?}, {} input(s), {} output(s) */",
        if kernel.row.is_some() {
            "row kernel"
        } else {
            "pointwise kernel"
        },
        kernel.inputs.len(),
        kernel.outputs
    );
    let _ = writeln!(
        c,
        "void {name}(const void *const *in, void *const *out, const double *s) {{"
    );
    for i in 0..kernel.inputs.len() {
        let _ = writeln!(
            c,
            "    const {ty} *restrict in{i} = (const {ty} *)in[{i}];",
            ty = t.name
        );
    }
    for o in 0..kernel.outputs as usize {
        let _ = writeln!(
            c,
            "    {ty} *restrict out{o} = ({ty} *)out[{o}];",
            ty = t.name
        );
    }
    // Large kernels run on all threads: by rows, or — a pointwise kernel with few rows (a
    // rank-1 tensor is one row) — by columns within each row.
    let large = rows * cols >= PARALLEL_ELEMENTS;
    let split_columns = large && kernel.row.is_none() && rows < SPLIT_COLUMNS_BELOW_ROWS;
    if large && !split_columns && rows > 1 {
        let _ = writeln!(c, "    #pragma omp parallel for schedule(static)");
    }
    let _ = writeln!(c, "    for (int64_t row = 0; row < {rows}; row++) {{");
    // Each input's offset at the start of the row: the row index split into coordinates.
    let offsets: Vec<String> = (0..kernel.inputs.len())
        .map(|i| format!("o{i} = 0"))
        .collect();
    if !offsets.is_empty() {
        let _ = writeln!(c, "        int64_t {};", offsets.join(", "));
    }
    if rank > 1 && !kernel.inputs.is_empty() {
        let _ = writeln!(c, "        int64_t rest = row, x;");
        for d in (0..rank - 1).rev() {
            let mut line = format!("        x = rest % {}; rest /= {};", shape[d], shape[d]);
            for i in 0..kernel.inputs.len() {
                let s = stride(i, d);
                if s != 0 {
                    let _ = write!(line, " o{i} += x * {s};");
                }
            }
            let _ = writeln!(c, "{line}");
        }
    }
    let ind = "        ";
    let ind2 = "            ";
    // Values of the row known before any reduction.
    let row_regs_of = |stage: u32| -> Vec<usize> {
        (0..st.row.len())
            .filter(|r| st.row[*r] && st.stage[*r] == stage)
            .filter(|r| !matches!(kernel.program[st.instr_of[*r]], Instr::Reduce { .. }))
            .collect()
    };
    for r in row_regs_of(0) {
        define(&mut c, ind, r);
    }
    let last_stage = st.stage.iter().copied().max().unwrap_or(0);
    for stage in 1..=last_stage {
        let reduces: Vec<(usize, ReduceOp, usize)> = (0..st.row.len())
            .filter(|r| st.stage[*r] == stage)
            .filter_map(|r| match kernel.program[st.instr_of[r]] {
                Instr::Reduce { op, a } => Some((r, op, a as usize)),
                _ => None,
            })
            .collect();
        let mut clauses = Vec::new();
        for &(r, op, _) in &reduces {
            let init = match op {
                ReduceOp::Sum | ReduceOp::Mean => t.lit(0.0),
                ReduceOp::Max => "-INFINITY".to_string(),
            };
            let _ = writeln!(c, "{ind}{} a{r} = {init};", t.name);
            clauses.push(match op {
                ReduceOp::Sum | ReduceOp::Mean => format!("reduction(+:a{r})"),
                ReduceOp::Max => format!("reduction(max:a{r})"),
            });
        }
        let _ = writeln!(c, "{ind}#pragma omp simd {}", clauses.join(" "));
        let _ = writeln!(c, "{ind}for (int64_t c = 0; c < {cols}; c++) {{");
        let operands: Vec<usize> = reduces.iter().map(|(_, _, a)| *a).collect();
        for r in column_closure(kernel, &st, &operands) {
            define(&mut c, ind2, r);
        }
        for &(r, op, a) in &reduces {
            let _ = match op {
                ReduceOp::Sum | ReduceOp::Mean => writeln!(c, "{ind2}a{r} += r{a};"),
                ReduceOp::Max => writeln!(c, "{ind2}a{r} = a{r} > r{a} ? a{r} : r{a};"),
            };
        }
        let _ = writeln!(c, "{ind}}}");
        for &(r, op, _) in &reduces {
            let value = match op {
                ReduceOp::Mean => format!("a{r} / {}", t.lit(cols as f64)),
                ReduceOp::Sum | ReduceOp::Max => format!("a{r}"),
            };
            let _ = writeln!(c, "{ind}const {} r{r} = {value};", t.name);
        }
        for r in row_regs_of(stage) {
            define(&mut c, ind, r);
        }
    }
    // The stores: a full output in a last column loop, a row output once per row.
    let stores: Vec<(usize, usize)> = kernel
        .program
        .iter()
        .filter_map(|i| match *i {
            Instr::Store { output, value } => Some((output as usize, value as usize)),
            _ => None,
        })
        .collect();
    let full: Vec<(usize, usize)> = stores
        .iter()
        .copied()
        .filter(|(o, _)| !row_outputs[*o])
        .collect();
    if !full.is_empty() {
        let pragma = if split_columns {
            "omp parallel for simd schedule(static)"
        } else {
            "omp simd"
        };
        let _ = writeln!(c, "{ind}#pragma {pragma}");
        let _ = writeln!(c, "{ind}for (int64_t c = 0; c < {cols}; c++) {{");
        let values: Vec<usize> = full.iter().map(|(_, v)| *v).collect();
        for r in column_closure(kernel, &st, &values) {
            define(&mut c, ind2, r);
        }
        for (o, v) in &full {
            let _ = writeln!(c, "{ind2}out{o}[row * {cols} + c] = r{v};");
        }
        let _ = writeln!(c, "{ind}}}");
    }
    for (o, v) in stores.iter().filter(|(o, _)| row_outputs[*o]) {
        let _ = writeln!(c, "{ind}out{o}[row] = r{v};");
    }
    let _ = writeln!(c, "    }}");
    let _ = writeln!(c, "}}");
    Ok(c)
}

/// One translation unit holding `functions` (from [`c_function`]), with what they include.
pub fn c_unit(functions: &[String]) -> String {
    let mut unit = String::from(
        "/* Generated by burn-compile: the fused kernels of one graph. */\n\
         #include <math.h>\n\
         #include <stdint.h>\n",
    );
    for f in functions {
        unit.push('\n');
        unit.push_str(f);
    }
    unit
}

mod toolchain;
pub use toolchain::{BuildError, KernelFn, Toolchain, Unit};
