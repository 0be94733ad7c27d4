//! `burn-compile-plan FILE [--target cuda|wgpu] [--dtype f32|f16|bf16] [--max-buffers N]`:
//! prints the plan a GPU target would build for a graph file (written by
//! `BURN_COMPILE_DUMP_GRAPHS`, the accuracy check or `GraphFile::write`), on this machine, with
//! no GPU: its generated kernels, library matmuls, column sums and executable, one line per
//! launch, as `explain` prints a graph. `--dtype` plans the graph's float tensors in another
//! dtype (a graph captured on the CPU in f32, planned as a bf16 run on CUDA plans it). The plan
//! uses the file's config, with what the environment's `BURN_COMPILE_*` variables set
//! (`BURN_COMPILE_RELU_MASKS=0 burn-compile-plan FILE` plans it without ReLU masks).
//!
//! Exit status: 0 with the plan printed, 2 when the file cannot be read or an argument is wrong.

use burn_compile::GpuRules;
use burn_compile::incident::GraphFile;
use std::process::ExitCode;

const USAGE: &str = "usage: burn-compile-plan FILE [--target cuda|wgpu] [--dtype f32|f16|bf16] \
                     [--max-buffers N (wgpu; default 7)]";

fn main() -> ExitCode {
    let mut file = None;
    let mut target = "cuda".to_string();
    let mut dtype = None;
    let mut max_buffers = 7;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))
        };
        let parsed = match arg.as_str() {
            "--target" => value().map(|v| target = v),
            "--dtype" => value().map(|v| dtype = Some(v)),
            "--max-buffers" => value().and_then(|v| {
                v.parse()
                    .map(|n| max_buffers = n)
                    .map_err(|e| format!("--max-buffers {v}: {e}"))
            }),
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ if file.is_none() && !arg.starts_with("--") => {
                file = Some(arg.clone());
                Ok(())
            }
            _ => Err(format!("unexpected argument {arg:?}\n{USAGE}")),
        };
        if let Err(e) = parsed {
            return fail(&e);
        }
    }
    let Some(path) = file else {
        return fail(USAGE);
    };
    let rules = match target.as_str() {
        "cuda" => GpuRules::Cuda,
        "wgpu" => GpuRules::Wgpu {
            max_kernel_buffers: max_buffers,
        },
        other => return fail(&format!("unknown target {other:?}\n{USAGE}")),
    };
    let graph = match read(&path, dtype.as_deref()) {
        Ok(g) => g,
        Err(e) => return fail(&e),
    };
    // The file's config, with what the environment's `BURN_COMPILE_*` variables set.
    let config = match graph.config.clone().with_env() {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    print!("{}", burn_compile::explain_plan(&graph.ops, &config, rules));
    ExitCode::SUCCESS
}

/// The graph file at `path`, its float tensors in `dtype` when given.
fn read(path: &str, dtype: Option<&str>) -> Result<GraphFile, String> {
    let path = std::path::Path::new(path);
    let Some(dtype) = dtype else {
        return GraphFile::read(path);
    };
    let name = match dtype {
        "f32" => "F32",
        "f16" => "F16",
        "bf16" => "BF16",
        other => return Err(format!("unknown dtype {other:?}\n{USAGE}")),
    };
    let mut graph = GraphFile::read(path)?;
    let mut ops = serde_json::to_value(&graph.ops).map_err(|e| e.to_string())?;
    retype_floats(&mut ops, name);
    graph.ops = serde_json::from_value(ops).map_err(|e| e.to_string())?;
    Ok(graph)
}

/// Every float dtype of the ops set to `name`, through their serialized form: each tensor's (an
/// object with `id`, `shape`, `status` and `dtype`) and each float operation's own (`Float` and
/// `NumericFloat` hold theirs first: `[dtype, operation]`).
fn retype_floats(value: &mut serde_json::Value, name: &str) {
    let float = |v: &serde_json::Value| {
        v.as_str()
            .is_some_and(|d| matches!(d, "F64" | "F32" | "Flex32" | "F16" | "BF16"))
    };
    match value {
        serde_json::Value::Object(map) => {
            if map.get("dtype").is_some_and(float) && map.contains_key("shape") {
                map.insert("dtype".into(), name.into());
            }
            for key in ["Float", "NumericFloat"] {
                if let Some(serde_json::Value::Array(op)) = map.get_mut(key)
                    && op.first().is_some_and(float)
                {
                    op[0] = name.into();
                }
            }
            map.values_mut().for_each(|v| retype_floats(v, name));
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| retype_floats(v, name)),
        _ => {}
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("{message}");
    ExitCode::from(2)
}
