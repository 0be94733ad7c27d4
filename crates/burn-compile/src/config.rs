//! Typed configuration, per device, with `BURN_COMPILE_*` environment overrides.
//!
//! Resolution order for a device: the config given to [`configure`] for that device (else
//! [`CompileConfig::default`]), then every `BURN_COMPILE_*` variable that is set. The
//! environment wins so that a deployed binary can be tuned or debugged without a rebuild.

use burn_backend::{DeviceId, DeviceOps};
use serde::{Deserialize, Serialize};
use std::any::TypeId;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// What happens to the op stream of a device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompileConfig {
    /// Capture ops into graphs. `false` runs every op eagerly on the inner backend, as it
    /// arrives (`BURN_COMPILE_ENABLED=0`). Same effect as [`crate::Stance::Eager`], per device.
    pub enabled: bool,
    /// A graph is cut when it reaches this many ops (`BURN_COMPILE_MAX_GRAPH_OPS`).
    pub max_graph_ops: usize,
    /// Compiles a graph family may have after its first (`BURN_COMPILE_RECOMPILE_LIMIT`;
    /// default 8, torch.compile's). A family is one program (the same operations, dtypes and
    /// ranks) over any sizes: each new set of sizes is a recompile, logged under the
    /// `burn_compile::recompiles` target with the tensors and dimensions that changed. Past
    /// the limit the family runs eagerly, with one warning. 0: a family never recompiles.
    pub recompile_limit: usize,
    /// Which sizes a plan takes as runtime values rather than constants
    /// (`BURN_COMPILE_DYNAMIC` = `auto`, `true` or `false`; see [`DynamicShapes`]).
    pub dynamic: DynamicShapes,
    /// When a stream reaches the size limit, look for the period of the loop that produced it
    /// and cut every period from then on, so that a loop that never reads settles into repeating
    /// cached graphs (`BURN_COMPILE_DETECT_PERIOD`).
    pub detect_period: bool,
    /// Skip ops whose results are dropped unused (`BURN_COMPILE_DEAD_CODE`).
    pub dead_code_elimination: bool,
    /// Run an op that repeats an earlier one (same op, same input tensors, no scalar operand)
    /// once, its repeat sharing the result (`BURN_COMPILE_CSE`).
    pub common_subexpressions: bool,
    /// Fuse runs of elementwise ops into generated kernels where the inner backend can run
    /// them (CubeCL backends: wgpu, CUDA); elsewhere every op runs on the inner backend
    /// (`BURN_COMPILE_FUSION`).
    pub fusion: bool,
    /// Run matrix products (matmul, linear and its gradients) through a library matmul with
    /// fused epilogues (bias, scale, residual add, ReLU) where the inner backend has one:
    /// cuBLASLt on CUDA. `false` keeps the inner backend's own matmul (cubek), which is also
    /// what runs on wgpu and where cuBLASLt cannot be loaded (`BURN_COMPILE_LIBRARY_MATMUL`).
    pub library_matmul: bool,
    /// A linear layer's bias gradient comes out of its weight gradient's library call (CUDA:
    /// cuBLASLt's bias-gradient epilogue, `BGRADA`; f16 and bf16 only) rather than a column sum
    /// of its own (`BURN_COMPILE_BIAS_GRADIENT_EPILOGUE`); only with [`Self::library_matmul`].
    /// Off by default until its bf16 GPU test has passed: on an H100 cuBLASLt ran the
    /// epilogue as a reduction kernel of its own (BENCHMARKS.md), so it saves the step's
    /// launches, not GPU time.
    pub bias_gradient_epilogue: bool,
    /// Run 2-D convolutions (`conv2d`, and the gradients of its input and weight) as cuDNN calls
    /// on CUDA (`BURN_COMPILE_CUDNN`). cuDNN is loaded at run time the first time a convolution
    /// asks for it; where it cannot be loaded (one warning), and for what it does not take
    /// (dtypes other than f32, f16, bf16 and f64, a shape it refuses), the inner backend's own
    /// convolutions run, as they do with this off and on other backends; operands it cannot
    /// read in place (Burn's pitched tensors: a 3×3 filter) are copied first. f32 runs in full
    /// f32 (no TF32). On by default: its GPU tests pass with the CPU's results judging where
    /// it and eager differ (Burn's own CUDA gradient of a one-channel input is the one off),
    /// and `train_digits` trains through it on CUDA (BENCHMARKS.md, with W3's figures).
    pub cudnn: bool,
    /// A library matmul (CUDA) whose `m`, `n` or `k` is not a multiple of 16 bytes' worth of
    /// elements (GPT-2's vocabulary of 50,257) runs on zero-padded copies of its operands, so
    /// that cuBLASLt takes its vectorized kernels, and its product is copied out of the padded
    /// result (`BURN_COMPILE_PAD_MATMUL_DIMS`); not for a batched call, one with a bias or a
    /// fused residual. On by default (W2's figures with and without it are in BENCHMARKS.md).
    pub pad_matmul_dims: bool,
    /// Time the algorithms cuBLASLt's heuristic offers for a library matmul (up to eight) the
    /// first time each call shape is prepared, on scratch operands of its shape on a stream of
    /// their own, and keep the fastest, instead of the heuristic's first
    /// (`BURN_COMPILE_TUNE_MATMULS`); the choice is kept in the disk cache (per GPU and
    /// cuBLASLt version) for the next process. A shape first met while a graph is being
    /// recorded keeps the heuristic's choice. The choice may differ between machines, and with
    /// it the last bits of a product (another tiling or split of `k`). Off by default: on W1
    /// the timed choices were no faster inside the training step than the heuristic's
    /// (BENCHMARKS.md).
    pub tune_matmuls: bool,
    /// Run attention written from parts (`softmax(q @ kᵀ / √d) @ v`, as Burn's
    /// `MultiHeadAttention` computes it without mask or dropout) as one flash-attention kernel
    /// (cubek's) where the inner backend is a CubeCL backend; a mask, dropout, another scale or
    /// a read of the weights keeps the parts (`BURN_COMPILE_ATTENTION`). cubek's kernel stages
    /// q, k, v and the probabilities in f16 whatever the input dtype: f16 and bf16 attention
    /// take it (bf16 gains mantissa bits; values must stay below f16's 65504), f32 only with
    /// [`CompileConfig::attention_f32`].
    pub attention: bool,
    /// Let f32 attention take the f16-staged flash kernel too: a 10-bit mantissa, as TF32
    /// matmuls (Burn's f32 matmul on CUDA) already round their inputs, but f16's range
    /// (`BURN_COMPILE_ATTENTION_F32`). Off: f32 attention keeps its f32 parts.
    pub attention_f32: bool,
    /// Place the intermediates that generated kernels and library matmuls write, and only such
    /// steps read, in the slots of one buffer reserved per replay, shared by liveness: one
    /// allocation per replay in place of one per tensor (`BURN_COMPILE_MEMORY_PLAN`).
    pub memory_planning: bool,
    /// Launch generated kernels that run the same program over independent tensors (an
    /// optimizer's update of each parameter) as one kernel: its units split among them, each
    /// part over its own tensors and scalars (`BURN_COMPILE_HORIZONTAL`).
    pub horizontal_fusion: bool,
    /// Sums over leading dimensions (a linear layer's bias gradient, the gradient of an operand
    /// broadcast in the forward pass) run as generated column-sum kernels, a chain of such sums
    /// as one kernel, where the device's kernel target has them (CubeCL: CUDA and wgpu); off,
    /// or elsewhere, the inner backend's reductions (`BURN_COMPILE_COLUMN_SUMS`).
    pub column_sums: bool,
    /// A swapped view that batched products read and cannot read in place (attention's heads,
    /// `[b, s, h, d]` swapped to `[b, h, s, d]`) is copied contiguous once, by a generated
    /// kernel at the swap's place, and every product reads the copy; copies of one shape launch
    /// together with `horizontal_fusion` (`BURN_COMPILE_VIEW_COPIES`). Off: each product copies
    /// the view it reads (CUDA and wgpu; the CPU's products read views in place either way).
    pub view_copies: bool,
    /// A ReLU's backward reads the forward's output instead of its input where that output
    /// still exists at the backward (the same gradient: both are positive at the same places),
    /// so the input no longer lives until the backward and the ReLU fuses into the product
    /// that makes it (`BURN_COMPILE_RELU_MASKS`). Off: the backward reads what autodiff
    /// recorded.
    pub relu_masks: bool,
    /// Generated kernels load, compute and store vectors of consecutive elements (16 bytes:
    /// 4 × f32, 8 × f16/bf16) where every buffer's layout and alignment allows, scalar code
    /// elsewhere (`BURN_COMPILE_VECTORIZE`). Off: the fused groups' kernels run scalar code;
    /// the operand copies that library matmuls, attention and copying reshapes need keep their
    /// vectors (they are made where no config is at hand, and are plain copies).
    pub vectorize: bool,
    /// How a plan's replay reaches the device (`BURN_COMPILE_MODE`: `default` or
    /// `reduce-overhead`). See [`Mode`].
    pub mode: Mode,
    /// How a launch of a recorded graph (reduce-overhead mode) moves its inputs in and its
    /// outputs out (`BURN_COMPILE_RECORDING_COPIES`: `each`, `batched` or `alternate`). See
    /// [`RecordingCopies`].
    pub recording_copies: RecordingCopies,
    /// Time each attention problem's kernel against its parts on its first replays (after an
    /// untimed run of each, three synced runs of each, like Burn's autotune) and keep the
    /// faster by each side's fastest run; `false`: the kernel always
    /// (`BURN_COMPILE_ATTENTION_AUTOTUNE`). The decision is logged (`output_code`).
    pub attention_autotune: bool,
    /// A generated kernel that fails to compile or launch is an error (raised at the next
    /// read or sync, like an inner-backend panic) instead of a warning and an eager fallback
    /// of its ops (`BURN_COMPILE_STRICT`).
    pub strict: bool,
    /// Record where in the user's code each break happened and keep readable listings of
    /// graphs (`BURN_COMPILE_DIAGNOSTICS`). Costs a backtrace per break; `explain` and
    /// `fullgraph` turn it on for their region.
    pub diagnostics: bool,
    /// Run closed graphs on the device's execution thread while the program records the next
    /// one, like a GPU stream; reads, syncs and eager ops wait for it. `false` runs each graph
    /// on the thread that closed it (`BURN_COMPILE_ASYNC`).
    pub async_execution: bool,
    /// Replay each plan as one task of the inner backend's own device thread (CubeCL's device
    /// runner), so that the plan's allocations, kernel launches and library calls run there
    /// directly instead of each being handed over the runner's queue, one task per call
    /// (`BURN_COMPILE_DEVICE_THREAD`). Only CubeCL inner backends have such a thread; others
    /// replay where they always do. Off by default: on the H200 the queue hand-off is cheap and
    /// the overlap of the replay's own work with the runtime's is worth more (figures in
    /// BENCHMARKS.md, "where the replay's host time goes"). On, the replay
    /// profile (`BURN_COMPILE_PROFILE_REPLAY`) times each step's whole host cost.
    pub replay_on_device_thread: bool,
    /// The C compiler of the CPU path's kernels (`BURN_COMPILE_CC`; default `$CC`, else `cc`).
    /// Without one, or when a build fails, the kernels' ops run on the inner backend after one
    /// warning (an error when [`CompileConfig::strict`]).
    pub c_compiler: Option<String>,
    /// The flags C kernels are built with (`BURN_COMPILE_CFLAGS`; default
    /// `-O3 -march=native -fopenmp-simd -fno-math-errno`). Part of the disk cache's key.
    pub c_flags: Option<String>,
    /// Where the disk cache keeps what was compiled, between runs (`BURN_COMPILE_CACHE_DIR`;
    /// default `$XDG_CACHE_HOME/burn-compile`, else `~/.cache/burn-compile`, else the temporary
    /// directory's `burn-compile`). Entries are keyed by what built them (a C unit: its
    /// source, the compiler's identity and the flags; every entry: the versions of this crate,
    /// Burn and CubeCL) and checksummed, so a stale or damaged entry is never loaded.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Keep compiled kernels and tuning choices on disk, in [`CompileConfig::cache_dir`]
    /// (`BURN_COMPILE_DISK_CACHE`). Off: every process compiles from scratch.
    pub disk_cache: bool,
    /// The disk cache's size cap in bytes (`BURN_COMPILE_CACHE_MAX_BYTES`; default 1 GiB): past
    /// it, the least recently used entries are removed.
    pub cache_max_bytes: u64,
    /// Run every graph both compiled and eagerly and compare their outputs
    /// (`BURN_COMPILE_ACCURACY_CHECK`; see [`crate::incident`]): a divergence is bisected to
    /// the first op that diverges, reported, and written as a replay file into
    /// [`CompileConfig::incident_dir`]; in strict mode it is also an error at the next read.
    /// Costs a sync and an eager run per graph: a debugging mode.
    pub accuracy_check: bool,
    /// Write every graph compiled (each cache miss) as a replay file into
    /// [`CompileConfig::incident_dir`] (`BURN_COMPILE_DUMP_GRAPHS`): shapes and dtypes of its
    /// inputs, no values. `burn-compile-replay FILE` runs one offline.
    pub dump_graphs: bool,
    /// Where replay files go (`BURN_COMPILE_INCIDENT_DIR`; default: `incidents` in the
    /// cache directory).
    pub incident_dir: Option<std::path::PathBuf>,
    /// Faults injected by this project's own tests (feature `fault-injection`, never on in a
    /// user's build): what the fallbacks and the accuracy check must handle.
    #[cfg(feature = "fault-injection")]
    #[serde(default)]
    pub faults: Faults,
}

