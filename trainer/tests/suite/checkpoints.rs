//! Training checkpoints: atomic save with DONE last, newest-complete
//! resume, retention, interrupted saves, exact RNG continuation, and
//! refusal of mismatched architectures or configs.

use crate::common;

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use trainer::checkpoint::*;
use lm::weights::{load_weights, TensorMap};

fn state(step: u64, rng: &ChaCha8Rng, cfg: serde_json::Value, arch: &str) -> TrainState {
    TrainState {
        format_version: FORMAT_VERSION,
        step,
        rngs: BTreeMap::from([("sampling".to_string(), RngState::capture(rng))]),
        data: DataCursor { epoch: 1, index: step * 4 },
        config_hash: config_hash(&cfg),
        config: cfg,
        arch_hash: arch.into(),
    }
}

fn optimizer() -> TensorMap {
    TensorMap::from([("state.w.exp_avg".to_string(), Tensor::new(&[1f32, 2.0, 3.0], &Device::Cpu).unwrap())])
}

#[test]
fn save_resume_and_retention() {
    let (cfg, w) = common::load("untied");
    let arch = cfg.arch_hash();
    let run = tempfile::tempdir().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let run_cfg = serde_json::json!({"lr": 1e-6, "group": 8});
    for step in [100, 200, 300] {
        let _: u64 = rng.random();
        save(run.path(), &cfg, &w, &optimizer(), &state(step, &rng, run_cfg.clone(), &arch), 2).unwrap();
    }
    // Keep the last 2.
    let steps: Vec<u64> = complete_checkpoints(run.path()).unwrap().into_iter().map(|(s, _)| s).collect();
    assert_eq!(steps, vec![200, 300]);
    // An interrupted save (no DONE, or a temporary folder) is never picked.
    let partial = run.path().join(step_dir_name(400));
    std::fs::create_dir_all(&partial).unwrap();
    std::fs::write(partial.join(STATE_FILE), "{").unwrap();
    std::fs::create_dir_all(run.path().join(".tmp-step_00000500-1")).unwrap();
    let newest = latest(run.path()).unwrap().unwrap();
    assert!(newest.ends_with("step_00000300"));
    assert!(load_state(&partial).unwrap_err().to_string().contains("no DONE"));
    // Restore: weights (transformers layout), optimizer, step, cursor, RNG.
    let st = load_state(&newest).unwrap();
    assert_eq!((st.step, st.data.index), (300, 1200));
    let back = load_weights(&newest, &cfg, candle_core::DType::F32, &Device::Cpu).unwrap();
    for (k, t) in &w {
        let d = (t - &back[k]).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(d, 0.0, "{k}");
    }
    assert_eq!(load_optimizer(&newest, &Device::Cpu).unwrap()["state.w.exp_avg"].to_vec1::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
    let mut resumed = st.rngs["sampling"].restore().unwrap();
    let a: Vec<u64> = (0..5).map(|_| rng.random()).collect();
    let b: Vec<u64> = (0..5).map(|_| resumed.random()).collect();
    assert_eq!(a, b, "the RNG continues exactly");
    // The next save cleans the interrupted temporary folder.
    save(run.path(), &cfg, &w, &optimizer(), &state(600, &rng, run_cfg.clone(), &arch), 2).unwrap();
    assert!(!run.path().join(".tmp-step_00000500-1").exists());
}

#[test]
fn mismatches_are_refused_unless_allowed() {
    let (cfg, w) = common::load("untied");
    let (other, _) = common::load("tied_sharded");
    let run = tempfile::tempdir().unwrap();
    let rng = ChaCha8Rng::seed_from_u64(0);
    let run_cfg = serde_json::json!({"lr": 1e-6});
    let dir = save(run.path(), &cfg, &w, &optimizer(), &state(1, &rng, run_cfg.clone(), &cfg.arch_hash()), 0).unwrap();
    let st = load_state(&dir).unwrap();
    check_compatible(&dir, &st, &cfg.arch_hash(), &run_cfg, false).unwrap();
    let e = check_compatible(&dir, &st, &other.arch_hash(), &run_cfg, true).unwrap_err().to_string();
    assert!(e.contains("arch_hash") && e.contains("state.json"), "{e}");
    let changed = serde_json::json!({"lr": 2e-6});
    let e = check_compatible(&dir, &st, &cfg.arch_hash(), &changed, false).unwrap_err().to_string();
    assert!(e.contains("--allow-config-change"), "{e}");
    check_compatible(&dir, &st, &cfg.arch_hash(), &changed, true).unwrap();
    // `[pipeline]` does not enter a training run: a change there alone resumes.
    let recipe = serde_json::json!({"lr": 1e-6, "pipeline": {"difficulty": {"tasks": 128}}});
    check_compatible(&dir, &st, &cfg.arch_hash(), &recipe, false).unwrap();
    let both = serde_json::json!({"lr": 2e-6, "pipeline": {"difficulty": {"tasks": 128}}});
    let e = check_compatible(&dir, &st, &cfg.arch_hash(), &both, false).unwrap_err().to_string();
    assert!(e.contains("lr (1e-6 -> 2e-6)") || e.contains("lr (0.000001 -> 0.000002)"), "{e}");
    // Key order does not change the hash.
    assert_eq!(config_hash(&serde_json::json!({"a": 1, "b": 2})), config_hash(&serde_json::json!({"b": 2, "a": 1})));
}

#[test]
fn defect_1_pruning_keeps_the_checkpoint_just_written_and_leaves_later_ones() {
    // Issue 37: a run writing step 1 into a folder with an older run's step 2
    // pruned the step it had just written (keep_last counted step 2).
    let (cfg, w) = common::load("untied");
    let arch = cfg.arch_hash();
    let run = tempfile::tempdir().unwrap();
    let rng = ChaCha8Rng::seed_from_u64(0);
    let steps = || complete_checkpoints(run.path()).unwrap().into_iter().map(|(s, _)| s).collect::<Vec<_>>();
    save(run.path(), &cfg, &w, &optimizer(), &state(2, &rng, serde_json::json!({}), &arch), 1).unwrap();
    save(run.path(), &cfg, &w, &optimizer(), &state(1, &rng, serde_json::json!({}), &arch), 1).unwrap();
    assert_eq!(steps(), vec![1, 2], "step 1 just written stays; step 2 is not this run's past");
    // Later steps of the same run prune only what came before them.
    save(run.path(), &cfg, &w, &optimizer(), &state(3, &rng, serde_json::json!({}), &arch), 2).unwrap();
    assert_eq!(steps(), vec![2, 3]);
    assert_eq!(checkpoints_after(run.path(), 2).unwrap().into_iter().map(|(s, _)| s).collect::<Vec<_>>(), vec![3]);
}

#[test]
fn defect_8_a_changed_config_names_its_keys() {
    let old = serde_json::json!({"optim": {"lr": 1e-4, "beta1": 0.9}, "rollout": {"group": 2}, "name": "a"});
    let new = serde_json::json!({"optim": {"lr": 2e-4, "beta1": 0.9}, "rollout": {"group": 2, "max_kv_tokens": 64}, "name": "a"});
    assert_eq!(changed_keys(&old, &new), vec!["optim.lr (0.0001 -> 0.0002)".to_string(), "rollout.max_kv_tokens (missing -> 64)".to_string()]);
    assert!(changed_keys(&old, &old).is_empty());
}
