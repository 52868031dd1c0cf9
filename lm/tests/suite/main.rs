//! lm's integration tests, one binary: the model against transformers and
//! PEFT goldens (lm/tests/fixtures), checkpoints, GGUF import, KV caches.

mod common;
mod architectures;
mod checkpoint_io;
mod gguf_import;
mod kv_cache;
mod lora;
mod parity;
mod shipped_localizer;
