//! SVG plots of runs, drawn with `plotters`' SVG backend.
//!
//! Per policy:
//! - `<policy>.gpu_timeline.svg`: one row per GPU, grouped by GPU type (a
//!   tinted band and a label per type), with a bar per job run on the GPU,
//!   colored by job id; x is hours from the trace start.
//!   Job ids label the bars of small runs; a note under the chart says what
//!   the colors and the tinted background mean.
//! - `<policy>.utilization.svg`: busy GPUs over time, per round, stacked by
//!   type up to the cluster's size (no line hides another), the legend in
//!   a panel beside the chart; x is hours.
//!
//! A sweep's `jct_vs_load.svg`: mean JCT against the arrival rate, a line
//! and a confidence band per policy.
//!
//! For all policies together, `jct_cdf.svg`: the empirical CDF of the
//! measured, completed jobs' JCT in hours, one line per policy.
//!
//! Text (titles, axis labels, legends) is written as SVG `<text>` elements:
//! without the `ttf` feature `plotters` lays text out with a crude size
//! estimate and needs no font file; the viewer picks a sans-serif font.
//!
//! Big runs are drawn at screen resolution so the files stay small (a few
//! MB at most): the timeline shows at most [`MAX_TIMELINE_GPUS`] GPUs (each
//! type keeps a share) and snaps bars to pixel columns, merging what is
//! shorter than a pixel; long utilization series are averaged per pixel
//! column; long CDFs keep every k-th job.

use std::error::Error;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use hadar_core::metrics::{GpuSpan, RoundRecord, RunResult};
use hadar_core::sim::sweep::CurvePoint;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::exit::CliError;

/// The most GPU rows a timeline shows.
pub const MAX_TIMELINE_GPUS: usize = 200;
/// The most bars a timeline draws (about 90 bytes of SVG each).
const MAX_TIMELINE_BARS: usize = 30_000;
/// The most points a CDF line has.
const MAX_CDF_POINTS: usize = 4_000;
/// Width of every plot (px).
const WIDTH: u32 = 1200;
/// Approximate width of the plotting area (px): `WIDTH` less the margins
/// and the label area, the resolution that big runs are reduced to.
const PLOT_PX: usize = 1050;
/// Seconds per hour.
const HOUR: f64 = 3600.0;
/// Height of the line under a timeline that says how to read it (px).
const NOTE_PX: u32 = 26;
/// Runs with at most this many jobs get job ids on their timeline bars.
const MAX_LABELLED_JOBS: usize = 40;

/// Colors for jobs, GPU types and policies (Tableau 10 and a few more).
const PALETTE: [RGBColor; 14] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 128),
    RGBColor(170, 110, 40),
    RGBColor(0, 128, 128),
    RGBColor(128, 0, 0),
];

/// What drawing can fail with (plotters' errors, boxed).
type DrawError = Box<dyn Error + Send + Sync>;
/// An SVG drawing area covering the whole image.
type Root<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Writes the plots of `results` into `dir` (created if missing) and returns
/// the paths written: per result `<policy>.gpu_timeline.svg` and
/// `<policy>.utilization.svg`, then `jct_cdf.svg` over all results (not
/// written when `results` is empty). Characters of a policy name other than
/// ASCII letters, digits, `-`, `_` and `.` become `_` in file names.
pub fn write_plots(dir: &Path, results: &[RunResult]) -> Result<Vec<PathBuf>, CliError> {
    fs::create_dir_all(dir).map_err(|e| CliError::output(dir.display(), e))?;
    let mut written = Vec::with_capacity(2 * results.len() + 1);
    for r in results {
        let stem = super::file_stem(&r.summary.policy);

        let path = dir.join(format!("{stem}.gpu_timeline.svg"));
        let timeline = Timeline::new(r);
        write_svg(&path, (WIDTH, timeline.height_px()), |root| {
            timeline.draw(root, r)
        })?;
        written.push(path);

        let path = dir.join(format!("{stem}.utilization.svg"));
        write_svg(&path, (WIDTH, 600), |root| draw_utilization(root, r))?;
        written.push(path);
    }
    if !results.is_empty() {
        let path = dir.join("jct_cdf.svg");
        write_svg(&path, (WIDTH, 700), |root| draw_jct_cdf(root, results))?;
        written.push(path);
    }
    Ok(written)
}

/// Writes a sweep's mean JCT against load to `path`: a line per policy with
/// a marker per load, and a band for the 95% confidence interval where
/// there are several seeds.
pub fn write_load_plot(path: &Path, curves: &[CurvePoint]) -> Result<(), CliError> {
    write_svg(path, (WIDTH, 700), |root| draw_load_curves(root, curves))
}

