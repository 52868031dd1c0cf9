//! The model shape a benchmark builds (random weights, f32, CPU); defaults
//! are SmolLM2-135M's shape as a Qwen3 (tied embeddings).

use anyhow::{ensure, Result};
use lm::ModelConfig;

#[derive(clap::Args, Clone, Debug)]
pub struct Shape {
    #[arg(long, default_value_t = 576)]
    pub hidden: usize,
    #[arg(long, default_value_t = 1536)]
    pub intermediate: usize,
    #[arg(long, default_value_t = 30)]
    pub layers: usize,
    #[arg(long, default_value_t = 9)]
    pub heads: usize,
    #[arg(long, default_value_t = 3)]
    pub kv_heads: usize,
    #[arg(long, default_value_t = 64)]
    pub head_dim: usize,
    #[arg(long, default_value_t = 49_152)]
    pub vocab: usize,
    /// A separate lm_head instead of the tied embedding.
    #[arg(long)]
    pub untied: bool,
}

impl Shape {
    /// The config, with room for `max_tokens` positions.
    pub fn config(&self, max_tokens: usize) -> Result<ModelConfig> {
        ensure!(
            self.hidden > 0 && self.intermediate > 0 && self.layers > 0 && self.vocab > 0 && self.head_dim > 0,
            "--hidden, --intermediate, --layers, --vocab and --head-dim must be positive"
        );
        ensure!(
            self.kv_heads > 0 && self.heads.is_multiple_of(self.kv_heads),
            "--heads ({}) must be a positive multiple of --kv-heads ({})",
            self.heads,
            self.kv_heads
        );
        let mut cfg = ModelConfig::new_tiny(
            self.vocab,
            self.hidden,
            self.intermediate,
            self.layers,
            self.heads,
            self.kv_heads,
            self.head_dim,
            !self.untied,
        );
        cfg.max_position_embeddings = max_tokens.max(1);
        cfg.raw = cfg.to_raw();
        Ok(cfg)
    }

    /// The shape as JSON fields of a report.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "hidden": self.hidden, "intermediate": self.intermediate, "layers": self.layers,
            "heads": self.heads, "kv_heads": self.kv_heads, "head_dim": self.head_dim,
            "vocab": self.vocab, "tied": !self.untied,
        })
    }
}
