//! TensorBoard event files (`[log] tensorboard = true`, `--tensorboard DIR`):
//! read back with a reader of their own here (record framing, masked
//! CRC-32C, the few `Event` protobuf fields), they hold one value per
//! scalar of metrics.jsonl per step, equal to it, also after a resume that
//! redoes a step.

use e2e::{fusegrpo_ok, read_jsonl, shop_world};
use std::collections::BTreeMap;
use std::path::Path;

/// CRC-32C bit by bit (the binary's is table-driven).
fn crc32c(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 == 1 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
        }
    }
    !c
}

fn masked(data: &[u8]) -> u32 {
    let c = crc32c(data);
    c.rotate_right(15).wrapping_add(0xA282_EAD8)
}

/// The records of an event file, every CRC checked.
fn records(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    let (mut at, mut out) = (0, vec![]);
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
    while at < bytes.len() {
        let n = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
        assert_eq!(masked(&bytes[at..at + 8]), u32_at(at + 8), "{}: length CRC at byte {at}", path.display());
        let data = &bytes[at + 12..at + 12 + n];
        assert_eq!(masked(data), u32_at(at + 12 + n), "{}: data CRC at byte {at}", path.display());
        out.push(data.to_vec());
        at += 16 + n;
    }
    out
}

/// A protobuf message's fields: (number, wire type, varint or fixed value, bytes).
fn fields(mut b: &[u8]) -> Vec<(u64, u64, u64, Vec<u8>)> {
    fn varint(b: &mut &[u8]) -> u64 {
        let mut v = 0;
        for shift in (0..64).step_by(7) {
            let x = b[0];
            *b = &b[1..];
            v |= ((x & 0x7f) as u64) << shift;
            if x & 0x80 == 0 {
                break;
            }
        }
        v
    }
    let mut out = vec![];
    while !b.is_empty() {
        let key = varint(&mut b);
        let (num, bytes) = match key & 7 {
            0 => (varint(&mut b), vec![]),
            1 => (u64::from_le_bytes(b[..8].try_into().unwrap()), b[..8].to_vec()),
            2 => {
                let n = varint(&mut b) as usize;
                (0, b[..n].to_vec())
            }
            5 => (u32::from_le_bytes(b[..4].try_into().unwrap()) as u64, b[..4].to_vec()),
            w => panic!("wire type {w}"),
        };
        b = &b[match key & 7 {
            0 => 0,
            1 => 8,
            5 => 4,
            _ => bytes.len(),
        }..];
        out.push((key >> 3, key & 7, num, bytes));
    }
    out
}

/// Every scalar of the event files in `dir`: (tag, step) -> values (all of them, to catch duplicates).
pub(crate) fn scalars(dir: &Path) -> BTreeMap<(String, u64), Vec<f32>> {
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.to_string_lossy().contains("tfevents")).collect();
    files.sort();
    assert!(!files.is_empty(), "no event file in {}", dir.display());
    let mut out: BTreeMap<(String, u64), Vec<f32>> = BTreeMap::new();
    for file in files {
        let records = records(&file);
        let first = fields(&records[0]);
        assert!(first.iter().any(|f| f.0 == 3 && f.3 == b"brain.Event:2"), "{}: the first event is not file_version", file.display());
        for event in &records[1..] {
            let fs = fields(event);
            let step = fs.iter().find(|f| f.0 == 2).map_or(0, |f| f.2);
            for summary in fs.iter().filter(|f| f.0 == 5) {
                for value in fields(&summary.3).iter().filter(|f| f.0 == 1) {
                    let v = fields(&value.3);
                    let tag = String::from_utf8(v.iter().find(|f| f.0 == 1).unwrap().3.clone()).unwrap();
                    let simple = f32::from_bits(v.iter().find(|f| f.0 == 2 && f.1 == 5).unwrap().2 as u32);
                    out.entry((tag, step)).or_default().push(simple);
                }
            }
        }
    }
    out
}

/// metrics.jsonl's scalars as the event files must hold them: numbers and
/// booleans at any depth (keys joined by `/`), as f32, no `step`, no nulls,
/// and no per-task reward (`tasks/<id>`: `[log] tensorboard_tasks` is off).
pub(crate) fn expected(run: &Path) -> BTreeMap<(String, u64), Vec<f32>> {
    let mut all = expected_with_tasks(run);
    all.retain(|(tag, _), _| !tag.starts_with("tasks/"));
    all
}