fn draw_load_curves(root: &Root<'_>, curves: &[CurvePoint]) -> Result<(), DrawError> {
    let mut policies: Vec<&str> = Vec::new();
    for c in curves {
        if !policies.contains(&c.policy.as_str()) {
            policies.push(&c.policy);
        }
    }
    let top = |c: &CurvePoint| {
        c.ci95_h
            .map_or(c.mean_jct_h, |(_, hi)| hi.max(c.mean_jct_h))
    };
    let loads = || curves.iter().map(|c| c.jobs_per_hour);
    let (lo_x, hi_x) = (
        loads().fold(f64::INFINITY, f64::min),
        loads().fold(0.0_f64, f64::max),
    );
    // A margin of a tenth of the span each side (of the load itself with
    // one load), never below 0.
    let pad = if hi_x > lo_x {
        (hi_x - lo_x) * 0.1
    } else {
        hi_x.max(1.0) * 0.1
    };
    let (lo_x, hi_x) = if lo_x.is_finite() {
        ((lo_x - pad).max(0.0), hi_x + pad)
    } else {
        (0.0, 1.0)
    };
    let max_y = curves.iter().map(top).fold(0.0_f64, f64::max);
    let max_y = if max_y > 0.0 { max_y * 1.08 } else { 1.0 };
    let banded = curves.iter().any(|c| c.ci95_h.is_some());
    let caption = if banded {
        "Mean JCT against load (band: 95% confidence interval over seeds)"
    } else {
        "Mean JCT against load (one seed: no interval)"
    };
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(lo_x..hi_x, 0.0..max_y)?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .x_desc("input job rate (jobs/hour)")
        .y_desc("mean job completion time (hours)")
        .draw()?;
    let of = |policy: &str| -> Vec<&CurvePoint> {
        curves.iter().filter(|c| c.policy == policy).collect()
    };
    // Every band first, then every line: no band hides a line.
    for (i, policy) in policies.iter().enumerate() {
        let band: Vec<(f64, f64, f64)> = of(policy)
            .iter()
            .filter_map(|c| c.ci95_h.map(|(lo, hi)| (c.jobs_per_hour, lo.max(0.0), hi)))
            .collect();
        if band.len() > 1 {
            let outline: Vec<(f64, f64)> = band
                .iter()
                .map(|&(x, _, hi)| (x, hi))
                .chain(band.iter().rev().map(|&(x, lo, _)| (x, lo)))
                .collect();
            chart.draw_series(std::iter::once(Polygon::new(
                outline,
                palette(i).mix(0.15).filled(),
            )))?;
        }
    }
    for (i, policy) in policies.iter().enumerate() {
        let color = palette(i);
        let line: Vec<(f64, f64)> = of(policy)
            .iter()
            .map(|c| (c.jobs_per_hour, c.mean_jct_h))
            .collect();
        chart
            .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))?
            .label(policy.to_string())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
        chart.draw_series(line.into_iter().map(|p| Circle::new(p, 4, color.filled())))?;
    }
    draw_series_legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

/// The legend of a chart's labelled series, in a light box at `position`.
fn draw_series_legend<'a, 'b: 'a>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    position: SeriesLabelPosition,
) -> Result<(), DrawError> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 14))
        .draw()?;
    Ok(())
}

/// Renders an SVG of `size` (px) with `draw` and writes it to `path`.
fn write_svg(
    path: &Path,
    size: (u32, u32),
    draw: impl FnOnce(&Root<'_>) -> Result<(), DrawError>,
) -> Result<(), CliError> {
    let svg = render_svg(size, draw)
        .map_err(|e| CliError::output(path.display(), io::Error::other(e)))?;
    fs::write(path, svg).map_err(|e| CliError::output(path.display(), e))
}

/// Renders an SVG of `size` (px) on a white background into a string.
fn render_svg(
    size: (u32, u32),
    draw: impl FnOnce(&Root<'_>) -> Result<(), DrawError>,
) -> Result<String, DrawError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)?;
        draw(&root)?;
        root.present()?;
    }
    Ok(svg)
}

