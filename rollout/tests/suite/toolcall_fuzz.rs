//! Property test: the tool-call parser and the tools on arbitrary text
//! (seeded random generator; each seed is a reproducible case) never panic,
//! and well-formed calls embedded in noise are all recovered in order.

use crate::repo_builder;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use repo_builder::TempRepo;
use rollout::toolcall::{parse_tool_calls, ToolCall};
use rollout::tools::ToolRunner;

const PIECES: &[&str] = &[
    "<tool_call>", "</tool_call>", "<tool_", "call>", "{", "}", "[", "]", "\"", ":", ",", "\\", "\n",
    "\"name\"", "\"arguments\"", "\"grep\"", "\"glob\"", "\"read_file\"", "\"pattern\"", "\"path\"",
    "\"../\"", "\"/etc/passwd\"", "\"**/**/**\"", "\"(a*)*b\"", "null", "true", "1e309", "-1", "é", "\u{0}",
    "\u{FFFD}", "<tool_response>", "```", "\u{1F600}", "   ",
];

fn noise(rng: &mut ChaCha8Rng) -> String {
    let n = rng.random_range(0..40);
    (0..n)
        .map(|_| {
            if rng.random_bool(0.8) {
                PIECES[rng.random_range(0..PIECES.len())].to_string()
            } else {
                char::from_u32(rng.random_range(0..0x11000)).unwrap_or('?').to_string()
            }
        })
        .collect()
}

#[test]
fn arbitrary_text_never_panics_and_calls_run() {
    let repo = TempRepo::new("o/fuzz");
    repo.file("a.py", "def f():\n    return 1\n").symlink("l", "/etc/passwd");
    repo.commit("one");
    let snap = repo.snapshot("HEAD");
    let runner = ToolRunner::default();
    for seed in 0..3000u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let text = noise(&mut rng);
        let calls = parse_tool_calls(&text);
        assert!(calls.len() <= text.matches("<tool_call>").count(), "seed {seed}");
        let results = runner.run_turn(&snap, &calls);
        assert_eq!(results.len(), calls.len(), "seed {seed}");
        for result in results {
            assert!(!result.error || result.entities.is_empty(), "seed {seed}");
        }
    }
}

#[test]
fn embedded_valid_calls_are_recovered_in_order() {
    for seed in 0..500u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut text = String::new();
        let mut want = Vec::new();
        for i in 0..rng.random_range(1..5) {
            let filler = noise(&mut rng).replace("<tool_call>", "").replace("</tool_call>", "");
            let filler = filler.replace("<tool_", "");
            text.push_str(&filler);
            let call = ToolCall {
                name: format!("tool{i}"),
                arguments: serde_json::json!({"pattern": noise(&mut rng), "n": i}).as_object().unwrap().clone(),
            };
            text.push_str(&format!("<tool_call>\n{}\n</tool_call>", serde_json::to_string(&call).unwrap()));
            want.push(call);
        }
        let got: Vec<ToolCall> = parse_tool_calls(&text).into_iter().map(|c| c.unwrap()).collect();
        assert_eq!(got, want, "seed {seed}");
    }
}
