//! Every parsed language end to end. Gold from patches: each sample file
//! under tests/fixtures/spans gets one-line patches touching a function, a
//! method, a nested function, a type body line and a module-level line, and
//! one patch touching them all; gold is the owner of each touched line at
//! the base commit (DESIGN.md, "Gold from a patch"). The same lines through
//! read_file and grep surface those functions, and tasks mined from a Rust
//! and a Go history get function-level gold.

use crate::repo_builder;

use std::collections::BTreeSet;
use std::sync::Arc;

use repo_builder::{entity_strings, git, run, TempRepo};
use rollout::repo::Snapshot;
use rollout::tasks::gold::{derive_gold, GoldFlag, GoldReport};
use rollout::tasks::history::{tasks_from_history, HistoryConfig};

/// One language's sample and the lines to touch, with the gold function
/// each should give (None: module level, file gold only).
struct Sample {
    path: &'static str,
    source: &'static str,
    touches: &'static [(usize, Option<&'static str>)],
}

const SAMPLES: &[Sample] = &[Sample {
    path: "src/stack.rs",
    source: include_str!("../fixtures/spans/sample.rs"),
    touches: &[
        (44, Some("generic")),       // a generic function
        (20, Some("Stack.push")),    // a method in `impl<T: Clone> Stack<T>`
        (18, Some("Stack.push")),    // inside a nested fn
        (26, Some("Stack.fmt")),     // a method of `impl Display for Stack<T>`
        (9, Some("Stack")),          // a struct field
        (31, Some("Shape")),         // a trait's associated type
        (59, Some("tests.pushes")),  // a test in an inline module
        (4, None),                   // a module-level const
    ],
}, Sample {
    path: "pkg/stack.go",
    source: include_str!("../fixtures/spans/sample.go"),
    touches: &[
        (36, Some("Map")),         // a generic function
        (16, Some("Stack.Push")),  // a method (pointer receiver)
        (14, Some("Stack.Push")),  // inside a function literal in it
        (9, Some("Stack")),        // a struct field
        (25, Some("Shape")),       // an interface method spec
        (42, Some("handler")),     // var handler = func ..
        (6, None),                 // a module-level const
    ],
}, Sample {
    path: "src/sample/Box.java",
    source: include_str!("../fixtures/spans/Sample.java"),
    touches: &[
        (19, Some("Box.map")),        // a generic method
        (17, Some("Box.map")),        // a local class in it
        (11, Some("Box.Box")),        // the constructor
        (8, Some("Box")),             // a field
        (25, Some("Box.Entry.key")),  // a nested class's method
        (32, Some("Box.Mode")),       // an enum's field
        (41, Some("Shape")),          // an abstract interface method
        (3, None),                    // an import
    ],
}, Sample {
    path: "web/stack.js",
    source: include_str!("../fixtures/spans/sample.js"),
    touches: &[
        (19, Some("Stack.push")),     // a method
        (8, Some("outer")),           // a nested function
        (14, Some("Stack")),          // a class field
        (27, Some("Stack.onClick")),  // an arrow-function field
        (32, Some("arrow")),          // const arrow = () => ..
        (48, Some("render")),         // JSX
        (55, Some("api.get")),        // a method of `const api = {..}`
        (4, None),                    // a module-level const
    ],
}, Sample {
    path: "web/base.ts",
    source: include_str!("../fixtures/spans/sample.ts"),
    touches: &[
        (27, Some("Base.describe")),      // a decorated method
        (26, Some("Base.describe")),      // an arrow function in it
        (20, Some("Base")),               // a field
        (22, Some("Base")),               // an abstract method
        (39, Some("Geometry.distance")),  // a generic function in a namespace
        (10, Some("Pair")),               // a type alias's member
        (5, Some("Shape")),               // an interface's method signature
        (43, None),                       // an overload signature
    ],
}, Sample {
    path: "web/panel.tsx",
    source: include_str!("../fixtures/spans/sample.tsx"),
    touches: &[
        (9, Some("Header")),          // a component
        (16, Some("Panel.render")),   // a method returning JSX
        (13, Some("Panel")),          // a class field
        (4, Some("Props")),           // an interface member
        (1, None),                    // an import
    ],
}, Sample {
    path: "src/sample.c",
    source: include_str!("../fixtures/spans/sample.c"),
    touches: &[
        (24, Some("helper")),      // a function
        (33, Some("name_of")),     // a function returning a pointer
        (37, Some("pick")),        // one returning a function pointer
        (9, Some("point")),        // a struct member
        (14, Some("size2")),       // a typedef'd anonymous struct's member
        (6, Some("SQUARE")),       // a macro's continued line
        (48, Some("debug_dump")),  // inside #ifdef
        (4, None),                 // an object-like macro
    ],
}, Sample {
    path: "src/geo.cpp",
    source: include_str!("../fixtures/spans/sample.cpp"),
    touches: &[
        (15, Some("geo.Stack.push")),       // a method of a class template in a namespace
        (14, Some("geo.Stack.push")),       // a lambda in it
        (11, Some("geo.Stack")),            // a class body line
        (21, Some("geo.Stack.Node")),       // a nested struct's member
        (31, Some("geo.Stack.empty")),      // a template method defined out of class
        (46, Some("Point.operator==")),     // an operator
        (42, Some("Point")),                // a member
        (50, Some("geo.detail.twice")),     // defined out of its namespace
        (6, None),                          // a namespace-level constant
    ],
}];