/// [`expected`] with the per-task rewards (`[log] tensorboard_tasks = true`).
pub(crate) fn expected_with_tasks(run: &Path) -> BTreeMap<(String, u64), Vec<f32>> {
    fn walk(tag: &str, v: &serde_json::Value, step: u64, out: &mut BTreeMap<(String, u64), Vec<f32>>) {
        match v {
            serde_json::Value::Number(n) => out.entry((tag.to_string(), step)).or_default().push(n.as_f64().unwrap() as f32),
            serde_json::Value::Bool(b) => out.entry((tag.to_string(), step)).or_default().push(*b as u8 as f32),
            serde_json::Value::Object(m) => m.iter().for_each(|(k, v)| walk(&format!("{tag}/{k}"), v, step, out)),
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    for row in read_jsonl(&run.join("metrics.jsonl")) {
        let step = row["step"].as_u64().unwrap();
        for (k, v) in row.as_object().unwrap().iter().filter(|(k, _)| *k != "step") {
            walk(k, v, step, &mut out);
        }
    }
    out
}

#[test]
fn event_files_hold_every_scalar_of_each_step_once_through_a_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    std::fs::write(&cfg, std::fs::read_to_string(&cfg).unwrap() + "[log]\ntensorboard = true\n").unwrap();
    let (cfg, run) = (cfg.to_str().unwrap(), tmp.path().join("run"));
    // 3 steps (checkpoints at 2 and 3), then a resume from step 2 that
    // redoes step 3 (its timings differ) and goes on to step 4.
    fusegrpo_ok(&["train", "--config", cfg, "--out", run.to_str().unwrap(), "--max-steps", "3"]);
    let tb = run.join("tensorboard");
    let first = scalars(&tb);
    assert_eq!(first, expected(&run));
    assert!(first.contains_key(&("loss".to_string(), 3)), "{:?}", first.keys());
    assert!(!first.keys().any(|(t, _)| t.starts_with("tasks/")), "no tag per task by default (issue 65 item 9): {:?}", first.keys());
    assert!(read_jsonl(&run.join("metrics.jsonl"))[0]["tasks"].as_object().is_some_and(|t| !t.is_empty()), "metrics.jsonl keeps them");
    fusegrpo_ok(&["train", "--config", cfg, "--out", run.to_str().unwrap(), "--resume", run.join("step_00000002").to_str().unwrap(), "--overwrite"]);
    assert_eq!(read_jsonl(&run.join("metrics.jsonl")).len(), 4);
    let resumed = scalars(&tb);
    assert!(resumed.values().all(|v| v.len() == 1), "a step logged twice: {:?}", resumed.iter().find(|(_, v)| v.len() > 1));
    assert_eq!(resumed, expected(&run));
    assert_eq!(std::fs::read_dir(&tb).unwrap().count(), 2, "one event file per process start");
    // `--tensorboard DIR` writes there, without the config key.
    let (plain, dir) = (tmp.path().join("plain"), tmp.path().join("tb-elsewhere"));
    let text = std::fs::read_to_string(cfg).unwrap().replace("[log]\ntensorboard = true\n", "");
    std::fs::write(tmp.path().join("plain.toml"), text).unwrap();
    let plain_cfg = tmp.path().join("plain.toml");
    fusegrpo_ok(&["train", "--config", plain_cfg.to_str().unwrap(), "--out", plain.to_str().unwrap(), "--max-steps", "1", "--tensorboard", dir.to_str().unwrap()]);
    assert_eq!(scalars(&dir), expected(&plain));
    assert!(!plain.join("tensorboard").exists());
    // `[log]` is not compared on resume: turned on for step 2 alone.
    fusegrpo_ok(&["train", "--config", plain_cfg.to_str().unwrap(), "--out", plain.to_str().unwrap(), "--resume", "auto", "--max-steps", "2", "--set", "log.tensorboard=true"]);
    let later = scalars(&plain.join("tensorboard"));
    assert!(!later.is_empty() && later.keys().all(|(_, step)| *step == 2), "{:?}", later.keys());
    // The per-task rewards when asked for.
    let (tasks_run, tasks_dir) = (tmp.path().join("tasks-run"), tmp.path().join("tb-tasks"));
    fusegrpo_ok(&["train", "--config", plain_cfg.to_str().unwrap(), "--out", tasks_run.to_str().unwrap(), "--max-steps", "1", "--tensorboard", tasks_dir.to_str().unwrap(), "--set", "log.tensorboard_tasks=true"]);
    let with_tasks = scalars(&tasks_dir);
    assert!(with_tasks.keys().any(|(t, _)| t.starts_with("tasks/")), "{:?}", with_tasks.keys());
    assert_eq!(with_tasks, expected_with_tasks(&tasks_run));
}
