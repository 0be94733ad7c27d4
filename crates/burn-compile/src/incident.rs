//! Incident replay and accuracy checking: a captured graph as a file, run offline compiled and
//! eagerly on any backend, compared output by output; a divergence bisected to the first op
//! that diverges.
//!
//! A [`GraphFile`] holds a graph's ops (Burn's IR, serde), its inputs' shapes and dtypes, and
//! optionally their values, with the config it was compiled under. It is written
//! - by the accuracy check ([`CompileConfig::accuracy_check`]) when a graph diverges, with its
//!   input values;
//! - for every graph compiled when [`CompileConfig::dump_graphs`] is on (no values);
//! - by [`GraphFile::write`] from code.
//!
//! `burn-compile-replay FILE [--backend flex|ndarray|wgpu|cuda]` runs one ([`replay`]). Inputs
//! without recorded values are filled from a fixed seed: floats uniform in [-1, 1], ints 0
//! (always valid indices), bools false.
//!
//! Outputs are compared elementwise: `|compiled − eager| ≤ atol · scale + rtol · |eager|`,
//! `scale` the largest `|eager|` of the tensor (at least 1), with per-dtype tolerances
//! ([`tolerance`]); ints and bools exactly; NaN matches NaN.

use crate::config::CompileConfig;
use crate::plan_cache::{PlanCache, plan_on};
use burn_backend::{DType, TensorData};
use burn_compile_graph::Segment;
use burn_compile_runtime::{InnerDevice, execute, execute_one};
use burn_ir::{BackendIr, OperationIr, TensorId, TensorIr, TensorStatus};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The format of [`GraphFile`]s this build reads and writes.
pub const GRAPH_FILE_FORMAT: u32 = 1;

/// One captured graph, to replay offline.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GraphFile {
    pub format: u32,
    /// The versions that captured it (this crate, Burn, CubeCL).
    pub versions: String,
    /// The graph's cache key, as `explain` prints it.
    pub key: String,
    /// Why it was written (an accuracy check's finding, a dump).
    pub reason: String,
    pub ops: Vec<OperationIr>,
    /// The tensors the graph reads that it does not produce, in order of first use.
    pub inputs: Vec<GraphInput>,
    /// The config the graph was compiled under.
    pub config: CompileConfig,
}

/// An input of a [`GraphFile`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GraphInput {
    pub tensor: TensorIr,
    /// Its values when the graph ran, if recorded.
    pub values: Option<TensorData>,
}

impl GraphFile {
    /// A file of `ops`, its inputs' values where given (by input, in [`graph_inputs`] order).
    pub fn new(
        key: impl Into<String>,
        reason: impl Into<String>,
        ops: Vec<OperationIr>,
        values: Option<Vec<TensorData>>,
        config: CompileConfig,
    ) -> GraphFile {
        let tensors = graph_inputs(&ops);
        let mut values = values.map(Vec::into_iter);
        let inputs = tensors
            .into_iter()
            .map(|tensor| GraphInput {
                tensor,
                values: values.as_mut().and_then(Iterator::next),
            })
            .collect();
        GraphFile {
            format: GRAPH_FILE_FORMAT,
            versions: burn_compile_runtime::disk::versions(),
            key: key.into(),
            reason: reason.into(),
            ops,
            inputs,
            config,
        }
    }

    /// Writes the file (JSON) into `dir`, atomically, under a name of its key; its path.
    pub fn write(&self, dir: &Path) -> std::io::Result<PathBuf> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The key as `explain` prints it has a `/` (hash/ops): file names take a `-`.
        let key: String = self
            .key
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let path = dir.join(format!("graph-{key}-{}-{n}.json", std::process::id()));
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        std::fs::create_dir_all(dir)?;
        let mut file = tempfile::Builder::new()
            .prefix(".tmp-graph-")
            .tempfile_in(dir)?;
        std::io::Write::write_all(&mut file, &bytes)?;
        file.persist(&path).map_err(|e| e.error)?;
        Ok(path)
    }

    /// Reads a file written by [`GraphFile::write`]; a clear error for another format.
    pub fn read(path: &Path) -> Result<GraphFile, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file: GraphFile = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{} is not a burn-compile graph file: {e}", path.display()))?;
        if file.format != GRAPH_FILE_FORMAT {
            return Err(format!(
                "{} is a graph file of format {}; this build reads format {GRAPH_FILE_FORMAT}",
                path.display(),
                file.format
            ));
        }
        Ok(file)
    }

    /// The values of every input: recorded, or filled from a fixed seed.
    pub fn input_values(&self) -> Result<Vec<TensorData>, String> {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        self.inputs
            .iter()
            .map(|input| match &input.values {
                Some(values) => Ok(values.clone()),
                None => filled(&input.tensor, &mut seed),
            })
            .collect()
    }
}

