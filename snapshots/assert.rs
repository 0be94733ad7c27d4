// The one place that says where snapshots live: `snapshots/<stage>/` at the workspace root,
// one folder per pipeline stage. Every crate's snapshot tests include this file
// (`include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../snapshots/assert.rs"))`; every crate
// sits in `crates/<name>/`).

/// `insta::assert_snapshot!(name, value)` into `snapshots/<stage>/`, with an optional
/// description (what the snapshot was made from, shown in `cargo insta review`).
#[allow(unused_macros)]
macro_rules! assert_stage_snapshot {
    ($stage:literal, $name:expr, $value:expr $(, $description:expr)? $(,)?) => {{
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path(concat!(env!("CARGO_MANIFEST_DIR"), "/../../snapshots/", $stage));
        $(settings.set_description($description);)?
        settings.bind(|| insta::assert_snapshot!($name, $value));
    }};
}
