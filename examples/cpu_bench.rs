//! `Compiled<Flex>` against eager Flex on this CPU: the blocks whose elementwise work the C
//! kernels fuse (a layer norm + GELU, an MLP block around it, an attention softmax, a
//! log-softmax, an elementwise chain), each timed side by side in one process on the same
//! inputs, its output compared; then the cost of getting there: the first call with an empty
//! kernel cache (the graph's C unit compiled) and, in a second process, with the cache warm
//! (the unit loaded).
//!
//! ```text
//! cargo run --release -p burn-compile-examples --example cpu_bench [-- --out benchmarks/results/FILE.jsonl]
//! ```
//!
//! Timing: each call is synced (`B::sync`, the compiled side's graph closes and runs there);
//! both sides alternate 3 × 7 rounds of `calls` calls after a warm-up, the median round's time
//! per call is printed with the ratio. The compiled output is compared with eager's: over
//! 1e-4 (relative to the output's scale) the run fails. One JSON line per case (`--out` appends
//! them to a file). `BENCH_MACHINE` and `BENCH_DATE` fill the `machine` and `date` fields.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData, activation};
use burn_compile::{CompileConfig, Compiled, configure, explain};
use burn_flex::{Flex, FlexDevice};
use std::io::Write;
use std::time::Instant;

type C = Compiled<Flex>;

/// One benchmark: its inputs, and the function both backends run.
struct Case {
    name: &'static str,
    shape: &'static str,
    inputs: Vec<TensorData>,
    /// Calls per timed round.
    calls: usize,
    eager: fn(&[Tensor<Flex, 3>]) -> Tensor<Flex, 3>,
    compiled: fn(&[Tensor<C, 3>]) -> Tensor<C, 3>,
}