/// Values for an input recorded without them.
fn filled(tensor: &TensorIr, seed: &mut u64) -> Result<TensorData, String> {
    let shape = tensor.shape.clone();
    let n = shape.num_elements();
    match tensor.dtype {
        DType::Bool(_) => Ok(TensorData::new(vec![false; n], shape)),
        DType::QFloat(_) => Err(format!(
            "input {:?} is quantized: a graph file needs its recorded values",
            tensor.id
        )),
        d if d.is_float() => {
            let values: Vec<f32> = (0..n)
                .map(|_| {
                    // SplitMix64.
                    *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
                    let mut z = *seed;
                    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                    z ^= z >> 31;
                    ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
                })
                .collect();
            Ok(TensorData::new(values, shape).convert_dtype(d))
        }
        d => Ok(TensorData::new(vec![0i64; n], shape).convert_dtype(d)),
    }
}

/// The tensors `ops` read that they do not produce, in order of first use (an `Init` op's
/// tensor included), read-only.
pub fn graph_inputs(ops: &[OperationIr]) -> Vec<TensorIr> {
    burn_compile_graph::graph_inputs(ops)
        .into_iter()
        .map(|input| TensorIr {
            status: TensorStatus::ReadOnly,
            ..input.tensor
        })
        .collect()
}

/// The tensors `ops` compute that are still alive after them (not dropped nor consumed), in
/// order of production: what a run of them is compared on.
pub fn graph_outputs(ops: &[OperationIr]) -> Vec<TensorIr> {
    let mut alive: Vec<TensorIr> = Vec::new();
    let mut index: FxHashMap<TensorId, usize> = FxHashMap::default();
    let mut gone: FxHashSet<TensorId> = FxHashSet::default();
    for op in ops {
        if matches!(op, OperationIr::Init(_)) {
            continue; // an input
        }
        for t in op.inputs() {
            if t.status == TensorStatus::ReadWrite || matches!(op, OperationIr::Drop(_)) {
                gone.insert(t.id);
            }
        }
        for t in op.outputs() {
            index.insert(t.id, alive.len());
            let mut t = t.clone();
            t.status = TensorStatus::ReadOnly;
            alive.push(t);
        }
    }
    alive.retain(|t| !gone.contains(&t.id));
    alive
}

/// The tolerances of a dtype's comparison, compiled against eager: `(atol, rtol)` (zero:
/// exact). The accuracy check allows `atol·scale + rtol·|eager|` per element (`scale`: the
/// tensor's largest `|eager|`, at least 1); the project's differential tests use the same
/// numbers through [`approx_tolerance`]. Half precisions allow a few ULPs (bf16's epsilon is
/// 7.8e-3): a fused kernel rounds once where eager rounds after every op.
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-10, 1e-9),
        DType::F32 | DType::Flex32 => (1e-4, 1e-3),
        DType::F16 => (1e-2, 1e-2),
        DType::BF16 => (3e-2, 3e-2),
        d if d.is_float() => (1e-4, 1e-3),
        _ => (0.0, 0.0),
    }
}

/// [`tolerance`] as Burn's `Tolerance`, for `TensorData::assert_approx_eq::<f64>`: relative
/// `rtol`, absolute `atol` (Burn's comparison has no per-tensor scale).
pub fn approx_tolerance(dtype: DType) -> burn_backend::Tolerance<f64> {
    let (atol, rtol) = tolerance(dtype);
    burn_backend::Tolerance::rel_abs(rtol, atol)
}

