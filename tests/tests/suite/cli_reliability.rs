//! Issue 52's regressions in the binary: a closed stderr or stdout never
//! panics a job (defect 6); adapters are checked whole on export and
//! record where their base is (defect 8); messages name what is wrong
//! (defect 9).

use e2e::{fusegrpo_bin, fusegrpo_ok, read_jsonl, shop_world, fusegrpo_fails as fails, s};
use std::path::Path;
use std::process::{Command, Stdio};


/// Runs `fusegrpo args` with stderr (or stdout) a pipe whose reader has
/// already gone, as in `fusegrpo ... 2>&1 >/dev/null | head -1` after head
/// exits; returns the exit status.
fn with_closed(stream: &str, args: &[&str]) -> Option<i32> {
    let mut cmd = Command::new(fusegrpo_bin());
    cmd.args(args).env("FUSEGRPO_LOG", "info").stdin(Stdio::null());
    match stream {
        "stderr" => cmd.stdout(Stdio::null()).stderr(Stdio::piped()),
        _ => cmd.stdout(Stdio::piped()).stderr(Stdio::null()),
    };
    let mut child = cmd.spawn().expect("spawn fusegrpo");
    // The reading end closes before the child writes a byte.
    drop(child.stderr.take());
    drop(child.stdout.take());
    child.wait().expect("wait").code()
}

#[test]
fn defect_6_a_closed_stderr_or_stdout_does_not_panic_the_job() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let tasks = tmp.path().join("tasks.jsonl");
    let mut rows = read_jsonl(&tasks);
    rows[0]["base_commit"] = "0".repeat(40).into();
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, rows.iter().map(|r| format!("{r}\n")).collect::<String>()).unwrap();
    // A refused task file: the job's own status (1), not a panic's (101).
    let refused = ["eval", "--config", s(&cfg), "--tasks", s(&bad), "--policy", "scripted"];
    assert_eq!(with_closed("stderr", &refused), Some(1));
    // A job that warns and goes on writes its output and exits 0.
    for (stream, name) in [("stderr", "a.jsonl"), ("stdout", "b.jsonl")] {
        let out = tmp.path().join(name);
        let args = ["eval", "--config", s(&cfg), "--tasks", s(&bad), "--policy", "scripted", "--group", "1", "--skip-bad-tasks", "--out", s(&out)];
        assert_eq!(with_closed(stream, &args), Some(0), "closed {stream}");
        assert_eq!(read_jsonl(&out).len(), 1, "closed {stream}: the one good task's episode");
    }
}

