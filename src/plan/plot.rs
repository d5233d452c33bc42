//! `plan --plot FILE.svg|FILE.png`: what the replay did over time, for the
//! ScaledObject's own trigger and the recommended one, in three panels
//! sharing the time axis: replicas, jobs waiting, and the longest wait of
//! the jobs arriving in each HPA sync (with `targetWait` drawn across), so
//! a user sees when and why a trigger is late or costly, not only its
//! totals. Gaps (no traffic recorded) are shaded grey.
//!
//! Drawn by `plotters`, into SVG or into its bitmap written as PNG by the
//! `png` crate. Text is laid out (and, in a PNG, drawn) with Noto Sans,
//! embedded in the binary: a fresh machine or a container may have no font
//! to find.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::plan::replay::Moment;

/// Why the plot cannot be written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlotError {
    /// Neither a `.svg` nor a `.png` path.
    #[error("--plot {0}: give a path ending in .svg or .png")]
    Format(String),
    /// The drawing or the file failed.
    #[error("--plot {path}: {problem}")]
    Draw {
        /// The file.
        path: String,
        /// What failed.
        problem: String,
    },
}

/// What a plot is written as, from its path's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Vector: any browser shows it, and it stays sharp.
    Svg,
    /// A 1200 × 900 picture, for a chat or an issue.
    Png,
}

/// The plot's size in pixels.
const SIZE: (u32, u32) = (1200, 900);

/// One trigger's replay, as drawn.
#[derive(Debug, Clone)]
pub struct Series {
    /// The candidate's name, for the legend.
    pub name: String,
    /// Its state at every HPA sync.
    pub timeline: Vec<Moment>,
    /// (arrival, wait) of every job that started, in arrival order.
    pub waits: Vec<(f64, f64)>,
}

/// What the plot shows besides the series.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    /// `targetWait`, seconds.
    pub target_wait: f64,
    /// Seconds between HPA syncs: the waits' bucket.
    pub sync: f64,
    /// Stretches with no traffic recorded, shaded.
    pub gaps: &'a [(f64, f64)],
    /// The replay's length, seconds.
    pub length: f64,
}

/// The format of `path` (`.svg` or `.png`, any case); refuses any other,
/// before anything is replayed.
pub fn check_path(path: &Path) -> Result<Format, PlotError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        _ => Err(PlotError::Format(path.display().to_string())),
    }
}

/// Registers the embedded font as plotters' `sans-serif`, once.
fn font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font("sans-serif", FontStyle::Normal, ttf_noto_sans::REGULAR)
                .map_err(|_| "the embedded font cannot be read".to_owned())
        })
        .clone()
}

/// The longest wait of the jobs arriving in each `sync`-long bucket, as
/// (bucket start, wait); buckets with no job are left out, never 0.
pub fn worst_waits(waits: &[(f64, f64)], sync: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for &(arrival, wait) in waits {
        let start = (arrival / sync).floor() * sync;
        match out.last_mut() {
            Some((t, w)) if *t == start => *w = w.max(wait),
            _ => out.push((start, wait)),
        }
    }
    out
}

/// Minutes from the start, the plot's time axis.
fn minutes(t: f64) -> f64 {
    t / 60.0
}

/// One panel: its title, the top of its value axis, and each series'
/// (minutes, value) points.
struct Panel {
    title: &'static str,
    top: f64,
    lines: Vec<Vec<(f64, f64)>>,
    /// Whether `targetWait` is drawn across it.
    target: bool,
}

/// Writes the plot of `series` to `path` (checked by [`check_path`]).
pub fn draw(path: &Path, frame: &Frame, series: &[Series]) -> Result<(), PlotError> {
    let format = check_path(path)?;
    let fail = |e: String| PlotError::Draw {
        path: path.display().to_string(),
        problem: e,
    };
    font().map_err(fail)?;
    match format {
        Format::Svg => {
            let root = SVGBackend::new(path, SIZE).into_drawing_area();
            draw_on(&root, frame, series).map_err(fail)?;
            root.present().map_err(|e| fail(e.to_string()))
        }
        Format::Png => {
            let (w, h) = SIZE;
            let mut pixels = vec![0u8; w as usize * h as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut pixels, SIZE).into_drawing_area();
                draw_on(&root, frame, series).map_err(fail)?;
                root.present().map_err(|e| fail(e.to_string()))?;
            }
            write_png(path, SIZE, &pixels).map_err(fail)
        }
    }
}

/// The three panels of `series` on `root`.
fn draw_on<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    frame: &Frame,
    series: &[Series],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
    for (area, panel) in root.split_evenly((3, 1)).iter().zip(panels(frame, series)) {
        draw_panel(area, frame, &names, &panel)?;
    }
    Ok(())
}

/// `pixels` (RGB, row by row) written to `path` as an 8-bit RGB PNG.
fn write_png(path: &Path, (w, h): (u32, u32), pixels: &[u8]) -> Result<(), String> {
    let file = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(pixels).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())
}