/// Which sizes of a graph its plan takes as runtime values (symbolic sizes): one plan, and
/// one kernel per fused group, then serve every value of them, where a plan specialized on
/// every size compiles again for each new one.
///
/// A symbolic size is a distinct value of the graph (a batch, a sequence length, their
/// product after a reshape) that is at least 2: sizes 0 and 1 stay constants (a 1 broadcasts,
/// a 0 is empty). A symbolic plan's guard is the graph's pattern of sizes: every constant size
/// the same, every symbolic one within its declared range ([`crate::Dim`]), and no two
/// distinct sizes equal (nor two equal ones distinct); a graph that breaks it compiles again.
/// Symbolic plans plan no memory slab and run attention as its parts (both are sized per
/// problem).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DynamicShapes {
    /// torch.compile's automatic dynamic shapes: a family's first compile is specialized on
    /// every size; when a size changes, the recompile makes the sizes that changed symbolic,
    /// so later values of them reuse that plan. Sizes declared with [`crate::mark_dynamic`]
    /// are symbolic from the first compile.
    #[default]
    Auto,
    /// `dynamic = true`: every size of at least 2 is symbolic from the first compile.
    Always,
    /// `dynamic = false`: every plan is specialized on every size (each new size recompiles,
    /// up to `recompile_limit`); declared sizes are still range-checked.
    Never,
}