/// An output that differs beyond its tolerance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    /// The tensor, as the graph names it.
    pub tensor: TensorIr,
    /// Elements beyond the tolerance, and the first of them: its index, compiled and eager value.
    pub elements: usize,
    pub first: (usize, f64, f64),
    /// The largest absolute difference.
    pub max_error: f64,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (i, got, want) = self.first;
        let (atol, rtol) = tolerance(self.tensor.dtype);
        write!(
            f,
            "tensor {:?} ({:?} {:?}): {} element(s) differ, the first at {i}: compiled {got}, \
             eager {want} (largest difference {:.3e}; tolerance {atol:e} × scale + {rtol:e} × |eager|)",
            self.tensor.id,
            self.tensor.dtype,
            self.tensor.shape.as_slice(),
            self.elements,
            self.max_error
        )
    }
}

/// Compares a compiled output with the eager one.
pub fn compare(tensor: &TensorIr, compiled: &TensorData, eager: &TensorData) -> Option<Mismatch> {
    let as_f64 = |d: &TensorData| -> Vec<f64> {
        match d.dtype {
            DType::Bool(_) => d
                .as_bytes()
                .iter()
                .map(|b| f64::from(u8::from(*b != 0)))
                .collect(),
            _ => d
                .clone()
                .convert::<f64>()
                .to_vec::<f64>()
                .unwrap_or_default(),
        }
    };
    let (got, want) = (as_f64(compiled), as_f64(eager));
    let mismatch = |elements, first, max_error| Mismatch {
        tensor: tensor.clone(),
        elements,
        first,
        max_error,
    };
    if got.len() != want.len() || compiled.shape != eager.shape {
        return Some(mismatch(
            got.len().max(want.len()),
            (0, f64::NAN, f64::NAN),
            f64::INFINITY,
        ));
    }
    let (atol, rtol) = tolerance(tensor.dtype);
    let scale = want
        .iter()
        .filter(|v| v.is_finite())
        .fold(1f64, |m, v| m.max(v.abs()));
    let mut elements = 0;
    let mut first = None;
    let mut max_error = 0f64;
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        let same = (g.is_nan() && w.is_nan()) || g == w;
        let error = (g - w).abs();
        // A NaN error compares false, so it is never within tolerance.
        let within = error <= atol * scale + rtol * w.abs();
        if !same && !within {
            elements += 1;
            first.get_or_insert((i, g, w));
        }
        if error.is_finite() {
            max_error = max_error.max(error);
        } else if !same {
            max_error = f64::INFINITY;
        }
    }
    first.map(|first| mismatch(elements, first, max_error))
}

/// Runs `ops` on a fresh device of `B` from `inputs` (by [`graph_inputs`]): compiled under
/// `config` (its plan built as the capture would), or op by op when `config` is `None`.
/// Returns the [`graph_outputs`]' values; a panic of the backend is an `Err` with its message.
pub fn run<B: BackendIr>(
    device: &B::Device,
    ops: &[OperationIr],
    inputs: &[TensorData],
    config: Option<&CompileConfig>,
) -> Result<Vec<TensorData>, String> {
    let inner = InnerDevice::<B>::new(device.clone());
    for (t, data) in graph_inputs(ops).iter().zip(inputs) {
        inner.register_data(t.id, data.clone());
    }
    let outputs = graph_outputs(ops);
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match config {
        Some(config) => {
            inner.set_kernel_policy(&config.runtime());
            let mut segment = Segment::new();
            for op in ops {
                segment.push(op.clone());
            }
            let mut cache = PlanCache::default();
            let (plan, record, _) = plan_on(
                &mut cache,
                segment.keys(),
                segment.ops(),
                config,
                false,
                &inner,
                &[],
            );
            // Twice, the inputs registered again: a target that builds its kernels at the
            // end of a graph's first replay (the CPU target) runs them in the second, as a
            // live program does from its second step on.
            execute(&inner, record.key, ops.to_vec(), &plan);
            for (t, data) in graph_inputs(ops).iter().zip(inputs) {
                inner.register_data(t.id, data.clone());
            }
            execute(&inner, record.key, segment.take_ops(), &plan);
        }
        None => {
            for op in ops {
                execute_one(&inner, op.clone());
            }
        }
    }));
    ran.map_err(|p| burn_compile_runtime::panic_message(&*p))?;
    outputs
        .iter()
        .map(|t| {
            burn_std::future::block_on(inner.read(t))
                .map_err(|e| format!("reading {:?}: {e:?}", t.id))
        })
        .collect()
}

