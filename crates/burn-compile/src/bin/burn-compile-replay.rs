//! `burn-compile-replay FILE [--backend flex|ndarray|wgpu|cuda] [--json]`: runs a graph file
//! (written by the accuracy check, `BURN_COMPILE_DUMP_GRAPHS` or `GraphFile::write`) compiled
//! and eagerly on a backend, compares every output, and on a divergence names the first op
//! that diverges.
//!
//! Exit status: 0 when every output matches, 1 on a divergence, 2 when the file cannot be
//! replayed (unreadable, another format, a backend this build lacks).

use burn_compile::incident::{Comparison, GraphFile, replay};
use std::process::ExitCode;

const USAGE: &str = "usage: burn-compile-replay FILE [--backend flex|ndarray|wgpu|cuda] [--json]";

fn main() -> ExitCode {
    let mut file = None;
    let mut backend = "flex".to_string();
    let mut json = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--backend" => match args.next() {
                Some(b) => backend = b,
                None => return fail(USAGE),
            },
            "--json" => json = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ if file.is_none() && !arg.starts_with("--") => file = Some(arg),
            _ => return fail(&format!("unexpected argument {arg:?}\n{USAGE}")),
        }
    }
    let Some(path) = file else {
        return fail(USAGE);
    };
    let graph = match GraphFile::read(std::path::Path::new(&path)) {
        Ok(g) => g,
        Err(e) => return fail(&e),
    };
    let recorded = graph.inputs.iter().filter(|i| i.values.is_some()).count();
    if !json {
        println!(
            "graph {} ({} ops, {} inputs, {recorded} with recorded values; written by {})",
            graph.key,
            graph.ops.len(),
            graph.inputs.len(),
            graph.versions
        );
        println!("reason: {}", graph.reason);
        println!("backend: {backend}");
    }
    let result = match backend.as_str() {
        "flex" => replay::<burn_flex::Flex>(&graph, &Default::default()),
        "ndarray" => replay::<burn_ndarray::NdArray>(&graph, &Default::default()),
        // A build with `wgpu-fusion` (the inner-Fusion test's) has wgpu only as Burn's Fusion,
        // which replays no incident file: the command has no wgpu there.
        #[cfg(all(feature = "wgpu", not(feature = "wgpu-fusion")))]
        "wgpu" => replay::<burn_compile::Wgpu>(&graph, &Default::default()),
        #[cfg(feature = "cuda")]
        "cuda" => replay::<burn_compile::Cuda>(&graph, &Default::default()),
        #[cfg(not(all(feature = "wgpu", not(feature = "wgpu-fusion"))))]
        "wgpu" => return missing("wgpu"),
        #[cfg(not(feature = "cuda"))]
        "cuda" => return missing("cuda"),
        other => return fail(&format!("unknown backend {other:?}\n{USAGE}")),
    };
    match result {
        Ok(comparison) => report(&comparison, json),
        Err(e) => fail(&format!("the replay failed: {e}")),
    }
}

fn report(c: &Comparison, json: bool) -> ExitCode {
    if json {
        println!("{}", serde_json::to_string_pretty(c).expect("serializable"));
    } else if c.matches() {
        println!(
            "compiled matches eager: {} output(s) within tolerance",
            c.outputs
        );
    } else {
        println!(
            "compiled DIVERGES from eager in {} of {} output(s):",
            c.mismatches.len(),
            c.outputs
        );
        for m in &c.mismatches {
            println!("  {m}");
        }
        match &c.first_divergent_op {
            Some((i, name)) => println!("first divergent op: #{i} {name}"),
            None => println!("no single op found"),
        }
    }
    if c.matches() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

#[allow(dead_code)] // with every backend feature on
fn missing(backend: &str) -> ExitCode {
    fail(&format!(
        "this build has no {backend} backend: build with `--features {backend}`"
    ))
}

fn fail(message: &str) -> ExitCode {
    eprintln!("burn-compile-replay: {message}");
    ExitCode::from(2)
}
