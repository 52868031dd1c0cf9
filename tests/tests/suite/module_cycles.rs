//! Dependencies run one way: no crate of the workspace has a cycle among
//! its files' modules or among its top-level modules
//! (`e2e::module_graph`: `use`, inline paths, re-exports resolved).

use e2e::module_graph::{crate_graph, cycles, display, top_level, workspace_roots};
use std::path::Path;

#[test]
fn no_crate_has_a_module_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace");
    let roots = workspace_roots(root);
    assert!(roots.len() >= 5, "crate roots found: {roots:?}");
    let mut problems = Vec::new();
    let mut modules = 0;
    for r in &roots {
        let g = crate_graph(r).unwrap();
        modules += g.files.len();
        let name = r.strip_prefix(root).unwrap_or(r).display().to_string();
        for c in cycles(&g.edges) {
            let edges: Vec<String> = c
                .iter()
                .flat_map(|a| g.edges[a].iter().filter(|b| c.contains(b)).map(move |b| format!("{} -> {}", display(a), display(b))))
                .collect();
            problems.push(format!("{name}: files {}", edges.join(", ")));
        }
        let top = top_level(&g);
        for c in cycles(&top) {
            let edges: Vec<String> = c
                .iter()
                .flat_map(|a| top[a].iter().filter(|b| c.contains(b)).map(move |b| format!("{a} -> {b}")))
                .collect();
            problems.push(format!("{name}: top-level modules {}", edges.join(", ")));
        }
    }
    println!("module graph: {} crate roots, {modules} modules, {} cycles", roots.len(), problems.len());
    assert!(modules > 100, "only {modules} modules were read");
    assert!(problems.is_empty(), "module cycles:\n  {}", problems.join("\n  "));
}
