//! Every preset in configs/ parses and validates.

use trainer::packing::MicroBatching;
use trainer::run_config::RunConfig;

#[test]
fn presets_parse_and_validate() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            let cfg = RunConfig::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(!cfg.name.is_empty());
            n += 1;
        }
    }
    assert!(n >= 1, "no presets in {}", dir.display());
}

#[test]
fn micro_batch_tokens_selects_packing_and_zero_names_the_key() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let text = std::fs::read_to_string(dir.join("smoke-cpu.toml")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let write = |train: &str, sft: &str| {
        let path = tmp.path().join("run.toml");
        let t = text.replacen("[train]\n", &format!("[train]\n{train}"), 1).replacen("[sft]\n", &format!("[sft]\n{sft}"), 1);
        std::fs::write(&path, t).unwrap();
        path
    };
    let cfg = RunConfig::from_file(&write("micro_batch_tokens = 4096\n", "micro_batch_tokens = 2048\n")).unwrap();
    assert_eq!(cfg.train.micro_batching().unwrap(), MicroBatching::Tokens(4096));
    assert_eq!(cfg.sft.micro_batching().unwrap(), MicroBatching::Tokens(2048));
    let plain = RunConfig::from_file(&dir.join("smoke-cpu.toml")).unwrap();
    assert_eq!(plain.train.micro_batching().unwrap(), MicroBatching::Rows(plain.train.micro_batch_rows));
    for (train, sft, key) in [("micro_batch_tokens = 0\n", "", "train.micro_batch_tokens"), ("", "micro_batch_tokens = 0\n", "sft.micro_batch_tokens")] {
        let e = RunConfig::from_file(&write(train, sft)).unwrap_err();
        assert!(matches!(e, trainer::Error::Config { key: ref k, .. } if k == key), "{key}: {e}");
        assert!(e.to_string().contains("run.toml"), "{e}");
    }
}

/// Each localizer is measured in the setting it was trained in: the
/// shipped one (`configs/smollm2-real.toml`, trained by the search recipe,
/// issue 64) and the previous one (`configs/smollm2-real-v1.toml`, by the
/// real recipe, issue 33) agree with their recipes on the model, template,
/// tools and episode; both greedy, one episode per task.
#[test]
fn each_localizer_config_matches_its_recipe() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    for (config, recipe, adapter) in [
        ("smollm2-real.toml", "smollm2-search-recipe.toml", "models/smollm2-135m-localizer"),
        ("smollm2-real-v1.toml", "smollm2-real-recipe.toml", "models/smollm2-135m-localizer-v1"),
    ] {
        let eval = RunConfig::from_file(&dir.join(config)).unwrap();
        let recipe = RunConfig::from_file(&dir.join(recipe)).unwrap();
        assert_eq!(eval.model.path, recipe.model.path, "{config}");
        assert!(!eval.model.path.starts_with('~'), "`~/` expands: {}", eval.model.path);
        assert_eq!(eval.model.chat_template, recipe.model.chat_template, "{config}");
        assert_eq!((eval.model.dtype, recipe.model.adapter.is_none()), (recipe.model.dtype, true), "{config}");
        assert!(eval.model.adapter.as_ref().is_some_and(|a| a.ends_with(adapter)), "{config}: {:?}", eval.model.adapter);
        assert_eq!(eval.env.tools, recipe.env.tools, "{config}");
        assert_eq!(eval.episode, recipe.episode, "{config}");
        assert_eq!(eval.env.repos_dir, recipe.env.repos_dir, "{config}");
        assert_eq!(eval.sampling.temperature, 0.0, "{config}: the localizer is measured greedy");
        let p = recipe.pipeline.as_ref().expect("[pipeline]");
        assert_eq!(p.eval_temperature, 0.0);
        assert_eq!(p.eval_group, 1);
        assert!(recipe.lora.is_some(), "the recipe trains the shipped adapter");
    }
    // The two differ in the tool alone (and their adapters and names).
    let new = RunConfig::from_file(&dir.join("smollm2-real.toml")).unwrap();
    let mut old = RunConfig::from_file(&dir.join("smollm2-real-v1.toml")).unwrap();
    assert!(new.env.tools.search && !old.env.tools.search);
    old.env.tools.search = true;
    old.model.adapter = new.model.adapter.clone();
    old.name = new.name.clone();
    assert_eq!(serde_json::to_value(&old).unwrap(), serde_json::to_value(&new).unwrap());
}

