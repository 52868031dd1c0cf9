//! The vague instructions a synthetic issue is written around (SERA's
//! "fix an issue related to ..."): one is drawn per task, so issues vary in
//! what they complain about while the gold stays the picked function.

/// The instructions, each of the form `Fix an issue related to <topic>.`
pub const INSTRUCTIONS: &[&str] = &[
    "Fix an issue related to state management.",
    "Fix an issue related to error handling.",
    "Fix an issue related to input validation.",
    "Fix an issue related to boundary conditions.",
    "Fix an issue related to default values.",
    "Fix an issue related to configuration handling.",
    "Fix an issue related to string formatting.",
    "Fix an issue related to data conversion.",
    "Fix an issue related to resource cleanup.",
    "Fix an issue related to caching.",
    "Fix an issue related to ordering of results.",
    "Fix an issue related to empty or missing values.",
    "Fix an issue related to encoding.",
    "Fix an issue related to performance.",
    "Fix an issue related to compatibility with older callers.",
    "Fix an issue related to the handling of optional arguments.",
];

/// The topic of an instruction: what follows "related to", without the
/// final period (the whole instruction when it has no such phrase).
pub fn topic(instruction: &str) -> &str {
    let rest = instruction.split_once("related to ").map_or(instruction, |(_, t)| t);
    rest.trim().trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_instruction_has_a_topic() {
        for i in INSTRUCTIONS {
            let t = topic(i);
            assert!(!t.is_empty() && !t.contains("related") && !t.ends_with('.'), "{i} -> {t}");
        }
        assert_eq!(topic("Fix an issue related to caching."), "caching");
    }
}