/// Faults this project's tests inject (feature `fault-injection`; env
/// `BURN_COMPILE_INJECT_KERNEL_FAILURE`, `BURN_COMPILE_INJECT_COMPILE_FAILURE`,
/// `BURN_COMPILE_INJECT_WRONG_KERNEL`). Without the feature, a config has none.
#[doc(hidden)]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Faults {
    /// Every generated kernel fails to launch: its ops fall back to eager, or, in strict mode,
    /// the failure is an error.
    pub kernel_failure: bool,
    /// Every graph's compile fails: the graphs run eagerly, or, in strict mode, the failure is
    /// an error.
    pub compile_failure: bool,
    /// Generated kernels compute this op kind wrongly (a unary op as `abs`, `abs` as `relu`; a
    /// binary op as `sub`, `sub` as `add`; C and CubeCL alike; e.g. `exp`): what the accuracy
    /// check must catch and bisect to.
    pub wrong_kernel: Option<String>,
}

/// How replays reach the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Each replay walks its plan's executable, one launch after another.
    #[default]
    Default,
    /// On CUDA, a plan's replay is recorded once as a CUDA graph after two warm-up replays, and
    /// later replays launch it: the inputs copied into the recording's buffers, one graph
    /// launch, the outputs copied out. A changed scalar re-records (logged under
    /// `burn_compile::recordings`, counted in `metrics()`); past 8 recordings a plan replays
    /// launch by launch. Elsewhere (wgpu, the CPU) the same as `Default`.
    ReduceOverhead,
}

