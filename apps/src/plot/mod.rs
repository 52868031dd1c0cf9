//! Plots. This module: the curves of a training run (`fusegrpo plot`)
//! from `RUN_DIR/metrics.jsonl` (one JSON object per step, written by
//! `fusegrpo train`) into a PNG: reward (mean, a +-std band and a moving
//! average), F1 file and F1 function, e, loss, KL and gradient norm, each
//! against the step.
//!
//! Only the bitmap backend of `plotters` is used and text is drawn with an
//! embedded DejaVu Sans, so no system font (and no fontconfig) is needed.

pub mod scaling;

use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// Font family name under which the embedded font is registered.
pub const FONT: &str = "sans-serif";

/// The metrics of one step that the plot uses; a key that is absent or null
/// in the line (KL without a reference model, say) is `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    pub step: u64,
    pub reward: Option<f64>,
    pub reward_std: Option<f64>,
    pub f1_file: Option<f64>,
    pub f1_func: Option<f64>,
    pub e: Option<f64>,
    pub loss: Option<f64>,
    pub kl: Option<f64>,
    pub grad_norm: Option<f64>,
}

/// Parse the text of a metrics.jsonl (`path` is only used in messages, which
/// name `path:LINE`). Blank lines are skipped; a step logged twice (a run
/// resumed from a checkpoint older than its last logged step) keeps its
/// later line. Rows come back sorted by step.
pub fn parse_metrics(text: &str, path: &Path) -> Result<Vec<Row>> {
    let mut rows = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let where_ = format!("{}:{}", path.display(), i + 1);
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{where_}: malformed JSON line"))?;
        let obj = value.as_object().ok_or_else(|| anyhow!("{where_}: expected a JSON object, got `{value}`"))?;
        let step = obj
            .get("step")
            .and_then(|s| s.as_u64())
            .ok_or_else(|| anyhow!("{where_}: missing or non-integer \"step\""))?;
        let num = |key: &str| -> Result<Option<f64>> {
            match obj.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => v
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| anyhow!("{where_}: \"{key}\" is not a number: `{v}`")),
            }
        };
        let row = Row {
            step,
            reward: num("reward")?,
            reward_std: num("reward_std")?,
            f1_file: num("f1_file")?,
            f1_func: num("f1_func")?,
            e: num("e")?,
            loss: num("loss")?,
            kl: num("kl")?,
            grad_norm: num("grad_norm")?,
        };
        rows.insert(step, row);
    }
    if rows.is_empty() {
        bail!("{}: no steps (the file has no metric lines)", path.display());
    }
    Ok(rows.into_values().collect())
}

/// Trailing moving average over `window` points (shorter at the start).
pub fn moving_average(points: &[(f64, f64)], window: usize) -> Vec<(f64, f64)> {
    let window = window.max(1);
    let mut sum = 0.0;
    let mut out = Vec::with_capacity(points.len());
    for (i, &(x, y)) in points.iter().enumerate() {
        sum += y;
        if i >= window {
            sum -= points[i - window].1;
        }
        out.push((x, sum / (i + 1).min(window) as f64));
    }
    out
}

/// `(step, value)` for the rows where `f` gives a finite value.
fn series(rows: &[Row], f: impl Fn(&Row) -> Option<f64>) -> Vec<(f64, f64)> {
    rows.iter().filter_map(|r| f(r).filter(|v| v.is_finite()).map(|v| (r.step as f64, v))).collect()
}

/// One curve of a panel.
pub(super) struct Curve {
    pub label: String,
    pub color: RGBColor,
    pub points: Vec<(f64, f64)>,
}

/// A filled band between `lower` and `upper` (same x values).
pub(super) struct Band {
    color: RGBColor,
    lower: Vec<(f64, f64)>,
    upper: Vec<(f64, f64)>,
}

/// The x axis of a panel: its name and how its labels read.
pub(super) struct XAxis<'a> {
    pub desc: &'a str,
    pub format: &'a dyn Fn(&f64) -> String,
}

