//! The text of a panic's payload (what `panic!` formatted, or the `&str` it was given).

/// The payload's text, if it has one.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
}

/// The payload's text, or "a panic".
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    panic_text(payload).unwrap_or_else(|| "a panic".into())
}