/// How a launch of a recorded graph moves its inputs in and its outputs out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordingCopies {
    /// Every input copied into the recording's buffers and every output out of them, one
    /// driver call per tensor (measured on an H200).
    #[default]
    Each,
    /// Only the inputs found elsewhere than where the last launch copied them from (the
    /// recording holds the last launch's inputs until the next, so an input at the same
    /// address was not rewritten: a model's weights are copied once), each direction's copies
    /// in one launch of a copy kernel reading a table of moves uploaded per launch (one DMA
    /// copy per tensor costs the GPU a few microseconds however small the tensor).
    Batched,
    /// No output copied out, and no input copied in that the loop hands back: up to two
    /// recordings of a plan alternate, each handing out its own output buffers and reading an
    /// input in place where one of them holds its value; the second writes each output that
    /// comes back as an input where the first reads it. A recording is launched only while no
    /// tensor of the program holds a buffer it writes (else the other, else the replay runs
    /// launch by launch): a program that keeps a call's outputs across the next two calls
    /// replays launch by launch. Other inputs (a new batch) are copied with the copy kernel.
    Alternate,
}

impl Default for CompileConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_graph_ops: 10_000,
            recompile_limit: 8,
            dynamic: DynamicShapes::Auto,
            detect_period: true,
            dead_code_elimination: true,
            common_subexpressions: true,
            fusion: true,
            library_matmul: true,
            bias_gradient_epilogue: false,
            cudnn: true,
            pad_matmul_dims: true,
            tune_matmuls: false,
            attention: true,
            attention_f32: false,
            memory_planning: true,
            horizontal_fusion: true,
            column_sums: true,
            view_copies: true,
            relu_masks: true,
            vectorize: true,
            mode: Mode::Default,
            recording_copies: RecordingCopies::Each,
            attention_autotune: true,
            strict: false,
            diagnostics: false,
            async_execution: true,
            replay_on_device_thread: false,
            c_compiler: None,
            c_flags: None,
            cache_dir: None,
            disk_cache: true,
            cache_max_bytes: 1 << 30,
            accuracy_check: false,
            dump_graphs: false,
            incident_dir: None,
            #[cfg(feature = "fault-injection")]
            faults: Faults::default(),
        }
    }
}