/// The palette color number `i` (wrapping).
fn palette(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// `c` mixed with white: `amount` 0 is `c`, 1 is white.
fn tint(c: RGBColor, amount: f64) -> RGBColor {
    let mix = |v: u8| (f64::from(v) + (255.0 - f64::from(v)) * amount).round() as u8;
    RGBColor(mix(c.0), mix(c.1), mix(c.2))
}

/// The end of the run in hours (the last span or round; 1 if there is none),
/// the x range of the time plots.
fn end_hours(r: &RunResult) -> f64 {
    let spans = r.spans.iter().map(|s| s.end_s);
    let rounds = r.rounds.iter().map(|x| x.end_s);
    let end = spans.chain(rounds).fold(0.0_f64, f64::max) / HOUR;
    if end.is_finite() && end > 0.0 {
        end
    } else {
        1.0
    }
}

/// The number of GPU types: named ones, and any index used beyond them.
fn type_count(r: &RunResult) -> usize {
    let used = r.gpu_type_of.iter().map(|&t| usize::from(t) + 1).max();
    r.gpu_types
        .len()
        .max(r.gpus_per_type.len())
        .max(used.unwrap_or(0))
}

/// GPU type `t`'s name (its index if unnamed).
fn type_name(r: &RunResult, t: usize) -> String {
    r.gpu_types
        .get(t)
        .cloned()
        .unwrap_or_else(|| format!("type {t}"))
}

// ---------------------------------------------------------------- timeline

/// One bar of the timeline: a row running a job over an interval.
#[derive(Debug, Clone, PartialEq)]
struct Bar {
    /// Row (0 at the top).
    row: usize,
    /// Job id.
    job: u32,
    /// Start (s).
    start_s: f64,
    /// End (s).
    end_s: f64,
}

/// A run's GPU timeline, reduced to what is drawn.
#[derive(Debug)]
struct Timeline {
    /// The GPU shown on each row, grouped by type.
    rows: Vec<usize>,
    /// Per type shown: (type, first row, rows, GPUs of the type).
    groups: Vec<(usize, usize, usize, usize)>,
    /// GPUs in the cluster.
    total_gpus: usize,
    /// The bars, snapped to pixel columns.
    bars: Vec<Bar>,
    /// The x range (h).
    end_h: f64,
}

impl Timeline {
    /// Picks the rows and bars of `r`'s timeline.
    fn new(r: &RunResult) -> Self {
        let by_type = gpus_by_type(&r.gpu_type_of, type_count(r));
        let shown = rows_to_show(&by_type, MAX_TIMELINE_GPUS);
        let mut rows = Vec::new();
        let mut groups = Vec::new();
        for (t, gpus) in shown.iter().enumerate() {
            if !gpus.is_empty() {
                groups.push((t, rows.len(), gpus.len(), by_type[t].len()));
                rows.extend_from_slice(gpus);
            }
        }
        let mut row_of = vec![None; r.gpu_type_of.len()];
        for (row, &gpu) in rows.iter().enumerate() {
            row_of[gpu] = Some(row);
        }
        let end_h = end_hours(r);
        let bars = rasterize_budgeted(&r.spans, &row_of, rows.len(), end_h * HOUR);
        Self {
            rows,
            groups,
            total_gpus: r.gpu_type_of.len(),
            bars,
            end_h,
        }
    }

    /// Height of a row (px): rows get thinner as there are more.
    fn row_px(&self) -> u32 {
        match self.rows.len() {
            0..=16 => 28,
            17..=48 => 12,
            _ => 6,
        }
    }

    /// Height of the whole image (px).
    fn height_px(&self) -> u32 {
        let rows = u32::try_from(self.rows.len()).unwrap_or(u32::MAX);
        (rows.saturating_mul(self.row_px())).max(120) + 130 + NOTE_PX
    }

    /// Draws the timeline of `r` on `root`, with a line under it that says
    /// how to read it.
    fn draw(&self, root: &Root<'_>, r: &RunResult) -> Result<(), DrawError> {
        let (_, height) = root.dim_in_pixel();
        let (chart_area, note) = root.split_vertically(height.saturating_sub(NOTE_PX));
        let jobs = self.jobs_shown();
        let labelled = jobs <= MAX_LABELLED_JOBS;
        let text = format!(
            "Bars: the job a GPU runs, one color per job ({}); colors repeat every {} jobs. \
             Tinted background: the GPU is idle (tint = its type).",
            if labelled {
                "labelled with its id where the bar is wide enough"
            } else {
                "too many jobs to label"
            },
            PALETTE.len()
        );
        note.draw(&Text::new(text, (14, 4), ("sans-serif", 13).into_font()))?;
        self.draw_chart(&chart_area, r, labelled)
    }

    /// Distinct jobs among the bars.
    fn jobs_shown(&self) -> usize {
        let mut jobs: Vec<u32> = self.bars.iter().map(|b| b.job).collect();
        jobs.sort_unstable();
        jobs.dedup();
        jobs.len()
    }

    /// The chart itself; job ids on the bars wide enough when `labelled`.
    fn draw_chart(&self, root: &Root<'_>, r: &RunResult, labelled: bool) -> Result<(), DrawError> {
        let n = self.rows.len() as f64;
        let shown = if self.rows.len() < self.total_gpus {
            format!("{} of {} GPUs shown", self.rows.len(), self.total_gpus)
        } else {
            format!("{} GPUs", self.total_gpus)
        };
        let title = format!(
            "{}: GPU timeline ({shown}; color = job id)",
            r.summary.policy
        );
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(110)
            .build_cartesian_2d(0.0..self.end_h, 0.0..n.max(1.0))?;
        chart
            .configure_mesh()
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 15))
            .disable_y_mesh()
            .y_labels(0)
            .x_labels(12)
            .x_desc("time (hours)")
            .y_desc("GPUs, by type")
            .draw()?;

        // Row y (from the top) to chart y (from the bottom).
        let top = |row: usize| n - row as f64;
        for &(t, first, count, of_type) in &self.groups {
            let band = tint(palette(t), if t % 2 == 0 { 0.88 } else { 0.8 });
            chart.draw_series(std::iter::once(Rectangle::new(
                [(0.0, top(first)), (self.end_h, top(first + count))],
                band.filled(),
            )))?;
            let mid = top(first) - count as f64 / 2.0;
            let (x, y) = chart.backend_coord(&(0.0, mid));
            let label = if count < of_type {
                format!("{} ({count}/{of_type})", type_name(r, t))
            } else {
                format!("{} ({count})", type_name(r, t))
            };
            let style = ("sans-serif", 14)
                .into_font()
                .color(&palette(t))
                .pos(Pos::new(HPos::Right, VPos::Center));
            root.draw(&Text::new(label, (x - 8, y), style))?;
        }
        chart.draw_series(self.bars.iter().map(|b| {
            let y0 = top(b.row) - 0.1;
            let y1 = top(b.row + 1) + 0.1;
            Rectangle::new(
                [(b.start_s / HOUR, y0), (b.end_s / HOUR, y1)],
                palette(b.job as usize).filled(),
            )
        }))?;
        if labelled && self.row_px() >= 12 {
            for b in &self.bars {
                let mid = top(b.row) - 0.5;
                let (x0, y) = chart.backend_coord(&(b.start_s / HOUR, mid));
                let (x1, _) = chart.backend_coord(&(b.end_s / HOUR, mid));
                let label = b.job.to_string();
                // About 8 px per character at 12 px.
                if x1 - x0 < 8 * i32::try_from(label.len()).unwrap_or(9) + 6 {
                    continue;
                }
                let style = ("sans-serif", 12)
                    .into_font()
                    .color(&ink_on(palette(b.job as usize)))
                    .pos(Pos::new(HPos::Center, VPos::Center));
                root.draw(&Text::new(label, ((x0 + x1) / 2, y), style))?;
            }
        }
        Ok(())
    }
}

