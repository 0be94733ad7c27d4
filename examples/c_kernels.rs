//! The C code generator's kernels against Flex's eager ops, kernel by kernel, on this CPU: a
//! layer norm, a bias + GELU and a softmax, each as the schedule fuses it (one C function) and
//! as eager Burn runs it (one Flex op after another). Not yet the issue's benchmark of
//! `Compiled<Flex>`: the plans do not launch C kernels yet; this measures what they will launch.
//!
//! ```text
//! cargo run --release -p burn-compile-examples --example c_kernels [-- --rows 4096]
//! ```
//!
//! Each case: the C kernel built once (its build time printed, cached on disk under the system
//! temp dir), both sides run alternately 3 × 7 rounds of 20 calls, the median round per call
//! printed with the ratio; the C output is compared with Flex's (max |diff|, fails over 1e-4).

use burn::tensor::{Tensor, TensorData, activation};
use burn_compile_codegen_c::{Toolchain, c_function, c_unit};
use burn_compile_schedule::{BinaryOp, PointwiseKernel, ReduceOp, UnaryOp};
use std::ffi::c_void;
use std::time::Instant;

type F = burn_flex::Flex;

// The code generators' kernel fixtures (those their tests snapshot and execute), input values.
#[path = "../crates/codegen/tests/support/kernels.rs"]
mod kernels;
#[path = "../crates/codegen/tests/support/reference.rs"]
mod reference;
use kernels::{bin, load, reduce, row_kernel, store, un};

/// A kernel and its eager form: name, kernel, inputs (data, strides), scalars, eager Burn.
type Case<'a> = (
    &'static str,
    PointwiseKernel,
    Vec<(&'a Vec<f32>, Vec<isize>)>,
    Vec<f64>,
    Box<dyn Fn() -> Tensor<F, 2> + 'a>,
);

/// Seconds per call of `f` in each of 7 rounds of 20 calls.
fn rounds(mut f: impl FnMut()) -> Vec<f64> {
    let mut v = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        for _ in 0..20 {
            f();
        }
        v.push(t.elapsed().as_secs_f64() / 20.0);
    }
    v
}

fn med(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows: usize = args
        .iter()
        .position(|a| a == "--rows")
        .map(|i| args[i + 1].parse().expect("--rows N"))
        .unwrap_or(4096);
    let n = 512;
    let device = Default::default();
    let toolchain = Toolchain::new(None, None).expect("a C compiler");
    let cache = std::env::temp_dir().join("burn-compile-c-kernels-example");
    println!(
        "compiler: {} ({}), flags {:?}, {} threads",
        toolchain.compiler,
        toolchain.identity,
        toolchain.flags,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let x = reference::values(rows * n, 1, -2.0, 2.0);
    let (g, b) = (
        reference::values(n, 2, -2.0, 2.0),
        reference::values(n, 3, -2.0, 2.0),
    );
    let xt = || Tensor::<F, 2>::from_data(TensorData::new(x.clone(), [rows, n]), &device);
    let row = |v: &Vec<f32>| Tensor::<F, 2>::from_data(TensorData::new(v.clone(), [1, n]), &device);
    let shape = [rows, n];
    let contiguous = vec![n as isize, 1];
    let bcast = vec![0, 1];

    let cases: Vec<Case> = vec![
        (
            "layer norm (x - mean) / sqrt(var + eps) * g + b",
            kernels::layer_norm(rows, n),
            vec![
                (&x, contiguous.clone()),
                (&g, bcast.clone()),
                (&b, bcast.clone()),
            ],
            vec![1e-5],
            Box::new(|| {
                let x = xt();
                let mean = x.clone().mean_dim(1);
                let c = x - mean;
                let var = (c.clone() * c.clone()).mean_dim(1);
                c / (var + 1e-5).sqrt() * row(&g) + row(&b)
            }),
        ),
        (
            "gelu(x + b)",
            kernels::bias_activation(UnaryOp::Gelu),
            vec![(&x, contiguous.clone()), (&b, bcast.clone())],
            vec![],
            Box::new(|| activation::gelu(xt() + row(&b))),
        ),
        (
            "softmax over rows of 512",
            row_kernel(
                &shape,
                vec![vec![false, false]],
                vec![false],
                0,
                vec![
                    load(0),
                    reduce(ReduceOp::Max, 0),
                    bin(BinaryOp::Sub, 0, 1),
                    un(UnaryOp::Exp, 2),
                    reduce(ReduceOp::Sum, 3),
                    bin(BinaryOp::Div, 3, 4),
                    store(0, 5),
                ],
            ),
            vec![(&x, contiguous.clone())],
            vec![],
            Box::new(|| activation::softmax(xt(), 1)),
        ),
    ];
    println!(
        "| kernel [{rows}, {n}] f32 | Flex eager (ms) | C kernel (ms) | eager / C | C build (s) | max abs diff |"
    );
    println!("|---|---|---|---|---|---|");
    for (name, k, inputs, scalars, eager) in cases {
        let strides: Vec<Vec<isize>> = inputs.iter().map(|(_, s)| s.clone()).collect();
        let cf = c_function("kernel", &k, &shape, &strides).expect("C");
        let tasks = cf.tasks as i64;
        let source = c_unit(&[cf]);
        let unit = toolchain.build(&source, &cache).expect("builds");
        let f = unit.kernel("kernel").expect("exported");
        let mut out = vec![0f32; rows * n];
        let ins: Vec<*const c_void> = inputs.iter().map(|(d, _)| d.as_ptr().cast()).collect();
        let outs = [out.as_mut_ptr().cast::<c_void>()];
        let mut run_c = || {
            // SAFETY: every buffer has the length the kernel was generated for.
            unsafe { f(ins.as_ptr(), outs.as_ptr(), scalars.as_ptr(), 0, tasks) };
        };
        // The eager side includes its input upload (one copy of x), as the C side reads x in place:
        // the upload is timed alone and subtracted.
        let upload = med(rounds(|| drop(std::hint::black_box(xt()))));
        run_c();
        let want: Vec<f32> = eager().into_data().to_vec().unwrap();
        let diff = out
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff <= 1e-4, "{name}: C differs from Flex by {diff}");
        let (mut e, mut c) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            e.extend(rounds(|| drop(std::hint::black_box(eager()))));
            c.extend(rounds(&mut run_c));
        }
        let (e, c) = (med(e) - upload, med(c));
        println!(
            "| {name} | {:.3} | {:.3} | {:.2}× | {:.2}{} | {diff:.1e} |",
            e * 1e3,
            c * 1e3,
            e / c,
            unit.build_time.as_secs_f64(),
            if unit.cached { " (cached)" } else { "" }
        );
    }
}