/// A `BURN_COMPILE_*` variable that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The variable.
    pub variable: String,
    /// Its value.
    pub value: String,
    /// What was expected.
    pub expected: &'static str,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}={:?} is not valid: expected {}",
            self.variable, self.value, self.expected
        )
    }
}

impl std::error::Error for ConfigError {}

fn parse_bool(variable: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(ConfigError {
            variable: variable.into(),
            value: value.into(),
            expected: "a boolean (1/0, true/false, on/off)",
        }),
    }
}

fn parse_count(variable: &str, value: &str) -> Result<usize, ConfigError> {
    match value.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ConfigError {
            variable: variable.into(),
            value: value.into(),
            expected: "a positive integer",
        }),
    }
}

impl CompileConfig {
    /// Whether attention of `dtype` may run as one flash-attention kernel (see
    /// [`CompileConfig::attention`]: the kernel computes in f16).
    pub fn attention_for(&self, dtype: burn_backend::DType) -> bool {
        use burn_backend::DType;
        self.attention
            && match dtype {
                DType::F16 | DType::BF16 => true,
                DType::F32 | DType::Flex32 => self.attention_f32,
                _ => false,
            }
    }

    /// Applies the overrides found by `lookup` (the environment, in production).
    pub fn with_overrides(
        mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).map(|v| (name.to_string(), v));
        if let Some((k, v)) = get("BURN_COMPILE_ENABLED") {
            self.enabled = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_MAX_GRAPH_OPS") {
            self.max_graph_ops = parse_count(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_RECOMPILE_LIMIT") {
            self.recompile_limit = v.trim().parse::<usize>().map_err(|_| ConfigError {
                variable: k.clone(),
                value: v.clone(),
                expected: "a non-negative integer",
            })?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_DYNAMIC") {
            self.dynamic = match v.trim().to_ascii_lowercase().as_str() {
                "auto" => DynamicShapes::Auto,
                "1" | "true" | "on" | "yes" => DynamicShapes::Always,
                "0" | "false" | "off" | "no" => DynamicShapes::Never,
                _ => {
                    return Err(ConfigError {
                        variable: k,
                        value: v,
                        expected: "auto, true or false",
                    });
                }
            };
        }
        if let Some((k, v)) = get("BURN_COMPILE_DETECT_PERIOD") {
            self.detect_period = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_DEAD_CODE") {
            self.dead_code_elimination = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_CSE") {
            self.common_subexpressions = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_FUSION") {
            self.fusion = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_LIBRARY_MATMUL") {
            self.library_matmul = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_BIAS_GRADIENT_EPILOGUE") {
            self.bias_gradient_epilogue = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_CUDNN") {
            self.cudnn = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_PAD_MATMUL_DIMS") {
            self.pad_matmul_dims = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_TUNE_MATMULS") {
            self.tune_matmuls = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_ATTENTION") {
            self.attention = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_ATTENTION_F32") {
            self.attention_f32 = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_MEMORY_PLAN") {
            self.memory_planning = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_HORIZONTAL") {
            self.horizontal_fusion = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_COLUMN_SUMS") {
            self.column_sums = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_VIEW_COPIES") {
            self.view_copies = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_RELU_MASKS") {
            self.relu_masks = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_VECTORIZE") {
            self.vectorize = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_MODE") {
            self.mode = match v.trim().to_ascii_lowercase().as_str() {
                "default" => Mode::Default,
                "reduce-overhead" | "reduce_overhead" => Mode::ReduceOverhead,
                _ => {
                    return Err(ConfigError {
                        variable: k,
                        value: v,
                        expected: "default or reduce-overhead",
                    });
                }
            };
        }
        if let Some((k, v)) = get("BURN_COMPILE_RECORDING_COPIES") {
            self.recording_copies = match v.trim().to_ascii_lowercase().as_str() {
                "each" => RecordingCopies::Each,
                "batched" => RecordingCopies::Batched,
                "alternate" => RecordingCopies::Alternate,
                _ => {
                    return Err(ConfigError {
                        variable: k,
                        value: v,
                        expected: "each, batched or alternate",
                    });
                }
            };
        }
        if let Some((k, v)) = get("BURN_COMPILE_ATTENTION_AUTOTUNE") {
            self.attention_autotune = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_STRICT") {
            self.strict = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_DIAGNOSTICS") {
            self.diagnostics = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_ASYNC") {
            self.async_execution = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_DEVICE_THREAD") {
            self.replay_on_device_thread = parse_bool(&k, &v)?;
        }
        if let Some((_, v)) = get("BURN_COMPILE_CC").filter(|(_, v)| !v.trim().is_empty()) {
            self.c_compiler = Some(v.trim().to_string());
        }
        if let Some((_, v)) = get("BURN_COMPILE_CFLAGS") {
            self.c_flags = Some(v);
        }
        if let Some((_, v)) = get("BURN_COMPILE_CACHE_DIR").filter(|(_, v)| !v.trim().is_empty()) {
            self.cache_dir = Some(v.trim().into());
        }
        if let Some((k, v)) = get("BURN_COMPILE_DISK_CACHE") {
            self.disk_cache = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_CACHE_MAX_BYTES") {
            self.cache_max_bytes = parse_count(&k, &v)? as u64;
        }
        if let Some((k, v)) = get("BURN_COMPILE_ACCURACY_CHECK") {
            self.accuracy_check = parse_bool(&k, &v)?;
        }
        if let Some((k, v)) = get("BURN_COMPILE_DUMP_GRAPHS") {
            self.dump_graphs = parse_bool(&k, &v)?;
        }
        if let Some((_, v)) = get("BURN_COMPILE_INCIDENT_DIR").filter(|(_, v)| !v.trim().is_empty())
        {
            self.incident_dir = Some(v.trim().into());
        }
        #[cfg(feature = "fault-injection")]
        {
            if let Some((k, v)) = get("BURN_COMPILE_INJECT_KERNEL_FAILURE") {
                self.faults.kernel_failure = parse_bool(&k, &v)?;
            }
            if let Some((k, v)) = get("BURN_COMPILE_INJECT_COMPILE_FAILURE") {
                self.faults.compile_failure = parse_bool(&k, &v)?;
            }
            if let Some((_, v)) = get("BURN_COMPILE_INJECT_WRONG_KERNEL") {
                self.faults.wrong_kernel = Some(v.trim().to_string()).filter(|v| !v.is_empty());
            }
        }
        Ok(self)
    }

