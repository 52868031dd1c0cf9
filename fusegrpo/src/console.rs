//! The terminal, the binary's alone: the command's output on stdout
//! ([`Stdout`], `out!`/`outln!`), lines for the user on stderr (`say!`,
//! the libraries' `trainer::progress` lines) and the log, both through
//! [`Stderr`].
//!
//! A closed or full stream never stops a job, as with ripgrep's `main`
//! (a broken pipe is a reader that left, not an error), and is dealt with
//! in one place, `main`, at exit:
//! - stdout: a write that fails is noted and the job goes on (`eval ... |
//!   head -1` still writes its `--out` file). A reader that left is no
//!   error; any other failure (a full disk, `> /dev/full`) lost output,
//!   which `main` reports at exit with a failing status ([`stdout_failed`]).
//! - stderr: a line that cannot be written is dropped, so that no job's
//!   result depends on its stderr.
//!
//! std's `println!`/`eprintln!` panic on such a stream ("failed printing to
//! stdout: Broken pipe", exit 101): the binary uses these instead.

use std::io::{ErrorKind, Write};
use std::sync::Mutex;

/// Writes to stdout, the command's output, as `println!` does (`writeln!`
/// on it, or `outln!`): the arguments formatted as they are.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        // Never an error: a failure is noted for `main` (console::Stdout).
        let _ = ::std::writeln!($crate::console::Stdout, $($arg)*);
    }};
}

/// `print!` to stdout, through [`Stdout`] (see `outln!`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::write!($crate::console::Stdout, $($arg)*);
    }};
}

/// A line for the user on stderr (`eprintln!`'s arguments), written whole
/// and dropped when stderr is gone.
macro_rules! say {
    ($($arg:tt)*) => {
        ::trainer::progress::say(&::std::format!($($arg)*))
    };
}

/// stdout as a writer that never fails: a failed write is noted (the first
/// failure other than a reader that left is reported by `main` at exit) and
/// the bytes are dropped, so that the command goes on as it would have.
pub struct Stdout;

/// The first failed write to stdout other than a broken pipe.
static STDOUT_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// Notes a failed write to stdout: a broken pipe is a reader that left
/// (`| head -1`), which stops nothing; any other error lost output.
fn note(result: std::io::Result<()>) {
    if let Err(e) = result {
        if e.kind() != ErrorKind::BrokenPipe {
            let mut first = STDOUT_ERROR.lock().unwrap_or_else(|p| p.into_inner());
            first.get_or_insert_with(|| e.to_string());
        }
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        note(std::io::stdout().write_all(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        note(std::io::stdout().flush());
        Ok(())
    }
}

/// Flushes stdout, then the first failed write to it that was not a broken
/// pipe, if any: a command whose output was lost must not exit 0.
pub fn stdout_failed() -> Option<String> {
    note(std::io::stdout().flush());
    STDOUT_ERROR.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// stderr as a writer that never fails, for lines for the user and the
/// log alike: what cannot be written (stderr closed, a full disk) is
/// dropped, so that no job's result depends on its stderr.
pub struct Stderr;

/// The binary's `trainer::progress` sink: each line in a single write
/// (ranks share the launcher's stderr, and `eprintln!` writes each
/// formatted piece separately, so two ranks' lines could interleave
/// mid-line).
impl trainer::progress::Sink for Stderr {
    fn say(&self, line: &str) {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        let _ = std::io::stderr().lock().write_all(&bytes);
    }
}

/// The log's writer.
impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}
