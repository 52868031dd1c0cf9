//! Entity voting: keep what enough attempts answered.
//!
//! Each attempt votes once for every entity it answered; a function it
//! answered is also a vote for its file (a listed function implies its
//! file, as in scoring). Entities with at least `min` votes are kept, and a
//! kept function keeps its file.

use crate::answer::Answer;
use std::collections::BTreeMap;

/// The default threshold: a majority of the attempts that answered (at
/// least 1). Attempts without an answer abstain.
pub fn majority(answered: usize) -> usize {
    answered / 2 + 1
}

/// The voted answer of `answers` (one entity list per attempt) with
/// threshold `min` (>= 1), as sorted entity strings (functions, then files).
pub fn vote(answers: &[&[String]], min: usize) -> Vec<String> {
    let min = min.max(1);
    let mut files: BTreeMap<String, usize> = BTreeMap::new();
    let mut functions: BTreeMap<String, usize> = BTreeMap::new();
    for answer in answers {
        let a = Answer::from_strings(answer.iter().map(String::as_str));
        for f in a.files {
            *files.entry(f).or_default() += 1;
        }
        for f in a.functions {
            *functions.entry(f).or_default() += 1;
        }
    }
    let kept_functions = functions.into_iter().filter(|(_, n)| *n >= min).map(|(f, _)| f);
    let kept_files = files.into_iter().filter(|(_, n)| *n >= min).map(|(f, _)| f);
    let voted = Answer::from_strings(kept_functions.collect::<Vec<_>>().iter().chain(kept_files.collect::<Vec<_>>().iter()).map(String::as_str));
    voted.functions.into_iter().chain(voted.files).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn functions_imply_their_files_and_the_threshold_holds() {
        let a = v(&["a.py:f"]);
        let b = v(&["a.py"]);
        let c = v(&["b.py:g", "a.py:f"]);
        let answers: Vec<&[String]> = vec![&a, &b, &c];
        // a.py has 3 votes (two through a.py:f), a.py:f 2, b.py and b.py:g 1.
        assert_eq!(vote(&answers, 2), v(&["a.py:f", "a.py"]));
        assert_eq!(vote(&answers, 3), v(&["a.py"]));
        assert_eq!(vote(&answers, 1), v(&["a.py:f", "b.py:g", "a.py", "b.py"]));
        assert!(vote(&answers, 4).is_empty());
        assert_eq!(majority(3), 2);
        assert_eq!(majority(4), 3);
        assert_eq!(majority(0), 1);
    }

    #[test]
    fn an_attempt_votes_once_per_entity() {
        let a = v(&["a.py:f", "a.py:g", "a.py"]);
        let b = v(&["c.py"]);
        let answers: Vec<&[String]> = vec![&a, &b];
        // a.py is implied twice and listed once by the first attempt: one vote.
        assert_eq!(vote(&answers, 2), Vec::<String>::new());
    }
}
