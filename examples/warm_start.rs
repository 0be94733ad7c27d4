//! W1 cold start against warm start: the same program in two fresh processes sharing one disk
//! cache directory (empty for the first). Each child builds W1 on `Compiled<B>`, runs its first
//! forward pass (synced: every graph compiled, its kernels built), then steady passes, and
//! compares its output with eager `B`'s on the same weights and input. The parent prints, per
//! process: the first pass's wall time, the compile work the metrics count (plans + kernel
//! builds), the disk cache's hits and misses, the steady pass, and cold / warm.
//!
//! ```text
//! cargo run --release -p burn-compile-examples --example warm_start [-- --full] [--steps N]
//! CUDARC_CUDA_VERSION=13000 cargo build --release -p burn-compile-examples --features cuda --example warm_start
//! ```
//!
//! CPU: W1-small (d_model 256, 4 heads, 2 layers, d_ff 1024, batch 8 × seq 64) unless `--full`
//! (W1: 512, 8 heads, 6 layers, d_ff 2048, batch 32 × seq 128); CUDA: W1. On CUDA the first
//! pass also pays CubeCL's NVRTC compiles and Burn's autotune, which the disk cache keeps under
//! its `cubecl/` directory: "first pass − steady pass" is the warm-up the cache saves.
//! Tolerance: 1e-4 (CPU) / 5e-3 (CUDA: cuBLASLt and Burn's matmul sum in other orders) of the
//! output's scale; over it the child fails.

use burn::module::Module;
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use burn_compile::{Compiled, metrics};
use burn_compile_examples::{CollectWeights, encoder_config, forward, input_data, model_with};
use std::process::Command;
use std::time::Instant;

#[cfg(feature = "cuda")]
type Inner = burn_cuda::Cuda<f32, i32>;
#[cfg(not(feature = "cuda"))]
type Inner = burn_flex::Flex;
type C = Compiled<Inner>;

const TOLERANCE: f32 = if cfg!(feature = "cuda") { 5e-3 } else { 1e-4 };

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(which) = arg(&args, "--child") {
        child(&which, &args);
        return;
    }
    let dir = std::env::temp_dir().join(format!("burn-compile-warm-start-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let full = cfg!(feature = "cuda") || args.iter().any(|a| a == "--full");
    println!(
        "W1{} forward, cold then warm start, on {}, disk cache {}",
        if full { "" } else { "-small" },
        if cfg!(feature = "cuda") {
            "CUDA"
        } else {
            "Flex (CPU)"
        },
        dir.display()
    );
    let mut rows = Vec::new();
    for which in ["cold", "warm"] {
        let mut command = Command::new(std::env::current_exe().expect("this program"));
        command
            .args(["--child", which])
            .env("BURN_COMPILE_CACHE_DIR", &dir);
        if full {
            command.arg("--full");
        }
        if let Some(steps) = arg(&args, "--steps") {
            command.args(["--steps", &steps]);
        }
        let out = command.output().expect("the child runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
            panic!("the {which} start failed");
        }
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .expect("the child's result line");
        let row: serde_json::Value = serde_json::from_str(line).expect("JSON");
        println!("{line}");
        rows.push(row);
    }
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "{:<6} {:>14} {:>14} {:>12} {:>12} {:>12} {:>12}",
        "start",
        "first pass ms",
        "compile ms",
        "disk hits",
        "disk misses",
        "C compiles",
        "steady ms"
    );
    for (row, which) in rows.iter().zip(["cold", "warm"]) {
        println!(
            "{which:<6} {:>14.1} {:>14.1} {:>12} {:>12} {:>12} {:>12.2}",
            f(row, "first_pass_ms"),
            f(row, "compile_work_ms"),
            f(row, "disk_cache_hits"),
            f(row, "disk_cache_misses"),
            f(row, "c_units_compiled"),
            f(row, "steady_ms"),
        );
    }
    println!(
        "cold / warm: first pass {:.2}x, compile work {:.2}x",
        f(&rows[0], "first_pass_ms") / f(&rows[1], "first_pass_ms"),
        f(&rows[0], "compile_work_ms") / f(&rows[1], "compile_work_ms")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn sync<B: Backend>(t: &Tensor<B, 3>) {
    B::sync(&t.device()).expect("sync");
}

fn child(which: &str, args: &[String]) {
    let full = args.iter().any(|a| a == "--full");
    let steps: usize = arg(args, "--steps")
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let (config, shape) = if full {
        (encoder_config(512, 2048, 8, 6), [32, 128, 512])
    } else {
        (encoder_config(256, 1024, 4, 2), [8, 64, 256])
    };
    let device = Default::default();
    // The compiled device first: as the process's first use of CubeCL it roots CubeCL's
    // kernel and autotune caches in the disk cache's directory.
    let model = config.init::<C>(&device);
    let mut weights = CollectWeights(Vec::new());
    model.visit(&mut weights);
    let data = input_data(shape, 1);

    let start = Instant::now();
    let before = metrics();
    let x = Tensor::<C, 3>::from_data(data.clone(), &device);
    let out = forward(&model, &x);
    sync(&out);
    let first = start.elapsed();
    let m = metrics().since(&before);
    let mut times = Vec::new();
    for _ in 0..steps {
        let t = Instant::now();
        let out = forward(&model, &x);
        sync(&out);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let compiled = forward(&model, &x).into_data();

    let eager = model_with::<Inner>(&config, &weights.0, &device);
    let expected = forward(&eager, &Tensor::<Inner, 3>::from_data(data, &device)).into_data();
    let (a, b) = (
        compiled.to_vec::<f32>().unwrap(),
        expected.to_vec::<f32>().unwrap(),
    );
    let scale = b.iter().fold(1f32, |m, v| m.max(v.abs()));
    let diff = a
        .iter()
        .zip(&b)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(
        diff <= TOLERANCE * scale,
        "{which}: compiled differs from eager by {diff} (scale {scale})"
    );
    println!(
        "RESULT {{\"start\":\"{which}\",\"first_pass_ms\":{:.2},\"compile_work_ms\":{:.2},\
         \"plan_compile_ms\":{:.2},\"kernel_build_ms\":{:.2},\"disk_cache_hits\":{},\
         \"disk_cache_misses\":{},\"disk_cache_invalid\":{},\"c_units_compiled\":{},\
         \"graphs_compiled\":{},\"steady_ms\":{:.3},\"max_abs_diff_vs_eager\":{diff:e}}}",
        first.as_secs_f64() * 1e3,
        (m.compile_time + m.kernel_build_time).as_secs_f64() * 1e3,
        m.compile_time.as_secs_f64() * 1e3,
        m.kernel_build_time.as_secs_f64() * 1e3,
        m.disk_cache_hits,
        m.disk_cache_misses,
        m.disk_cache_invalid,
        m.disk_cache_writes,
        m.cache_misses,
        times[times.len() / 2],
    );
}