/// What comparing a graph compiled against eager found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Comparison {
    /// Outputs compared.
    pub outputs: usize,
    /// The outputs that differ.
    pub mismatches: Vec<Mismatch>,
    /// The first op whose inclusion makes the compiled prefix of the graph diverge: its
    /// position and name, when a divergence was bisected.
    pub first_divergent_op: Option<(usize, String)>,
}

impl Comparison {
    pub fn matches(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// Runs `ops` compiled (under `config`) and eagerly on fresh devices of `B`, compares every
/// output, and on a divergence bisects to the first op whose prefix diverges.
pub fn compare_runs<B: BackendIr>(
    device: &B::Device,
    ops: &[OperationIr],
    inputs: &[TensorData],
    config: &CompileConfig,
) -> Result<Comparison, String> {
    let mismatches = |n: usize| -> Result<Vec<Mismatch>, String> {
        let prefix = &ops[..n];
        let compiled = run::<B>(device, prefix, inputs, Some(config))?;
        let eager = run::<B>(device, prefix, inputs, None)?;
        Ok(graph_outputs(prefix)
            .iter()
            .zip(compiled.iter().zip(&eager))
            .filter_map(|(t, (c, e))| compare(t, c, e))
            .collect())
    };
    let found = mismatches(ops.len())?;
    let outputs = graph_outputs(ops).len();
    if found.is_empty() {
        return Ok(Comparison {
            outputs,
            mismatches: found,
            first_divergent_op: None,
        });
    }
    // The shortest diverging prefix: `lo` does not diverge (the empty prefix), `hi` does.
    let (mut lo, mut hi) = (0usize, ops.len());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if mismatches(mid)?.is_empty() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let op = hi - 1;
    Ok(Comparison {
        outputs,
        mismatches: found,
        first_divergent_op: Some((op, burn_compile_graph::op_name(&ops[op]))),
    })
}

/// Replays a graph file on `B`: compiled (under the file's config) against eager.
pub fn replay<B: BackendIr>(file: &GraphFile, device: &B::Device) -> Result<Comparison, String> {
    let inputs = file.input_values()?;
    let mut config = file.config.clone();
    // The capture's own checking and dumping are not part of the graph's compile. (Injected
    // faults are: a file written under one replays it.)
    config.accuracy_check = false;
    config.dump_graphs = false;
    compare_runs::<B>(device, &file.ops, &inputs, &config)
}

/// What the accuracy check found wrong with one graph.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AccuracyReport {
    /// The graph's cache key.
    pub key: String,
    /// The outputs of the live (compiled) run that differ from the eager run.
    pub mismatches: Vec<Mismatch>,
    /// The first op whose prefix diverges, re-run offline (`None`: the offline runs agreed,
    /// a divergence that does not reproduce).
    pub first_divergent_op: Option<(usize, String)>,
    /// The replay file written for it (`None`: it could not be written, see the log).
    pub replay_file: Option<PathBuf>,
}

impl std::fmt::Display for AccuracyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "burn-compile accuracy check: graph {} diverges from eager in {} output(s)",
            self.key,
            self.mismatches.len()
        )?;
        if let Some(m) = self.mismatches.first() {
            write!(f, "; {m}")?;
        }
        match &self.first_divergent_op {
            Some((i, name)) => write!(f, "; first divergent op: #{i} {name}")?,
            None => write!(f, "; it does not reproduce offline")?,
        }
        if let Some(path) = &self.replay_file {
            write!(f, "; replay: burn-compile-replay {}", path.display())?;
        }
        Ok(())
    }
}

static REPORTS: std::sync::Mutex<Vec<AccuracyReport>> = std::sync::Mutex::new(Vec::new());

