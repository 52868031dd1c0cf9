//! The kernels' integration tests, one binary (fewer links, less disk in CI).

mod attention;
mod common;
mod folded;
mod linear;
mod logprobs;
mod norm_rope;
mod sampling;
