//! Resolving a hub id from the Hugging Face cache layout with HF_HUB_OFFLINE
//! (one test in its own process: it sets environment variables).

#[path = "suite/common/mod.rs"]
mod common;

use candle_core::{DType, Device};
use lm::hub::resolve_model_dir;

#[test]
fn hub_ids_resolve_from_the_cache_offline() {
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join("models--tiny-org--tiny-qwen3");
    let rev = "0123456789abcdef0123456789abcdef01234567";
    let snap = repo.join("snapshots").join(rev);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), rev).unwrap();
    for e in std::fs::read_dir(common::fixture_dir("tied_sharded")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), snap.join(e.file_name())).unwrap();
    }
    std::env::set_var("HF_HUB_CACHE", cache.path());
    std::env::set_var("HF_HUB_OFFLINE", "1");
    let dir = resolve_model_dir("tiny-org/tiny-qwen3").unwrap();
    assert_eq!(dir, snap);
    let cfg = lm::ModelConfig::from_file(&dir.join("config.json")).unwrap();
    let w = lm::weights::load_weights(&dir, &cfg, DType::F32, &Device::Cpu).unwrap();
    assert_eq!(w.len(), lm::params::parameter_shapes(&cfg).len());

    let e = resolve_model_dir("tiny-org/not-cached").unwrap_err().to_string();
    assert!(e.contains("tiny-org/not-cached") && e.contains("HF_HUB_OFFLINE"), "{e}");
    let e = resolve_model_dir("./no/such/folder").unwrap_err().to_string();
    assert!(e.contains("./no/such/folder"), "{e}");
}
