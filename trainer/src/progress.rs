//! What the library has to tell the user while it works (a stage begins,
//! a run resumed, a file was skipped): lines handed to a [`Sink`] the
//! binary installs at start-up ([`install`]), which alone writes to the
//! terminal and decides what a closed or full stream means. Without one
//! (a test, another program over this library), each line is a `tracing`
//! info event. The library writes nothing to stdout or stderr itself:
//! what a command outputs it returns, or writes to a writer its caller
//! passes.

use std::sync::OnceLock;

/// Where progress lines go.
pub trait Sink: Send + Sync {
    /// One whole line, without its newline. Never fails: a line that
    /// cannot be shown is the sink's to drop, never the job's to stop for.
    fn say(&self, line: &str);
}

static SINK: OnceLock<Box<dyn Sink>> = OnceLock::new();

/// Installs the process's sink (once, at start-up; a second is ignored).
pub fn install(sink: Box<dyn Sink>) {
    let _ = SINK.set(sink);
}

/// Tells the user `line` (through the installed sink, else as a `tracing`
/// info event). Ranks share the launcher's stderr: each line reaches the
/// sink whole, so that two ranks' lines never interleave mid-line.
pub fn say(line: &str) {
    match SINK.get() {
        Some(sink) => sink.say(line),
        None => tracing::info!(target: "progress", "{line}"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    struct Lines(Arc<Mutex<Vec<String>>>);

    impl super::Sink for Lines {
        fn say(&self, line: &str) {
            self.0.lock().unwrap().push(line.to_string());
        }
    }

    /// The installed sink gets each line whole, as it was said.
    #[test]
    fn lines_reach_the_installed_sink() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        super::install(Box::new(Lines(lines.clone())));
        super::say("== sft");
        super::say("resumed from a at step 2");
        let got = lines.lock().unwrap().clone();
        assert!(got.ends_with(&["== sft".to_string(), "resumed from a at step 2".to_string()]), "{got:?}");
    }
}
