//! Log topics, like TORCH_LOGS: `BURN_COMPILE_LOGS=graph_breaks,recompiles` (or `all`).

/// The topics and the `tracing` targets they map to.
pub const TOPICS: [(&str, &str); 8] = [
    ("graph_breaks", "burn_compile::graph_breaks"),
    ("recompiles", "burn_compile::recompiles"),
    ("graphs", "burn_compile::graphs"),
    ("output_code", "burn_compile::output_code"),
    // The disk cache: entries ignored (warnings), evictions, writes that failed.
    ("cache", "burn_compile::cache"),
    // The accuracy check's findings (errors) and what it could not check.
    ("accuracy", "burn_compile::accuracy"),
    // Reduce-overhead mode: each CUDA graph recorded, each re-record and fallback, with why.
    ("recordings", "burn_compile::recordings"),
    // Compiled steps (`jit`): each step recorded, and why one is not replayed.
    ("jit", "burn_compile::jit"),
];

/// The `tracing` filter directives for a `BURN_COMPILE_LOGS` value. Unknown topics are an error
/// naming the known ones.
pub fn filter_for(topics: &str) -> Result<String, String> {
    let mut directives = vec!["warn".to_string()];
    for topic in topics.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if topic == "all" {
            directives.extend(TOPICS.iter().map(|(_, target)| format!("{target}=trace")));
            continue;
        }
        match TOPICS.iter().find(|(name, _)| *name == topic) {
            Some((_, target)) => directives.push(format!("{target}=trace")),
            None => {
                let known: Vec<&str> = TOPICS.iter().map(|(n, _)| *n).collect();
                return Err(format!(
                    "unknown BURN_COMPILE_LOGS topic {topic:?}; known: {}, all",
                    known.join(", ")
                ));
            }
        }
    }
    Ok(directives.join(","))
}

/// Installs a `tracing` subscriber printing the topics named in `BURN_COMPILE_LOGS` to stderr.
/// Does nothing if a global subscriber is already set (the application's own wins).
pub fn init_logs() {
    let topics = std::env::var("BURN_COMPILE_LOGS").unwrap_or_default();
    let filter = match filter_for(&topics) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("burn-compile: {e}");
            "warn".into()
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
}

#[cfg(test)]
mod tests {
    #[test]
    fn topics_map_to_targets() {
        assert_eq!(
            super::filter_for("graph_breaks, recompiles").unwrap(),
            "warn,burn_compile::graph_breaks=trace,burn_compile::recompiles=trace"
        );
        assert!(
            super::filter_for("graph_brakes")
                .unwrap_err()
                .contains("graph_breaks")
        );
    }
}
