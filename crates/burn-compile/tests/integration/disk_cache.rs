//! The disk cache across processes, on the CPU path: a second process runs W1-small with no C
//! compile (every unit loaded from the cache); corrupt, truncated and other-version entries
//! are ignored with a warning and rebuilt; two processes share one directory; export and
//! import carry a cache to a fresh directory. Every run compares its outputs with eager Flex
//! on the same inputs and weights (f32: relative 1e-4, absolute 1e-5). Each scenario runs in
//! a child process of the test binary, as a real warm start would: the parent reads its
//! metrics from its last line.
//!
//! (A process of its own: it configures the one Flex device.)

use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, Tolerance};
use burn_compile::{CompileConfig, Compiled, configure, export_cache, import_cache, metrics};
use burn_flex::{Flex, FlexDevice};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;

fn w1_small<B: Backend>() -> TransformerEncoder<B> {
    let config = TransformerEncoderConfig::new(32, 64, 4, 2)
        .with_dropout(0.0)
        .with_activation(burn::nn::activation::ActivationConfig::Relu);
    let model = config.init::<B>(&Default::default());
    let shapes: Vec<_> = support::weights(&model)
        .into_iter()
        .map(|d| d.shape)
        .collect();
    let weights = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| support::float_data(s, 100 + i as u64, -0.2, 0.2))
        .collect();
    support::load(model, weights)
}

fn forward<B: Backend>(seq: usize) -> burn::tensor::TensorData {
    let model = w1_small::<B>();
    let x = Tensor::<B, 3>::from_data(
        support::float_data(&[2, seq, 32], 7 + seq as u64, -1.0, 1.0),
        &Default::default(),
    );
    model.forward(TransformerEncoderInput::new(x)).into_data()
}

/// The child: W1-small at two sequence lengths, compiled against eager; prints its metrics.
#[test]
fn child_runs_w1_small() {
    let Ok(dir) = std::env::var("BC_TEST_CACHE_DIR") else {
        return; // Only as a child of the tests below.
    };
    burn_compile::init_logs();
    configure(
        &FlexDevice,
        CompileConfig {
            cache_dir: Some(dir.into()),
            ..Default::default()
        },
    );
    let before = metrics();
    for seq in [8, 12] {
        forward::<Compiled<Flex>>(seq).assert_approx_eq::<f32>(
            &forward::<Flex>(seq),
            Tolerance::default().set_relative(1e-4).set_absolute(1e-5),
        );
    }
    let m = metrics().since(&before);
    println!(
        "METRICS {{\"disk_cache_hits\":{},\"disk_cache_misses\":{},\"disk_cache_invalid\":{},\
         \"disk_cache_writes\":{},\"kernel_builds\":{},\"kernel_fallbacks\":{}}}",
        m.disk_cache_hits,
        m.disk_cache_misses,
        m.disk_cache_invalid,
        m.disk_cache_writes,
        m.kernel_builds,
        m.kernel_fallbacks
    );
}

#[derive(Debug)]
struct ChildMetrics(serde_json::Value);

impl ChildMetrics {
    fn get(&self, name: &str) -> u64 {
        self.0[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} in {:?}", self.0))
    }
}

fn spawn(dir: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "disk_cache::child_runs_w1_small",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("BC_TEST_CACHE_DIR", dir)
        .env("BURN_COMPILE_LOGS", "cache")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a child: its metrics and its log.
fn finish(child: std::process::Child) -> (ChildMetrics, String) {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "the child failed:\n{stdout}\n{stderr}"
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("METRICS ").map(|(_, m)| m))
        .unwrap_or_else(|| panic!("no metrics:\n{stdout}\n{stderr}"));
    (
        ChildMetrics(serde_json::from_str(line).unwrap()),
        format!("{stdout}{stderr}"),
    )
}

fn run_child(dir: &Path) -> (ChildMetrics, String) {
    finish(spawn(dir))
}

fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bc-disk-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("c-unit"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "entry"));
    files.sort();
    files
}

#[test]
fn a_second_process_compiles_nothing() {
    crate::own_process!(a_second_process_compiles_nothing);
    let dir = fresh_dir("warm");
    let (cold, _) = run_child(&dir);
    assert!(cold.get("disk_cache_misses") > 0);
    assert_eq!(cold.get("disk_cache_hits"), 0);
    assert_eq!(cold.get("disk_cache_writes"), cold.get("disk_cache_misses"));
    let units = entries(&dir).len();
    assert_eq!(units as u64, cold.get("disk_cache_writes"));

    let (warm, _) = run_child(&dir);
    assert_eq!(warm.get("disk_cache_misses"), 0, "{warm:?}");
    assert_eq!(warm.get("disk_cache_hits"), cold.get("disk_cache_misses"));
    assert_eq!(warm.get("disk_cache_writes"), 0);
    assert_eq!(warm.get("kernel_fallbacks"), 0);
    assert_eq!(entries(&dir).len(), units);
}

