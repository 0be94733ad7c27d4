//! Generated C kernels built by the system compiler, loaded and run, compared with a reference
//! evaluation of the same program in f64: broadcasting, strided (transposed) inputs, runtime
//! scalars, several outputs, row kernels of every shape, dimensions of size 1 and 0, every op.
//! All kernels of the test go into one unit, built once, as a graph's kernels are.
//!
//! Needs a C compiler (`cc`, or `$CC`): the CPU path's tests are not skipped without one.

mod support;

use burn_backend::DType;
use burn_compile_codegen_c::{
    CFunction, KernelFn, PARALLEL_ELEMENTS, Toolchain, c_function, c_symbolic_function, c_unit,
    symbolic_args, symbolic_layout, symbolic_tasks,
};
use burn_compile_schedule::{FusedKernel, UnaryOp};
use std::ffi::c_void;
use support::reference::{Input, contiguous, reference, row_reference};
use support::{BINARY_OPS, UNARY_OPS, binary, unary};

struct Case {
    name: String,
    kernel: FusedKernel,
    shape: Vec<usize>,
    inputs: Vec<Input>,
    scalars: Vec<f32>,
}

fn case(
    name: &str,
    kernel: FusedKernel,
    shape: &[usize],
    inputs: Vec<Input>,
    scalars: &[f32],
) -> Case {
    Case {
        name: name.to_string(),
        kernel,
        shape: shape.to_vec(),
        inputs,
        scalars: scalars.to_vec(),
    }
}

