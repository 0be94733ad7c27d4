//! Readable listings of captured operations, for `explain` and the `graphs` log topic.
//!
//! Only diagnostics build these, so they favour clarity over speed.

use burn_ir::{OperationIr, TensorIr, TensorStatus};
use rustc_hash::FxHashMap;
use std::fmt::Write;

/// Short name of an operation, such as `NumericFloat.Add`, `Float.Exp`, `Drop` or
/// `Custom.burn_compile.softmax(dim=3)`.
///
/// Taken from the `Debug` form: the category variant and the operation variant are the first two
/// identifiers that open a tuple (`NumericFloat(F32, Add(BinaryOpIr {…`).
pub fn op_name(op: &OperationIr) -> String {
    if let OperationIr::Custom(custom) = op {
        return format!("Custom.{}", custom.id);
    }
    let text = format!("{op:?}");
    let bytes = text.as_bytes();
    let mut names = Vec::with_capacity(2);
    let mut start = None;
    for (i, &b) in bytes.iter().enumerate() {
        if b.is_ascii_alphanumeric() || b == b'_' {
            start.get_or_insert(i);
            continue;
        }
        if let Some(s) = start.take()
            && b == b'('
        {
            names.push(&text[s..i]);
            if names.len() == 2 {
                break;
            }
        }
        if b == b'{' {
            break;
        }
    }
    names.join(".")
}

/// Numbered listing of operations: ids renumbered by first appearance (as in the cache key),
/// `!` marks an input consumed in place (its last use).
pub fn op_listing(ops: &[OperationIr]) -> String {
    let mut ids: FxHashMap<u64, usize> = FxHashMap::default();
    let mut name = |t: &TensorIr| {
        let next = ids.len();
        let id = *ids.entry(t.id.value()).or_insert(next);
        let consumed = if t.status == TensorStatus::ReadWrite {
            "!"
        } else {
            ""
        };
        format!("%{id}{consumed}")
    };
    let mut out = String::new();
    for (i, op) in ops.iter().enumerate() {
        let inputs: Vec<String> = op.inputs().map(&mut name).collect();
        let outputs: Vec<String> = op
            .outputs()
            .map(|t| format!("{}: {:?}{:?}", name(t), t.dtype, t.shape.as_slice()))
            .collect();
        let _ = write!(out, "{i:4}  ");
        if !outputs.is_empty() {
            let _ = write!(out, "{} = ", outputs.join(", "));
        }
        let _ = writeln!(out, "{}({})", op_name(op), inputs.join(", "));
    }
    out
}
