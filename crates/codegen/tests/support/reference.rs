//! The reference the code generators' execution tests compare with: a kernel's program
//! evaluated on the host in f64, over inputs given with their strides.
#![allow(dead_code)] // each test binary uses its own subset

use burn_compile_schedule::{BinaryOp, FusedKernel, Instr, ReduceOp, UnaryOp};

/// Reproducible values in [lo, hi).
pub fn values(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// An input: values in memory order, its shape and strides (in elements).
pub struct Input {
    pub data: Vec<f32>,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
}

pub fn contiguous(shape: &[usize], seed: u64, lo: f32, hi: f32) -> Input {
    let n = shape.iter().product();
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    Input {
        data: values(n, seed, lo, hi),
        shape: shape.to_vec(),
        strides,
    }
}

pub fn erf(x: f64) -> f64 {
    // Abramowitz–Stegun 7.1.26 is too coarse for a 1e-5 check: integrate instead.
    let n = 2000;
    let h = x / n as f64;
    let f = |t: f64| (-t * t).exp();
    let mut sum = f(0.0) + f(x);
    for i in 1..n {
        sum += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    sum * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt()
}

pub fn eval_unary(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Erf => erf(x),
        UnaryOp::Recip => 1.0 / x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Gelu => x * 0.5 * (1.0 + erf(x / 2f64.sqrt())),
    }
}

pub fn eval_binary(op: BinaryOp, x: f64, y: f64) -> f64 {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Powf => x.powf(y),
        BinaryOp::ReluBackward => {
            if x <= 0.0 {
                0.0
            } else {
                y
            }
        }
    }
}

/// A row kernel's program evaluated on the host, in f64, row by row: each value is a vector
/// over the row's columns (a row value repeats one number).
pub fn row_reference(k: &FusedKernel, inputs: &[Input], scalars: &[f32]) -> Vec<Vec<f64>> {
    let layout = k.row.as_ref().expect("row kernel");
    let shape = &layout.shape;
    let (rank, n) = (shape.len(), *shape.last().unwrap());
    let rows: usize = shape[..rank - 1].iter().product();
    let mut outs: Vec<Vec<f64>> = layout
        .row_outputs
        .iter()
        .map(|r| vec![0.0; if *r { rows } else { rows * n }])
        .collect();
    for row in 0..rows {
        let mut coords = vec![0; rank];
        let mut rest = row;
        for d in (0..rank - 1).rev() {
            coords[d] = rest % shape[d];
            rest /= shape[d];
        }
        let mut regs: Vec<Vec<f64>> = Vec::new();
        for instr in &k.program {
            let v: Vec<f64> = match *instr {
                Instr::Load { input } => {
                    let t = &inputs[input as usize];
                    (0..n)
                        .map(|col| {
                            coords[rank - 1] = col;
                            let offset: usize = (0..rank)
                                .filter(|d| !k.inputs[input as usize][*d])
                                .map(|d| coords[d] * t.strides[d])
                                .sum();
                            t.data[offset] as f64
                        })
                        .collect()
                }
                Instr::Scalar { index } => vec![scalars[index as usize] as f64; n],
                Instr::Const { value } => vec![value.value(); n],
                Instr::Unary { op, a } => regs[a as usize]
                    .iter()
                    .map(|x| eval_unary(op, *x))
                    .collect(),
                Instr::Binary { op, a, b } => regs[a as usize]
                    .iter()
                    .zip(&regs[b as usize])
                    .map(|(x, y)| eval_binary(op, *x, *y))
                    .collect(),
                Instr::Reduce { op, a } => {
                    let x = &regs[a as usize];
                    let r = match op {
                        ReduceOp::Sum => x.iter().sum(),
                        ReduceOp::Mean => x.iter().sum::<f64>() / n as f64,
                        ReduceOp::Max => x.iter().cloned().fold(f64::MIN, f64::max),
                    };
                    vec![r; n]
                }
                Instr::Store { output, value } => {
                    let v = &regs[value as usize];
                    if layout.row_outputs[output as usize] {
                        outs[output as usize][row] = v[0];
                    } else {
                        outs[output as usize][row * n..(row + 1) * n].copy_from_slice(v);
                    }
                    continue;
                }
            };
            regs.push(v);
        }
    }
    outs
}

/// The program evaluated on the host, in f64: one vector per output.
#[allow(clippy::needless_range_loop)] // `pos` indexes every output
pub fn reference(
    k: &FusedKernel,
    shape: &[usize],
    inputs: &[Input],
    scalars: &[f32],
) -> Vec<Vec<f64>> {
    let len: usize = shape.iter().product();
    let mut outs = vec![vec![0.0; len]; k.outputs as usize];
    for pos in 0..len {
        let mut coords = vec![0; shape.len()];
        let mut rest = pos;
        for d in (0..shape.len()).rev() {
            coords[d] = rest % shape[d];
            rest /= shape[d];
        }
        let mut regs: Vec<f64> = Vec::new();
        for instr in &k.program {
            match *instr {
                Instr::Load { input } => {
                    let t = &inputs[input as usize];
                    let offset: usize = (0..shape.len())
                        .filter(|d| !k.inputs[input as usize][*d])
                        .map(|d| coords[d] * t.strides[d])
                        .sum();
                    regs.push(t.data[offset] as f64);
                }
                Instr::Scalar { index } => regs.push(scalars[index as usize] as f64),
                Instr::Const { value } => regs.push(value.value()),
                Instr::Unary { op, a } => regs.push(eval_unary(op, regs[a as usize])),
                Instr::Binary { op, a, b } => {
                    regs.push(eval_binary(op, regs[a as usize], regs[b as usize]))
                }
                Instr::Reduce { .. } => unreachable!("pointwise kernels have no reductions"),
                Instr::Store { output, value } => outs[output as usize][pos] = regs[value as usize],
            }
        }
    }
    outs
}