/// Issue 64's recipe differs from the real recipe only in the `search`
/// tool, the guided teacher and its name: the comparison of the two runs
/// is of those alone.
#[test]
fn the_search_recipe_is_the_real_recipe_with_the_search_tool_and_the_guided_teacher() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let real = RunConfig::from_file(&dir.join("smollm2-real-recipe.toml")).unwrap();
    let search = RunConfig::from_file(&dir.join("smollm2-search-recipe.toml")).unwrap();
    assert!(search.env.tools.search && !real.env.tools.search);
    let p = search.pipeline.as_ref().expect("[pipeline]");
    assert_eq!(p.teacher, trainer::run_config::PolicyChoice::Guided);
    let mut same = search.clone();
    same.name = real.name.clone();
    same.env.tools.search = false;
    if let Some(p) = same.pipeline.as_mut() {
        p.teacher = trainer::run_config::PolicyChoice::Scripted;
    }
    assert_eq!(serde_json::to_value(&same).unwrap(), serde_json::to_value(&real).unwrap());
}

/// A leading `~/` in a config's paths is the user's home (`$HOME`), for
/// `[model] path` too; other relative paths stay relative to the file.
#[test]
fn tilde_paths_expand_to_home() {
    let home = std::path::PathBuf::from(std::env::var_os("HOME").expect("HOME is set"));
    assert!(home.is_absolute(), "{}", home.display());
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("home.toml");
    std::fs::write(
        &path,
        "name = \"home\"\n[model]\npath = \"~/models/tiny\"\ntokenizer = \"~/tok\"\n[env]\nrepos_dir = \"~/repos dir\"\n\
         [pipeline]\ntasks = \"tasks.jsonl\"\nheldout = \"~/held.jsonl\"\n",
    )
    .unwrap();
    let cfg = RunConfig::from_file(&path).unwrap();
    assert_eq!(std::path::Path::new(&cfg.model.path), home.join("models/tiny"));
    assert_eq!(cfg.model.tokenizer.as_deref(), Some(home.join("tok").as_path()));
    assert_eq!(cfg.env.repos_dir, home.join("repos dir"));
    let p = cfg.pipeline.as_ref().unwrap();
    assert_eq!(p.heldout.as_deref(), Some(home.join("held.jsonl").as_path()));
    assert_eq!(p.tasks.as_deref(), Some(tmp.path().join("tasks.jsonl").as_path()), "a relative path is the config folder's");

    std::fs::write(&path, "name = \"home\"\n[model]\npath = \"~other/m\"\n[env]\nrepos_dir = \"~other/r\"\n").unwrap();
    let cfg = RunConfig::from_file(&path).unwrap();
    assert_eq!(cfg.model.path, "~other/m", "only `~/` is the home");
    assert_eq!(cfg.env.repos_dir, tmp.path().join("~other/r"));
}

/// `extends`: the GPU presets start from the 4B recipe, their own keys
/// winning table by table; a cycle, another folder and a bad key are errors
/// naming the file and `extends`.
#[test]
fn extends_merges_tables_key_by_key_and_refuses_cycles_and_other_folders() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let base = RunConfig::from_file(&dir.join("qwen3-4b-fusesearch.toml")).unwrap();
    let zero = RunConfig::from_file(&dir.join("qwen3-4b-8x80gb.toml")).unwrap();
    assert_eq!((zero.optim.zero_stage, zero.train.tasks_per_step), (1, 8));
    assert_eq!(zero.optim.lr, base.optim.lr, "keys the preset leaves out come from the base");
    assert_eq!(zero.train.micro_batch_tokens, Some(49_152), "the preset's own key wins (sized by the CUDA plan)");
    assert_eq!(zero.env.repos_dir, base.env.repos_dir, "relative paths mean the same");
    // Two levels: 24gb-lora extends 80gb-lora extends the recipe.
    let small = RunConfig::from_file(&dir.join("qwen3-4b-24gb-lora.toml")).unwrap();
    let lora = small.lora().expect("[lora] from the 80 GB preset");
    assert_eq!((lora.r, small.episode.max_total_tokens, small.grpo.clip_high), (32, 8192, base.grpo.clip_high));
    assert!(!lora.merge_for_rollouts);

    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(tmp.path().join(name), text).unwrap();
    write("a.toml", "extends = \"b.toml\"\nname = \"a\"\n");
    write("b.toml", "extends = \"a.toml\"\n");
    let e = RunConfig::from_file(&tmp.path().join("a.toml")).unwrap_err().to_string();
    assert!(e.contains("cycle") && e.contains("extends"), "{e}");
    std::fs::create_dir(tmp.path().join("sub")).unwrap();
    write("sub/c.toml", "name = \"c\"\n");
    write("d.toml", "extends = \"sub/c.toml\"\n");
    let e = RunConfig::from_file(&tmp.path().join("d.toml")).unwrap_err().to_string();
    assert!(e.contains("same folder") && e.contains("d.toml"), "{e}");
    write("e.toml", "extends = \"base.toml\"\n[optim]\nbetta = 1\n");
    std::fs::copy(dir.join("smoke-cpu.toml"), tmp.path().join("base.toml")).unwrap();
    let e = RunConfig::from_file(&tmp.path().join("e.toml")).unwrap_err().to_string();
    assert!(e.contains("e.toml") && e.contains("betta"), "{e}");
}