/// Black or white, whichever reads better on `c`.
fn ink_on(c: RGBColor) -> RGBColor {
    let luma = 0.299 * f64::from(c.0) + 0.587 * f64::from(c.1) + 0.114 * f64::from(c.2);
    if luma > 150.0 {
        BLACK
    } else {
        WHITE
    }
}

/// The GPU indices of each type, in index order.
fn gpus_by_type(gpu_type_of: &[u16], types: usize) -> Vec<Vec<usize>> {
    let mut by_type = vec![Vec::new(); types];
    for (gpu, &t) in gpu_type_of.iter().enumerate() {
        by_type[usize::from(t)].push(gpu);
    }
    by_type
}

/// The GPUs to show per type: all when there are at most `cap`, else the
/// first ones of each type, each type keeping its share of `cap` (at least
/// one GPU).
fn rows_to_show(by_type: &[Vec<usize>], cap: usize) -> Vec<Vec<usize>> {
    let total: usize = by_type.iter().map(Vec::len).sum();
    if total <= cap {
        return by_type.to_vec();
    }
    by_type
        .iter()
        .map(|gpus| {
            let share = (gpus.len() * cap / total).clamp(1, gpus.len().max(1));
            gpus.iter().copied().take(share).collect()
        })
        .collect()
}

/// The bars of `spans` at [`PLOT_PX`] columns, halving the columns until
/// there are at most [`MAX_TIMELINE_BARS`] bars.
fn rasterize_budgeted(
    spans: &[GpuSpan],
    row_of: &[Option<usize>],
    rows: usize,
    end_s: f64,
) -> Vec<Bar> {
    let mut columns = PLOT_PX;
    loop {
        let bars = rasterize(spans, row_of, rows, end_s, columns);
        if bars.len() <= MAX_TIMELINE_BARS || columns <= 16 {
            return bars;
        }
        columns /= 2;
    }
}