fn cases() -> Vec<Case> {
    let mut cases = vec![
        case(
            "chain",
            support::chain(),
            &[5, 7],
            vec![contiguous(&[5, 7], 1, -2.0, 2.0)],
            &[0.75],
        ),
        case(
            "constants",
            support::constants(),
            &[6, 5],
            vec![contiguous(&[6, 5], 21, -2.0, 2.0)],
            &[0.0, 0.5],
        ),
        case("fill", support::fill(), &[3, 70], vec![], &[-0.25]),
        case(
            "bias_relu",
            support::bias_relu(),
            &[300, 9],
            vec![
                contiguous(&[300, 9], 2, -1.0, 1.0),
                contiguous(&[1, 9], 3, -0.5, 0.5),
            ],
            &[],
        ),
        // Large enough to run its rows on all threads.
        case(
            "bias_relu (parallel)",
            support::bias_relu(),
            &[512, 256],
            vec![
                contiguous(&[512, 256], 4, -1.0, 1.0),
                contiguous(&[1, 256], 5, -0.5, 0.5),
            ],
            &[],
        ),
        case(
            "centre",
            support::row_broadcast(),
            &[20, 32],
            vec![
                contiguous(&[20, 32], 14, -1.0, 1.0),
                contiguous(&[20, 1], 15, -0.5, 0.5),
            ],
            &[1.5],
        ),
        case(
            "two_outputs",
            support::two_outputs(),
            &[2, 3, 5],
            vec![contiguous(&[2, 3, 5], 6, 0.1, 2.0)],
            &[],
        ),
        // One long row (rank 1) and few long rows: the columns split among the threads.
        case(
            "Exp [65536] (columns split)",
            unary(UnaryOp::Exp),
            &[65536],
            vec![contiguous(&[65536], 16, -3.0, 3.0)],
            &[],
        ),
        case(
            "bias_relu [3, 20000] (columns split)",
            support::bias_relu(),
            &[3, 20000],
            vec![
                contiguous(&[3, 20000], 17, -1.0, 1.0),
                contiguous(&[1, 20000], 18, -0.5, 0.5),
            ],
            &[],
        ),
        // Dimensions of size 1 and 0.
        case(
            "chain [5, 1]",
            support::chain(),
            &[5, 1],
            vec![contiguous(&[5, 1], 7, -2.0, 2.0)],
            &[2.0],
        ),
        case(
            "chain [0, 7]",
            support::chain(),
            &[0, 7],
            vec![contiguous(&[0, 7], 8, -2.0, 2.0)],
            &[2.0],
        ),
        case(
            "chain [4, 0]",
            support::chain(),
            &[4, 0],
            vec![contiguous(&[4, 0], 9, -2.0, 2.0)],
            &[2.0],
        ),
    ];
    const { assert!(512 * 256 >= PARALLEL_ELEMENTS) };

    // A transposed input: a contiguous [4, 3] buffer read as its transpose.
    let mut t = contiguous(&[4, 3], 4, -1.0, 1.0);
    t.shape = vec![3, 4];
    t.strides = vec![1, 3];
    let sub = support::difference();
    cases.push(case(
        "transposed",
        sub,
        &[3, 4],
        vec![t, contiguous(&[3, 4], 5, -1.0, 1.0)],
        &[],
    ));

    // Row kernels: layer norm (two dependent reductions, γ and β along the row), over short,
    // long, single-column and parallel rows; softmax and log-softmax with its row output.
    for (rows, n, seed) in [(6, 300, 7), (2, 9000, 60), (4, 1, 61), (256, 512, 62)] {
        let inputs = vec![
            contiguous(&[rows, n], seed, -2.0, 2.0),
            contiguous(&[1, n], seed + 1, 0.5, 1.5),
            contiguous(&[1, n], seed + 2, -0.5, 0.5),
        ];
        let name = format!("layer_norm {rows}×{n}");
        cases.push(case(
            &name,
            support::layer_norm(rows, n),
            &[rows, n],
            inputs,
            &[1e-5],
        ));
    }
    for (shape, seed) in [
        ([3, 5, 40], 10),
        ([2, 32, 128], 70),
        ([2, 3, 1], 71),
        ([0, 4, 8], 72),
    ] {
        let x = contiguous(&shape, seed, -4.0, 4.0);
        cases.push(case(
            &format!("softmax {shape:?}"),
            support::softmax_rows(shape),
            &shape,
            vec![x],
            &[],
        ));
        let x = contiguous(&shape, seed + 1, -4.0, 4.0);
        let k = support::log_softmax_rows(shape);
        cases.push(case(
            &format!("log_softmax {shape:?}"),
            k,
            &shape,
            vec![x],
            &[],
        ));
    }
    // A row value read from an input broadcast along the row: `x·s[r, 1] - Σ x·s`.
    let rows = support::row_scaled_minus_sum();
    let inputs = vec![
        contiguous(&[8, 256], 90, -1.0, 1.0),
        contiguous(&[8, 1], 91, 0.5, 1.5),
    ];
    cases.push(case("row narrow input", rows, &[8, 256], inputs, &[]));

    // Every unary op on its domain, every binary op.
    for (i, op) in UNARY_OPS.into_iter().enumerate() {
        let (lo, hi) = match op {
            UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Recip => (0.1, 3.0),
            _ => (-3.0, 3.0),
        };
        let x = contiguous(&[64], 10 + i as u64, lo, hi);
        cases.push(case(&format!("{op:?}"), unary(op), &[64], vec![x], &[]));
    }
    for (i, op) in BINARY_OPS.into_iter().enumerate() {
        let (lo, hi) = support::binary_lhs_range(op);
        let inputs = vec![
            contiguous(&[64], 30 + i as u64, lo, hi),
            contiguous(&[64], 40 + i as u64, 0.5, 2.0),
        ];
        cases.push(case(&format!("{op:?}"), binary(op), &[64], inputs, &[]));
    }
    cases
}

fn signed(strides: &[usize]) -> Vec<isize> {
    strides.iter().map(|s| *s as isize).collect()
}

/// Calls `f` over all of `cf`'s tasks in three uneven ranges, as threads would split them
/// (each range must compute exactly its tasks).
///
/// # Safety
/// The buffers have the lengths the kernel was generated for.
unsafe fn run(
    f: KernelFn,
    cf: &CFunction,
    ins: &[*const c_void],
    outs: &[*mut c_void],
    scalars: &[f64],
) {
    let n = cf.tasks as i64;
    let cuts = [0, n / 3, n / 3 + (n - n / 3) / 2 + 1, n];
    for w in cuts.windows(2) {
        let (begin, end) = (w[0].min(n), w[1].min(n));
        if begin < end {
            unsafe { f(ins.as_ptr(), outs.as_ptr(), scalars.as_ptr(), begin, end) };
        }
    }
}