/// The training step as x.
const STEP_AXIS: XAxis<'static> = XAxis { desc: "step", format: &|v| format!("{v:.0}") };

/// Padded y range that covers every value (a flat series gets a unit-ish
/// range); values that are all >= 0 (reward, F1, KL, ...) get no range
/// below 0.
fn y_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (y0, y1, lo) = padded_range(values);
    (if lo >= 0.0 { y0.max(0.0) } else { y0 }, y1)
}

/// A y label with as many decimals as ticks `span / 6` apart need, never
/// "-0.0".
fn y_label(v: f64, span: f64) -> String {
    let step = span / 6.0;
    let decimals = if step > 0.0 && step.is_finite() { (-step.log10()).ceil().clamp(0.0, 6.0) as usize } else { 1 };
    let text = format!("{v:.decimals$}");
    match text.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => text,
    }
}

/// [`y_range`] before the floor at 0, and the lowest value.
fn padded_range(values: impl Iterator<Item = f64>) -> (f64, f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0, 0.0);
    }
    if hi - lo < 1e-12 {
        let pad = if lo.abs() > 1e-12 { lo.abs() * 0.1 } else { 0.5 };
        return (lo - pad, hi + pad, lo);
    }
    let pad = (hi - lo) * 0.05;
    (lo - pad, hi + pad, lo)
}

/// Draw one panel: a title, axes with the step on x, optional band, curves and
/// (for more than one curve) a legend. A panel with no data says so.
pub(super) fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    title: &str,
    x: (f64, f64),
    x_axis: &XAxis<'_>,
    band: Option<Band>,
    curves: Vec<Curve>,
) -> Result<()> {
    let all_y = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.1))
        .chain(band.iter().flat_map(|b| b.lower.iter().chain(&b.upper).map(|p| p.1)))
        .collect::<Vec<_>>();
    if all_y.is_empty() {
        let (w, h) = area.dim_in_pixel();
        area.draw(&Text::new(
            format!("{title}: no data"),
            (w as i32 / 2 - 60, h as i32 / 2),
            (FONT, 18).into_font().color(&BLACK),
        ))
        .map_err(|e| anyhow!("drawing {title}: {e}"))?;
        return Ok(());
    }
    let (y0, y1) = y_range(all_y.into_iter());
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 20))
        .margin(10)
        .margin_right(24)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(x.0..x.1, y0..y1)
        .map_err(|e| anyhow!("drawing {title}: {e}"))?;
    chart
        .configure_mesh()
        .x_desc(x_axis.desc)
        .x_label_formatter(x_axis.format)
        .y_label_formatter(&|v| y_label(*v, y1 - y0))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .x_labels(8)
        .y_labels(6)
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .map_err(|e| anyhow!("drawing {title}: {e}"))?;
    if let Some(band) = band {
        let mut outline = band.upper.clone();
        outline.extend(band.lower.iter().rev());
        chart
            .draw_series(std::iter::once(Polygon::new(outline, band.color.mix(0.18).filled())))
            .map_err(|e| anyhow!("drawing {title}: {e}"))?;
    }
    let legend = curves.len() > 1;
    for c in curves {
        let color = c.color;
        let style = color.stroke_width(2);
        if c.points.len() == 1 {
            // A lone point draws no line: mark it.
            chart
                .draw_series(c.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| anyhow!("drawing {title}: {e}"))?;
        }
        chart
            .draw_series(LineSeries::new(c.points.iter().copied(), style))
            .map_err(|e| anyhow!("drawing {title}: {e}"))?
            .label(c.label)
            .legend(move |(lx, ly)| PathElement::new(vec![(lx, ly), (lx + 18, ly)], color.stroke_width(2)));
    }
    if legend {
        chart
            .configure_series_labels()
            .label_font((FONT, 13))
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(|e| anyhow!("drawing {title} legend: {e}"))?;
    }
    Ok(())
}

/// Registers the embedded font (registering the same family twice just replaces it).
pub(super) fn register_font() -> Result<()> {
    plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| anyhow!("the embedded DejaVu Sans font did not load"))
}