/// The bars of `spans` snapped to `columns` equal columns over `0..end_s`:
/// each column of a row shows the job that ran longest in it (so spans
/// shorter than a column still show), and runs of columns showing the same
/// job merge into one bar. Spans on GPUs without a row are skipped.
fn rasterize(
    spans: &[GpuSpan],
    row_of: &[Option<usize>],
    rows: usize,
    end_s: f64,
    columns: usize,
) -> Vec<Bar> {
    let width = end_s / columns as f64;
    // Per row and column: the job that ran longest there, and for how long.
    let mut cells: Vec<Option<(u32, f64)>> = vec![None; rows * columns];
    for s in spans {
        let Some(Some(row)) = row_of.get(s.gpu as usize).copied() else {
            continue;
        };
        if s.end_s <= s.start_s || width.is_nan() || width <= 0.0 {
            continue;
        }
        let first = ((s.start_s / width).floor().max(0.0) as usize).min(columns);
        let last = ((s.end_s / width).ceil().max(0.0) as usize).min(columns);
        for col in first..last {
            let lo = s.start_s.max(col as f64 * width);
            let hi = s.end_s.min((col + 1) as f64 * width);
            let cell = &mut cells[row * columns + col];
            if cell.is_none_or(|(_, best)| hi - lo > best) {
                *cell = Some((s.job, hi - lo));
            }
        }
    }
    let mut bars = Vec::new();
    for (row, line) in cells.chunks(columns.max(1)).enumerate() {
        let mut col = 0;
        while col < line.len() {
            let Some((job, _)) = line[col] else {
                col += 1;
                continue;
            };
            let start = col;
            while col < line.len() && line[col].is_some_and(|(j, _)| j == job) {
                col += 1;
            }
            bars.push(Bar {
                row,
                job,
                start_s: start as f64 * width,
                end_s: col as f64 * width,
            });
        }
    }
    bars
}

// ------------------------------------------------------------- utilization

/// Width of the legend panel right of the utilization chart (px).
const LEGEND_PX: u32 = 150;

/// Draws the busy GPUs of `r`'s rounds, stacked by type (so no line hides
/// another), up to the cluster's size; the legend sits beside the chart.
fn draw_utilization(root: &Root<'_>, r: &RunResult) -> Result<(), DrawError> {
    let end_h = end_hours(r);
    let total: u32 = r.gpus_per_type.iter().sum();
    let (width, _) = root.dim_in_pixel();
    let (plot, legend) = root.split_horizontally(width.saturating_sub(LEGEND_PX));
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            format!(
                "{}: busy GPUs, stacked by type ({total} GPUs)",
                r.summary.policy
            ),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..end_h, 0.0..f64::from(total.max(1)))?;
    let count = |v: &f64| format!("{v:.0}");
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .x_labels(12)
        .y_labels(usize::try_from(total.clamp(2, 12)).unwrap_or(12) + 1)
        .y_label_formatter(&count)
        .x_desc("time (hours)")
        .y_desc("GPUs busy")
        .draw()?;

    // Type t's band lies between the busy GPUs of the types before it and
    // those of the types up to it.
    let below = |x: &RoundRecord, t: usize| (0..t).map(|u| busy(x, u)).sum::<f64>();
    let mut keys = Vec::new();
    for (t, &gpus) in r.gpus_per_type.iter().enumerate() {
        if gpus == 0 {
            continue;
        }
        let end_s = end_h * HOUR;
        let upper = series_points(&r.rounds, end_s, |x| below(x, t) + busy(x, t));
        let lower = series_points(&r.rounds, end_s, |x| below(x, t));
        let color = palette(t);
        let outline: Vec<(f64, f64)> = upper.iter().chain(lower.iter().rev()).copied().collect();
        chart.draw_series(std::iter::once(Polygon::new(
            outline,
            tint(color, 0.35).filled(),
        )))?;
        chart.draw_series(LineSeries::new(upper, color.stroke_width(1)))?;
        keys.push((format!("{} ({gpus})", type_name(r, t)), color));
    }
    draw_legend(&legend, &keys, "GPU type (GPUs)")?;
    Ok(())
}

