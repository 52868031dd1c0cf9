//! Hand-made episodes: e, F1 and R equal the values computed by hand in the
//! comments.

use crate::repo_builder;

use repo_builder::TempRepo;
use rollout::answer::{parse_answer, Answer};
use rollout::efficiency::efficiency;
use rollout::entities::{Entity, EntitySet};
use rollout::reward::{score, RewardConfig};
use rollout::toolcall::parse_tool_calls;
use rollout::tools::ToolRunner;

fn set(items: &[&str]) -> EntitySet {
    items.iter().map(|s| Entity::parse(s).unwrap()).collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn efficiency_by_hand() {
    // Call 1 surfaces {a.py, a.py:f}: both new -> g1 = 2/2 = 1.
    // Call 2 (same turn) surfaces {a.py, b.py}: a.py seen -> g2 = 1/2.
    // Call 3 fails: E3 = {} -> g3 = 0.
    // Call 4 repeats call 1: nothing new -> g4 = 0/2 = 0.
    // Call 5 surfaces {b.py, b.py:C.m, c.py}: 2 new of 3 -> g5 = 2/3.
    // e = (1 + 1/2 + 0 + 0 + 2/3) / 5 = (13/6) / 5 = 13/30.
    let calls = [
        set(&["a.py", "a.py:f"]),
        set(&["a.py", "b.py"]),
        set(&[]),
        set(&["a.py", "a.py:f"]),
        set(&["b.py", "b.py:C.m", "c.py"]),
    ];
    assert!(close(efficiency(&calls), 13.0 / 30.0));
    assert_eq!(efficiency(&[]), 0.0);
    assert_eq!(efficiency(&[set(&[]), set(&[])]), 0.0);
    assert_eq!(efficiency(&[set(&["x.py"])]), 1.0);
}

#[test]
fn f1_and_reward_by_hand() {
    let gold = Answer::from_strings(["a.py:f", "b.py:C.m", "b.py"]);
    // Gold files {a.py, b.py}, functions {a.py:f, b.py:C.m}.
    let answer = parse_answer("Here:\n```\na.py::f\nc.py:g\n```");
    // Predicted files {a.py, c.py}: hits 1, P = 1/2, R = 1/2 -> F1_file = 1/2.
    // Predicted functions {a.py:f, c.py:g}: hits 1, P = 1/2, R = 1/2 -> F1_func = 1/2.
    let config = RewardConfig { w_file: 0.25, w_func: 0.75, alpha: 1.0, gamma: 2.0, answer_bonus: 0.0 };
    // F1 = 0.25 * 1/2 + 0.75 * 1/2 = 1/2; with e = 0.4: R = 1 * 1/2 + 2 * 1/2 * 0.4 = 0.9.
    let s = score(&answer, &gold, &config, 0.4);
    assert!(close(s.f1_file, 0.5) && close(s.f1_func, 0.5) && close(s.f1, 0.5), "{s:?}");
    assert!(close(s.reward, 0.9), "{s:?}");

    // A file-only answer against gold with no functions: F1_func = 1 (nothing
    // predicted, nothing gold); files {a.py} vs {a.py, b.py}: P = 1, R = 1/2,
    // F1_file = 2/3. Default weights 0.5/0.5: F1 = 1/3 + 1/2 = 5/6; e = 0 -> R = 5/6.
    let file_gold = Answer::from_strings(["a.py", "b.py"]);
    let s = score(&parse_answer("a.py"), &file_gold, &RewardConfig::default(), 0.0);
    assert!(close(s.f1_file, 2.0 / 3.0) && close(s.f1_func, 1.0) && close(s.reward, 5.0 / 6.0), "{s:?}");

    // Predicting a function where gold has none: F1_func = 0.
    let s = score(&parse_answer("a.py:f"), &file_gold, &RewardConfig::default(), 1.0);
    assert_eq!(s.f1_func, 0.0);
}

#[test]
fn whole_episode_by_hand() {
    let repo = TempRepo::new("o/ep");
    repo.file("pkg/m.py", "import os\n\ndef f():\n    return 1\n\nclass C:\n    def m(self):\n        return 2\n")
        .file("pkg/n.py", "def g():\n    return 1\n");
    repo.commit("one");
    let snap = repo.snapshot("HEAD");
    let runner = ToolRunner::default();
    // Turn 1: grep "return 1" -> pkg/m.py:4 (in f), pkg/n.py:2 (in g):
    //   E1 = {pkg/m.py, pkg/m.py:f, pkg/n.py, pkg/n.py:g}, g1 = 4/4 = 1.
    // read_file pkg/m.py 6-8 -> E2 = {pkg/m.py, pkg/m.py:C, pkg/m.py:C.m}:
    //   pkg/m.py seen -> g2 = 2/3.
    let turn1 = r#"<tool_call>{"name":"grep","arguments":{"pattern":"return 1"}}</tool_call>
<tool_call>{"name":"read_file","arguments":{"path":"pkg/m.py","start_line":6,"end_line":8}}</tool_call>"#;
    // Turn 2: the same grep again -> g3 = 0; a bad call -> g4 = 0.
    let turn2 = r#"<tool_call>{"name":"grep","arguments":{"pattern":"return 1"}}</tool_call><tool_call>{"name":"nope"}</tool_call>"#;
    let mut history = Vec::new();
    for turn in [turn1, turn2] {
        let results = runner.run_turn(&snap, &parse_tool_calls(turn));
        history.extend(results.into_iter().map(|r| r.entities));
    }
    assert_eq!(history[1], set(&["pkg/m.py", "pkg/m.py:C", "pkg/m.py:C.m"]));
    // e = (1 + 2/3 + 0 + 0) / 4 = 5/12.
    let e = efficiency(&history);
    assert!(close(e, 5.0 / 12.0), "{e}");
    // Answer pkg/m.py:C.m against gold {pkg/m.py:C.m}: F1_file = F1_func = 1,
    // F1 = 1, R = 1 + 1 * 5/12 = 17/12.
    let gold = Answer::from_strings(["pkg/m.py:C.m"]);
    let s = score(&parse_answer("pkg/m.py:C.m"), &gold, &RewardConfig::default(), e);
    assert!(close(s.reward, 17.0 / 12.0), "{s:?}");
}

#[test]
fn reward_config_is_strict() {
    assert!(serde_json::from_str::<RewardConfig>(r#"{"alpha": 1.0, "beta": 2.0}"#).is_err());
    let partial: RewardConfig = serde_json::from_str(r#"{"gamma": 0.5}"#).unwrap();
    assert_eq!(partial.gamma, 0.5);
    assert_eq!(partial.alpha, RewardConfig::default().alpha);
    assert!(RewardConfig { w_file: -1.0, ..Default::default() }.validate().is_err());
    assert!(RewardConfig { gamma: f64::NAN, ..Default::default() }.validate().is_err());
    assert!(RewardConfig::default().validate().is_ok());
}

/// The format term: `answer_bonus` is added to the training reward of an
/// episode that ends with a non-empty answer, never to R, and never for an
/// empty answer or an episode stopped by a limit.
#[test]
fn answer_bonus_goes_to_the_training_reward_only() {
    use rollout::episode::{Episode, Phase, StopReason};
    let s = score(&parse_answer("a.py"), &Answer::from_strings(["a.py", "b.py"]), &RewardConfig::default(), 0.5);
    let episode = |stop: StopReason, answer: &[&str]| Episode {
        task_id: "t".into(),
        sample: 0,
        tokens: vec![],
        loss_mask: vec![],
        logprobs: vec![],
        prompt_tokens: 0,
        turns: vec![],
        phase: Phase::Done(stop),
        answer: answer.iter().map(|a| a.to_string()).collect(),
        score: Some(s),
        seconds: 0.0,
    };
    let cfg = RewardConfig { answer_bonus: 0.1, ..Default::default() };
    let answered = episode(StopReason::Answer, &["a.py"]);
    assert!(answered.answered());
    assert!(close(answered.training_reward(&cfg), s.reward + 0.1), "{}", answered.training_reward(&cfg));
    assert!(close(answered.training_reward(&RewardConfig::default()), s.reward));
    for (stop, answer) in [(StopReason::Answer, &[][..]), (StopReason::MaxTurns, &["a.py"][..]), (StopReason::MaxTokens, &[][..])] {
        let e = episode(stop, answer);
        assert!(!e.answered(), "{stop:?} {answer:?}");
        assert!(close(e.training_reward(&cfg), s.reward), "{stop:?} {answer:?}");
    }
    assert!(s.reward > 0.0, "{s:?}");
    assert!(RewardConfig { answer_bonus: -0.1, ..Default::default() }.validate().unwrap_err().to_string().contains("answer_bonus"));
}
