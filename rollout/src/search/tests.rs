use super::*;
use std::sync::Arc;
use crate::repo::{FileEntry, FileKind, Snapshot, WORKTREE};

fn snapshot(commit: &str, files: &[(&str, &str)]) -> Snapshot {
    Snapshot::new(
        "o/r".into(),
        commit.into(),
        files.iter().map(|(p, t)| FileEntry::new((*p).into(), FileKind::Text(t.as_bytes().to_vec()))).collect(),
    )
}

const PARSER: &str = "\
\"\"\"Parsing of configuration files.\"\"\"

class ConfigParser:
    \"\"\"Reads sections and options.\"\"\"

    def read_section(self, name):
        \"\"\"One section by its header.\"\"\"
        header = self._header(name)
        return header

    def _header(self, name):
        return '[' + name + ']'


def merge_defaults(config, defaults):
    for key in defaults:
        config.setdefault(key, defaults[key])
    return config
";

const NETWORK: &str = "\
import socket


def open_connection(host, port, timeout):
    sock = socket.create_connection((host, port), timeout)
    return sock


def retry_request(session, url, attempts):
    for _ in range(attempts):
        response = session.get(url)
        if response.ok:
            return response
    return None
";

const CLI: &str = "\
import sys
from pkg.config.parser import ConfigParser


def main(argv):
    parser = ConfigParser()
    section = parser.read_section(argv[1])
    print(section)
";

fn repo() -> Snapshot {
    snapshot(
        "c1",
        &[
            ("pkg/config/parser.py", PARSER),
            ("pkg/net/network.py", NETWORK),
            ("pkg/cli.py", CLI),
            ("pkg/util.py", "def helper(x):\n    return x\n"),
            ("README.md", "A package for configuration and networking."),
            ("data/blob.bin", "\0\0\0"),
        ],
    )
}

/// What tests read of a ranking (`Hits::ranking`, in the ranking module).
#[derive(Debug, PartialEq)]
struct Ranked {
    files: Vec<String>,
    functions: Vec<String>,
    answer: crate::answer::Answer,
}

fn ranked_by(cache: &IndexCache, s: &Snapshot, issue: &str, cfg: &SearchConfig) -> Ranked {
    let r = search_hits(cache, s, issue, cfg).unwrap().ranking(cfg);
    Ranked { files: r.files, functions: r.functions, answer: r.answer }
}

fn ranked(s: &Snapshot, issue: &str) -> Ranked {
    ranked_by(&IndexCache::default(), s, issue, &SearchConfig::default())
}

#[test]
fn identifiers_in_the_issue_find_their_function() {
    let r = ranked(&repo(), "`read_section` returns the header instead of the section");
    assert_eq!(r.files[0], "pkg/config/parser.py", "{r:?}");
    assert_eq!(r.functions[0], "pkg/config/parser.py:ConfigParser.read_section", "{r:?}");
    assert!(r.answer.files.contains("pkg/config/parser.py"));
    // Every ranked function's file is ranked.
    for f in &r.functions {
        let (path, _) = f.split_once(':').unwrap();
        assert!(r.files.iter().any(|x| x == path), "{f} without its file in {:?}", r.files);
    }
}

#[test]
fn a_path_named_in_the_issue_ranks_first() {
    // The words point at the parser; the issue names the network module.
    let issue = "The section header of ConfigParser read_section breaks; the culprit is in pkg/net/network.py";
    let r = ranked(&repo(), issue);
    assert_eq!(r.files[0], "pkg/net/network.py", "{:?}", r.files);
    // A dotted module path names it too.
    let r = ranked(&repo(), "ConfigParser read_section header broken since pkg.net.network changed");
    assert_eq!(r.files[0], "pkg/net/network.py", "{:?}", r.files);
    // Without the path, the parser.
    let r = ranked(&repo(), "The section header of ConfigParser read_section breaks");
    assert_eq!(r.files[0], "pkg/config/parser.py", "{:?}", r.files);
}

#[test]
fn a_stack_frame_finds_its_function() {
    let issue = "Connecting hangs forever.\n\nTraceback (most recent call last):\n  \
        File \"/home/me/app.py\", line 3, in <module>\n  \
        File \"/venv/lib/python3.11/site-packages/pkg/net/network.py\", line 5, in open_connection\n\
        socket.timeout: timed out";
    let r = ranked(&repo(), issue);
    assert_eq!(r.files[0], "pkg/net/network.py", "{:?}", r.files);
    assert_eq!(r.functions[0], "pkg/net/network.py:open_connection", "{:?}", r.functions);
}

