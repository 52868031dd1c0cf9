//! Policies without a model of ours: a scripted teacher that searches the
//! way a careful engineer would (for SFT data and CI), and [`http::HttpTeacher`],
//! a client for OpenAI-compatible teachers ([`openai`]: the format conversions).

pub mod guided;
pub mod http;
pub mod openai;
pub mod scripted;