/// A legend of colored boxes in its own panel, under a heading.
fn draw_legend(
    area: &Root<'_>,
    keys: &[(String, RGBColor)],
    heading: &str,
) -> Result<(), DrawError> {
    let font = ("sans-serif", 14).into_font();
    area.draw(&Text::new(heading.to_string(), (4, 60), font.clone()))?;
    for (i, (label, color)) in keys.iter().enumerate() {
        let y = 86 + 24 * i32::try_from(i).unwrap_or(0);
        area.draw(&Rectangle::new(
            [(6, y - 7), (24, y + 7)],
            tint(*color, 0.35).filled(),
        ))?;
        area.draw(&Rectangle::new(
            [(6, y - 7), (24, y + 7)],
            color.stroke_width(1),
        ))?;
        area.draw(&Text::new(
            label.clone(),
            (30, y),
            font.clone()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    Ok(())
}

/// GPUs of type `t` busy in round `x`.
fn busy(x: &RoundRecord, t: usize) -> f64 {
    f64::from(x.busy_gpus.get(t).copied().unwrap_or(0))
}

/// A step line (x in hours) of `value` per round: exact when there are few
/// rounds, else averaged over [`PLOT_PX`] columns of `0..end_s`.
fn series_points(
    rounds: &[RoundRecord],
    end_s: f64,
    value: impl Fn(&RoundRecord) -> f64,
) -> Vec<(f64, f64)> {
    if rounds.len() <= PLOT_PX {
        step_points(rounds, value)
    } else {
        binned_points(rounds, end_s, PLOT_PX, value)
    }
}

/// A step line (x in hours) holding `value` over each round, at 0 in gaps
/// between rounds.
fn step_points(rounds: &[RoundRecord], value: impl Fn(&RoundRecord) -> f64) -> Vec<(f64, f64)> {
    let mut points = Vec::with_capacity(2 * rounds.len());
    let mut prev_end: Option<f64> = None;
    for x in rounds {
        if let Some(end) = prev_end.filter(|&end| x.start_s > end + 1e-9) {
            points.push((end / HOUR, 0.0));
            points.push((x.start_s / HOUR, 0.0));
        }
        let v = value(x);
        points.push((x.start_s / HOUR, v));
        points.push((x.end_s / HOUR, v));
        prev_end = Some(x.end_s);
    }
    points
}

/// A step line (x in hours) of `value` averaged over time in each of
/// `columns` equal columns of `0..end_s` (time without a round counts 0).
fn binned_points(
    rounds: &[RoundRecord],
    end_s: f64,
    columns: usize,
    value: impl Fn(&RoundRecord) -> f64,
) -> Vec<(f64, f64)> {
    let width = end_s / columns as f64;
    if width.is_nan() || width <= 0.0 {
        return Vec::new();
    }
    let mut sums = vec![0.0; columns];
    for x in rounds {
        if x.end_s <= x.start_s {
            continue;
        }
        let v = value(x);
        let first = ((x.start_s / width).floor().max(0.0) as usize).min(columns);
        let last = ((x.end_s / width).ceil().max(0.0) as usize).min(columns);
        for (col, sum) in sums.iter_mut().enumerate().take(last).skip(first) {
            let lo = x.start_s.max(col as f64 * width);
            let hi = x.end_s.min((col + 1) as f64 * width);
            *sum += v * (hi - lo).max(0.0);
        }
    }
    sums.iter()
        .enumerate()
        .flat_map(|(col, sum)| {
            let v = sum / width;
            [
                (col as f64 * width / HOUR, v),
                ((col + 1) as f64 * width / HOUR, v),
            ]
        })
        .collect()
}

// ----------------------------------------------------------------- JCT CDF

/// Draws the CDF of the measured, completed jobs' JCT (hours), one line per
/// result.
fn draw_jct_cdf(root: &Root<'_>, results: &[RunResult]) -> Result<(), DrawError> {
    let jcts: Vec<Vec<f64>> = results.iter().map(measured_jct_hours).collect();
    let max_h = jcts
        .iter()
        .filter_map(|v| v.last().copied())
        .fold(0.0_f64, f64::max);
    let max_h = if max_h > 0.0 { max_h * 1.02 } else { 1.0 };
    let mut chart = ChartBuilder::on(root)
        .caption("JCT CDF (measured, completed jobs)", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_h, 0.0..1.0)?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .x_labels(12)
        .y_labels(11)
        .x_desc("job completion time (hours)")
        .y_desc("fraction of jobs")
        .draw()?;
    for (i, (r, jct)) in results.iter().zip(&jcts).enumerate() {
        let color = palette(i);
        let label = if jct.is_empty() {
            format!("{} (no completed jobs)", r.summary.policy)
        } else {
            format!("{} ({} jobs)", r.summary.policy, jct.len())
        };
        chart
            .draw_series(LineSeries::new(cdf_points(jct), color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
    }
    draw_series_legend(&mut chart, SeriesLabelPosition::LowerRight)
}

/// The JCTs (hours) of `r`'s measured, completed jobs, ascending.
fn measured_jct_hours(r: &RunResult) -> Vec<f64> {
    let mut v: Vec<f64> = r
        .jobs
        .iter()
        .filter(|j| j.measured)
        .filter_map(|j| j.jct_s)
        .filter(|x| x.is_finite())
        .map(|x| x / HOUR)
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The empirical CDF of ascending `sorted` as a step line; for more than
/// [`MAX_CDF_POINTS`] / 2 values, every k-th value (and the last).
fn cdf_points(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    let Some(&first) = sorted.first() else {
        return Vec::new();
    };
    let stride = n.div_ceil(MAX_CDF_POINTS / 2).max(1);
    let mut picks: Vec<usize> = (stride - 1..n).step_by(stride).collect();
    if picks.last() != Some(&(n - 1)) {
        picks.push(n - 1);
    }
    let mut points = vec![(first, 0.0)];
    let mut y = 0.0;
    for i in picks {
        let x = sorted[i];
        points.push((x, y));
        y = (i + 1) as f64 / n as f64;
        points.push((x, y));
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_core::metrics::{JobRecord, Summary};

    fn summary(policy: &str) -> Summary {
        Summary {
            policy: policy.into(),
            makespan_s: 7200.0,
            avg_jct_s: 3600.0,
            median_jct_s: 3600.0,
            p95_jct_s: 5400.0,
            p99_jct_s: 5400.0,
            avg_queueing_s: 100.0,
            utilization: 0.6,
            ftf_max: 1.5,
            ftf_mean: 1.1,
            jobs_completed: 3,
            jobs_measured: 3,
            lower_bound_s: Some(6000.0),
            forked_lower_bound_s: None,
            makespan_over_bound: Some(1.2),
            jct_lower_bound_s: 3000.0,
            forked_jct_lower_bound_s: 3000.0,
            jct_over_bound: 1.2,
            rounds: 4,
            decisions: 4,
            decision_mean_s: 0.01,
            decision_max_s: 0.02,
            wall_s: 0.5,
            warnings: Vec::new(),
            knowledge: None,
        }
    }

    fn job(id: u32, jct_s: Option<f64>, measured: bool) -> JobRecord {
        JobRecord {
            id,
            job_type: "ResNet-18 (batch size 64)".into(),
            scale_factor: 1,
            arrival_s: 0.0,
            start_s: Some(0.0),
            finish_s: jct_s,
            jct_s,
            queueing_s: Some(0.0),
            gpu_seconds: 1800.0,
            task_rounds: 5,
            copy_rounds: 0,
            ftf: Some(1.0),
            measured,
        }
    }

    fn span(gpu: u32, job: u32, start_s: f64, end_s: f64) -> GpuSpan {
        GpuSpan {
            gpu,
            job,
            start_s,
            end_s,
        }
    }

    fn round(start_s: f64, busy_gpus: Vec<u32>) -> RoundRecord {
        RoundRecord {
            start_s,
            end_s: start_s + 1800.0,
            active_jobs: 3,
            busy_gpus,
        }
    }

    /// 2 GPU types (1 v100, 2 k80), 3 GPUs, 4 rounds of 30 min.
    fn result(policy: &str) -> RunResult {
        RunResult {
            summary: summary(policy),
            gpu_types: vec!["v100".into(), "k80".into()],
            gpus_per_type: vec![1, 2],
            gpu_type_of: vec![0, 1, 1],
            jobs: vec![
                job(0, Some(3600.0), true),
                job(1, Some(7200.0), true),
                job(2, Some(5400.0), false),
                job(3, None, true),
            ],
            rounds: vec![
                round(0.0, vec![1, 2]),
                round(1800.0, vec![1, 1]),
                round(3600.0, vec![0, 1]),
                round(5400.0, vec![1, 0]),
            ],
            spans: vec![
                span(0, 0, 0.0, 3600.0),
                span(0, 1, 5400.0, 7200.0),
                span(1, 1, 0.0, 5400.0),
                span(2, 2, 0.0, 1800.0),
                span(2, 3, 1800.0, 1801.0),
            ],
            decisions: Vec::new(),
            explanations: Vec::new(),
        }
    }

    fn read(path: &Path) -> String {
        fs::read_to_string(path).expect("read svg")
    }

    fn assert_svg(text: &str) {
        let start = text.trim_start();
        assert!(
            start.starts_with("<svg") || start.starts_with("<?xml"),
            "{start:.80}"
        );
        assert!(text.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn writes_every_plot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("plots");
        let results = [result("fifo"), result("max_min_fairness")];
        let written = write_plots(&out, &results).expect("write");
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "fifo.gpu_timeline.svg",
                "fifo.utilization.svg",
                "max_min_fairness.gpu_timeline.svg",
                "max_min_fairness.utilization.svg",
                "jct_cdf.svg",
            ]
        );
        for p in &written {
            assert!(p.starts_with(&out));
            assert_svg(&read(p));
        }

        let timeline = read(&out.join("fifo.gpu_timeline.svg"));
        assert!(timeline.contains("fifo: GPU timeline"));
        assert!(timeline.contains("v100 (1)") && timeline.contains("k80 (2)"));
        assert!(timeline.contains("time (hours)"));
        assert!(timeline.contains("<rect"));

        assert!(timeline.contains("Tinted background: the GPU is idle"));

        let util = read(&out.join("max_min_fairness.utilization.svg"));
        assert!(util.contains("max_min_fairness: busy GPUs, stacked by type (3 GPUs)"));
        assert!(util.contains("v100 (1)") && util.contains("k80 (2)"));
        assert!(util.contains("<polygon") && util.contains("<polyline"));
        assert!(!util.contains("%<"), "counts, not percentages above 100%");

        let cdf = read(&out.join("jct_cdf.svg"));
        assert!(cdf.contains("JCT CDF"));
        // Jobs 0, 1 count; job 2 is not measured, job 3 did not finish.
        assert!(cdf.contains("fifo (2 jobs)") && cdf.contains("max_min_fairness (2 jobs)"));
    }

    #[test]
    fn empty_inputs_still_draw() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(write_plots(dir.path(), &[]).expect("write").is_empty());

        let mut r = result("odd name/x");
        r.spans.clear();
        r.rounds.clear();
        r.jobs.clear();
        let written = write_plots(dir.path(), &[r]).expect("write");
        assert_eq!(written.len(), 3);
        assert!(written[0].ends_with("odd_name_x.gpu_timeline.svg"));
        assert!(read(&written[2]).contains("(no completed jobs)"));
    }

    #[test]
    fn an_unwritable_directory_is_an_output_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("file");
        fs::write(&file, "x").expect("seed");
        let err = write_plots(&file, &[result("fifo")]).expect_err("must fail");
        assert!(matches!(err, CliError::Output { .. }), "{err:?}");
    }

    #[test]
    fn rows_keep_a_share_of_every_type() {
        let gpu_type_of: Vec<u16> = (0..1000).map(|g| if g < 900 { 0 } else { 1 }).collect();
        let by_type = gpus_by_type(&gpu_type_of, 3);
        let shown = rows_to_show(&by_type, 200);
        assert_eq!(shown[0].len(), 180);
        assert_eq!(shown[1].len(), 20);
        assert!(shown[2].is_empty());
        assert_eq!(shown[1][0], 900);
        assert_eq!(rows_to_show(&by_type[..1], 1000)[0].len(), 900);
    }

    #[test]
    fn rasterize_merges_and_keeps_short_spans() {
        let spans = [
            span(0, 7, 0.0, 50.0),
            span(0, 7, 50.0, 100.0),
            span(1, 8, 10.0, 10.5),
            span(5, 9, 0.0, 100.0), // no row
        ];
        let row_of = [Some(0), Some(1)];
        let bars = rasterize(&spans, &row_of, 2, 100.0, 10);
        assert_eq!(
            bars,
            [
                Bar {
                    row: 0,
                    job: 7,
                    start_s: 0.0,
                    end_s: 100.0
                },
                Bar {
                    row: 1,
                    job: 8,
                    start_s: 10.0,
                    end_s: 20.0
                },
            ]
        );
    }

    #[test]
    fn big_runs_stay_small() {
        // 400 GPUs of 2 types, 60,000 short spans alternating jobs.
        let gpus = 400u32;
        let mut r = result("big");
        r.gpu_types = vec!["a".into(), "b".into()];
        r.gpus_per_type = vec![gpus / 2, gpus / 2];
        r.gpu_type_of = (0..gpus).map(|g| u16::from(g >= gpus / 2)).collect();
        r.spans = (0..60_000u32)
            .map(|i| {
                let t = f64::from(i / gpus) * 360.0;
                span(i % gpus, i % 97, t, t + 360.0)
            })
            .collect();
        r.rounds = (0..150)
            .map(|i| round(f64::from(i) * 360.0, vec![200, 150]))
            .collect();
        r.jobs = (0..6000)
            .map(|i| job(i, Some(f64::from(i) * 10.0), true))
            .collect();
        let dir = tempfile::tempdir().expect("tempdir");
        for p in write_plots(dir.path(), &[r]).expect("write") {
            let size = fs::metadata(&p).expect("metadata").len();
            assert!(size < 5_000_000, "{}: {size} bytes", p.display());
        }
        let timeline = read(&dir.path().join("big.gpu_timeline.svg"));
        assert!(timeline.contains("200 of 400 GPUs shown"));
        assert!(timeline.contains("a (100/200)") && timeline.contains("b (100/200)"));
        let timeline = Timeline::new(&result("x"));
        assert_eq!(timeline.rows, [0, 1, 2]);
    }

    #[test]
    fn series_are_steps() {
        let rounds = [round(0.0, vec![1]), round(3600.0, vec![0])];
        let pts = step_points(&rounds, |x| busy(x, 0));
        assert_eq!(
            pts,
            [
                (0.0, 1.0),
                (0.5, 1.0),
                (0.5, 0.0),
                (1.0, 0.0),
                (1.0, 0.0),
                (1.5, 0.0)
            ]
        );
        let binned = binned_points(&rounds, 7200.0, 4, |x| busy(x, 0));
        assert_eq!(binned.len(), 8);
        assert_eq!(binned[1], (0.5, 1.0));
        assert_eq!(binned[2], (0.5, 0.0));

        let cdf = cdf_points(&[1.0, 2.0, 2.0, 4.0]);
        assert_eq!(cdf.first(), Some(&(1.0, 0.0)));
        assert_eq!(cdf.last(), Some(&(4.0, 1.0)));
        let big: Vec<f64> = (0..100_000).map(f64::from).collect();
        let cdf = cdf_points(&big);
        assert!(cdf.len() <= MAX_CDF_POINTS + 4, "{}", cdf.len());
        assert_eq!(cdf.last(), Some(&(99_999.0, 1.0)));
    }
}