#[test]
fn tests_rank_below_the_code_they_test_unless_named() {
    let test_file = "from pkg.net.network import retry_request\n\n\ndef test_retry_request_gives_up():\n    \
        assert retry_request(session, url, attempts) is None\n    retry_request(session, url, attempts)\n";
    let s = snapshot("c1", &[("pkg/net/network.py", NETWORK), ("tests/test_network.py", test_file), ("pkg/util.py", "def helper(): pass\n")]);
    let r = ranked(&s, "retry_request never gives up after attempts");
    assert_eq!(r.files[0], "pkg/net/network.py", "{:?}", r.files);
    assert_eq!(r.functions[0], "pkg/net/network.py:retry_request", "{:?}", r.functions);
    // With the prior off, the test file (more mentions) wins: the prior is what ranks it down.
    let cfg = SearchConfig { test_prior: 1.0, ..SearchConfig::default() };
    let hits = search_hits(&IndexCache::default(), &s, "retry_request never gives up after attempts", &cfg).unwrap();
    assert_eq!(hits.files[0].path, "tests/test_network.py", "{:?}", hits.files);
    // Named: the test file is not lowered.
    let r = ranked(&s, "retry_request never gives up after attempts, see tests/test_network.py");
    assert_eq!(r.files[0], "tests/test_network.py", "{:?}", r.files);
    // A quoted test name raises what it tests.
    let r = ranked(&s, "test_retry_request fails on CI");
    assert_eq!(r.functions[0], "pkg/net/network.py:retry_request", "{:?}", r.functions);
}

#[test]
fn the_same_ranking_on_every_run() {
    let issue = "merge_defaults and read_section and retry_request and open_connection and helper all misbehave";
    let first = ranked(&repo(), issue);
    assert!(first.files.len() >= 4 && first.functions.len() >= 4, "{first:?}");
    for _ in 0..20 {
        assert_eq!(ranked(&repo(), issue), first);
    }
}

#[test]
fn the_cache_is_reused_and_rebuilt_when_the_commit_changes() {
    let cache = IndexCache::default();
    let a = cache.get(&repo());
    let b = cache.get(&repo());
    assert!(Arc::ptr_eq(&a, &b), "the same commit: the same index");
    assert_eq!(cache.builds(), 1);
    let next = snapshot("c2", &[("pkg/config/parser.py", PARSER), ("pkg/new.py", "def brand_new(): pass\n")]);
    let c = cache.get(&next);
    assert!(!Arc::ptr_eq(&a, &c));
    assert_eq!(cache.builds(), 2);
    assert!(c.files.contains(&"pkg/new.py".to_string()) && !a.files.contains(&"pkg/new.py".to_string()));
    // A working tree: keyed by its contents.
    let w1 = snapshot(WORKTREE, &[("a.py", "def one(): pass\n")]);
    let w2 = snapshot(WORKTREE, &[("a.py", "def one(): pass\n")]);
    let w3 = snapshot(WORKTREE, &[("a.py", "def two(): pass\n")]);
    let (x, y, z) = (cache.get(&w1), cache.get(&w2), cache.get(&w3));
    assert!(Arc::ptr_eq(&x, &y), "an unchanged tree is not indexed again");
    assert!(!Arc::ptr_eq(&x, &z), "an edited tree is");
    assert_eq!(cache.builds(), 4);
}

#[test]
fn index_holds_files_and_entities() {
    let index = Index::build(&repo(), &IndexConfig::default());
    assert_eq!(index.files, ["README.md", "pkg/cli.py", "pkg/config/parser.py", "pkg/net/network.py", "pkg/util.py"]);
    let names: Vec<&str> = index.entities.iter().map(|e| e.name.as_str()).collect();
    assert!(names.contains(&"ConfigParser") && names.contains(&"ConfigParser.read_section") && names.contains(&"merge_defaults"), "{names:?}");
    assert!(index.heap_bytes() > 0);
}

#[test]
fn roles_of_paths() {
    assert_eq!(FileRole::of("src/a.py"), FileRole::Source);
    assert_eq!(FileRole::of("tests/a.py"), FileRole::Test);
    assert_eq!(FileRole::of("src/pkg/test_a.py"), FileRole::Test);
    assert_eq!(FileRole::of("a_test.go"), FileRole::Test);
    assert_eq!(FileRole::of("hydra/test_utils/config_source_common_tests.py"), FileRole::Test);
    assert_eq!(FileRole::of("pkg/latest.py"), FileRole::Source);
    assert_eq!(FileRole::of("docs/conf.py"), FileRole::Doc);
    assert_eq!(FileRole::of("README.rst"), FileRole::Doc);
    assert_eq!(FileRole::of("examples/demo.py"), FileRole::Example);
}

#[test]
fn hostile_queries_are_errors() {
    let cache = IndexCache::default();
    let cfg = SearchConfig::default();
    for issue in ["", "  \n ", "a\0b"] {
        assert!(search_hits(&cache, &repo(), issue, &cfg).is_err(), "{issue:?}");
    }
    // Regex-like text is searched as words, nothing compiled from it.
    let r = ranked_by(&cache, &repo(), r"(((retry_request)*)+ [a-z\]$ .*", &cfg);
    assert_eq!(r.functions[0], "pkg/net/network.py:retry_request");
}
