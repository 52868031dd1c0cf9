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

/// std's `println!`, with a failed write ignored (stdout closed by its reader).
#[macro_export]
macro_rules! println {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stdout(), $($arg)*);
    }};
}

/// std's `print!`, with a failed write ignored.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::write!(::std::io::stdout(), $($arg)*);
    }};
}