    /// The faults this config injects (none without the `fault-injection` feature).
    pub(crate) fn faults(&self) -> Faults {
        #[cfg(feature = "fault-injection")]
        return self.faults.clone();
        #[cfg(not(feature = "fault-injection"))]
        Faults::default()
    }

    /// The directory of built kernels: [`CompileConfig::cache_dir`] or the user's cache.
    pub fn kernel_cache_dir(&self) -> std::path::PathBuf {
        self.cache_dir
            .clone()
            .unwrap_or_else(burn_compile_runtime::default_cache_dir)
    }

    /// What the runtime reads of this config.
    pub fn runtime(&self) -> burn_compile_runtime::RuntimeConfig {
        burn_compile_runtime::RuntimeConfig {
            strict: self.strict,
            inject_kernel_failure: self.faults().kernel_failure,
            attention_autotune: self.attention_autotune,
            replay_on_device_thread: self.replay_on_device_thread,
            vectorize: self.vectorize,
            reduce_overhead: self.mode == Mode::ReduceOverhead,
            batched_recording_copies: self.recording_copies == RecordingCopies::Batched,
            alternate_recordings: self.recording_copies == RecordingCopies::Alternate,
            cudnn: self.cudnn,
            pad_matmul_dims: self.pad_matmul_dims,
            tune_matmuls: self.tune_matmuls,
            c_compiler: self.c_compiler.clone(),
            c_flags: self.c_flags.clone(),
            cache_dir: self.kernel_cache_dir(),
            disk_cache: self.disk_cache,
            cache_max_bytes: self.cache_max_bytes,
        }
    }