/// `[rollout] engine = "vllm"` needs `[rollout.vllm]` with a served model
/// and an http URL; a `[rollout.vllm]` without the engine is refused; each
/// error names the key.
#[test]
fn vllm_engine_settings_are_checked() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let text = std::fs::read_to_string(dir.join("smoke-cpu.toml")).unwrap();
    assert!(text.contains("[rollout]\n"), "smoke-cpu.toml has a [rollout] table");
    let tmp = tempfile::tempdir().unwrap();
    let with = |rollout: &str, tables: &str| {
        let path = tmp.path().join("run.toml");
        std::fs::write(&path, text.replacen("[rollout]\n", &format!("[rollout]\n{rollout}"), 1) + tables).unwrap();
        RunConfig::from_file(&path)
    };
    let ok = with("engine = \"vllm\"\n", "[rollout.vllm]\nurl = \"http://127.0.0.1:8123\"\nserved_model = \"smollm2\"\n").unwrap();
    let v = ok.rollout.vllm.as_ref().unwrap();
    assert_eq!((ok.rollout.engine, v.max_concurrency, v.timeout_s), (trainer::run_config::Engine::Vllm, 64, 600.0));
    for (rollout, tables, key) in [
        ("engine = \"vllm\"\n", "", "rollout.vllm"),
        ("engine = \"vllm\"\n", "[rollout.vllm]\nurl = \"http://h:1\"\n", "rollout.vllm.served_model"),
        ("engine = \"vllm\"\n", "[rollout.vllm]\nurl = \"h:1\"\nserved_model = \"m\"\n", "rollout.vllm.url"),
        ("", "[rollout.vllm]\nserved_model = \"m\"\n", "rollout.vllm"),
    ] {
        let e = with(rollout, tables).unwrap_err();
        assert!(matches!(e, trainer::Error::Config { key: ref k, .. } if k == key), "{key}: {e}");
    }
    assert!(with("engine = \"sglang\"\n", "").unwrap_err().to_string().contains("sglang"));
}

/// The teacher is a policy choice, one parser for configs and command
/// lines: scripted or a URL parse; the model teaching itself is refused
/// naming the key, and an unknown word names what is expected.
#[test]
fn the_pipeline_teacher_is_a_policy_choice() {
    use trainer::run_config::PolicyChoice;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("teacher.toml");
    let with = |teacher: &str, key: &str| {
        let text = format!("name = \"t\"\n[model]\npath = \"m\"\n[env]\nrepos_dir = \"r\"\n[pipeline]\ntasks = \"t.jsonl\"\n{key} = \"{teacher}\"\n");
        std::fs::write(&path, text).unwrap();
        RunConfig::from_file(&path)
    };
    let cfg = with("http://localhost:8000", "teacher").unwrap();
    assert_eq!(cfg.pipeline.unwrap().teacher, PolicyChoice::Http("http://localhost:8000".into()));
    assert_eq!(with("scripted", "teacher").unwrap().pipeline.unwrap().teacher, PolicyChoice::Scripted);
    let e = with("model", "teacher").unwrap_err().to_string();
    assert!(e.contains("pipeline.teacher") && e.contains("cannot teach itself"), "{e}");
    std::fs::write(&path, "name = \"t\"\n[model]\npath = \"m\"\n[env]\nrepos_dir = \"r\"\n[pipeline]\ntasks = \"t.jsonl\"\n[pipeline.synth]\nteacher = \"model\"\n").unwrap();
    let e = RunConfig::from_file(&path).unwrap_err().to_string();
    assert!(e.contains("pipeline.synth.teacher"), "{e}");
    let e = with("gpt", "teacher").unwrap_err().to_string();
    assert!(e.contains("expected model, scripted, guided or an http(s):// URL"), "{e}");
    assert_eq!("model".parse::<PolicyChoice>(), Ok(PolicyChoice::Model));
    assert_eq!(with("guided", "teacher").unwrap().pipeline.unwrap().teacher, PolicyChoice::Guided);
    std::fs::write(&path, "name = \"t\"\n[model]\npath = \"m\"\n[env]\nrepos_dir = \"r\"\n[pipeline]\ntasks = \"t.jsonl\"\n[pipeline.synth]\nteacher = \"guided\"\n").unwrap();
    let e = RunConfig::from_file(&path).unwrap_err().to_string();
    assert!(e.contains("pipeline.synth.teacher") && e.contains("writes no issues"), "{e}");
    assert_eq!(String::from(PolicyChoice::Http("https://x".into())), "https://x");
}