/// A flipped bit of the payload (the checksum catches it).
fn corrupt(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let n = bytes.len();
    bytes[n - 64] ^= 0xff;
    std::fs::write(file, bytes).unwrap();
}

/// The entry cut short, as a crash mid-write without the atomic rename would leave it.
fn truncate(file: &Path) {
    let bytes = std::fs::read(file).unwrap();
    std::fs::write(file, &bytes[..bytes.len() / 2]).unwrap();
}

/// The header rewritten to name another version of this crate (same length, so only the
/// version check can tell).
fn other_version(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let from = format!("burn-compile {}", env!("CARGO_PKG_VERSION"));
    let at = bytes
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .expect("the header names the versions");
    let to = format!("{:width$}", "burn-compile 9.9.9", width = from.len());
    bytes[at..at + from.len()].copy_from_slice(to.as_bytes());
    std::fs::write(file, bytes).unwrap();
}

/// A way to damage one entry file, and the words of the warning it must raise.
type Fault = (fn(&Path), &'static str);

/// Damages entries, runs a process on the cache: every damaged entry is reported invalid
/// with its warning, rebuilt and rewritten, the rest are hits; a further process finds
/// every entry good.
fn damaged_entries_are_rebuilt(dir: &Path, faults: &[Fault]) {
    let files = entries(dir);
    assert!(files.len() >= faults.len(), "{files:?}");
    let good = files.len() as u64;
    for ((fault, _), file) in faults.iter().zip(&files) {
        fault(file);
    }
    let n = faults.len() as u64;
    let (after, log) = run_child(dir);
    assert_eq!(after.get("disk_cache_invalid"), n, "{after:?}\n{log}");
    assert_eq!(after.get("disk_cache_misses"), n);
    assert_eq!(after.get("disk_cache_writes"), n);
    assert_eq!(after.get("disk_cache_hits"), good - n);
    for (_, why) in faults {
        assert!(log.contains(why), "warned about {why}:\n{log}");
    }
    let (again, _) = run_child(dir);
    assert_eq!(again.get("disk_cache_invalid"), 0);
    assert_eq!(again.get("disk_cache_misses"), 0);
    assert_eq!(again.get("disk_cache_hits"), good);
}

#[test]
fn corrupt_truncated_and_other_version_entries_are_rebuilt() {
    crate::own_process!(corrupt_truncated_and_other_version_entries_are_rebuilt);
    let dir = fresh_dir("faults");
    let (cold, _) = run_child(&dir);
    assert_eq!(entries(&dir).len() as u64, cold.get("disk_cache_writes"));
    damaged_entries_are_rebuilt(
        &dir,
        &[(corrupt, "checksum mismatch"), (truncate, "truncated")],
    );
    damaged_entries_are_rebuilt(&dir, &[(other_version, "other versions")]);
}

#[test]
fn two_processes_share_one_cache_dir() {
    crate::own_process!(two_processes_share_one_cache_dir);
    let dir = fresh_dir("shared");
    let children = [spawn(&dir), spawn(&dir)];
    let mut writes = 0;
    for child in children {
        let (m, log) = finish(child);
        assert_eq!(m.get("disk_cache_invalid"), 0, "{log}");
        writes += m.get("disk_cache_writes");
    }
    assert!(writes >= entries(&dir).len() as u64);
    // Whatever interleaving: the cache holds good entries only.
    let (warm, _) = run_child(&dir);
    assert_eq!(warm.get("disk_cache_invalid"), 0);
    assert_eq!(warm.get("disk_cache_misses"), 0);
}

#[test]
fn an_exported_bundle_warms_a_fresh_directory() {
    crate::own_process!(an_exported_bundle_warms_a_fresh_directory);
    let dir = fresh_dir("export");
    let (cold, _) = run_child(&dir);
    let bundle = dir.with_extension("tar");
    let config = |d: &Path| CompileConfig {
        cache_dir: Some(d.to_path_buf()),
        ..Default::default()
    };
    let exported = export_cache(&config(&dir), &bundle).unwrap();
    assert_eq!(exported as u64, cold.get("disk_cache_writes"));
    let other = fresh_dir("import");
    let report = import_cache(&config(&other), &bundle).unwrap();
    assert_eq!(report.imported, exported);
    assert!(report.skipped.is_empty());
    let (warm, _) = run_child(&other);
    assert_eq!(warm.get("disk_cache_misses"), 0);
    assert_eq!(warm.get("disk_cache_hits"), cold.get("disk_cache_misses"));
}