    /// Where replay files are written: [`CompileConfig::incident_dir`] or the cache's
    /// `incidents`.
    pub fn incident_dir(&self) -> std::path::PathBuf {
        self.incident_dir
            .clone()
            .unwrap_or_else(|| self.kernel_cache_dir().join("incidents"))
    }

    /// Applies the `BURN_COMPILE_*` environment variables.
    pub fn with_env(self) -> Result<Self, ConfigError> {
        self.with_overrides(|name| std::env::var(name).ok())
    }
}

/// A device: its type and its id. The id alone is not enough: devices of different backends
/// share ids (`NdArrayDevice::Cpu` and Flex's default device are both type 0, index 0).
type DeviceKey = (TypeId, DeviceId);

static CONFIGS: Mutex<Vec<(DeviceKey, CompileConfig)>> = Mutex::new(Vec::new());
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Bumped by every [`configure`]: devices re-read their config at their next break when it moved.
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// Sets the configuration of one device. Takes effect at the device's next graph break.
pub fn configure<D: DeviceOps + 'static>(device: &D, config: CompileConfig) {
    let id = (TypeId::of::<D>(), device.id());
    let mut configs = CONFIGS.lock().unwrap_or_else(|e| e.into_inner());
    configs.retain(|(d, _)| *d != id);
    configs.push((id, config));
    GENERATION.fetch_add(1, Ordering::Release);
}

