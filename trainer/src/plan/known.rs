//! Shapes of published checkpoints, so a run can be planned before its
//! weights are downloaded.

use lm::config::ModelConfig;

/// The architecture of a known hub id (from its config.json on the hub).
pub fn published(id: &str) -> Option<ModelConfig> {
    match id {
        // Qwen/Qwen3-4B config.json: hidden 2560, intermediate 9728, 36
        // layers, 32 query / 8 key-value heads of 128, vocabulary 151,936,
        // tied embeddings, rope_theta 1e6, 40,960 positions.
        "Qwen/Qwen3-4B" => Some(ModelConfig::new_tiny(151_936, 2560, 9728, 36, 32, 8, 128, true)),
        _ => None,
    }
}
