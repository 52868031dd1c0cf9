//! ARCHITECTURE.md lists every `FUSEGRPO_*` environment variable the code
//! reads, and no other. The code's set: every string literal that is
//! exactly a `FUSEGRPO_...` name (`"FUSEGRPO_LOG"`, as `env::var`,
//! `var_os`, clap's `env = ..` and the `*_ENV` constants take them; a name
//! inside a message or a comment is not a read) in the Rust sources of
//! every workspace member, `src/` and `build.rs` (not their `tests/`). The
//! doc's set: the table rows that start with `` | `FUSEGRPO_ ``.

use std::collections::BTreeSet;
use std::path::Path;

/// The names of the string literals of `text` that are exactly a
/// `FUSEGRPO_[A-Z0-9_]+` name, outside `//` comment lines.
fn literal_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
        let mut rest = line;
        while let Some(at) = rest.find("\"FUSEGRPO_") {
            let after = &rest[at + 1..];
            let len = after.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')).unwrap_or(after.len());
            if after[len..].starts_with('"') {
                names.insert(after[..len].to_string());
            }
            rest = &after[len..];
        }
    }
    names
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The variables the code of the workspace under `root` reads.
fn code_names(root: &Path) -> BTreeSet<String> {
    let mut files = Vec::new();
    for member in std::fs::read_dir(root).unwrap().flatten().map(|e| e.path()).filter(|p| p.join("Cargo.toml").is_file()) {
        rust_files(&member.join("src"), &mut files);
        files.push(member.join("build.rs"));
    }
    files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).flat_map(|t| literal_names(&t)).collect()
}

/// The variables ARCHITECTURE.md's table lists.
fn doc_names(doc: &str) -> BTreeSet<String> {
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|n| n.starts_with("FUSEGRPO_"))
        .map(str::to_string)
        .collect()
}

#[test]
fn architecture_doc_lists_every_environment_variable_the_code_reads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace");
    let code = code_names(root);
    assert!(code.len() >= 5 && code.contains("FUSEGRPO_LOG"), "the scan found too little: {code:?}");
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let listed = doc_names(&doc);
    let missing: Vec<_> = code.difference(&listed).collect();
    let extra: Vec<_> = listed.difference(&code).collect();
    println!("environment variables: {} read by the code, {} in ARCHITECTURE.md", code.len(), listed.len());
    assert!(
        missing.is_empty() && extra.is_empty(),
        "ARCHITECTURE.md's environment variables differ from the code's: read but not listed {missing:?}, listed but not read {extra:?}"
    );
}

#[test]
fn only_whole_literals_count_as_reads() {
    let text = "let a = std::env::var(\"FUSEGRPO_ONE\");\n#[arg(env = \"FUSEGRPO_TWO\")]\n\
                // std::env::var(\"FUSEGRPO_COMMENTED\")\n\
                bail!(\"set FUSEGRPO_THREE=1\"); let m = \"FUSEGRPO_FOUR=0 or\";\n";
    let names: Vec<String> = literal_names(text).into_iter().collect();
    assert_eq!(names, ["FUSEGRPO_ONE", "FUSEGRPO_TWO"]);
    let doc = "| Variable | Read in |\n|---|---|\n| `FUSEGRPO_ONE` | a.rs |\nScripts read `FUSEGRPO_BIN`.\n";
    assert_eq!(doc_names(doc).into_iter().collect::<Vec<_>>(), ["FUSEGRPO_ONE"]);
}