/// `--set` over a file with `extends`: keys set in order, the file's own
/// errors located in it first, a key the file lacks given by a `--set`,
/// and a value refused by validation blamed on the `--set` that set it.
#[test]
fn set_overrides_apply_over_extends_and_name_what_is_wrong() {
    use trainer::run_config::Override;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(tmp.path().join(name), text).unwrap();
    std::fs::copy(dir.join("smoke-cpu.toml"), tmp.path().join("base.toml")).unwrap();
    write("a.toml", "extends = \"base.toml\"\n[grpo]\nbeta = 0.5\n");
    let sets = |s: &[&str]| -> Vec<Override> { s.iter().map(|s| s.parse().unwrap()).collect() };
    let path = tmp.path().join("a.toml");
    let cfg = RunConfig::from_file_with(&path, &sets(&["grpo.beta=0.1", "grpo.beta=0.2", "rollout.group=3", "train.tasks=t.jsonl"])).unwrap();
    assert_eq!((cfg.grpo.beta, cfg.rollout.group), (0.2, 3), "the last --set wins");
    assert_eq!(cfg.train.tasks.unwrap(), tmp.path().join("t.jsonl"), "relative to the config's folder, as in the file");
    // A file with a bad key: its own error, at its line, whatever --set says.
    write("bad.toml", "name = \"b\"\n[grpo]\nbeta = \"x\"\n");
    let e = RunConfig::from_file_with(&tmp.path().join("bad.toml"), &sets(&["grpo.beta=0.1"])).unwrap_err().to_string();
    assert!(e.contains("bad.toml:3:8") && e.contains("config key `grpo.beta`"), "{e}");
    // A key the file lacks (here every required one) comes from --set.
    write("min.toml", "[model]\npath = \"m\"\n[env]\nrepos_dir = \"r\"\n");
    let cfg = RunConfig::from_file_with(&tmp.path().join("min.toml"), &sets(&["name=from-set"])).unwrap();
    assert_eq!(cfg.name, "from-set");
    let e = RunConfig::from_file_with(&tmp.path().join("min.toml"), &sets(&["grpo.beta=0"])).unwrap_err().to_string();
    assert!(e.contains("min.toml with --set grpo.beta=0") && e.contains("missing field `name`"), "{e}");
    // Validation: the error of the --set whose key (or section) it names.
    let e = RunConfig::from_file_with(&path, &sets(&["sampling.top_p=1.5"])).unwrap_err().to_string();
    assert_eq!(e, "--set sampling.top_p=1.5: config key `sampling.top_p`: must be in (0, 1], got 1.5");
    let e = RunConfig::from_file_with(&path, &sets(&["optim={lr = -1.0}"])).unwrap_err().to_string();
    assert!(e.starts_with("--set optim={lr = -1.0}: config key `optim.lr`: must be a positive number"), "{e}");
}