fn data(shape: [usize; 3], seed: u64, lo: f32, hi: f32) -> TensorData {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n = shape.iter().product();
    let values: Vec<f32> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            lo + (hi - lo) * ((state >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect();
    TensorData::new(values, shape)
}

/// `LN(x) · γ + β` over the last dimension, as Burn's `LayerNorm` computes it.
fn layer_norm<B: Backend>(
    x: Tensor<B, 3>,
    gamma: &Tensor<B, 3>,
    beta: &Tensor<B, 3>,
) -> Tensor<B, 3> {
    let (var, mean) = x.clone().var_mean_bias(2);
    (x - mean) / (var + 1e-5).sqrt() * gamma.clone() + beta.clone()
}

fn ln_gelu<B: Backend>(t: &[Tensor<B, 3>]) -> Tensor<B, 3> {
    activation::gelu(layer_norm(t[0].clone(), &t[1], &t[2]) + t[3].clone())
}

fn mlp<B: Backend>(t: &[Tensor<B, 3>]) -> Tensor<B, 3> {
    let x = t[0].clone();
    let h = layer_norm(x.clone(), &t[1], &t[2]).matmul(t[3].clone()) + t[4].clone();
    activation::gelu(h).matmul(t[5].clone()) + t[6].clone() + x
}

fn attention_softmax<B: Backend>(t: &[Tensor<B, 3>]) -> Tensor<B, 3> {
    activation::softmax(t[0].clone() * 0.125 + t[1].clone(), 2)
}

fn log_softmax<B: Backend>(t: &[Tensor<B, 3>]) -> Tensor<B, 3> {
    activation::log_softmax(t[0].clone(), 2)
}

fn chain<B: Backend>(t: &[Tensor<B, 3>]) -> Tensor<B, 3> {
    let (x, y) = (t[0].clone(), t[1].clone());
    ((x.clone() * 1.5 + y.clone()).tanh() * activation::sigmoid(x.clone()) - (y * 0.5).exp())
        / (x.abs() + 1.0)
}

fn cases() -> Vec<Case> {
    let (rows, d) = (4096, 512);
    let (tokens, dm, dff) = (1024, 256, 1024);
    vec![
        Case {
            name: "layer norm + bias + GELU",
            shape: "[4096, 512]",
            inputs: vec![
                data([1, rows, d], 1, -2.0, 2.0),
                data([1, 1, d], 2, 0.5, 1.5),
                data([1, 1, d], 3, -0.5, 0.5),
                data([1, 1, d], 4, -0.5, 0.5),
            ],
            calls: 10,
            eager: ln_gelu::<Flex>,
            compiled: ln_gelu::<C>,
        },
        Case {
            name: "MLP block: x + W2·GELU(W1·LN(x) + b1) + b2",
            shape: "[1024, 256] → 1024 → 256",
            inputs: vec![
                data([1, tokens, dm], 5, -2.0, 2.0),
                data([1, 1, dm], 6, 0.5, 1.5),
                data([1, 1, dm], 7, -0.5, 0.5),
                data([1, dm, dff], 8, -0.06, 0.06),
                data([1, 1, dff], 9, -0.1, 0.1),
                data([1, dff, dm], 10, -0.03, 0.03),
                data([1, 1, dm], 11, -0.1, 0.1),
            ],
            calls: 5,
            eager: mlp::<Flex>,
            compiled: mlp::<C>,
        },
        Case {
            name: "attention softmax(s/8 + mask)",
            shape: "[32, 128, 128]",
            inputs: vec![
                data([32, 128, 128], 12, -8.0, 8.0),
                data([1, 128, 128], 13, -1.0, 0.0),
            ],
            calls: 10,
            eager: attention_softmax::<Flex>,
            compiled: attention_softmax::<C>,
        },
        Case {
            name: "log-softmax over 1000 classes",
            shape: "[1, 2048, 1000]",
            inputs: vec![data([1, 2048, 1000], 14, -5.0, 5.0)],
            calls: 10,
            eager: log_softmax::<Flex>,
            compiled: log_softmax::<C>,
        },
        Case {
            name: "elementwise chain (tanh, sigmoid, exp, abs)",
            shape: "[1, 1024, 1024]",
            inputs: vec![
                data([1, 1024, 1024], 15, -2.0, 2.0),
                data([1, 1024, 1024], 16, -2.0, 2.0),
            ],
            calls: 10,
            eager: chain::<Flex>,
            compiled: chain::<C>,
        },
    ]
}

fn tensors<B: Backend>(inputs: &[TensorData]) -> Vec<Tensor<B, 3>> {
    inputs
        .iter()
        .map(|d| Tensor::from_data(d.clone(), &Default::default()))
        .collect()
}

/// Seconds per call of `f` in each of 7 rounds of `calls` synced calls.
fn rounds(calls: usize, mut f: impl FnMut()) -> Vec<f64> {
    (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..calls {
                f();
            }
            t.elapsed().as_secs_f64() / calls as f64
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The first compiled call of `case` (its graph planned, run on Flex, its C unit built or
/// loaded), synced: (seconds, the kernel build's seconds, kernels, whether the disk cache had
/// the unit).
fn first_call(case: &Case) -> (f64, f64, usize, bool) {
    let inputs = tensors::<C>(&case.inputs);
    let start = Instant::now();
    let (out, report) = explain(|| {
        let out = (case.compiled)(&inputs);
        C::sync(&Default::default()).expect("sync");
        out
    });
    let first = start.elapsed().as_secs_f64();
    drop(out);
    let builds: Vec<_> = report
        .graphs
        .iter()
        .filter_map(|g| g.kernel_build.as_ref())
        .collect();
    if let Some(e) = builds.iter().find_map(|b| b.error.as_ref()) {
        panic!("{}: the kernels did not build: {e}", case.name);
    }
    (
        first,
        builds.iter().map(|b| b.time.as_secs_f64()).sum(),
        builds.iter().map(|b| b.kernels).sum(),
        builds.iter().all(|b| b.cached),
    )
}

fn max_diff(a: TensorData, b: TensorData) -> (f32, f32) {
    let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = a
        .iter()
        .zip(&b)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    (diff, scale)
}

fn field(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| "unset".into())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .map(|i| args[i + 1].clone())
    };
    // The warm-start child: first calls only, with the parent's cache.
    if let Some(cache) = arg("--warm-start") {
        configure(
            &FlexDevice,
            CompileConfig {
                cache_dir: Some(cache.into()),
                ..Default::default()
            },
        );
        for case in cases() {
            let (first, build, _, cached) = first_call(&case);
            assert!(cached, "{}: the warm start found its unit", case.name);
            println!("{first} {build}");
        }
        return;
    }

    let cache = std::env::temp_dir().join(format!("burn-compile-cpu-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    configure(
        &FlexDevice,
        CompileConfig {
            cache_dir: Some(cache.clone()),
            ..Default::default()
        },
    );
    let threads = rayon_threads();
    println!(
        "Compiled<Flex> vs Flex eager, f32, {threads} threads; kernel cache (cold) {}",
        cache.display()
    );
    let cases = cases();
    let mut lines = Vec::new();
    let mut rows = Vec::new();
    for case in &cases {
        let (cold_first, cold_build, kernels, cached) = first_call(case);
        assert!(!cached, "a fresh cache holds no unit");
        let (eager_in, compiled_in) = (tensors::<Flex>(&case.inputs), tensors::<C>(&case.inputs));
        let (got, want) = (
            (case.compiled)(&compiled_in).into_data(),
            (case.eager)(&eager_in).into_data(),
        );
        let (diff, scale) = max_diff(got, want);
        assert!(
            diff <= 1e-4 * scale.max(1.0),
            "{}: compiled differs from eager by {diff} (scale {scale})",
            case.name
        );
        let mut eager = || {
            let out = (case.eager)(&eager_in);
            Flex::sync(&Default::default()).expect("sync");
            drop(out);
        };
        let mut compiled = || {
            let out = (case.compiled)(&compiled_in);
            C::sync(&Default::default()).expect("sync");
            drop(out);
        };
        for _ in 0..3 {
            eager();
            compiled();
        }
        let (mut e, mut c) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            e.extend(rounds(case.calls, &mut eager));
            c.extend(rounds(case.calls, &mut compiled));
        }
        let (e, c) = (median(e), median(c));
        rows.push((case, e, c, diff, cold_first, cold_build, kernels));
    }

    // The warm start: a new process, the cache as this one left it.
    let child = std::process::Command::new(std::env::current_exe().expect("this program"))
        .arg("--warm-start")
        .arg(&cache)
        .output()
        .expect("the warm-start run");
    assert!(
        child.status.success(),
        "the warm-start run failed:\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let warm: Vec<(f64, f64)> = String::from_utf8_lossy(&child.stdout)
        .lines()
        .map(|l| {
            let mut it = l.split(' ').map(|v| v.parse::<f64>().expect("seconds"));
            (it.next().unwrap(), it.next().unwrap())
        })
        .collect();
    assert_eq!(warm.len(), rows.len());

    println!(
        "| block | shape | Flex eager (ms) | Compiled<Flex> (ms) | speedup | C kernels | first call, cold cache (s) | of which C build (s) | first call, warm cache (s) | of which load (s) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for ((case, e, c, diff, cold_first, cold_build, kernels), (warm_first, warm_build)) in
        rows.iter().zip(&warm)
    {
        println!(
            "| {} | {} | {:.3} | {:.3} | {:.2}× | {kernels} | {cold_first:.3} | {cold_build:.3} | {warm_first:.3} | {warm_build:.4} |",
            case.name,
            case.shape,
            e * 1e3,
            c * 1e3,
            e / c
        );
        lines.push(format!(
            "{{\"bench\":\"cpu_bench\",\"case\":{:?},\"shape\":{:?},\"dtype\":\"f32\",\"threads\":{threads},\"eager_ms\":{:.4},\"compiled_ms\":{:.4},\"speedup\":{:.3},\"max_abs_diff_vs_eager\":{diff:e},\"c_kernels\":{kernels},\"cold_first_call_s\":{cold_first:.4},\"cold_build_s\":{cold_build:.4},\"warm_first_call_s\":{warm_first:.4},\"warm_build_s\":{warm_build:.5},\"machine\":{:?},\"date\":{:?}}}",
            case.name,
            case.shape,
            e * 1e3,
            c * 1e3,
            e / c,
            field("BENCH_MACHINE"),
            field("BENCH_DATE"),
        ));
    }
    for line in &lines {
        println!("{line}");
    }
    if let Some(path) = arg("--out") {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("the --out file");
        for line in &lines {
            writeln!(file, "{line}").expect("written");
        }
    }
    let _ = std::fs::remove_dir_all(&cache);
}

/// Threads of rayon's pool (Flex's, and the C kernels'): `RAYON_NUM_THREADS` or the cores.
fn rayon_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
