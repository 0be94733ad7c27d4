//! `burn-compile-cache export FILE | import FILE | size | clear`: the disk cache of this
//! configuration (`BURN_COMPILE_CACHE_DIR`, else the user's cache directory) as one bundle
//! file, for another machine or a container image; its size; emptied.

use burn_compile::{CompileConfig, cache_usage, export_cache, import_cache};
use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "usage: burn-compile-cache export FILE | import FILE | size | clear";

fn main() -> ExitCode {
    let config = match CompileConfig::default().with_env() {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args[..] {
        ["export", file] => match export_cache(&config, Path::new(file)) {
            Ok(n) => {
                println!(
                    "exported {n} entries of {} to {file}",
                    config.kernel_cache_dir().display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(&format!("export failed: {e}")),
        },
        ["import", file] => match import_cache(&config, Path::new(file)) {
            Ok(report) => {
                println!(
                    "imported {} entries into {}",
                    report.imported,
                    config.kernel_cache_dir().display()
                );
                for (name, why) in &report.skipped {
                    println!("  skipped {name}: {why}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(&format!("import failed: {e}")),
        },
        ["size"] => {
            let (bytes, cap, dir) = cache_usage(&config);
            println!("{}: {bytes} bytes (cap {cap})", dir.display());
            ExitCode::SUCCESS
        }
        ["clear"] => {
            let dir = config.kernel_cache_dir();
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {
                    println!("removed {}", dir.display());
                    ExitCode::SUCCESS
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => ExitCode::SUCCESS,
                Err(e) => fail(&format!("{}: {e}", dir.display())),
            }
        }
        _ => fail(USAGE),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("burn-compile-cache: {message}");
    ExitCode::from(2)
}
