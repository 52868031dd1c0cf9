//! The recipe configs in configs/ pass what `fusegrpo pipeline` checks
//! before it runs (`recipe::pipeline::pipeline_inputs`).

use trainer::packing::MicroBatching;
use trainer::run_config::RunConfig;

/// The Qwen3-4B recipe passes what `fusegrpo pipeline` checks before it runs
/// (`pipeline_inputs`), and carries FuseSearch's filter and the packed,
/// recomputed micro-batches its comments promise.
#[test]
fn qwen3_4b_recipe_is_a_pipeline_config() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/qwen3-4b-fusesearch.toml");
    let cfg = RunConfig::from_file(&path).unwrap();
    let (p, tasks) = recipe::pipeline::pipeline_inputs(&cfg, &path).unwrap_or_else(|e| panic!("{e}"));
    let recipe::pipeline::TaskSource::File(tasks) = tasks else { panic!("the recipe reads a task file: {tasks:?}") };
    assert!(tasks.ends_with("configs/../data/tasks.jsonl"), "{}", tasks.display());
    assert!(matches!(p.teacher, trainer::run_config::PolicyChoice::Http(ref url) if url.starts_with("http://")), "{:?}", p.teacher);
    assert_ne!(cfg.sft, trainer::run_config::SftSection::default(), "[sft] is missing");
    let f = &cfg.sft.filter;
    assert_eq!((f.min_f1, f.min_e, f.min_calls_per_turn, f.max_calls_per_turn), (0.5, 0.2, 2.0, 8.0));
    assert!(f.max_truncation_ratio > 0.0 && f.max_tokens == cfg.episode.max_total_tokens);
    assert_eq!(cfg.train.micro_batching().unwrap(), MicroBatching::Tokens(65536));
    assert_eq!(cfg.train.recompute, lm::model::recompute::Recompute::PerLayer);
    assert!(matches!(cfg.sft.micro_batching().unwrap(), MicroBatching::Tokens(_)));
    assert!(cfg.pipeline.as_ref().unwrap().heldout_tasks >= 1);
}

/// Without `[pipeline]` the same check refuses, naming the file and the key.
#[test]
fn pipeline_check_names_a_missing_section() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/qwen3-4b-fusesearch.toml");
    let mut cfg = RunConfig::from_file(&path).unwrap();
    cfg.pipeline = None;
    let e = recipe::pipeline::pipeline_inputs(&cfg, &path).unwrap_err();
    assert!(matches!(e, trainer::Error::Config { ref key, .. } if key == "pipeline"), "{e}");
    assert!(e.to_string().contains("qwen3-4b-fusesearch.toml"), "{e}");
}

/// SmolLM2's recipe is a pipeline config whose chat template is the file
/// next to it, and that template gives the tool-response layout episodes
/// need (probed on the small Qwen3-style tokenizer: the template only uses
/// ChatML's turn markers).
#[test]
fn smollm2_recipe_has_a_tool_chat_template() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/smollm2-cpu.toml");
    let cfg = RunConfig::from_file(&path).unwrap();
    recipe::pipeline::pipeline_inputs(&cfg, &path).unwrap_or_else(|e| panic!("{e}"));
    let template = cfg.model.chat_template.clone().expect("[model] chat_template");
    assert!(template.ends_with("configs/chatml-tools.jinja") && template.is_file(), "{}", template.display());
    let tok_dir = tempfile::tempdir().unwrap();
    rollout::chat::write_small_tokenizer(tok_dir.path(), 1500).unwrap();
    let mut cfg = cfg;
    cfg.model.tokenizer = Some(tok_dir.path().to_path_buf());
    let tok = cfg.chat_tokenizer(tok_dir.path()).unwrap();
    let layout = tok.response_layout(Some(false)).unwrap();
    assert_eq!(layout.render(&["x"]), "\n<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
    let hash = trainer::checkpoint::config_hash(&serde_json::to_value(&cfg).unwrap());
    cfg.model.chat_template = None;
    assert_ne!(hash, trainer::checkpoint::config_hash(&serde_json::to_value(&cfg).unwrap()), "the template is part of the run's identity");
}
