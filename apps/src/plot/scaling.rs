//! The test-time scaling plot: F1 file, F1 function and tokens spent per
//! task against the number of attempts N (log scale), one curve per
//! selector (and per selector + refine), from the `scaling.json` that
//! `eval --attempts N --out-dir DIR` writes.

use super::{draw_panel, register_font, Curve, XAxis, FONT};
use anyhow::{anyhow, bail, Context, Result};
use plotters::prelude::*;
use rollout::scaling::ScalingRow;
use std::path::{Path, PathBuf};

/// Reads `dir/scaling.json` and draws it into `out` (default `dir/scaling.png`).
pub fn draw_dir(dir: &Path, out: Option<&Path>) -> Result<PathBuf> {
    let path = dir.join("scaling.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: cannot read it (is {} an output folder of `eval --attempts N --out-dir`?)", path.display(), dir.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let rows: Vec<ScalingRow> = serde_json::from_value(v.get("rows").cloned().ok_or_else(|| anyhow!("{}: no `rows`", path.display()))?)
        .with_context(|| format!("{}: `rows`", path.display()))?;
    if rows.is_empty() {
        bail!("{}: no rows to plot", path.display());
    }
    let title = format!(
        "test-time scaling: policy {}, judge {}",
        v["policy"].as_str().unwrap_or("?"),
        v["judge"].as_str().unwrap_or("?")
    );
    let out = out.map(Path::to_path_buf).unwrap_or_else(|| dir.join("scaling.png"));
    render(&rows, &title, &out)?;
    Ok(out)
}

const COLORS: [RGBColor; 6] =
    [RGBColor(30, 90, 200), RGBColor(0, 140, 60), RGBColor(200, 30, 30), RGBColor(120, 120, 120), RGBColor(150, 0, 150), RGBColor(230, 120, 0)];

/// One curve per row label, x = log2 N.
fn curves(rows: &[ScalingRow], f: impl Fn(&ScalingRow) -> f64) -> Vec<Curve> {
    let mut labels: Vec<String> = Vec::new();
    for r in rows {
        if !labels.contains(&r.label()) {
            labels.push(r.label());
        }
    }
    labels
        .iter()
        .enumerate()
        .map(|(i, label)| Curve {
            label: label.clone(),
            color: COLORS[i % COLORS.len()],
            points: rows.iter().filter(|r| &r.label() == label).map(|r| ((r.attempts as f64).log2(), f(r))).collect(),
        })
        .collect()
}

fn render(rows: &[ScalingRow], title: &str, out: &Path) -> Result<()> {
    register_font()?;
    let max = rows.iter().map(|r| r.attempts).max().unwrap_or(1) as f64;
    let x = (-0.1, max.log2().max(1.0) + 0.1);
    let format = |v: &f64| {
        let n = 2f64.powf(*v);
        if (n - n.round()).abs() < 1e-6 {
            format!("{}", n.round())
        } else {
            String::new()
        }
    };
    let axis = XAxis { desc: "attempts N (log scale)", format: &format };
    let root = BitMapBackend::new(out, (1500, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{}: {e}", out.display()))?;
    let root = root.titled(title, (FONT, 22)).map_err(|e| anyhow!("{}: {e}", out.display()))?;
    let panels = root.split_evenly((1, 3));
    draw_panel(&panels[0], "F1 file", x, &axis, None, curves(rows, |r| r.f1_file))?;
    draw_panel(&panels[1], "F1 function", x, &axis, None, curves(rows, |r| r.f1_func))?;
    draw_panel(&panels[2], "tokens per task", x, &axis, None, curves(rows, |r| r.tokens))?;
    root.present().with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}
