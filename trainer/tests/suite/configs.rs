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