/// Render `rows` into a PNG of `width` x `height` at `out`.
pub fn render(rows: &[Row], title: &str, out: &Path, width: u32, height: u32, smooth: usize) -> Result<()> {
    if width < 300 || height < 200 {
        bail!("--width/--height {width}x{height} is too small (at least 300x200)");
    }
    register_font()?;
    let first = rows.first().map_or(0, |r| r.step) as f64;
    let last = rows.last().map_or(0, |r| r.step) as f64;
    let x = if last > first { (first, last) } else { (first - 0.5, last + 0.5) };

    let root = BitMapBackend::new(out, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{}: {e}", out.display()))?;
    let root = root.titled(title, (FONT, 24)).map_err(|e| anyhow!("{}: {e}", out.display()))?;
    let panels = root.split_evenly((2, 3));

    let reward = series(rows, |r| r.reward);
    let with_std: Vec<_> = rows
        .iter()
        .filter_map(|r| match (r.reward, r.reward_std) {
            (Some(m), Some(s)) if m.is_finite() && s.is_finite() => Some((r.step as f64, m, s)),
            _ => None,
        })
        .collect();
    let band = (!with_std.is_empty()).then(|| Band {
        color: BLUE,
        // A reward is >= 0 (F1 terms times an efficiency factor): the band stops at 0.
        lower: with_std.iter().map(|&(x, m, s)| (x, (m - s).max(0.0))).collect(),
        upper: with_std.iter().map(|&(x, m, s)| (x, m + s)).collect(),
    });
    let mut reward_curves = vec![Curve { label: "mean (band: +-std)".into(), color: BLUE, points: reward.clone() }];
    if smooth > 1 && reward.len() > 1 {
        reward_curves.push(Curve {
            label: format!("moving average ({smooth} steps)"),
            color: RGBColor(230, 120, 0),
            points: moving_average(&reward, smooth),
        });
    }
    draw_panel(&panels[0], "reward", x, &STEP_AXIS, band, reward_curves)?;
    draw_panel(
        &panels[1],
        "F1",
        x,
        &STEP_AXIS,
        None,
        vec![
            Curve { label: "F1 file".into(), color: RGBColor(0, 140, 60), points: series(rows, |r| r.f1_file) },
            Curve { label: "F1 function".into(), color: RGBColor(150, 0, 150), points: series(rows, |r| r.f1_func) },
        ],
    )?;
    let one = |label: &str, color: RGBColor, f: fn(&Row) -> Option<f64>| vec![Curve { label: label.into(), color, points: series(rows, f) }];
    draw_panel(&panels[2], "e (efficiency)", x, &STEP_AXIS, None, one("e", RGBColor(200, 30, 30), |r| r.e))?;
    draw_panel(&panels[3], "loss", x, &STEP_AXIS, None, one("loss", BLACK, |r| r.loss))?;
    draw_panel(&panels[4], "KL (k3, to reference)", x, &STEP_AXIS, None, one("kl", RGBColor(0, 120, 160), |r| r.kl))?;
    draw_panel(&panels[5], "gradient norm (before clipping)", x, &STEP_AXIS, None, one("grad_norm", RGBColor(120, 90, 40), |r| r.grad_norm))?;
    root.present().with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

/// Format the latest value of a metric for the summary line.
fn latest(rows: &[Row], f: impl Fn(&Row) -> Option<f64>) -> String {
    rows.iter().rev().find_map(|r| f(r).filter(|v| v.is_finite())).map_or("-".into(), |v| format!("{v:.4}"))
}

/// Draws `run_dir/metrics.jsonl` into `out` (default `run_dir/plot.png`),
/// `width` x `height` pixels, the reward's moving average over `smooth`
/// steps; returns the line that says what was drawn.
pub fn plot_run(run_dir: &Path, out: Option<&Path>, width: u32, height: u32, smooth: usize) -> Result<String> {
    let path = run_dir.join("metrics.jsonl");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: cannot read it (is {} a run folder of `fusegrpo train`?)", path.display(), run_dir.display()))?;
    let rows = parse_metrics(&text, &path)?;
    let out = out.map(Path::to_path_buf).unwrap_or_else(|| run_dir.join("plot.png"));
    let name = run_dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| run_dir.display().to_string());
    let title = format!("{name}: steps {}..{} ({} logged)", rows[0].step, rows[rows.len() - 1].step, rows.len());
    render(&rows, &title, &out, width, height, smooth)?;
    Ok(format!(
        "wrote {} ({width}x{height}): reward, F1 file/function, e, loss, KL, grad norm over {} steps; last: reward {} F1_file {} F1_func {} e {}",
        out.display(),
        rows.len(),
        latest(&rows, |r| r.reward),
        latest(&rows, |r| r.f1_file),
        latest(&rows, |r| r.f1_func),
        latest(&rows, |r| r.e),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 65 item 12: no "-0.0" tick, and no range below 0 for values
    /// that never go there (the reward's band stops at 0 too).
    #[test]
    fn labels_never_read_minus_zero_and_nonnegative_values_stay_above_zero() {
        assert_eq!(y_label(-0.000_001, 0.6), "0.0");
        assert_eq!(y_label(-0.04, 0.6), "0.0");
        assert_eq!(y_label(-0.1, 0.6), "-0.1");
        assert_eq!(y_label(0.25, 0.06), "0.25");
        assert_eq!(y_label(1234.0, 6000.0), "1234");
        assert_eq!(y_range([0.0, 0.5].into_iter()).0, 0.0);
        assert_eq!(y_range([0.0, 0.0].into_iter()), (0.0, 0.5));
        assert!(y_range([-0.2, 0.5].into_iter()).0 < -0.2, "a loss below 0 keeps its padding");
    }

    #[test]
    fn parse_keeps_the_later_line_of_a_repeated_step_and_sorts() {
        let text = "{\"step\":2,\"reward\":0.5,\"kl\":null}\n\n{\"step\":1,\"reward\":0.1}\n{\"step\":2,\"reward\":0.7}\n";
        let rows = parse_metrics(text, Path::new("m.jsonl")).unwrap();
        assert_eq!(rows.iter().map(|r| r.step).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(rows[1].reward, Some(0.7));
        assert_eq!(rows[1].kl, None);
    }

    #[test]
    fn parse_errors_name_the_line() {
        let err = parse_metrics("{\"step\":1}\n{oops\n", Path::new("m.jsonl")).unwrap_err();
        assert!(format!("{err:#}").contains("m.jsonl:2"), "{err:#}");
        let err = parse_metrics("{\"reward\":1}\n", Path::new("m.jsonl")).unwrap_err();
        assert!(format!("{err:#}").contains("m.jsonl:1: missing"), "{err:#}");
        let err = parse_metrics("{\"step\":1,\"e\":\"x\"}\n", Path::new("m.jsonl")).unwrap_err();
        assert!(format!("{err:#}").contains("\"e\" is not a number"), "{err:#}");
        let err = parse_metrics("\n\n", Path::new("m.jsonl")).unwrap_err();
        assert!(format!("{err:#}").contains("no steps"), "{err:#}");
    }

    #[test]
    fn moving_average_is_trailing() {
        let pts = [(0.0, 1.0), (1.0, 3.0), (2.0, 5.0), (3.0, 7.0)];
        let ma = moving_average(&pts, 2);
        assert_eq!(ma, vec![(0.0, 1.0), (1.0, 2.0), (2.0, 4.0), (3.0, 6.0)]);
    }

    #[test]
    fn flat_series_get_a_nonempty_range() {
        // All zeros (a reward that never moved): from 0 up, never below.
        let (lo, hi) = y_range([0.0, 0.0].into_iter());
        assert!(lo == 0.0 && hi > 0.0);
        let (lo, hi) = y_range([2.0].into_iter());
        assert!(lo < 2.0 && hi > 2.0);
    }
}
