//! Building bounded tool outputs.

/// Accumulates lines up to a byte cap.
pub(super) struct Output {
    text: String,
    max_bytes: usize,
    /// Whether a line was refused for the byte cap.
    pub(super) cut: bool,
}

impl Output {
    pub(super) fn new(max_bytes: usize) -> Self {
        Self { text: String::new(), max_bytes, cut: false }
    }

    /// Appends a line unless it would pass the byte cap; returns whether it did.
    pub(super) fn push(&mut self, line: &str) -> bool {
        if self.cut || self.text.len() + line.len() + 1 > self.max_bytes {
            self.cut = true;
            return false;
        }
        self.text.push_str(line);
        self.text.push('\n');
        true
    }

    /// The text with an optional note after it.
    pub(super) fn finish(mut self, note: Option<String>) -> String {
        if let Some(note) = note {
            self.text.push_str(&note);
            self.text.push('\n');
        }
        self.text
    }
}

/// Cuts a line to `max_chars` characters, marking the cut with `…`.
pub(super) fn clip(line: &str, max_chars: usize) -> String {
    match line.char_indices().nth(max_chars) {
        None => line.to_string(),
        Some((i, _)) => format!("{}… [line cut at {max_chars} chars]", &line[..i]),
    }
}

/// Checks a pattern's length.
pub(super) fn check_pattern(pattern: &str, max: usize) -> Result<(), super::ToolError> {
    let len = pattern.chars().count();
    if len > max {
        return Err(super::ToolError::PatternTooLong { len, max });
    }
    Ok(())
}