#[test]
fn grpo_importance_sampling_reaches_the_loss_and_a_bad_level_names_the_key() {
    use trainer::grpo::ImportanceSampling;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let text = std::fs::read_to_string(dir.join("smoke-cpu.toml")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let write = |grpo: &str| {
        let path = tmp.path().join("run.toml");
        std::fs::write(&path, text.replacen("[grpo]\n", &format!("[grpo]\n{grpo}"), 1)).unwrap();
        path
    };
    let plain = RunConfig::from_file(&dir.join("smoke-cpu.toml")).unwrap();
    assert_eq!(plain.loss_config().importance_sampling, ImportanceSampling::Token);
    // The default stays out of the saved config, so existing runs keep their hash.
    assert!(serde_json::to_value(&plain).unwrap()["grpo"].get("importance_sampling").is_none());
    let gspo = RunConfig::from_file(&write("importance_sampling = \"sequence\"\n")).unwrap();
    assert_eq!(gspo.loss_config().importance_sampling, ImportanceSampling::Sequence);
    assert_eq!(serde_json::to_value(&gspo).unwrap()["grpo"]["importance_sampling"], "sequence");
    let e = RunConfig::from_file(&write("importance_sampling = \"seq\"\n")).unwrap_err().to_string();
    println!("{e}");
    assert!(e.contains("config key `grpo.importance_sampling`") && e.contains("run.toml") && e.contains("`sequence`"), "{e}");
}

/// `[grpo] zero_std_groups = "resample"` parses with its bound,
/// `max_resample_draws` (unset: 2 x tasks_per_step); a bound of 0, or one
/// set without resample, is refused naming the key.
#[test]
fn resample_and_its_bound_are_checked_at_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let text = std::fs::read_to_string(dir.join("smoke-cpu.toml")).unwrap();
    assert!(text.contains("zero_std_groups = \"drop\"\n"), "smoke-cpu.toml drops zero-std groups");
    let tmp = tempfile::tempdir().unwrap();
    let with = |setting: &str| {
        let path = tmp.path().join("run.toml");
        std::fs::write(&path, text.replacen("zero_std_groups = \"drop\"\n", setting, 1)).unwrap();
        RunConfig::from_file(&path)
    };
    let cfg = with("zero_std_groups = \"resample\"\n").unwrap();
    assert_eq!(cfg.grpo.zero_std_groups, trainer::grpo::ZeroStdGroups::Resample);
    assert_eq!(cfg.grpo.resample_draws(cfg.train.tasks_per_step), 2 * cfg.train.tasks_per_step);
    let cfg = with("zero_std_groups = \"resample\"\nmax_resample_draws = 5\n").unwrap();
    assert_eq!(cfg.grpo.resample_draws(cfg.train.tasks_per_step), 5);
    for (setting, says) in [
        ("zero_std_groups = \"resample\"\nmax_resample_draws = 0\n", "must be at least 1"),
        ("zero_std_groups = \"drop\"\nmax_resample_draws = 4\n", "zero_std_groups is \"drop\""),
        ("max_resample_draws = 4\n", "zero_std_groups is \"keep\""),
    ] {
        let e = with(setting).unwrap_err();
        assert!(matches!(e, trainer::Error::Config { ref key, .. } if key == "grpo.max_resample_draws"), "{setting}: {e}");
        assert!(e.to_string().contains(says), "{setting}: {e}");
    }
}

/// `[rollout] off_policy`: 1 needs TIS to correct the staleness (the error
/// names `grpo.rollout_correction`); more than one step of lag is refused
/// naming `rollout.off_policy`; 1 with TIS loads.
#[test]
fn off_policy_needs_tis_and_at_most_one_step() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let text = std::fs::read_to_string(dir.join("smoke-cpu.toml")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let load = |rollout: &str, grpo: &str| {
        let path = tmp.path().join("run.toml");
        std::fs::write(&path, text.replacen("[rollout]\n", &format!("[rollout]\n{rollout}"), 1).replacen("[grpo]\n", &format!("[grpo]\n{grpo}"), 1)).unwrap();
        RunConfig::from_file(&path)
    };
    let tis = "rollout_correction = \"tis\"\n";
    assert_eq!(load("off_policy = 1\n", tis).unwrap().grpo_trainer().off_policy, 1);
    for (rollout, grpo, key, says) in [
        ("off_policy = 1\n", "", "grpo.rollout_correction", "rollout_correction = \"tis\""),
        ("off_policy = 2\n", tis, "rollout.off_policy", "must be 0 (on-policy) or 1"),
    ] {
        let e = load(rollout, grpo).unwrap_err();
        assert!(matches!(e, trainer::Error::Config { key: ref k, .. } if k == key), "{key}: {e}");
        assert!(e.to_string().contains(says) && e.to_string().contains("run.toml"), "{e}");
    }
    // A wrong type names the key too (serde's message, with the file).
    let e = load("off_policy = \"yes\"\n", tis).unwrap_err().to_string();
    assert!(e.contains("off_policy") && e.contains("run.toml"), "{e}");
}

