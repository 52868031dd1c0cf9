//! Rollout engines outside this process: [`vllm`], vLLM over its HTTP API.

pub mod vllm;
