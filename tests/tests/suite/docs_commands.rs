//! docs/commands.md against clap's command tree as the binary prints it
//! (`fusegrpo <command> -h`, recursively): every command and subcommand is
//! documented (a table row naming it, or its entry in "Every command's
//! flags"), and every flag of it appears in what documents it, or in the
//! page's prose (the flags many commands share).

use std::path::Path;
use std::process::Command;

use e2e::fusegrpo_bin;

fn help(path: &[String]) -> String {
    let out = Command::new(fusegrpo_bin()).args(path).arg("-h").env("FUSEGRPO_LOG", "warn").output().unwrap();
    assert!(out.status.success(), "fusegrpo {path:?} -h failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands a help text lists (`help` aside).
fn subcommands(text: &str) -> Vec<String> {
    let Some(rest) = text.split("\nCommands:\n").nth(1) else { return Vec::new() };
    rest.lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.strip_prefix("  ").and_then(|l| l.split_whitespace().next()))
        .filter(|c| *c != "help" && c.chars().next().is_some_and(|ch| ch.is_ascii_lowercase()))
        .map(str::to_string)
        .collect()
}

/// The long flags of a help text's options (`--help`, `--version`, `--log` aside).
fn flags(text: &str) -> Vec<String> {
    let Some(rest) = text.split("\nOptions:\n").nth(1) else { return Vec::new() };
    rest.lines()
        .filter_map(|l| {
            let t = l.trim_start();
            let t = if t.starts_with('-') && !t.starts_with("--") { t.get(4..)? } else { t };
            let flag: String = t.strip_prefix("--")?.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            Some(format!("--{flag}"))
        })
        .filter(|f| !["--help", "--version", "--log"].contains(&f.as_str()))
        .collect()
}

/// Every leaf command with its flags.
fn commands(path: Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    let text = help(&path);
    let subs = subcommands(&text);
    if subs.is_empty() {
        out.push((path.join(" "), flags(&text)));
    }
    for s in subs {
        let mut p = path.clone();
        p.push(s);
        commands(p, out);
    }
}

/// Whether `flag` occurs in `text` as a whole flag (not a prefix of a longer one).
fn mentions(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(i, _)| !text[i + flag.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-'))
}

#[test]
fn docs_commands_lists_every_command_and_flag() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/commands.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let prose: String = doc.lines().filter(|l| !l.starts_with('|') && !l.starts_with("- `") && !l.starts_with("**`")).collect::<Vec<_>>().join("\n");
    let mut all = Vec::new();
    commands(Vec::new(), &mut all);
    assert!(all.len() > 40, "only {} commands found", all.len());
    let mut problems = Vec::new();
    for (cmd, flags) in &all {
        // Table rows whose first cell names the command.
        let names = |cell: &str| cell.split('`').skip(1).step_by(2).any(|seg| seg == cmd || seg.starts_with(&format!("{cmd} ")));
        let mut text: Vec<&str> = doc.lines().filter(|l| l.starts_with("| `") && names(l.split(" | ").next().unwrap_or(""))).collect();
        // Its entry in the flag reference: `**`cmd`**` and the list below it.
        let head = format!("**`{cmd}`**");
        if let Some(i) = doc.lines().position(|l| l.starts_with(&head)) {
            text.extend(doc.lines().skip(i + 1).take_while(|l| !l.starts_with("**`") && !l.starts_with('#')));
        }
        if text.is_empty() {
            problems.push(format!("`{cmd}`: not documented"));
            continue;
        }
        let text = text.join("\n");
        for f in flags {
            if !mentions(&text, f) && !mentions(&prose, f) {
                problems.push(format!("`{cmd} {f}`: not documented"));
            }
        }
    }
    assert!(problems.is_empty(), "docs/commands.md (scripts/commands-reference.py prints the flag reference):\n  {}", problems.join("\n  "));
}
