//! `plan --plot FILE.svg`: what the replay did over time, for the
//! ScaledObject's own trigger and the recommended one, in three panels
//! sharing the time axis: replicas, jobs waiting, and the longest wait of
//! the jobs arriving in each HPA sync (with `targetWait` drawn across), so
//! a user sees when and why a trigger is late or costly, not only its
//! totals. Gaps (no traffic recorded) are shaded grey.
//!
//! Drawn by `plotters` into SVG: its text needs no font in the binary.

use std::path::Path;

use plotters::prelude::*;

use crate::plan::replay::Moment;

/// Why the plot cannot be written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlotError {
    /// Not a `.svg` path.
    #[error(
        "--plot {0}: only SVG is drawn (give a path ending in .svg; any SVG viewer or rsvg-convert makes a PNG of it)"
    )]
    NotSvg(String),
    /// The drawing or the file failed.
    #[error("--plot {path}: {problem}")]
    Draw {
        /// The file.
        path: String,
        /// What failed.
        problem: String,
    },
}

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

/// Refuses a path that is not `.svg`, before anything is replayed.
pub fn check_path(path: &Path) -> Result<(), PlotError> {
    let svg = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if svg {
        Ok(())
    } else {
        Err(PlotError::NotSvg(path.display().to_string()))
    }
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
    check_path(path)?;
    let fail = |e: String| PlotError::Draw {
        path: path.display().to_string(),
        problem: e,
    };
    let root = SVGBackend::new(path, (1200, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
    for (area, panel) in root.split_evenly((3, 1)).iter().zip(panels(frame, series)) {
        draw_panel(area, frame, &names, &panel).map_err(fail)?;
    }
    root.present().map_err(|e| fail(e.to_string()))
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
fn draw_panel(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
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
    fn only_an_svg_path_is_taken() {
        assert!(check_path(Path::new("out/plan.svg")).is_ok());
        assert!(check_path(Path::new("PLAN.SVG")).is_ok());
        assert_eq!(
            check_path(Path::new("plan.png")),
            Err(PlotError::NotSvg("plan.png".to_owned()))
        );
    }
}