/// Each output's length: the iteration shape's, or a row output's (one value per row).
fn out_lens(c: &Case) -> Vec<usize> {
    let len = |s: &[usize]| s.iter().product::<usize>();
    (0..c.kernel.outputs as usize)
        .map(|o| match &c.kernel.row {
            Some(row) if row.row_outputs[o] => len(&c.shape[..c.shape.len() - 1]),
            _ => len(&c.shape),
        })
        .collect()
}

/// The outputs of case `c` against the f64 reference: f32 kernels, 1e-5 absolute + 1e-4
/// relative.
fn assert_matches_reference(c: &Case, outputs: &[Vec<f32>], label: &str) {
    let want = match c.kernel.row {
        Some(_) => row_reference(&c.kernel, &c.inputs, &c.scalars),
        None => reference(&c.kernel, &c.shape, &c.inputs, &c.scalars),
    };
    for (o, (got, want)) in outputs.iter().zip(&want).enumerate() {
        assert_eq!(got.len(), want.len(), "{label}: output {o}");
        for (j, (g, w)) in got.iter().zip(want).enumerate() {
            let tol = 1e-5 + 1e-4 * w.abs();
            assert!(
                (*g as f64 - w).abs() <= tol,
                "{label}: output {o}[{j}] = {g}, expected {w}"
            );
        }
    }
}

#[test]
fn generated_c_kernels_match_the_reference() {
    let cases = cases();
    let functions: Vec<CFunction> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let strides: Vec<Vec<isize>> = c.inputs.iter().map(|x| signed(&x.strides)).collect();
            c_function(&format!("k{i}"), &c.kernel, &c.shape, &strides).expect(&c.name)
        })
        .collect();
    let toolchain = Toolchain::new(None, None).expect("the CPU path's tests need a C compiler");
    let dir = std::env::temp_dir().join(format!("burn-compile-c-exec-{}", std::process::id()));
    let unit = toolchain
        .build(&c_unit(&functions), &dir)
        .expect("the unit builds");

    for (i, c) in cases.iter().enumerate() {
        let f = unit.kernel(&format!("k{i}")).expect("exported");
        let mut outputs: Vec<Vec<f32>> = out_lens(c).iter().map(|n| vec![f32::NAN; *n]).collect();
        let ins: Vec<*const c_void> = c.inputs.iter().map(|x| x.data.as_ptr().cast()).collect();
        let outs: Vec<*mut c_void> = outputs.iter_mut().map(|o| o.as_mut_ptr().cast()).collect();
        let scalars: Vec<f64> = c.scalars.iter().map(|s| *s as f64).collect();
        // SAFETY: the buffers have the lengths the kernel was generated for.
        unsafe { run(f, &functions[i], &ins, &outs, &scalars) };
        assert_matches_reference(c, &outputs, &c.name);
    }

    // The build directory is left empty: the object was loaded and its file removed.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every case again as a symbolic function of every dimension of size 2 or more (sizes and
