//! `fusegrpo plot RUN_DIR`: a PNG of the run's curves from metrics.jsonl.

use e2e::{fusegrpo, fusegrpo_ok};
use std::path::Path;

/// 20 steps of plausible metrics (rising reward, noisy loss, KL from step 0).
fn write_metrics(dir: &Path) {
    let mut text = String::new();
    for step in 0..20u64 {
        let t = step as f64 / 19.0;
        let wobble = ((step * 7 % 5) as f64 - 2.0) * 0.02;
        text.push_str(
            &serde_json::json!({
                "step": step,
                "reward": 0.2 + 0.5 * t + wobble,
                "reward_std": 0.15 - 0.05 * t,
                "frac_reward_zero_std": 0.1,
                "f1_file": 0.3 + 0.4 * t,
                "f1_func": 0.1 + 0.3 * t + wobble,
                "e": 0.5 + 0.2 * t,
                "loss": 0.05 * (1.0 - t) + wobble,
                "kl": if step == 0 { serde_json::Value::Null } else { serde_json::json!(0.001 * step as f64) },
                "grad_norm": 1.0 + wobble * 10.0,
                "lr": 1e-6,
                "tokens": 1000 + step,
            })
            .to_string(),
        );
        text.push('\n');
    }
    std::fs::write(dir.join("metrics.jsonl"), text).unwrap();
}

/// Width and height from the IHDR chunk (bytes 16..24, big-endian).
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&png[12..16], b"IHDR", "first chunk is IHDR");
    (u32::from_be_bytes(png[16..20].try_into().unwrap()), u32::from_be_bytes(png[20..24].try_into().unwrap()))
}

#[test]
fn plot_writes_a_png_of_the_run() {
    let dir = tempfile::tempdir().unwrap();
    write_metrics(dir.path());
    let run = dir.path().to_str().unwrap();
    let stdout = fusegrpo_ok(&["plot", run]);
    assert!(stdout.contains("plot.png") && stdout.contains("20 steps"), "{stdout}");
    let png = std::fs::read(dir.path().join("plot.png")).expect("plot.png written");
    assert_eq!(png_size(&png), (1500, 900));
    // A blank canvas compresses to a few KB; curves, text and the band do not.
    assert!(png.len() > 20_000, "PNG suspiciously small: {} bytes", png.len());
    // Pixel variety: the compressed image data is not one repeated byte.
    let distinct: std::collections::BTreeSet<u8> = png[33..].iter().copied().collect();
    assert!(distinct.len() > 200, "only {} distinct bytes", distinct.len());

    let other = dir.path().join("small.png");
    fusegrpo_ok(&["plot", run, "--out", other.to_str().unwrap(), "--width", "640", "--height", "480"]);
    assert_eq!(png_size(&std::fs::read(&other).unwrap()), (640, 480));
}

#[test]
fn plot_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().to_str().unwrap();
    let out = fusegrpo(&["plot", run]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("metrics.jsonl") && err.contains("cannot read"), "{err}");

    write_metrics(dir.path());
    let path = dir.path().join("metrics.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text = text.lines().enumerate().map(|(i, l)| if i == 4 { "{\"step\": 4, \"reward\": ".to_string() } else { l.to_string() }).collect::<Vec<_>>().join("\n");
    std::fs::write(&path, text).unwrap();
    let out = fusegrpo(&["plot", run]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("metrics.jsonl:5"), "{err}");
    assert!(!dir.path().join("plot.png").exists());

    std::fs::write(&path, "\n").unwrap();
    let out = fusegrpo(&["plot", run]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no steps"), "{}", String::from_utf8_lossy(&out.stderr));
}
