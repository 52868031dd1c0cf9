//! docs/configuration.md against the config structs: every key of every
//! section is documented, every documented key exists, and each documented
//! default is the one the code uses (the key set to it parses to the same
//! config as the key left out). Field names come from serde itself (the
//! error of an unknown key lists them), so a new key fails here until it is
//! documented.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::PathBuf;
use trainer::run_config::*;

/// `(key, default cell)` of each row of the page's tables.
fn rows() -> Vec<(String, String)> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let key = cells[0].trim_start_matches("| ").trim_matches('`').to_string();
            let default = cells[1].trim().to_string();
            (key, default.strip_prefix('`').and_then(|d| d.strip_suffix('`')).unwrap_or(&default).to_string())
        })
        .collect()
}

/// The keys `T` accepts, as its unknown-key error lists them.
fn fields<T: DeserializeOwned>() -> Vec<String> {
    let e = match toml::from_str::<T>("zzz_not_a_key = 1") {
        Ok(_) => panic!("{} accepts an unknown key", std::any::type_name::<T>()),
        Err(e) => e.to_string(),
    };
    let list = e.split("expected one of").nth(1).or_else(|| e.split("expected").nth(1)).unwrap_or_else(|| panic!("{e}"));
    list.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

fn json<T: DeserializeOwned + Serialize>(toml_text: &str) -> Result<serde_json::Value, String> {
    let t: T = toml::from_str(toml_text).map_err(|e| e.to_string())?;
    Ok(serde_json::to_value(t).unwrap())
}

/// Checks the rows of section `prefix` against `T`; `base` holds its
/// required keys.
fn section<T: DeserializeOwned + Serialize>(prefix: &str, base: &str, rows: &[(String, String)], problems: &mut Vec<String>) -> usize {
    let keys = fields::<T>();
    let own: Vec<&(String, String)> = rows
        .iter()
        .filter(|(k, _)| k.strip_prefix(prefix).and_then(|r| r.strip_prefix('.')).is_some_and(|r| !r.contains('.')))
        .collect();
    for k in &keys {
        if !own.iter().any(|(r, _)| *r == format!("{prefix}.{k}")) {
            problems.push(format!("{prefix}.{k}: a key of the code that docs/configuration.md does not list"));
        }
    }
    let plain = json::<T>(base).unwrap_or_else(|e| panic!("[{prefix}] with {base:?}: {e}"));
    for (key, default) in &own {
        let field = &key[prefix.len() + 1..];
        if !keys.iter().any(|k| k == field) {
            problems.push(format!("{key}: documented, but not a key of [{prefix}]"));
            continue;
        }
        match default.as_str() {
            "required" => {
                if !base.lines().any(|l| l.starts_with(&format!("{field} ="))) {
                    problems.push(format!("{key}: documented as required, but the test's base config does not set it"));
                }
            }
            "table" => {}
            "unset" => {
                if plain.get(field).is_some_and(|v| !v.is_null() && v != &serde_json::json!([])) {
                    problems.push(format!("{key}: documented unset, but its default is {}", plain[field]));
                }
            }
            literal => match json::<T>(&format!("{base}\n{field} = {literal}")) {
                Ok(v) if v == plain => {}
                Ok(_) => problems.push(format!("{key}: documented default {literal} is not the code's (the key set to it changes the config; left out: {})", plain.get(field).map_or("not serialized".into(), |v| v.to_string()))),
                Err(e) => problems.push(format!("{key}: the documented default {literal} does not parse: {e}")),
            },
        }
    }
    own.len()
}

#[test]
fn the_configuration_reference_lists_every_key_with_its_default() {
    let rows = rows();
    let mut problems = Vec::new();
    let mut checked = 0;
    checked += section::<ModelSection>("model", "path = \"m\"", &rows, &mut problems);
    checked += section::<EnvSection>("env", "repos_dir = \"r\"", &rows, &mut problems);
    checked += section::<rollout::tools::ToolConfig>("env.tools", "", &rows, &mut problems);
    checked += section::<rollout::episode::EpisodeConfig>("episode", "", &rows, &mut problems);
    checked += section::<rollout::reward::RewardConfig>("reward", "", &rows, &mut problems);
    checked += section::<SamplingSection>("sampling", "", &rows, &mut problems);
    checked += section::<RolloutSection>("rollout", "", &rows, &mut problems);
    checked += section::<VllmSection>("rollout.vllm", "", &rows, &mut problems);
    checked += section::<TrainSection>("train", "", &rows, &mut problems);
    checked += section::<GrpoSection>("grpo", "", &rows, &mut problems);
    checked += section::<OptimSection>("optim", "", &rows, &mut problems);
    checked += section::<SftSection>("sft", "", &rows, &mut problems);
    checked += section::<rollout::episode::filter::FilterConfig>("sft.filter", "", &rows, &mut problems);
    checked += section::<OpeningPhase>("sft.openings", "turns = 1\nepochs = 1\nbatch_rows = 1", &rows, &mut problems);
    checked += section::<PipelineSection>("pipeline", "", &rows, &mut problems);
    checked += section::<SynthSection>("pipeline.synth", "", &rows, &mut problems);
    checked += section::<DifficultySection>("pipeline.difficulty", "", &rows, &mut problems);
    checked += section::<PilotSection>("pipeline.pilot", "", &rows, &mut problems);
    checked += section::<trainer::run_config::LoraSection>("lora", "r = 8", &rows, &mut problems);
    checked += section::<LogSection>("log", "", &rows, &mut problems);
    checked += section::<LocalizeSection>("localize", "", &rows, &mut problems);
    checked += section::<rollout::search::SearchConfig>("search", "", &rows, &mut problems);
    // The top level: `name`, `extends` (read before the sections), and a
    // section heading for every other key.
    for k in fields::<RunConfig>() {
        let documented = rows.iter().any(|(r, _)| *r == k || r.starts_with(&format!("{k}.")));
        if !documented {
            problems.push(format!("{k}: a top-level key of the code that docs/configuration.md does not list"));
        }
    }
    for (key, _) in &rows {
        let top = key.split('.').next().unwrap();
        if top != "extends" && !fields::<RunConfig>().iter().any(|f| f == top) {
            problems.push(format!("{key}: documented, but [{top}] is not a section of a run config"));
        }
    }
    println!("docs/configuration.md: {} rows, {checked} checked against the structs", rows.len());
    assert!(checked > 130, "only {checked} keys checked");
    assert!(problems.is_empty(), "docs/configuration.md:\n  {}", problems.join("\n  "));
}