/// A LoRA SFT checkpoint (r = 4) of the shop world, made from `dir` with
/// the config's relative `[model] path = "model"`; returns it.
fn lora_checkpoint(dir: &Path) -> std::path::PathBuf {
    let cfg = shop_world(dir);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("[sft]\nepochs = 1\nbatch_rows = 1\n[sft.filter]\nmin_f1 = 0\nmin_e = 0\nmin_calls_per_turn = 0\n[lora]\nr = 4\nalpha = 8\n");
    std::fs::write(&cfg, text).unwrap();
    let traj = dir.join("traj.jsonl");
    fusegrpo_ok(&["synth", "--config", s(&cfg), "--tasks", s(&dir.join("tasks.jsonl")), "--teacher", "scripted", "--samples", "1", "--out", s(&traj)]);
    // Run from its folder with relative paths, as a user does.
    let out = Command::new(fusegrpo_bin())
        .args(["sft", "--config", "run.toml", "--data", "traj.jsonl", "--out", "lrun", "--max-steps", "1"])
        .current_dir(dir)
        .env("FUSEGRPO_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    dir.join("lrun/step_00000001")
}


/// A copy of the adapter folder `src` at `dst` with its config edited.
fn copy_adapter(src: &Path, dst: &Path, edit: impl Fn(&mut serde_json::Value)) {
    std::fs::create_dir_all(dst).unwrap();
    for f in ["adapter_config.json", "adapter_model.safetensors", "fusegrpo_base.json"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    let path = dst.join("adapter_config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&path, config.to_string()).unwrap();
}

/// Rewrites a safetensors file without its last tensor (by data offset),
/// or without any tensor when `all`.
fn drop_tensors(path: &Path, all: bool) -> String {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header.remove("__metadata__");
    let end = |v: &serde_json::Value| v["data_offsets"][1].as_u64().unwrap();
    let last = header.iter().max_by_key(|(_, v)| end(v)).map(|(k, _)| k.clone()).unwrap();
    let keep_bytes = if all { 0 } else { header[&last]["data_offsets"][0].as_u64().unwrap() as usize };
    if all { header.clear() } else { header.remove(&last); }
    let mut text = serde_json::Value::Object(header).to_string();
    while !text.len().is_multiple_of(8) { text.push(' '); }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&bytes[8 + n..8 + n + keep_bytes]);
    std::fs::write(path, out).unwrap();
    last
}

#[test]
fn defect_8_adapters_are_checked_whole_on_export_and_record_their_base() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ckpt = lora_checkpoint(dir);
    // The base is recorded as an absolute path, with its architecture.
    let config: serde_json::Value = serde_json::from_slice(&std::fs::read(ckpt.join("adapter_config.json")).unwrap()).unwrap();
    let base = config["base_model_name_or_path"].as_str().unwrap().to_string();
    assert!(Path::new(&base).is_absolute() && Path::new(&base).join("config.json").is_file(), "{base}");
    let identity: serde_json::Value = serde_json::from_slice(&std::fs::read(ckpt.join("fusegrpo_base.json")).unwrap()).unwrap();
    assert_eq!(identity["model_type"], "qwen3");
    // So the checkpoint is a model from any folder.
    let input = dir.join("in.jsonl");
    std::fs::write(&input, "{\"ids\": [1, 2, 3]}\n").unwrap();
    let out = Command::new(fusegrpo_bin())
        .args(["generate", "--model", s(&ckpt), "--input", s(&input), "--output", s(&dir.join("g.jsonl")), "--max-new-tokens", "2"])
        .current_dir("/")
        .env("FUSEGRPO_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "--model CKPT from another folder: {}", String::from_utf8_lossy(&out.stderr));

    // r in the config disagrees with the tensors: refused on export, naming `r`.
    let r8 = dir.join("r8");
    copy_adapter(&ckpt, &r8, |c| c["r"] = 8.into());
    let err = fails(&["export-adapter", "--adapter", s(&r8), "--out", s(&dir.join("e1"))]);
    assert!(err.contains("`r` in adapter_config.json is 8") && err.contains("rank 4"), "{err}");
    assert!(!dir.join("e1").exists());
    let err = fails(&["merge-adapter", "--model", s(&dir.join("model")), "--adapter", s(&r8), "--out", s(&dir.join("m1"))]);
    assert!(err.contains("`r` in adapter_config.json is 8"), "{err}");
    // A tensor missing, or none at all.
    let missing = dir.join("missing");
    copy_adapter(&ckpt, &missing, |_| {});
    let dropped = drop_tensors(&missing.join("adapter_model.safetensors"), false);
    let err = fails(&["export-adapter", "--adapter", s(&missing), "--out", s(&dir.join("e2"))]);
    assert!(err.contains(&format!("tensor `{dropped}` is missing")), "{err}");
    let none = dir.join("none");
    copy_adapter(&ckpt, &none, |_| {});
    drop_tensors(&none.join("adapter_model.safetensors"), true);
    let err = fails(&["export-adapter", "--adapter", s(&none), "--out", s(&dir.join("e3"))]);
    assert!(err.contains("holds no tensor"), "{err}");
    // A model folder given as the adapter is said to be one.
    let err = fails(&["export-adapter", "--adapter", s(&dir.join("model")), "--out", s(&dir.join("e4"))]);
    assert!(err.contains("is a model folder"), "{err}");
    assert!(["e2", "e3", "e4"].iter().all(|e| !dir.join(e).exists()));

    // Without fusegrpo_base.json, the recorded base's architecture is still
    // checked: a Llama of the same shapes does not take a Qwen3 adapter.
    let llama = dir.join("llama");
    fusegrpo_ok(&["init-tiny", "--out", s(&llama), "--small-vocab", "1024", "--seed", "2", "--architecture", "llama"]);
    let bare = dir.join("bare");
    copy_adapter(&ckpt, &bare, |_| {});
    std::fs::remove_file(bare.join("fusegrpo_base.json")).unwrap();
    let err = fails(&["merge-adapter", "--model", s(&llama), "--adapter", s(&bare), "--out", s(&dir.join("m2"))]);
    assert!(err.contains("base_model_name_or_path") && err.contains("qwen3 model") && err.contains("(llama)"), "{err}");
    // The right base merges, and the good checkpoint exports.
    fusegrpo_ok(&["merge-adapter", "--model", s(&dir.join("model")), "--adapter", s(&bare), "--out", s(&dir.join("m3"))]);
    fusegrpo_ok(&["export-adapter", "--adapter", s(&ckpt), "--out", s(&dir.join("e5"))]);
}

#[test]
fn defect_9_extends_errors_name_the_file_key_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).unwrap();
        dir.join(name)
    };
    // A missing extended file: the config that names it and its key.
    let missing = write("missing.toml", "extends = \"nope.toml\"\nname = \"x\"\n");
    let err = fails(&["train", "--config", s(&missing), "--out", s(&dir.join("r"))]);
    assert!(err.contains("missing.toml: config key `extends`: nope.toml"), "{err}");
    // A type error in the extended file: its file, line, column and key.
    write("base.toml", "name = \"base\"\n[model]\npath = \"model\"\n[sampling]\ntemperature = \"hot\"\n");
    let child = write("child.toml", "extends = \"base.toml\"\nname = \"x\"\n");
    let err = fails(&["train", "--config", s(&child), "--out", s(&dir.join("r"))]);
    assert!(err.contains("base.toml:5:15 (extended by") && err.contains("config key `sampling.temperature`"), "{err}");
    // ... and in the extending file.
    let typed = write("typed.toml", "extends = \"base.toml\"\nname = \"x\"\n[sampling]\ntemperature = \"cold\"\n");
    let err = fails(&["train", "--config", s(&typed), "--out", s(&dir.join("r"))]);
    assert!(err.contains("typed.toml:4:16: config key `sampling.temperature`"), "{err}");
}
