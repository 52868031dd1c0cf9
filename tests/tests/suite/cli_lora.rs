//! LoRA runs through the binary: SFT with `[lora]` leaves an adapter in
//! PEFT's layout (no base weights), GRPO starts from it (`[model] adapter`)
//! with the KL measured against the base (adapter off), a GRPO run killed
//! with SIGKILL after its first checkpoint resumes to the uninterrupted
//! run's adapter and moments bit for bit, and the checkpoints are usable
//! as models (`eval --model CKPT`, `score --adapter`, `merge-adapter`).

use e2e::{fusegrpo, fusegrpo_bin, fusegrpo_ok, read_jsonl, shop_world, without_timings};
use std::path::{Path, PathBuf};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The shop world's config with `[lora]` (and an SFT section whose filter
/// keeps the scripted teacher's trajectories), plus those trajectories.
fn lora_world(dir: &Path) -> (PathBuf, PathBuf) {
    let cfg = shop_world(dir);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text = text.replace("[grpo]\nbeta = 0.04\n", "[grpo]\nbeta = 0.04\nnum_iterations = 2\nzero_std_groups = \"keep\"\n");
    text.push_str(
        "[sft]\nepochs = 1\nbatch_rows = 2\nlr = 0.01\nsave_every = 1\n\
         [sft.filter]\nmin_f1 = 0\nmin_e = 0\nmin_calls_per_turn = 0\nmax_tokens = 8192\nmax_truncation_ratio = 1.0\n\
         [lora]\nr = 4\nalpha = 8\ninit_seed = 1\n",
    );
    std::fs::write(&cfg, text).unwrap();
    let traj = dir.join("traj.jsonl");
    fusegrpo_ok(&["synth", "--config", s(&cfg), "--tasks", s(&dir.join("tasks.jsonl")), "--teacher", "scripted", "--samples", "3", "--out", s(&traj)]);
    (cfg, traj)
}

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn lora_sft_then_grpo_resumes_bitwise_and_the_checkpoints_are_models() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, traj) = lora_world(tmp.path());
    let sft = tmp.path().join("sft");
    fusegrpo_ok(&["sft", "--config", s(&cfg), "--data", s(&traj), "--out", s(&sft), "--max-steps", "2"]);
    let adapter = sft.join("step_00000002");
    for f in ["adapter_config.json", "adapter_model.safetensors", "fusegrpo_base.json", "optimizer.safetensors", "state.json", "tokenizer.json", "DONE"] {
        assert!(adapter.join(f).exists(), "{f}");
    }
    assert!(!adapter.join("model.safetensors").exists() && !adapter.join("config.json").exists(), "a LoRA checkpoint holds no base weights");
    let losses: Vec<f64> = read_jsonl(&sft.join("metrics.jsonl")).iter().map(|m| m["loss"].as_f64().unwrap()).collect();
    assert!(losses.iter().all(|l| l.is_finite()) && losses.len() == 2);

    // GRPO from the SFT adapter: the KL against the base is there from step 1.
    let text = std::fs::read_to_string(&cfg).unwrap().replace("path = \"model\"\n", &format!("path = \"model\"\nadapter = \"{}\"\n", s(&adapter)));
    let gcfg = tmp.path().join("grpo.toml");
    std::fs::write(&gcfg, text).unwrap();
    let straight = tmp.path().join("straight");
    fusegrpo_ok(&["train", "--config", s(&gcfg), "--out", s(&straight), "--save-every", "1"]);
    let metrics = read_jsonl(&straight.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 4);
    assert!(metrics[0]["kl"].as_f64().unwrap() > 0.0, "the reference is the base, the policy base + adapter: {}", metrics[0]);
    assert!(metrics.iter().all(|m| m["grad_norm"].as_f64().unwrap() > 0.0));
    let last = straight.join("step_00000004");
    assert_ne!(bytes(&last.join("adapter_model.safetensors")), bytes(&adapter.join("adapter_model.safetensors")), "the adapter moved");

    // SIGKILL once step 1 is on disk, then --resume auto: the same bits.
    let killed = tmp.path().join("killed");
    let mut child = std::process::Command::new(fusegrpo_bin())
        .args(["train", "--config", s(&gcfg), "--out", s(&killed), "--save-every", "1"])
        .env("FUSEGRPO_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !killed.join("step_00000001/DONE").exists() {
        assert!(t0.elapsed().as_secs() < 300, "no checkpoint");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    fusegrpo_ok(&["train", "--config", s(&gcfg), "--out", s(&killed), "--resume", "auto"]);
    for f in ["adapter_model.safetensors", "optimizer.safetensors"] {
        assert!(bytes(&killed.join("step_00000004").join(f)) == bytes(&last.join(f)), "{f} of the resumed run differs");
    }
    assert_eq!(without_timings(read_jsonl(&killed.join("metrics.jsonl"))), without_timings(metrics));

    // The checkpoint as a model: eval takes it as --model (its base from
    // adapter_config.json), score as --adapter, merge-adapter makes a whole model.
    let out = fusegrpo_ok(&["eval", "--config", s(&cfg), "--tasks", s(&tmp.path().join("tasks.jsonl")), "--model", s(&last), "--group", "1"]);
    assert!(out.contains("eval"), "{out}");
    let input = tmp.path().join("in.jsonl");
    std::fs::write(&input, "{\"ids\": [5, 6, 7, 8, 9, 10]}\n").unwrap();
    let (a, m) = (tmp.path().join("a.jsonl"), tmp.path().join("m.jsonl"));
    fusegrpo_ok(&["score", "--model", s(&tmp.path().join("model")), "--adapter", s(&last), "--input", s(&input), "--output", s(&a)]);
    let merged = tmp.path().join("merged");
    fusegrpo_ok(&["merge-adapter", "--model", s(&tmp.path().join("model")), "--adapter", s(&last), "--out", s(&merged)]);
    fusegrpo_ok(&["score", "--model", s(&merged), "--input", s(&input), "--output", s(&m)]);
    let lp = |p: &Path| read_jsonl(p)[0]["logprobs"].as_array().unwrap().iter().skip(1).map(|x| x.as_f64().unwrap()).collect::<Vec<_>>();
    let worst = lp(&a).iter().zip(lp(&m)).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-4, "merged vs adapted log-probs differ by {worst}");

    // Exported in bf16 (what ships): PEFT's files only, half the bytes, the
    // same log-probs within bf16's rounding of the weights.
    let exported = tmp.path().join("exported");
    fusegrpo_ok(&["export-adapter", "--adapter", s(&last), "--out", s(&exported)]);
    let mut files: Vec<String> = std::fs::read_dir(&exported).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(files, ["adapter_config.json", "adapter_model.safetensors", "fusegrpo_base.json"]);
    let (f32_bytes, bf16_bytes) = (bytes(&last.join("adapter_model.safetensors")).len(), bytes(&exported.join("adapter_model.safetensors")).len());
    assert!(bf16_bytes < f32_bytes * 6 / 10, "bf16 {bf16_bytes} vs f32 {f32_bytes} bytes");
    let header = String::from_utf8_lossy(&bytes(&exported.join("adapter_model.safetensors"))[8..2000]).into_owned();
    assert!(header.contains("\"BF16\"") && !header.contains("\"F32\""), "{header}");
    let e = tmp.path().join("e.jsonl");
    fusegrpo_ok(&["score", "--model", s(&tmp.path().join("model")), "--adapter", s(&exported), "--input", s(&input), "--output", s(&e)]);
    let worst = lp(&a).iter().zip(lp(&e)).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-2, "bf16 vs f32 adapter log-probs differ by {worst}");
    let again = fusegrpo(&["export-adapter", "--adapter", s(&last), "--out", s(&exported)]);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("not empty"), "an export never overwrites");

    // Rollouts that apply the adapter at every token instead of merging it.
    let unmerged = tmp.path().join("unmerged.toml");
    std::fs::write(&unmerged, std::fs::read_to_string(&gcfg).unwrap().replace("[lora]\n", "[lora]\nmerge_for_rollouts = false\n")).unwrap();
    let run = tmp.path().join("unmerged");
    fusegrpo_ok(&["train", "--config", s(&unmerged), "--out", s(&run), "--max-steps", "2"]);
    let m = read_jsonl(&run.join("metrics.jsonl"));
    assert!(m.iter().all(|m| m["grad_norm"].as_f64().unwrap() > 0.0));
    let drift = m[0]["sampling/sampling_logp_difference/max"].as_f64().unwrap();
    assert!(drift < 1e-3, "unmerged rollouts sample with the trainer's log-probs: {drift}");

    // On another base the adapter is refused, naming the file.
    let other = tmp.path().join("other");
    fusegrpo_ok(&["init-tiny", "--out", s(&other), "--small-vocab", "1024", "--seed", "9"]);
    let out = fusegrpo(&["score", "--model", s(&other), "--adapter", s(&last), "--input", s(&input), "--output", s(&a)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("fusegrpo_base.json"), "{err}");
}

#[test]
fn bad_lora_settings_are_keyed_errors_that_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let run = tmp.path().join("run");
    for (lora, key) in [
        ("r = 0\n", "lora.r"),
        ("r = 4\ntarget_modules = [\"q_proj\", \"c_attn\"]\n", "lora.target_modules"),
        ("r = 4\ndropout = 0.1\n", "lora.dropout"),
    ] {
        let path = tmp.path().join("bad.toml");
        std::fs::write(&path, format!("{}[lora]\n{lora}", std::fs::read_to_string(&cfg).unwrap())).unwrap();
        let out = fusegrpo(&["train", "--config", s(&path), "--out", s(&run)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(&format!("config key `{key}`")), "{lora}: {err}");
        assert!(!run.exists());
    }
}