/// `source` with each of `lines` (1-based) ending in a comment.
fn touched(source: &str, lines: &[usize]) -> String {
    let mut out = String::new();
    for (i, line) in source.lines().enumerate() {
        out.push_str(line);
        if lines.contains(&(i + 1)) {
            out.push_str(" // changed");
        }
        out.push('\n');
    }
    out
}

/// Gold of the git diff `sample` -> `after`, against a base commit of `sample`.
fn gold_of(sample: &Sample, after: &str) -> GoldReport {
    let repo = TempRepo::new("o/lang");
    repo.file(sample.path, sample.source);
    repo.commit("base");
    repo.file(sample.path, after);
    let patch = git(&repo.work, &["diff", "-U3"]);
    assert!(!patch.is_empty(), "{}: the edit changed nothing", sample.path);
    derive_gold(&patch, &*repo.snapshot("HEAD")).expect("gold")
}

fn functions(report: &GoldReport) -> Vec<&str> {
    report.gold.functions.iter().map(String::as_str).collect()
}

#[test]
fn one_line_patches_give_the_owner() {
    for sample in SAMPLES {
        for &(line, owner) in sample.touches {
            let report = gold_of(sample, &touched(sample.source, &[line]));
            let want: Vec<String> = owner.map(|o| format!("{}:{o}", sample.path)).into_iter().collect();
            assert_eq!(functions(&report), want, "{} line {line}", sample.path);
            assert_eq!(report.gold.files.iter().collect::<Vec<_>>(), [sample.path], "{}", sample.path);
            let flags: BTreeSet<GoldFlag> = owner.map_or([GoldFlag::NoFunctions].into(), |_| BTreeSet::new());
            assert_eq!(report.flags, flags, "{} line {line}", sample.path);
        }
    }
}

#[test]
fn one_patch_touching_every_kind() {
    for sample in SAMPLES {
        let lines: Vec<usize> = sample.touches.iter().map(|t| t.0).collect();
        let report = gold_of(sample, &touched(sample.source, &lines));
        let want: BTreeSet<String> =
            sample.touches.iter().filter_map(|t| t.1).map(|o| format!("{}:{o}", sample.path)).collect();
        assert_eq!(report.gold.functions, want, "{}", sample.path);
        assert!(report.flags.is_empty(), "{}: {:?}", sample.path, report.flags);
    }
}

/// The file and, when given, the function entity of `owner` in `path`.
fn entities(path: &str, owner: Option<&str>) -> BTreeSet<String> {
    std::iter::once(path.to_string()).chain(owner.map(|o| format!("{path}:{o}"))).collect()
}

/// One repository holding every sample.
fn samples_repo() -> (TempRepo, Arc<Snapshot>) {
    let repo = TempRepo::new("o/samples");
    for sample in SAMPLES {
        repo.file(sample.path, sample.source);
    }
    repo.commit("samples");
    let snapshot = repo.snapshot("HEAD");
    (repo, snapshot)
}

#[test]
fn read_file_surfaces_the_owner_of_each_line() {
    let (_repo, snapshot) = samples_repo();
    for sample in SAMPLES {
        for &(line, owner) in sample.touches {
            let json = format!(
                r#"{{"name":"read_file","arguments":{{"path":"{}","start_line":{line},"end_line":{line}}}}}"#,
                sample.path
            );
            let result = run(&snapshot, &json);
            assert!(!result.error, "{json}: {}", result.output);
            let got: BTreeSet<String> = entity_strings(&result).into_iter().collect();
            assert_eq!(got, entities(sample.path, owner), "{json}");
        }
    }
}

#[test]
fn grep_surfaces_the_function_of_each_match() {
    let (_repo, snapshot) = samples_repo();
    // `helper(item)` is in the Rust and the Go method bodies only.
    let result = run(&snapshot, r#"{"name":"grep","arguments":{"pattern":"helper\\(item\\)"}}"#);
    let got: BTreeSet<String> = entity_strings(&result).into_iter().collect();
    let mut want = entities("src/stack.rs", Some("Stack.push"));
    want.extend(entities("pkg/stack.go", Some("Stack.Push")));
    assert_eq!(got, want, "{}", result.output);
    // A match in a C++ namespace-level line and one in a class template's method.
    let result = run(&snapshot, r#"{"name":"grep","arguments":{"pattern":"kLimit|push_back","path":"src/geo.cpp"}}"#);
    let got: BTreeSet<String> = entity_strings(&result).into_iter().collect();
    let mut want = entities("src/geo.cpp", Some("geo.Stack.push"));
    want.insert("src/geo.cpp:geo.detail.helper".to_string());
    assert_eq!(got, want, "{}", result.output);
}

#[test]
fn tasks_from_rust_and_go_history_have_function_gold() {
    for (path, source, line, want) in [
        ("src/stack.rs", SAMPLES[0].source, 20, "src/stack.rs:Stack.push"),
        ("pkg/stack.go", SAMPLES[1].source, 16, "pkg/stack.go:Stack.Push"),
    ] {
        let repo = TempRepo::new("o/hist");
        repo.file(path, source);
        repo.commit("initial import of the stack package");
        repo.file(path, touched(source, &[line]));
        repo.commit("Fix push: keep the items in order when the helper clones them");
        let git_repo = git2::Repository::open(&repo.work).unwrap();
        let tasks = tasks_from_history(&git_repo, "o/hist", &HistoryConfig::default()).unwrap();
        assert_eq!(tasks.len(), 1, "{path}: {tasks:#?}");
        let gold = tasks[0].gold.as_ref().unwrap();
        assert_eq!(gold.functions.iter().collect::<Vec<_>>(), [want], "{path}");
        assert_eq!(gold.files.iter().collect::<Vec<_>>(), [path], "{path}");
    }
}