/// Issue 66 (D9, D18): every count setting is bounded at load, the error
/// naming the key (a huge `rollout.group` was a capacity-overflow panic or
/// an allocation abort midway), in the file or through `--set`; a number
/// outside TOML's range says so; a cap of 0 on any `[env.tools]` limit is
/// refused naming it (every call of its tool failed).
#[test]
fn counts_are_bounded_and_tool_caps_of_zero_refused_at_load() {
    use trainer::run_config::Override;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let text = std::fs::read_to_string(dir.join("smoke-cpu.toml")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("run.toml");
    std::fs::write(&path, &text).unwrap();
    let set = |s: &str| RunConfig::from_file_with(&path, &[s.parse::<Override>().unwrap()]);
    for (setting, key) in [
        ("rollout.group=9223372036854775807", "rollout.group"),
        ("rollout.group=1000000000000", "rollout.group"),
        ("train.tasks_per_step=9223372036854775807", "train.tasks_per_step"),
        ("train.steps=9223372036854775807", "train.steps"),
        ("episode.max_turns=9223372036854775807", "episode.max_turns"),
        ("episode.max_total_tokens=9223372036854775807", "episode.max_total_tokens"),
        ("episode.max_turn_tokens=9223372036854775807", "episode.max_turn_tokens"),
        ("rollout.max_kv_tokens=9223372036854775807", "rollout.max_kv_tokens"),
        ("sft.epochs=9223372036854775807", "sft.epochs"),
        ("grpo.num_iterations=9223372036854775807", "grpo.num_iterations"),
        ("localize.max_issue_tokens=9223372036854775807", "localize.max_issue_tokens"),
    ] {
        let e = set(setting).unwrap_err().to_string();
        assert!(e.contains(&format!("config key `{key}`")) && e.contains("must be at most"), "{setting}: {e}");
    }
    // Each bound alone is allowed, their product per step is not.
    let e = RunConfig::from_file_with(&path, &["rollout.group=1024".parse().unwrap(), "train.tasks_per_step=1000".parse().unwrap()]).unwrap_err().to_string();
    assert!(e.contains("rollout.group / train.tasks_per_step") && e.contains("episodes per step"), "{e}");
    assert_eq!(set("rollout.group=1024").unwrap().rollout.group, 1024);
    // In the file, the same error, naming the file.
    std::fs::write(&path, text.replacen("group = 8", "group = 9223372036854775807", 1)).unwrap();
    let e = RunConfig::from_file(&path).unwrap_err();
    assert!(matches!(e, trainer::Error::Config { key: ref k, .. } if k == "rollout.group"), "{e}");
    assert!(e.to_string().contains("run.toml"), "{e}");
    // A number TOML cannot hold.
    for huge in ["99999999999999999999", "1e400"] {
        let e = format!("rollout.group={huge}").parse::<Override>().unwrap_err();
        assert!(e.contains("out of range") && !e.contains("invalid type"), "{e}");
    }
    // D18: the eight caps of the tools.
    std::fs::write(&path, &text).unwrap();
    for cap in ["max_grep_matches", "max_glob_results", "max_read_lines", "max_line_chars", "max_output_bytes", "max_pattern_chars", "regex_size_limit", "regex_dfa_size_limit"] {
        let e = set(&format!("env.tools.{cap}=0")).unwrap_err().to_string();
        assert!(e.contains(&format!("config key `env.tools.{cap}`")) && e.contains("at least 1"), "{cap}: {e}");
        assert_eq!(set(&format!("env.tools.{cap}=1")).map(|_| ()).map_err(|e| e.to_string()), Ok(()), "{cap} = 1");
    }
    std::fs::write(&path, text.replacen("max_grep_matches = 6", "max_grep_matches = 0", 1)).unwrap();
    let e = RunConfig::from_file(&path).unwrap_err();
    assert!(matches!(e, trainer::Error::Config { key: ref k, .. } if k == "env.tools.max_grep_matches"), "{e}");
}
