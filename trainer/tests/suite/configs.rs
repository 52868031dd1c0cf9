//! Every preset in configs/ parses and validates.

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