/// The effective configuration of a device: [`configure`]d or default, then the environment.
///
/// The environment is read when the device starts and after each [`configure`] call. An invalid
/// variable is reported as a warning and ignored, rather than failing the user's training run.
pub fn config_for<D: DeviceOps + 'static>(device: &D) -> CompileConfig {
    let id = (TypeId::of::<D>(), device.id());
    let base = CONFIGS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(d, _)| *d == id)
        .map(|(_, c)| c.clone())
        .unwrap_or_default();
    match base.clone().with_env() {
        Ok(config) => config,
        Err(err) => {
            tracing::warn!(target: "burn_compile", "ignoring the environment: {err}");
            base
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device's config is its own: configuring NdArray's default device leaves Flex's, which
    /// has the same `DeviceId`, alone (a regression: fusion turned off for one turned it off for
    /// both).
    #[test]
    fn devices_of_two_backends_with_one_id_have_their_own_configs() {
        let ndarray = burn_ndarray::NdArrayDevice::default();
        let flex = burn_flex::FlexDevice;
        assert_eq!(ndarray.id(), flex.id(), "the collision this test is about");
        configure(
            &ndarray,
            CompileConfig {
                fusion: false,
                ..Default::default()
            },
        );
        assert!(!config_for(&ndarray).fusion);
        assert_eq!(
            config_for(&flex).fusion,
            CompileConfig::default().with_env().unwrap().fusion
        );
    }

    /// The runtime's defaults (a target not yet configured uses them) are this config's.
    #[test]
    fn the_runtime_defaults_are_the_configs() {
        assert_eq!(
            CompileConfig::default().runtime(),
            burn_compile_runtime::RuntimeConfig::default()
        );
    }

    #[test]
    fn overrides_apply_and_reject_garbage() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let config = CompileConfig::default()
            .with_overrides(env(&[
                ("BURN_COMPILE_MAX_GRAPH_OPS", "64"),
                ("BURN_COMPILE_DEAD_CODE", "off"),
                ("BURN_COMPILE_ASYNC", "0"),
                ("BURN_COMPILE_FUSION", "off"),
                ("BURN_COMPILE_CSE", "false"),
                ("BURN_COMPILE_DEVICE_THREAD", "1"),
                ("BURN_COMPILE_VECTORIZE", "no"),
                ("BURN_COMPILE_MODE", "reduce-overhead"),
                ("BURN_COMPILE_RECORDING_COPIES", "Batched"),
                ("BURN_COMPILE_CC", " clang "),
                ("BURN_COMPILE_CFLAGS", "-O2"),
                ("BURN_COMPILE_CACHE_DIR", "/tmp/kernels"),
                ("BURN_COMPILE_RECOMPILE_LIMIT", "0"),
                ("BURN_COMPILE_CUDNN", "0"),
                ("BURN_COMPILE_PAD_MATMUL_DIMS", "off"),
                ("BURN_COMPILE_TUNE_MATMULS", "1"),
                ("BURN_COMPILE_BIAS_GRADIENT_EPILOGUE", "true"),
            ]))
            .unwrap();
        assert_eq!(config.c_compiler.as_deref(), Some("clang"));
        assert_eq!(config.c_flags.as_deref(), Some("-O2"));
        assert_eq!(
            config.kernel_cache_dir(),
            std::path::PathBuf::from("/tmp/kernels")
        );
        assert!(!config.vectorize);
        assert!(CompileConfig::default().vectorize);
        assert_eq!(config.mode, Mode::ReduceOverhead);
        assert_eq!(CompileConfig::default().mode, Mode::Default);
        assert!(config.runtime().reduce_overhead);
        assert_eq!(config.recording_copies, RecordingCopies::Batched);
        assert!(config.runtime().batched_recording_copies);
        assert!(!config.runtime().alternate_recordings);
        let alternate = CompileConfig::default()
            .with_overrides(env(&[("BURN_COMPILE_RECORDING_COPIES", "alternate")]))
            .unwrap();
        assert_eq!(alternate.recording_copies, RecordingCopies::Alternate);
        assert!(alternate.runtime().alternate_recordings);
        assert!(!alternate.runtime().batched_recording_copies);
        assert!(!config.cudnn && !config.runtime().cudnn);
        assert!(CompileConfig::default().cudnn);
        assert!(!config.pad_matmul_dims && !config.runtime().pad_matmul_dims);
        assert!(CompileConfig::default().pad_matmul_dims);
        assert!(config.tune_matmuls && config.runtime().tune_matmuls);
        assert!(!CompileConfig::default().tune_matmuls);
        assert!(config.bias_gradient_epilogue);
        assert!(!CompileConfig::default().bias_gradient_epilogue);
        assert_eq!(
            CompileConfig::default().recording_copies,
            RecordingCopies::Each
        );
        assert!(
            CompileConfig::default()
                .with_overrides(env(&[("BURN_COMPILE_RECORDING_COPIES", "some")]))
                .is_err()
        );
        assert!(!config.fusion);
        assert!(!config.common_subexpressions);
        assert_eq!(config.max_graph_ops, 64);
        assert_eq!(config.recompile_limit, 0);
        assert_eq!(CompileConfig::default().recompile_limit, 8);
        assert!(!config.dead_code_elimination);
        assert!(!config.async_execution);
        assert!(config.replay_on_device_thread);
        assert!(config.enabled);

        let err = CompileConfig::default()
            .with_overrides(env(&[("BURN_COMPILE_MAX_GRAPH_OPS", "0")]))
            .unwrap_err();
        assert_eq!(err.variable, "BURN_COMPILE_MAX_GRAPH_OPS");
    }

    #[test]
    fn config_round_trips_through_json() {
        let config = CompileConfig {
            max_graph_ops: 12,
            ..Default::default()
        };
        let text = serde_json::to_string(&config).unwrap();
        assert_eq!(
            serde_json::from_str::<CompileConfig>(&text).unwrap(),
            config
        );
        assert!(serde_json::from_str::<CompileConfig>(r#"{"max_ops": 3}"#).is_err());
    }

    /// The flash kernel computes in f16: f16/bf16 attention takes it by default, f32 only when
    /// asked, other dtypes never; `attention = false` turns it off for all.
    #[test]
    fn attention_dtypes_follow_the_kernels_precision() {
        use burn_backend::DType;
        let default = CompileConfig::default();
        assert!(default.attention_for(DType::BF16) && default.attention_for(DType::F16));
        assert!(!default.attention_for(DType::F32) && !default.attention_for(DType::F64));
        let f32_too = CompileConfig {
            attention_f32: true,
            ..Default::default()
        };
        assert!(f32_too.attention_for(DType::F32) && !f32_too.attention_for(DType::F64));
        let off = CompileConfig {
            attention: false,
            attention_f32: true,
            ..Default::default()
        };
        assert!(!off.attention_for(DType::BF16) && !off.attention_for(DType::F32));
    }
}
