//! CPU code generation: a scheduled kernel (pointwise or row) as one C function.
//!
//! The CPU path is ours, like Inductor's C++/OpenMP backend: CubeCL's own CPU runtime needs an
//! LLVM downloaded at build time. Each kernel becomes a plain C function specialized on its
//! iteration shape and its inputs' strides — constants of the source, so the C compiler sees
//! array walks it can unroll and vectorize — laid out as rows × columns (the last dimension):
//!
//! - a function computes a range of tasks, `[begin, end)`: rows, or, for a large pointwise
//!   kernel with few rows, blocks of a row's columns ([`COLUMN_BLOCK`]). The caller splits the
//!   tasks among its threads when the kernel has enough elements to repay it
//!   ([`PARALLEL_ELEMENTS`]): the threads are the host's (Flex's rayon pool), so the C code has
//!   no threading runtime of its own to contend with them;
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
//! `void name(const void *const *in, void *const *out, const double *s, int64_t begin, int64_t end)`:
//! inputs and outputs in kernel order (outputs contiguous, a row output one value per row),
//! scalars as doubles, converted once per call, and the tasks to compute.
//!
//! f32 and f64 compute in their own type; f16 and bf16 are stored as such and computed in
//! float (`_Float16` conversions; bf16 by its bits, rounded to nearest even), rounded once at
//! the store.

use burn_backend::DType;
use burn_compile_schedule::{BinaryOp, Constant, FusedKernel, Instr, ReduceOp, UnaryOp};
use std::fmt::Write;

/// Kernels of at least this many elements run their rows on all threads (rayon's pool, the
/// one Flex's own ops use); smaller ones
/// run on the caller's thread, where waking the pool costs more than the work.
pub const PARALLEL_ELEMENTS: usize = 1 << 15;

/// A large pointwise kernel with fewer rows than this splits each row's columns among the
/// threads rather than its rows (which would leave threads idle).
pub const SPLIT_COLUMNS_BELOW_ROWS: usize = 16;

/// Columns of one task of a kernel that splits its columns.
pub const COLUMN_BLOCK: usize = 8192;

/// One generated C function and how to call it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CFunction {
    /// Its C source (one function; [`c_unit`] puts a graph's together).
    pub source: String,
    /// The tasks it computes: `begin..end` within `0..tasks`.
    pub tasks: usize,
    /// Whether the kernel is large enough to split its tasks among threads.
    pub parallel: bool,
}

/// Why a kernel has no C code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodegenError {
    /// An element type with no C arithmetic here (not a float).
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

/// The C types of a kernel: how its elements are stored, and computed.
struct Ctype {
    /// The type of the buffers' elements.
    storage: &'static str,
    /// The type arithmetic runs in (`float` for the half types).
    name: &'static str,
    /// `f` for float (`expf`), empty for double.
    suffix: &'static str,
    /// bf16: stored as `uint16_t` bits, converted by the unit's helpers.
    bf16: bool,
}