/// strides read from `s` after the scalars, tasks counted by the caller), compared with the
/// reference; and one symbolic function run over sizes it was not generated from.
#[test]
fn symbolic_c_kernels_match_the_reference() {
    let cases = cases();
    let dynamic_of = |c: &Case| c.shape.iter().map(|&n| n >= 2).collect::<Vec<bool>>();
    let strides_of =
        |c: &Case| -> Vec<Vec<isize>> { c.inputs.iter().map(|x| signed(&x.strides)).collect() };
    // Strides as `c_function` takes them: 0 where not walked.
    let walked = |c: &Case, strides: Vec<Vec<isize>>| -> Vec<Vec<isize>> {
        strides
            .into_iter()
            .enumerate()
            .map(|(i, own)| {
                own.into_iter()
                    .enumerate()
                    .map(|(d, s)| {
                        if c.shape[d] > 1 && !c.kernel.inputs[i][d] {
                            s
                        } else {
                            0
                        }
                    })
                    .collect()
            })
            .collect()
    };
    let functions: Vec<CFunction> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let strides = walked(c, strides_of(c));
            let layout = symbolic_layout(&c.kernel, &dynamic_of(c), &c.shape, &strides);
            c_symbolic_function(&format!("k{i}"), &c.kernel, &dynamic_of(c), &layout)
                .expect(&c.name)
        })
        .collect();
    let toolchain = Toolchain::new(None, None).expect("the CPU path's tests need a C compiler");
    let dir = std::env::temp_dir().join(format!("burn-compile-c-sym-{}", std::process::id()));
    let unit = toolchain
        .build(&c_unit(&functions), &dir)
        .expect("the unit builds");
    for (i, c) in cases.iter().enumerate() {
        let f = unit.kernel(&format!("k{i}")).expect("exported");
        let dynamic = dynamic_of(c);
        let strides = walked(c, strides_of(c));
        let layout = symbolic_layout(&c.kernel, &dynamic, &c.shape, &strides);
        let mut outputs: Vec<Vec<f32>> = out_lens(c).iter().map(|n| vec![f32::NAN; *n]).collect();
        let ins: Vec<*const c_void> = c.inputs.iter().map(|x| x.data.as_ptr().cast()).collect();
        let outs: Vec<*mut c_void> = outputs.iter_mut().map(|o| o.as_mut_ptr().cast()).collect();
        let mut scalars: Vec<f64> = c.scalars.iter().map(|s| *s as f64).collect();
        scalars.extend(symbolic_args(&dynamic, &layout, &c.shape, &strides));
        let (tasks, _) = symbolic_tasks(&c.kernel, &c.shape);
        let call = CFunction {
            tasks,
            ..functions[i].clone()
        };
        // SAFETY: the buffers have the lengths of this call's sizes, which `s` carries.
        unsafe { run(f, &call, &ins, &outs, &scalars) };
        assert_matches_reference(c, &outputs, &format!("{} (symbolic)", c.name));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_compiler_and_a_rejected_unit_are_clear_errors() {
    let missing = Toolchain::new(Some("/nonexistent/cc"), None).unwrap_err();
    assert!(
        missing
            .to_string()
            .starts_with("no C compiler: `/nonexistent/cc`"),
        "{missing}"
    );
    let toolchain = Toolchain::new(None, None).expect("a C compiler");
    let dir = std::env::temp_dir().join(format!("burn-compile-c-bad-{}", std::process::id()));
    let err = toolchain
        .build("void k(void) { not C }", &dir)
        .err()
        .expect("rejected");
    assert!(
        err.to_string().contains("rejected the generated C"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A flipped view (Flex's `flip`): negative strides, read from the view's first element.
#[test]
fn a_flipped_input_is_read_backwards() {
    // out = x - y with x = flip(b, [0, 1]) of a contiguous [6, 10] buffer b.
    let sub = support::difference();
    let (b, y) = (
        contiguous(&[6, 10], 81, -1.0, 1.0),
        contiguous(&[6, 10], 82, -1.0, 1.0),
    );
    let cf = c_function("flipped", &sub, &[6, 10], &[vec![-10, -1], vec![10, 1]]).unwrap();
    let toolchain = Toolchain::new(None, None).expect("a C compiler");
    let dir = std::env::temp_dir().join(format!("burn-compile-c-flip-{}", std::process::id()));
    let unit = toolchain
        .build(&c_unit(std::slice::from_ref(&cf)), &dir)
        .expect("builds");
    let f = unit.kernel("flipped").unwrap();
    let mut out = vec![f32::NAN; 60];
    // The view's first element is the buffer's last.
    let ins: [*const c_void; 2] = [b.data[59..].as_ptr().cast(), y.data.as_ptr().cast()];
    let outs: [*mut c_void; 1] = [out.as_mut_ptr().cast()];
    // SAFETY: every offset the kernel forms stays inside the two 60-element buffers.
    unsafe { run(f, &cf, &ins, &outs, &[]) };
    for (i, got) in out.iter().enumerate() {
        let want = b.data[59 - i] - y.data[i];
        assert_eq!(*got, want, "element {i}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The half types: stored as f16 / bf16, computed in float, rounded once at the store. The
/// inputs are rounded to the type first, so the reference sees what the kernel reads; the
/// tolerance is the type's rounding of the result (f16: 11 bits, bf16: 8 bits of mantissa).
#[test]
fn half_type_kernels_store_their_type_and_match_the_reference() {
    let toolchain = Toolchain::new(None, None).expect("a C compiler");
    let dir = std::env::temp_dir().join(format!("burn-compile-c-half-{}", std::process::id()));
    let with_dtype = |mut k: FusedKernel, dtype| {
        k.dtype = dtype;
        k
    };
    for (dtype, rel) in [(DType::F16, 2e-3), (DType::BF16, 1.6e-2)] {
        let to_half = |x: f32| -> u16 {
            match dtype {
                DType::F16 => half::f16::from_f32(x).to_bits(),
                _ => half::bf16::from_f32(x).to_bits(),
            }
        };
        let from_half = |b: u16| -> f32 {
            match dtype {
                DType::F16 => half::f16::from_bits(b).to_f32(),
                _ => half::bf16::from_bits(b).to_f32(),
            }
        };
        let cases = [
            case(
                "bias_gelu",
                with_dtype(support::bias_activation(UnaryOp::Gelu), dtype),
                &[40, 33],
                vec![
                    contiguous(&[40, 33], 101, -2.0, 2.0),
                    contiguous(&[1, 33], 102, -0.5, 0.5),
                ],
                &[],
            ),
            case(
                "layer_norm",
                with_dtype(support::layer_norm(7, 200), dtype),
                &[7, 200],
                vec![
                    contiguous(&[7, 200], 103, -2.0, 2.0),
                    contiguous(&[1, 200], 104, 0.5, 1.5),
                    contiguous(&[1, 200], 105, -0.5, 0.5),
                ],
                &[1e-5],
            ),
            case(
                "softmax",
                with_dtype(support::softmax_rows([2, 5, 64]), dtype),
                &[2, 5, 64],
                vec![contiguous(&[2, 5, 64], 106, -4.0, 4.0)],
                &[],
            ),
        ];
        let functions: Vec<CFunction> = cases
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let strides: Vec<Vec<isize>> =
                    c.inputs.iter().map(|x| signed(&x.strides)).collect();
                c_function(&format!("k{i}"), &c.kernel, &c.shape, &strides).expect(&c.name)
            })
            .collect();
        let unit = toolchain
            .build(&c_unit(&functions), &dir)
            .expect("the unit builds");
        for (i, c) in cases.iter().enumerate() {
            // What the kernel reads: the inputs rounded to the type.
            let inputs: Vec<Input> = c
                .inputs
                .iter()
                .map(|x| Input {
                    data: x.data.iter().map(|v| from_half(to_half(*v))).collect(),
                    shape: x.shape.clone(),
                    strides: x.strides.clone(),
                })
                .collect();
            let bits: Vec<Vec<u16>> = inputs
                .iter()
                .map(|x| x.data.iter().map(|v| to_half(*v)).collect())
                .collect();
            let n: usize = c.shape.iter().product();
            let mut out = vec![0u16; n];
            let ins: Vec<*const c_void> = bits.iter().map(|b| b.as_ptr().cast()).collect();
            let outs = [out.as_mut_ptr().cast::<c_void>()];
            let scalars: Vec<f64> = c.scalars.iter().map(|s| *s as f64).collect();
            let f = unit.kernel(&format!("k{i}")).expect("exported");
            // SAFETY: the buffers have the lengths the kernel was generated for.
            unsafe { run(f, &functions[i], &ins, &outs, &scalars) };
            let want = match c.kernel.row {
                Some(_) => row_reference(&c.kernel, &inputs, &c.scalars),
                None => reference(&c.kernel, &c.shape, &inputs, &c.scalars),
            };
            for (j, (g, w)) in out.iter().zip(&want[0]).enumerate() {
                let g = from_half(*g) as f64;
                assert!(
                    (g - w).abs() <= 1e-3 + rel * w.abs(),
                    "{dtype:?} {}: [{j}] = {g}, expected {w}",
                    c.name
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
