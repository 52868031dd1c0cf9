//! The final answer (DESIGN.md, "Answer and F1"): entities one per line,
//! optionally inside a fenced block, and set F1.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::entities::Entity;

/// Predicted (or gold) entities by level, as display strings. Every
/// function's file is also in `files`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// File paths.
    #[serde(default)]
    pub files: BTreeSet<String>,
    /// `path:Qualified.name` entries.
    #[serde(default)]
    pub functions: BTreeSet<String>,
}

impl Answer {
    /// Adds an entity (a function adds its file too).
    pub fn insert(&mut self, entity: &Entity) {
        self.files.insert(entity.file_path().to_string());
        if entity.is_function() {
            self.functions.insert(entity.to_string());
        }
    }

    /// Builds from entity strings; unparsable strings are skipped.
    pub fn from_strings<'a>(items: impl IntoIterator<Item = &'a str>) -> Self {
        let mut answer = Answer::default();
        for entity in items.into_iter().filter_map(Entity::parse) {
            answer.insert(&entity);
        }
        answer
    }
}

/// Parses the final assistant text. A `<think>` block is ignored; when fenced
/// blocks (```) are present only their lines count. Each line may carry a
/// list marker (`-`, `*`, `1.`) and backticks; lines that are not a single
/// entity (prose) are skipped.
pub fn parse_answer(text: &str) -> Answer {
    let mut answer = Answer::default();
    for entity in answer_entities(text) {
        answer.insert(&entity);
    }
    answer
}

/// The entities [`parse_answer`] reads from `text`, in the order written
/// (the ranking a single answer gives), each once.
pub fn answer_entities(text: &str) -> Vec<Entity> {
    let text = text.rsplit_once("</think>").map_or(text, |(_, after)| after);
    let lines: Vec<&str> = text.lines().collect();
    let fenced = fenced_lines(&lines);
    let chosen: Vec<&str> = if fenced.is_empty() { lines } else { fenced };
    let mut out: Vec<Entity> = Vec::new();
    for entity in chosen.into_iter().map(clean_line).filter_map(Entity::parse) {
        if !out.contains(&entity) {
            out.push(entity);
        }
    }
    out
}

/// Lines inside ``` fences (an unclosed fence runs to the end).
fn fenced_lines<'a>(lines: &[&'a str]) -> Vec<&'a str> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in lines {
        if line.trim_start().starts_with("```") {
            inside = !inside;
        } else if inside {
            out.push(*line);
        }
    }
    out
}

fn clean_line(line: &str) -> &str {
    let mut line = line.trim();
    for marker in ["- ", "* ", "+ "] {
        if let Some(rest) = line.strip_prefix(marker) {
            line = rest.trim_start();
        }
    }
    if let Some((number, rest)) = line.split_once(". ") {
        if !number.is_empty() && number.chars().all(|c| c.is_ascii_digit()) {
            line = rest.trim_start();
        }
    }
    line.trim_matches('`').trim()
}

/// Set F1 of `predicted` against `gold`; when gold is empty: 1 if nothing
/// was predicted, else 0.
pub fn f1(predicted: &BTreeSet<String>, gold: &BTreeSet<String>) -> f64 {
    if gold.is_empty() {
        return if predicted.is_empty() { 1.0 } else { 0.0 };
    }
    let hits = predicted.intersection(gold).count() as f64;
    if hits == 0.0 {
        return 0.0;
    }
    let precision = hits / predicted.len() as f64;
    let recall = hits / gold.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_fenced_list() {
        let text = "<think>a.py:nope</think>The culprits:\n```\n- `a/b.py:C.m`\n2. c.py\nd.py::f\n```\nDone.";
        let answer = parse_answer(text);
        assert_eq!(answer.files, set(&["a/b.py", "c.py", "d.py"]));
        assert_eq!(answer.functions, set(&["a/b.py:C.m", "d.py:f"]));
    }

    #[test]
    fn parses_plain_lines_and_skips_prose() {
        let answer = parse_answer("I think these:\na.py\nb.py:f\n");
        assert_eq!(answer.files, set(&["a.py", "b.py"]));
        assert_eq!(answer.functions, set(&["b.py:f"]));
    }

    #[test]
    fn f1_cases() {
        // P = 1/2, R = 1/1 -> F1 = 2*(1/2)*1/(3/2) = 2/3
        assert!((f1(&set(&["a", "b"]), &set(&["a"])) - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(f1(&set(&[]), &set(&[])), 1.0);
        assert_eq!(f1(&set(&["a"]), &set(&[])), 0.0);
        assert_eq!(f1(&set(&[]), &set(&["a"])), 0.0);
        assert_eq!(f1(&set(&["x"]), &set(&["a"])), 0.0);
    }
}
