//! End-to-end tests of the `fusegrpo` binary live in `tests/tests/`.