/// The three panels' data: replicas, jobs waiting, the worst wait.
fn panels(frame: &Frame, series: &[Series]) -> [Panel; 3] {
    let top = |values: &mut dyn Iterator<Item = f64>| values.fold(1.0_f64, f64::max);
    let timeline = |f: fn(&Moment) -> f64| -> Vec<Vec<(f64, f64)>> {
        series.iter().map(|s| points(&s.timeline, f)).collect()
    };
    let replicas = timeline(|m| m.replicas as f64);
    let backlog = timeline(|m| m.backlog as f64);
    let worst: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            worst_waits(&s.waits, frame.sync)
                .into_iter()
                .map(|(t, w)| (minutes(t), w))
                .collect()
        })
        .collect();
    let values = |lines: &Vec<Vec<(f64, f64)>>| {
        let mut all = lines.iter().flatten().map(|p| p.1);
        top(&mut all)
    };
    [
        Panel {
            title: "replicas",
            top: values(&replicas),
            lines: replicas,
            target: false,
        },
        Panel {
            title: "jobs waiting",
            top: values(&backlog),
            lines: backlog,
            target: false,
        },
        Panel {
            title: "longest wait of the jobs arriving in each HPA sync, seconds",
            top: values(&worst).max(frame.target_wait),
            lines: worst,
            target: true,
        },
    ]
}

/// One panel on `area`, its series named by `names`.
fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    frame: &Frame,
    names: &[&str],
    panel: &Panel,
) -> Result<(), String> {
    let end = minutes(frame.length.max(1.0));
    let top = panel.top * 1.1;
    let err = |e: DrawingAreaErrorKind<_>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("minutes from the start")
        .draw()
        .map_err(err)?;
    let grey = RGBColor(200, 200, 200).mix(0.5).filled();
    let shades = frame
        .gaps
        .iter()
        .map(|&(a, b)| Rectangle::new([(minutes(a), 0.0), (minutes(b), top)], grey));
    chart.draw_series(shades).map_err(err)?;
    if panel.target {
        let across = [(0.0, frame.target_wait), (end, frame.target_wait)];
        chart
            .draw_series(LineSeries::new(across, BLACK.stroke_width(1)))
            .map_err(err)?
            .label("targetWait")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
    }
    let step = minutes(frame.sync) * 1.5;
    for (k, (name, pts)) in names.iter().zip(&panel.lines).enumerate() {
        let color = Palette99::pick(k).to_rgba();
        for (n, piece) in segments(pts, step).into_iter().enumerate() {
            let drawn = chart
                .draw_series(LineSeries::new(
                    piece.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(err)?;
            if n == 0 {
                drawn
                    .label(*name)
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
            }
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

/// `points` cut where two in a row are more than `step` apart, so a
/// stretch with no value (a gap, no job arriving) is drawn as nothing,
/// not as a line across it.
pub fn segments(points: &[(f64, f64)], step: f64) -> Vec<&[(f64, f64)]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..points.len() {
        if points[i].0 - points[i - 1].0 > step {
            out.push(&points[start..i]);
            start = i;
        }
    }
    if start < points.len() {
        out.push(&points[start..]);
    }
    out
}

/// A timeline's (minutes, value) points.
fn points(timeline: &[Moment], value: impl Fn(&Moment) -> f64) -> Vec<(f64, f64)> {
    timeline.iter().map(|m| (minutes(m.t), value(m))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_wait_is_per_sync_bucket_and_an_empty_bucket_is_left_out() {
        let waits = [(1.0, 2.0), (14.0, 5.0), (16.0, 1.0), (50.0, 3.0)];
        assert_eq!(
            worst_waits(&waits, 15.0),
            vec![(0.0, 5.0), (15.0, 1.0), (45.0, 3.0)]
        );
    }

    #[test]
    fn a_line_is_cut_where_its_points_are_further_apart_than_a_step() {
        let pts = [(0.0, 1.0), (1.0, 2.0), (5.0, 3.0), (6.0, 4.0)];
        assert_eq!(segments(&pts, 1.5), vec![&pts[0..2], &pts[2..4]]);
        assert!(segments(&[], 1.5).is_empty());
    }

    #[test]
    fn only_an_svg_or_png_path_is_taken() {
        assert_eq!(check_path(Path::new("out/plan.svg")), Ok(Format::Svg));
        assert_eq!(check_path(Path::new("PLAN.SVG")), Ok(Format::Svg));
        assert_eq!(check_path(Path::new("plan.Png")), Ok(Format::Png));
        assert_eq!(
            check_path(Path::new("plan.jpg")),
            Err(PlotError::Format("plan.jpg".to_owned()))
        );
        assert_eq!(
            check_path(Path::new("plan")),
            Err(PlotError::Format("plan".to_owned()))
        );
    }
}
