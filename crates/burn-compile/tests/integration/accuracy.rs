//! The accuracy check and incident replay on the CPU path: with a deliberately wrong kernel
//! (the test-only `Faults::wrong_kernel` hook: generated kernels compute `exp` as `abs`), the
//! check catches the divergence, bisects it to the `exp` op, writes a replay file, and hands
//! the user eager's values; the replay file reproduces it offline (the library call and the
//! `burn-compile-replay` command) and, without the fault, replays equal on another backend
//! (NdArray). A graph dumped with `dump_graphs` replays compiled against eager on NdArray,
//! and its eager results on NdArray equal Flex's.
//!
//! Tolerance (f32): relative 1e-4, absolute 1e-5 against eager Flex; the check's own per-dtype
//! tolerance is `incident::tolerance`. (A process of its own: it configures the one Flex device.)

use burn::tensor::{Tensor, TensorData};
use burn_compile::incident::{
    GraphFile, compare, graph_outputs, replay, run, take_accuracy_reports,
};
use burn_compile::{CompileConfig, Compiled, Faults, configure, metrics};
use burn_flex::{Flex, FlexDevice};
use burn_ndarray::NdArray;
use std::path::{Path, PathBuf};

use crate::support;

fn program<B: burn::tensor::backend::Backend>(seed: u64) -> TensorData {
    program_of::<B>([6, 40], seed)
}

fn program_of<B: burn::tensor::backend::Backend>(shape: [usize; 2], seed: u64) -> TensorData {
    let x = Tensor::<B, 2>::from_data(
        support::float_data(&shape, seed, -1.0, 1.0),
        &Default::default(),
    );
    let y =
        ((x.clone() * 2.0).exp() - x.clone()).tanh() + burn::tensor::activation::sigmoid(x.clone());
    (y * x).sum_dim(1).into_data()
}

fn tolerance() -> burn::tensor::Tolerance<f64> {
    burn_compile::incident::approx_tolerance(burn::tensor::DType::F32)
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "json"));
    files.sort();
    files
}

#[test]
fn accuracy_check_replay_and_dumps() {
    crate::own_process!(accuracy_check_replay_and_dumps);
    burn_compile::init_logs();
    let root = std::env::temp_dir().join(format!("bc-accuracy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let base = CompileConfig {
        cache_dir: Some(root.join("cache")),
        ..Default::default()
    };

    // 1. A correct compile: every graph checked, nothing reported.
    configure(
        &FlexDevice,
        CompileConfig {
            accuracy_check: true,
            incident_dir: Some(root.join("clean")),
            ..base.clone()
        },
    );
    let before = metrics();
    program::<Compiled<Flex>>(1).assert_approx_eq::<f64>(&program::<Flex>(1), tolerance());
    let m = metrics().since(&before);
    assert!(m.accuracy_checks >= 1, "{m:?}");
    assert_eq!(m.accuracy_failures, 0);
    assert!(take_accuracy_reports().is_empty());
    assert!(files_in(&root.join("clean")).is_empty());

    // 2. A wrong kernel: caught, bisected to `exp`, written; the user gets eager's values.
    let incidents = root.join("incidents");
    configure(
        &FlexDevice,
        CompileConfig {
            accuracy_check: true,
            faults: Faults {
                wrong_kernel: Some("exp".into()),
                ..Default::default()
            },
            incident_dir: Some(incidents.clone()),
            ..base.clone()
        },
    );
    // (The CPU target builds a graph's kernels at the end of its first replay: the wrong
    // kernel runs from the second on.)
    let before = metrics();
    for seed in [2, 3] {
        program::<Compiled<Flex>>(seed)
            .assert_approx_eq::<f64>(&program::<Flex>(seed), tolerance());
    }
    assert_eq!(metrics().since(&before).accuracy_failures, 1);
    let reports = take_accuracy_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    let report = &reports[0];
    let (op, name) = report.first_divergent_op.clone().expect("bisected");
    assert!(
        name.ends_with("Exp"),
        "bisected to {name} (#{op}): {report}"
    );
    let path = report.replay_file.clone().expect("a replay file");
    assert_eq!(files_in(&incidents), vec![path.clone()]);

    // The file reproduces it offline, with its recorded inputs, on Flex and on NdArray.
    let file = GraphFile::read(&path).unwrap();
    assert!(file.inputs.iter().all(|i| i.values.is_some()));
    assert_eq!(file.config.faults.wrong_kernel.as_deref(), Some("exp"));
    for found in [
        replay::<Flex>(&file, &FlexDevice).unwrap(),
        replay::<NdArray>(&file, &Default::default()).unwrap(),
    ] {
        assert!(!found.matches());
        assert_eq!(found.first_divergent_op, Some((op, name.clone())));
    }
    // The command line says the same, exit status 1.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_burn-compile-replay"))
        .arg(&path)
        .args(["--backend", "ndarray"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("DIVERGES") && stdout.contains(&name),
        "{stdout}"
    );

    // Without the fault, the same graph replays equal on NdArray: compiled against eager,
    // and NdArray's eager outputs against Flex's.
    let mut fixed = file.clone();
    fixed.config.faults.wrong_kernel = None;
    assert!(
        replay::<NdArray>(&fixed, &Default::default())
            .unwrap()
            .matches()
    );
    let inputs = fixed.input_values().unwrap();
    let on_ndarray = run::<NdArray>(&Default::default(), &fixed.ops, &inputs, None).unwrap();
    let on_flex = run::<Flex>(&FlexDevice, &fixed.ops, &inputs, None).unwrap();
    for (t, (a, b)) in graph_outputs(&fixed.ops)
        .iter()
        .zip(on_ndarray.iter().zip(&on_flex))
    {
        assert_eq!(compare(t, a, b), None);
    }

    // 3. Dumps: every graph compiled is written (no values); each replays on NdArray.
    let dumps = root.join("dumps");
    configure(
        &FlexDevice,
        CompileConfig {
            dump_graphs: true,
            incident_dir: Some(dumps.clone()),
            ..base.clone()
        },
    );
    // (Another shape: the graphs of `[6, 40]` are compiled already.)
    program_of::<Compiled<Flex>>([5, 17], 4)
        .assert_approx_eq::<f64>(&program_of::<Flex>([5, 17], 4), tolerance());
    let written = files_in(&dumps);
    assert!(!written.is_empty());
    for path in written {
        let file = GraphFile::read(&path).unwrap();
        assert!(file.inputs.iter().all(|i| i.values.is_none()));
        let found = replay::<NdArray>(&file, &Default::default()).unwrap();
        assert!(
            found.matches(),
            "{}: {:?}",
            path.display(),
            found.mismatches
        );
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_burn-compile-replay"))
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    // A file of another format is a clear error.
    let bad = root.join("bad.json");
    std::fs::write(&bad, b"{\"format\": 99}").unwrap();
    let err = GraphFile::read(&bad).unwrap_err();
    assert!(err.contains("not a burn-compile graph file"), "{err}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_burn-compile-replay"))
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
