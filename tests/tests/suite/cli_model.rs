//! `fusegrpo score`, `generate` and `init-tiny` as a user runs them.

use e2e::{fusegrpo, fusegrpo_ok, model_fixture, qwen_tokenizer_dir, read_jsonl};

fn write_ids(path: &std::path::Path, rows: &[Vec<u64>]) {
    let text: String = rows.iter().map(|r| serde_json::json!({ "ids": r }).to_string() + "\n").collect();
    std::fs::write(path, text).unwrap();
}

fn ids(v: &serde_json::Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

#[test]
fn score_and_generate_match_transformers_through_the_cli() {
    let tmp = tempfile::tempdir().unwrap();
    for case in ["tied_sharded", "untied"] {
        let model = model_fixture(case);
        let exp: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(model.join("expected.json")).unwrap()).unwrap();
        let input = tmp.path().join("in.jsonl");
        let output = tmp.path().join("out.jsonl");
        let rows: Vec<Vec<u64>> = exp["score"].as_array().unwrap().iter().map(|r| ids(&r["ids"])).collect();
        write_ids(&input, &rows);
        fusegrpo_ok(&["score", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap(), "--output", output.to_str().unwrap()]);
        let got = read_jsonl(&output);
        assert_eq!(got.len(), rows.len());
        let mut worst = 0f64;
        for (g, w) in got.iter().zip(exp["score"].as_array().unwrap()) {
            let (g, w) = (g["logprobs"].as_array().unwrap(), w["logprobs"].as_array().unwrap());
            assert!(g[0].is_null());
            for (a, b) in g.iter().zip(w).skip(1) {
                worst = worst.max((a.as_f64().unwrap() - b.as_f64().unwrap()).abs());
            }
        }
        println!("{case}: score max |diff| vs transformers = {worst:.3e}");
        assert!(worst <= 1e-4);

        let prompts: Vec<Vec<u64>> = exp["greedy"].as_array().unwrap().iter().map(|r| ids(&r["prompt"])).collect();
        write_ids(&input, &prompts);
        fusegrpo_ok(&[
            "generate", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap(),
            "--output", output.to_str().unwrap(), "--max-new-tokens", "16",
        ]);
        for (g, w) in read_jsonl(&output).iter().zip(exp["greedy"].as_array().unwrap()) {
            assert_eq!(ids(&g["ids"]), ids(&w["new"]), "{case}");
        }
    }
}

#[test]
fn sampled_generation_is_reproducible_with_a_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model_fixture("untied");
    let input = tmp.path().join("in.jsonl");
    write_ids(&input, &[vec![1, 2, 3], vec![9, 8, 7, 6, 5], vec![42]]);
    let run = |seed: &str, out: &str| {
        let output = tmp.path().join(out);
        fusegrpo_ok(&[
            "generate", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap(),
            "--output", output.to_str().unwrap(), "--max-new-tokens", "20", "--temperature", "1.0",
            "--top-p", "0.95", "--top-k", "50", "--seed", seed,
        ]);
        std::fs::read_to_string(output).unwrap()
    };
    let (a, b, c) = (run("7", "a"), run("7", "b"), run("8", "c"));
    assert_eq!(a, b, "same seed, same tokens");
    assert_ne!(a, c, "another seed, other tokens");
}

#[test]
fn bad_input_lines_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model_fixture("untied");
    let input = tmp.path().join("in.jsonl");
    std::fs::write(&input, "{\"ids\": [1, 2]}\n{\"ids\": [1, \"x\"]}\n").unwrap();
    let out = fusegrpo(&["score", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap(), "--output", "/dev/null"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in.jsonl:2"), "{err}");
    std::fs::write(&input, "{\"ids\": [1, 99999]}\n").unwrap();
    let out = fusegrpo(&["score", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap(), "--output", "/dev/null"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("99999") && err.contains("in.jsonl:1"), "{err}");
}

#[test]
fn init_tiny_with_the_real_tokenizer_makes_a_runnable_model() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tiny");
    let tok = qwen_tokenizer_dir();
    fusegrpo_ok(&["init-tiny", "--out", dir.to_str().unwrap(), "--tokenizer", tok.to_str().unwrap(), "--seed", "3", "--shards", "2"]);
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json"] {
        assert!(dir.join(f).exists(), "{f}");
    }
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["vocab_size"], 151936);
    let input = tmp.path().join("in.jsonl");
    write_ids(&input, &[vec![151644, 872, 198, 9707]]);
    let output = tmp.path().join("out.jsonl");
    fusegrpo_ok(&["score", "--model", dir.to_str().unwrap(), "--input", input.to_str().unwrap(), "--output", output.to_str().unwrap()]);
    let lp = read_jsonl(&output)[0]["logprobs"].as_array().unwrap().clone();
    assert_eq!(lp.len(), 4);
    // A random model is near uniform: log p ~ -ln(151936) ~ -11.9.
    for v in &lp[1..] {
        let v = v.as_f64().unwrap();
        assert!((-14.0..-10.0).contains(&v), "{v}");
    }
}

#[test]
fn init_tiny_small_vocab_is_deterministic_from_its_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let make = |name: &str, seed: &str| {
        let dir = tmp.path().join(name);
        fusegrpo_ok(&["init-tiny", "--out", dir.to_str().unwrap(), "--small-vocab", "1024", "--seed", seed]);
        dir
    };
    let (a, b, c) = (make("a", "1"), make("b", "1"), make("c", "2"));
    let bytes = |d: &std::path::Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert_eq!(bytes(&a), bytes(&b));
    assert_ne!(bytes(&a), bytes(&c));
    assert_eq!(std::fs::read(a.join("tokenizer.json")).unwrap(), std::fs::read(b.join("tokenizer.json")).unwrap());
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(a.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["vocab_size"], 1024);
}