impl Ctype {
    fn of(dtype: DType) -> Result<Ctype, CodegenError> {
        let float = |storage| Ctype {
            storage,
            name: "float",
            suffix: "f",
            bf16: false,
        };
        match dtype {
            DType::F32 | DType::Flex32 => Ok(float("float")),
            DType::F16 => Ok(float("_Float16")),
            DType::BF16 => Ok(Ctype {
                bf16: true,
                ..float("uint16_t")
            }),
            DType::F64 => Ok(Ctype {
                storage: "double",
                name: "double",
                suffix: "",
                bf16: false,
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

    /// An element read from storage, as the compute type.
    fn load(&self, element: String) -> String {
        if self.bf16 {
            format!("bf16_load({element})")
        } else if self.storage != self.name {
            format!("({}){element}", self.name)
        } else {
            element
        }
    }

    /// A computed value, as the storage type.
    fn store(&self, value: String) -> String {
        if self.bf16 {
            format!("bf16_store({value})")
        } else if self.storage != self.name {
            format!("({}){value}", self.storage)
        } else {
            value
        }
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

fn stages(k: &FusedKernel, row_broadcast: &[bool]) -> Stages {
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
fn column_closure(k: &FusedKernel, st: &Stages, targets: &[usize]) -> Vec<usize> {
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
                // `mask_fill(y, x <= 0, 0)`, as Burn's ReLU backward: a NaN `x` passes `y` on.
                BinaryOp::ReluBackward => format!("({x} <= {} ? {} : {y})", t.lit(0.0), t.lit(0.0)),
            }
        }
        Instr::Reduce { .. } | Instr::Store { .. } => unreachable!("not an expression"),
    }
}

/// A stride of a symbolic C function that is read at run time ([`c_symbolic_function`]).
pub const RUNTIME_STRIDE: isize = isize::MIN;

/// The C function `name` computing `kernel` over `shape`, its inputs read with `strides` (one
/// list per input, in elements from the pointer the caller passes for it; negative in a
/// flipped view; a broadcast dimension's stride is never used).
pub fn c_function(
    name: &str,
    kernel: &FusedKernel,
    shape: &[usize],
    strides: &[Vec<isize>],
) -> Result<CFunction, CodegenError> {
    check_layout(kernel, shape.len(), strides)?;
    generate(name, kernel, shape, &[], strides)
}

/// The layout a symbolic C function is built for, from a call's real `shape` and `strides`
/// (as [`c_function`] takes them): the sizes of the `dynamic` dimensions set to 0, and every
/// stride that is walked (not broadcast, along a dimension of more than one element)
/// [`RUNTIME_STRIDE`], except a unit stride along the last dimension (a contiguous row stays a
/// walk the C compiler vectorizes). Calls whose layouts normalize alike share one function.
pub fn symbolic_layout(
    kernel: &FusedKernel,
    dynamic: &[bool],
    shape: &[usize],
    strides: &[Vec<isize>],
) -> (Vec<usize>, Vec<Vec<isize>>) {
    let rank = shape.len();
    let is_dynamic = |d: usize| dynamic.get(d).copied().unwrap_or(false);
    let sizes = (0..rank)
        .map(|d| if is_dynamic(d) { 0 } else { shape[d] })
        .collect();
    let strides = strides
        .iter()
        .enumerate()
        .map(|(i, own)| {
            (0..rank)
                .map(|d| {
                    let walked = !kernel.inputs[i][d] && (is_dynamic(d) || shape[d] > 1);
                    if !walked {
                        0
                    } else if d + 1 == rank && own[d] == 1 {
                        1
                    } else {
                        RUNTIME_STRIDE
                    }
                })
                .collect()
        })
        .collect();
    (sizes, strides)
}

/// The runtime arguments a symbolic C function over `layout` (from [`symbolic_layout`]) reads
/// after the kernel's scalars, for a call over `shape` with inputs of `strides`: the size of
/// each dynamic dimension, then each [`RUNTIME_STRIDE`] stride, input by input (as doubles, like
/// the scalars: exact below 2^53).
pub fn symbolic_args(
    dynamic: &[bool],
    layout: &(Vec<usize>, Vec<Vec<isize>>),
    shape: &[usize],
    strides: &[Vec<isize>],
) -> Vec<f64> {
    let mut args: Vec<f64> = (0..shape.len())
        .filter(|&d| dynamic.get(d).copied().unwrap_or(false))
        .map(|d| shape[d] as f64)
        .collect();
    for (normalized, own) in layout.1.iter().zip(strides) {
        for (n, s) in normalized.iter().zip(own) {
            if *n == RUNTIME_STRIDE {
                args.push(*s as f64);
            }
        }
    }
    args
}

/// The symbolic C function `name` of `kernel` over `layout` (from [`symbolic_layout`]): the
/// sizes of the `dynamic` dimensions and the [`RUNTIME_STRIDE`] strides are read from `s` after
/// the kernel's `scalars` ([`symbolic_args`]), so one function serves every size of those
/// dimensions. A pointwise kernel always takes its tasks as blocks of columns
/// ([`COLUMN_BLOCK`]) within rows, a row kernel as rows; [`CFunction::tasks`] and
/// [`CFunction::parallel`] are those of the call's real sizes, computed by [`symbolic_tasks`].
pub fn c_symbolic_function(
    name: &str,
    kernel: &FusedKernel,
    dynamic: &[bool],
    layout: &(Vec<usize>, Vec<Vec<isize>>),
) -> Result<CFunction, CodegenError> {
    check_layout(kernel, layout.0.len(), &layout.1)?;
    if dynamic.len() != layout.0.len() {
        return Err(CodegenError::Layout(format!(
            "{} dynamic flags for rank {}",
            dynamic.len(),
            layout.0.len()
        )));
    }
    generate(name, kernel, &layout.0, dynamic, &layout.1)
}

/// The tasks of a symbolic C function's call over `shape`, and whether the call is large
/// enough to split them among threads.
pub fn symbolic_tasks(kernel: &FusedKernel, shape: &[usize]) -> (usize, bool) {
    let rank = shape.len();
    let cols = shape.last().copied().unwrap_or(1);
    let rows: usize = shape.iter().take(rank.saturating_sub(1)).product();
    let tasks = if kernel.row.is_some() {
        rows
    } else {
        rows * cols.div_ceil(COLUMN_BLOCK)
    };
    (tasks, rows * cols >= PARALLEL_ELEMENTS && tasks > 1)
}

fn check_layout(
    kernel: &FusedKernel,
    rank: usize,
    strides: &[Vec<isize>],
) -> Result<(), CodegenError> {
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
    Ok(())
}

/// The function of [`c_function`] (`dynamic` empty) or [`c_symbolic_function`].
fn generate(
    name: &str,
    kernel: &FusedKernel,
    shape: &[usize],
    dynamic: &[bool],
    strides: &[Vec<isize>],
) -> Result<CFunction, CodegenError> {
    let t = Ctype::of(kernel.dtype)?;
    let rank = shape.len();
    let symbolic = dynamic.iter().any(|d| *d);
    let is_dynamic = |d: usize| dynamic.get(d).copied().unwrap_or(false);
    // Each dimension's size in the source: a constant, or `n<d>` read at run time.
    let size = |d: usize| -> String {
        if is_dynamic(d) {
            format!("n{d}")
        } else {
            shape[d].to_string()
        }
    };
    let cols = shape.last().copied().unwrap_or(1);
    let cols_expr = if rank == 0 {
        "1".to_string()
    } else {
        size(rank - 1)
    };
    let rows: usize = shape.iter().take(rank.saturating_sub(1)).product();
    // The stride an input walks along dimension `d` (0 where it is broadcast).
    let stride = |i: usize, d: usize| {
        if kernel.inputs[i][d] {
            0
        } else {
            strides[i][d]
        }
    };
    // As source: a constant, or `t<i>_<d>` read at run time.
    let stride_expr = |i: usize, d: usize| -> String {
        match stride(i, d) {
            RUNTIME_STRIDE => format!("t{i}_{d}"),
            s => s.to_string(),
        }
    };
    let row_broadcast: Vec<bool> = (0..kernel.inputs.len())
        .map(|i| rank == 0 || stride(i, rank - 1) == 0 || (!is_dynamic(rank - 1) && cols == 1))
        .collect();
    let st = stages(kernel, &row_broadcast);
    let row_outputs: Vec<bool> = match &kernel.row {
        Some(layout) => layout.row_outputs.clone(),
        None => vec![false; kernel.outputs as usize],
    };
    let load = |input: u16| {
        let i = input as usize;
        t.load(if row_broadcast[i] {
            format!("in{i}[o{i}]")
        } else {
            match stride(i, rank - 1) {
                1 => format!("in{i}[o{i} + c]"),
                _ => format!("in{i}[o{i} + c * {}]", stride_expr(i, rank - 1)),
            }
        })
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
    let shown = if symbolic {
        let dims: Vec<String> = (0..rank).map(size).collect();
        format!("[{}] (symbolic)", dims.join(", "))
    } else {
        format!("{shape:?}")
    };
    let _ = writeln!(
        c,
        "/* {} over {shown}, {} input(s), {} output(s) */",
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
        "void {name}(const void *const *in, void *const *out, const double *s, int64_t begin, int64_t end) {{"
    );
    for i in 0..kernel.inputs.len() {
        let _ = writeln!(
            c,
            "    const {ty} *restrict in{i} = (const {ty} *)in[{i}];",
            ty = t.storage
        );
    }
    for o in 0..kernel.outputs as usize {
        let _ = writeln!(
            c,
            "    {ty} *restrict out{o} = ({ty} *)out[{o}];",
            ty = t.storage
        );
    }
    // The runtime sizes and strides of a symbolic function, after the scalars.
    if symbolic {
        let mut arg = kernel.scalars as usize;
        for d in (0..rank).filter(|&d| is_dynamic(d)) {
            let _ = writeln!(c, "    const int64_t n{d} = (int64_t)s[{arg}];");
            arg += 1;
        }
        for i in 0..kernel.inputs.len() {
            for d in 0..rank {
                if stride(i, d) == RUNTIME_STRIDE {
                    let _ = writeln!(c, "    const int64_t t{i}_{d} = (int64_t)s[{arg}];");
                    arg += 1;
                }
            }
        }
    }
    // Large kernels run on all threads: by rows, or — a pointwise kernel with few rows (a
    // rank-1 tensor is one row) — by blocks of columns within each row. A symbolic pointwise
    // kernel always takes blocks of columns (one block per row when rows are short), so one
    // function serves every size; the caller computes its tasks ([`symbolic_tasks`]).
    let large = rows * cols >= PARALLEL_ELEMENTS;
    let split_columns = if symbolic {
        kernel.row.is_none()
    } else {
        large && kernel.row.is_none() && rows < SPLIT_COLUMNS_BELOW_ROWS
    };
    let blocks = cols.div_ceil(COLUMN_BLOCK);
    let (tasks, first, past) = if split_columns {
        let blocks = if is_dynamic(rank.saturating_sub(1)) {
            let _ = writeln!(
                c,
                "    const int64_t blocks = ({cols_expr} + {}) / {COLUMN_BLOCK};",
                COLUMN_BLOCK - 1
            );
            "blocks".to_string()
        } else {
            blocks.to_string()
        };
        let _ = writeln!(c, "    for (int64_t task = begin; task < end; task++) {{");
        let _ = writeln!(
            c,
            "        const int64_t row = task / {blocks}, c0 = task % {blocks} * {COLUMN_BLOCK};"
        );
        let _ = writeln!(
            c,
            "        const int64_t c1 = c0 + {COLUMN_BLOCK} < {cols_expr} ? c0 + {COLUMN_BLOCK} : {cols_expr};"
        );
        (
            rows * cols.div_ceil(COLUMN_BLOCK),
            "c0".to_string(),
            "c1".to_string(),
        )
    } else {
        let _ = writeln!(c, "    for (int64_t row = begin; row < end; row++) {{");
        (rows, "0".to_string(), cols_expr.clone())
    };
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
            let n = size(d);
            let mut line = format!("        x = rest % {n}; rest /= {n};");
            for i in 0..kernel.inputs.len() {
                if stride(i, d) != 0 {
                    let _ = write!(line, " o{i} += x * {};", stride_expr(i, d));
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
        let _ = writeln!(c, "{ind}for (int64_t c = 0; c < {cols_expr}; c++) {{");
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
                ReduceOp::Mean if is_dynamic(rank - 1) => {
                    format!("a{r} / ({}){cols_expr}", t.name)
                }
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
        let _ = writeln!(c, "{ind}#pragma omp simd");
        let _ = writeln!(c, "{ind}for (int64_t c = {first}; c < {past}; c++) {{");
        let values: Vec<usize> = full.iter().map(|(_, v)| *v).collect();
        for r in column_closure(kernel, &st, &values) {
            define(&mut c, ind2, r);
        }
        for (o, v) in &full {
            let value = t.store(format!("r{v}"));
            let _ = writeln!(c, "{ind2}out{o}[row * {cols_expr} + c] = {value};");
        }
        let _ = writeln!(c, "{ind}}}");
    }
    for (o, v) in stores.iter().filter(|(o, _)| row_outputs[*o]) {
        let value = t.store(format!("r{v}"));
        let _ = writeln!(c, "{ind}out{o}[row] = {value};");
    }
    let _ = writeln!(c, "    }}");
    let _ = writeln!(c, "}}");
    Ok(CFunction {
        source: c,
        tasks,
        parallel: large && tasks > 1,
    })
}

/// bf16 from and to its bits: the upper half of an f32; stored rounded to nearest even, a NaN
/// kept a (quiet) NaN.
const BF16_HELPERS: &str = "\
static inline float bf16_load(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t bf16_store(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
";

/// glibc's vector math library (libmvec) on x86-64: the `math.h` functions a column loop calls
/// are declared with their vector variants, so the loop is vectorized through them (glibc
/// declares them itself only under `-ffast-math`, which would also let the compiler reorder
/// arithmetic). The variants are accurate to 4 ULP; their special values (NaN, ±∞) are those of
/// the scalar functions. Elsewhere the declarations vanish and the loops call the scalar
/// functions.
const VECTOR_MATH: &str = "\
#if defined(__x86_64__) && defined(__GLIBC__) && !defined(__FAST_MATH__)
#define BURN_VECTOR __attribute__((__simd__(\"notinbranch\")))
BURN_VECTOR float expf(float);
BURN_VECTOR float logf(float);
BURN_VECTOR float sinf(float);
BURN_VECTOR float cosf(float);
BURN_VECTOR float powf(float, float);
BURN_VECTOR double exp(double);
BURN_VECTOR double log(double);
BURN_VECTOR double sin(double);
BURN_VECTOR double cos(double);
BURN_VECTOR double pow(double, double);
#if __GLIBC_PREREQ(2, 35)
BURN_VECTOR float tanhf(float);
BURN_VECTOR float erff(float);
BURN_VECTOR double tanh(double);
BURN_VECTOR double erf(double);
#endif
#endif
";

/// One translation unit holding `functions` (from [`c_function`]), with what they include.
pub fn c_unit(functions: &[CFunction]) -> String {
    let mut unit = String::from(
        "/* Generated by burn-compile: the fused kernels of one graph. */\n\
         #include <math.h>\n\
         #include <stdint.h>\n\
         #include <string.h>\n\n",
    );
    unit.push_str(VECTOR_MATH);
    if functions.iter().any(|f| f.source.contains("bf16_")) {
        unit.push('\n');
        unit.push_str(BF16_HELPERS);
    }
    for f in functions {
        unit.push('\n');
        unit.push_str(&f.source);
    }
    unit
}

mod toolchain;
pub use toolchain::{BuildError, KernelFn, Toolchain, Unit};