/// The accuracy check's findings since the last call (they are also logged as errors under
/// `burn_compile::accuracy`).
pub fn take_accuracy_reports() -> Vec<AccuracyReport> {
    std::mem::take(&mut *REPORTS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The values of a graph's inputs on the device, read before the graph runs (the accuracy
/// check's eager run starts from them). The device's earlier graphs must have run.
pub(crate) fn read_inputs<B: BackendIr>(
    inner: &InnerDevice<B>,
    ops: &[OperationIr],
) -> Result<Vec<TensorData>, String> {
    graph_inputs(ops)
        .iter()
        .map(|t| {
            burn_std::future::block_on(inner.read(t)).map_err(|e| format!("{:?}: {e:?}", t.id))
        })
        .collect()
}

/// Writes a graph compiled under `dump_graphs` (shapes and dtypes, no values).
pub(crate) fn dump(key: &str, ops: &[OperationIr], config: &CompileConfig) {
    let file = GraphFile::new(key, "dump_graphs", ops.to_vec(), None, config.clone());
    match file.write(&config.incident_dir()) {
        Ok(path) => tracing::info!(
            target: "burn_compile::graphs",
            "graph {key} written to {}",
            path.display()
        ),
        Err(e) => {
            tracing::warn!(target: "burn_compile::graphs", "could not write graph {key}: {e}")
        }
    }
}

/// The accuracy check of a graph that has just run on `inner` (compiled): its outputs there
/// against an eager run from `inputs` on a fresh device. An output that diverges is replaced
/// by eager's value; the divergence is bisected offline, written as a replay file, logged and
/// kept for [`take_accuracy_reports`]; its report is returned.
pub(crate) fn check_live<B: BackendIr>(
    inner: &InnerDevice<B>,
    device: &B::Device,
    key: &str,
    ops: &[OperationIr],
    inputs: Vec<TensorData>,
    config: &CompileConfig,
) -> Option<AccuracyReport> {
    use crate::diagnostics::{COUNTERS, count};
    let outputs = graph_outputs(ops);
    let compiled: Result<Vec<TensorData>, String> = outputs
        .iter()
        .map(|t| {
            burn_std::future::block_on(inner.read(t)).map_err(|e| format!("{:?}: {e:?}", t.id))
        })
        .collect();
    let eager = run::<B>(device, ops, &inputs, None);
    let (compiled, eager) = match (compiled, eager) {
        (Ok(c), Ok(e)) => (c, e),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(
                target: "burn_compile::accuracy",
                "graph {key}: the accuracy check could not run ({e})"
            );
            return None;
        }
    };
    count(&COUNTERS.accuracy_checks);
    let mut mismatches: Vec<Mismatch> = Vec::new();
    for (t, (c, e)) in outputs.iter().zip(compiled.iter().zip(&eager)) {
        if let Some(m) = compare(t, c, e) {
            // The program goes on with eager's values: a wrong result found is not handed on.
            inner.register_data(t.id, e.clone());
            mismatches.push(m);
        }
    }
    if mismatches.is_empty() {
        return None;
    }
    count(&COUNTERS.accuracy_failures);
    let mut offline = config.clone();
    offline.accuracy_check = false;
    offline.dump_graphs = false;
    let first_divergent_op = match compare_runs::<B>(device, ops, &inputs, &offline) {
        Ok(found) => found.first_divergent_op,
        Err(e) => {
            tracing::warn!(target: "burn_compile::accuracy", "graph {key}: bisection failed ({e})");
            None
        }
    };
    let reason = format!(
        "accuracy check: {}{}",
        mismatches[0],
        first_divergent_op
            .as_ref()
            .map(|(i, n)| format!("; first divergent op #{i} {n}"))
            .unwrap_or_default()
    );
    let file = GraphFile::new(key, reason, ops.to_vec(), Some(inputs), config.clone());
    let replay_file = match file.write(&config.incident_dir()) {
        Ok(path) => Some(path),
        Err(e) => {
            tracing::warn!(target: "burn_compile::accuracy", "graph {key}: no replay file ({e})");
            None
        }
    };
    let report = AccuracyReport {
        key: key.to_string(),
        mismatches,
        first_divergent_op,
        replay_file,
    };
    tracing::error!(target: "burn_compile::accuracy", "{report}");
    REPORTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(report.clone());
    Some(report)
}
