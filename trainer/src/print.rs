//! `eprintln!`, `eprint!`, `println!` and `print!` that never panic.
//!
//! The std macros panic when their stream is gone ("failed printing to
//! stderr: Broken pipe", exit 101): `fusegrpo eval ... 2>&1 | head -1`
//! killed the job at its next diagnostic, before it wrote its output. These
//! shadow them in this crate (declared first in lib.rs) and in the binary
//! (`#[macro_use] extern crate trainer`): same formatting, the write error
//! dropped, so a job whose reader left goes on and exits as it would have.

/// std's `eprintln!`, with a failed write ignored (see the module).
#[macro_export]
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr(), $($arg)*);
    }};
}

/// std's `eprint!`, with a failed write ignored.
#[macro_export]
macro_rules! eprint {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::write!(::std::io::stderr(), $($arg)*);
    }};
}

/// std's `println!`, a failed write noted ([`stdout_failed`]) instead of a panic.
#[macro_export]
macro_rules! println {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        $crate::print::note_stdout(::std::writeln!(::std::io::stdout(), $($arg)*));
    }};
}

/// std's `print!`, a failed write noted ([`stdout_failed`]).
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        $crate::print::note_stdout(::std::write!(::std::io::stdout(), $($arg)*));
    }};
}

/// The first failed write to stdout other than a reader that left.
static STDOUT_ERROR: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Note the result of a write to stdout: a broken pipe is a reader that
/// left (`| head -1`), which stops nothing; any other error (a full disk,
/// `> /dev/full`) loses the command's output, which the binary reports at
/// exit ([`stdout_failed`]).
pub fn note_stdout(result: std::io::Result<()>) {
    if let Err(e) = result {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            let mut first = STDOUT_ERROR.lock().unwrap_or_else(|p| p.into_inner());
            first.get_or_insert_with(|| e.to_string());
        }
    }
}

/// Flush stdout, then the first failed write to it (not a broken pipe),
/// if any: a command whose output was lost must not exit 0.
pub fn stdout_failed() -> Option<String> {
    use std::io::Write as _;
    note_stdout(std::io::stdout().flush());
    STDOUT_ERROR.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// A writer to stderr that never fails: the log's writer. A log line that
/// cannot be written (stderr closed, a full disk) is dropped, so that no
/// job's result depends on its stderr.
pub struct QuietStderr;

impl std::io::Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}
