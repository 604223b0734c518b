//! SVG plots of runs, drawn with `plotters`' SVG backend.
//!
//! Per policy:
//! - `<policy>.gpu_timeline.svg`: one row per GPU, grouped by GPU type (a
//!   tinted band and a label per type), with a bar per job run on the GPU,
//!   each job in a color of its own, its id on the bars that have room.
//!   Where a HadarE job runs as forked copies (on more GPUs than its gang)
//!   its bars are hatched. A note under the chart says what the colors, the
//!   hatching and the tinted background mean.
//! - `<policy>.utilization.svg`: busy GPUs over time, per round, in a band
//!   per type as tall as its GPUs, stacked up to the cluster's size (no line
//!   hides another; a type's idle GPUs are the empty top of its band), the
//!   legend in a panel beside the chart.
//!
//! A sweep's `jct_vs_load.svg`: mean JCT against the arrival rate, a line
//! and a confidence band per policy.
//!
//! For all policies together, `jct_cdf.svg`: the empirical CDF of the
//! measured, completed jobs' JCT, one line per policy.
//!
//! Time axes are in s, min, h or days, whichever suits the span drawn
//! ([`TimeUnit::for_span`]); a sweep's mean JCT stays in hours, as in its
//! table and CSV. Policies' lines differ in color, dash and
//! marker, so that lines that coincide stay apart, and their legends sit
//! under the chart, off the data.
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

use std::collections::HashMap;
use std::error::Error;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use hadar_core::metrics::{GpuSpan, RoundRecord, RunResult};
use hadar_core::sweep::CurvePoint;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::exit::CliError;

/// The most GPU rows a timeline shows.
pub const MAX_TIMELINE_GPUS: usize = 200;
/// The most bars a timeline draws (about 90 bytes of SVG each).
const MAX_TIMELINE_BARS: usize = 30_000;
/// The most points a CDF line has.
const MAX_CDF_POINTS: usize = 4_000;
/// Markers per CDF line.
const CDF_MARKERS: usize = 10;
/// Width of every plot (px).
const WIDTH: u32 = 1200;
/// Approximate width of the plotting area (px): `WIDTH` less the margins
/// and the label area, the resolution that big runs are reduced to.
const PLOT_PX: usize = 1050;
/// Seconds per hour.
const HOUR: f64 = 3600.0;
/// Height of the two lines under a timeline that say how to read it (px).
const NOTE_PX: u32 = 46;

/// Colors for GPU types and policies (Tableau 10 and a few more).
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

/// The hue step between consecutive job ids: the golden angle, as a share
/// of the color wheel. Any run of ids then spreads evenly round the wheel,
/// and consecutive ids (often side by side on a timeline) are far apart.
const GOLDEN_TURN: f64 = 0.381_966_011_250_105;
/// Saturation of job colors.
const JOB_SATURATION: f64 = 0.65;
/// Lightness of job colors, cycled by id: ids whose hues nearly meet (8,
/// 13, 21, 34, 55, 68 or 89 apart) then differ in lightness. Black or white
/// text reads on each.
const JOB_LIGHTNESS: [f64; 6] = [0.74, 0.44, 0.68, 0.52, 0.36, 0.60];

/// The fill of the hatching laid over forked copies' bars. `plotters` draws
/// no patterns, so these rectangles are drawn in a color nothing else uses
/// and [`with_hatch`] makes that fill an SVG pattern.
const HATCH_MARK: RGBColor = RGBColor(1, 2, 3);
/// The hatch pattern: white diagonal stripes over the bar's own color.
const HATCH_DEFS: &str = concat!(
    r##"<defs><pattern id="hadar-copies" width="6" height="6" "##,
    r##"patternUnits="userSpaceOnUse" patternTransform="rotate(45)">"##,
    r##"<rect width="2.5" height="6" fill="#FFFFFF" fill-opacity="0.7"/>"##,
    "</pattern></defs>",
);
/// What the hatching means, under a timeline that has some.
const FORKED_NOTE: &str = "Hatched: the job runs as several HadarE copies at that time \
    (on more GPUs than its gang); spans do not record which GPU ran which copy, \
    so all of them are hatched.";

/// What drawing can fail with (plotters' errors, boxed).
type DrawError = Box<dyn Error + Send + Sync>;
/// An SVG drawing area covering the whole image.
type Root<'a> = DrawingArea<SVGBackend<'a>, Shift>;
/// A chart with `f64` axes on an SVG drawing area.
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The plot that sets the policies side by side: their JCT distributions.
pub const JCT_CDF_FILE: &str = "jct_cdf.svg";

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
        let path = dir.join(JCT_CDF_FILE);
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

/// Renders an SVG of `size` (px) with `draw` and writes it to `path`.
fn write_svg(
    path: &Path,
    size: (u32, u32),
    draw: impl FnOnce(&Root<'_>) -> Result<(), DrawError>,
) -> Result<(), CliError> {
    let svg = render_svg(size, draw)
        .map_err(|e| CliError::output(path.display(), io::Error::other(e)))?;
    crate::cmd::trace::write_atomically(path, svg.as_bytes())
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
    Ok(with_hatch(svg))
}

/// `svg` with its [`HATCH_MARK`] fills made the hatch pattern, defined
/// right after the opening `<svg>` tag; unchanged if it has none.
fn with_hatch(svg: String) -> String {
    let RGBColor(r, g, b) = HATCH_MARK;
    let mark = format!("fill=\"#{r:02X}{g:02X}{b:02X}\"");
    let open_end = svg
        .find("<svg")
        .and_then(|at| svg[at..].find('>').map(|end| at + end + 1));
    let Some(open_end) = open_end.filter(|_| svg.contains(&mark)) else {
        return svg;
    };
    let (head, body) = svg.split_at(open_end);
    let body = body.replace(&mark, "fill=\"url(#hadar-copies)\"");
    format!("{head}\n{HATCH_DEFS}{body}")
}

// ------------------------------------------------------------------ colors

/// The palette color number `i` (wrapping).
fn palette(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// `c` mixed with white: `amount` 0 is `c`, 1 is white.
fn tint(c: RGBColor, amount: f64) -> RGBColor {
    let mix = |v: u8| (f64::from(v) + (255.0 - f64::from(v)) * amount).round() as u8;
    RGBColor(mix(c.0), mix(c.1), mix(c.2))
}

/// Job `job`'s color: hues a golden angle apart by id, so that colors do
/// not come round again as a palette's do (the first 100 are all distinct)
/// and consecutive ids differ most.
fn job_color(job: u32) -> RGBColor {
    let hue = (f64::from(job) * GOLDEN_TURN).fract();
    let lightness = JOB_LIGHTNESS[job as usize % JOB_LIGHTNESS.len()];
    let (r, g, b) = HSLColor(hue, JOB_SATURATION, lightness)
        .to_backend_color()
        .rgb;
    RGBColor(r, g, b)
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

// -------------------------------------------------------------- time axes

/// A unit for a time axis (and for a duration said in words).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TimeUnit {
    /// Its name in axis labels.
    name: &'static str,
    /// Its length (s).
    seconds: f64,
}

const SECONDS: TimeUnit = TimeUnit {
    name: "s",
    seconds: 1.0,
};
const MINUTES: TimeUnit = TimeUnit {
    name: "min",
    seconds: 60.0,
};
const HOURS: TimeUnit = TimeUnit {
    name: "h",
    seconds: HOUR,
};
const DAYS: TimeUnit = TimeUnit {
    name: "days",
    seconds: 24.0 * HOUR,
};

impl TimeUnit {
    /// The unit for an axis spanning `span_s` seconds: the largest unit the
    /// span holds at least twice, so that ticks are numbers a reader takes
    /// in at once (90 s in s rather than 0.025 h; a week in days).
    pub(crate) fn for_span(span_s: f64) -> Self {
        [DAYS, HOURS, MINUTES]
            .into_iter()
            .find(|u| span_s >= 2.0 * u.seconds)
            .unwrap_or(SECONDS)
    }

    /// `s` seconds in this unit.
    fn of(self, s: f64) -> f64 {
        s / self.seconds
    }

    /// `s` seconds in the unit that suits them: `42 s`, `3.5 min`, `2.0 h`.
    pub(crate) fn say(s: f64) -> String {
        let u = Self::for_span(s);
        if u == SECONDS {
            format!("{s:.0} s")
        } else {
            format!("{:.1} {}", u.of(s), u.name)
        }
    }

    /// An axis label naming the unit: `what (unit)`.
    fn label(self, what: &str) -> String {
        format!("{what} ({})", self.name)
    }
}

/// An axis tick without trailing zeros ("20", not "20.0").
fn tick(v: &f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// The end of the run (s): the last span or round, an hour if there is
/// none; the x range of the time plots.
fn end_seconds(r: &RunResult) -> f64 {
    let spans = r.spans.iter().map(|s| s.end_s);
    let rounds = r.rounds.iter().map(|x| x.end_s);
    let end = spans.chain(rounds).fold(0.0_f64, f64::max);
    if end.is_finite() && end > 0.0 {
        end
    } else {
        HOUR
    }
}

// ---------------------------------------------------------- policies' lines

/// Marker shapes (white inside, outlined in the line's color).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Marker {
    Circle,
    Triangle,
    Square,
    Diamond,
    Cross,
}

/// Markers, cycled over policies.
const MARKERS: [Marker; 5] = [
    Marker::Circle,
    Marker::Triangle,
    Marker::Square,
    Marker::Diamond,
    Marker::Cross,
];
/// Dash patterns (on, off; px), cycled over policies; `None` is solid.
const DASHES: [Option<(u32, u32)>; 4] = [None, Some((10, 5)), Some((2, 4)), Some((18, 5))];

/// How a policy's line is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SeriesStyle {
    /// Line and marker color.
    color: RGBColor,
    /// Dash pattern (on, off; px); `None` is solid.
    dash: Option<(u32, u32)>,
    /// Marker shape.
    marker: Marker,
}

/// Policy number `i`'s style: color, dash and marker each cycle, so lines
/// that coincide still show each one's dashes and markers.
fn series_style(i: usize) -> SeriesStyle {
    SeriesStyle {
        color: palette(i),
        dash: DASHES[i % DASHES.len()],
        marker: MARKERS[i % MARKERS.len()],
    }
}

/// Draws `points` as a line in `style` (without markers).
fn draw_styled_line(
    chart: &mut Chart<'_, '_>,
    points: Vec<(f64, f64)>,
    style: SeriesStyle,
) -> Result<(), DrawError> {
    let stroke = style.color.stroke_width(2);
    match style.dash {
        None => chart.draw_series(LineSeries::new(points, stroke))?,
        Some((on, off)) => chart.draw_series(DashedLineSeries::new(points, on, off, stroke))?,
    };
    Ok(())
}

/// Draws `style`'s marker at each of `points` of `chart` on `root`, the
/// whole image (markers are drawn in pixels, to keep their shape).
fn draw_markers(
    chart: &Chart<'_, '_>,
    root: &Root<'_>,
    points: &[(f64, f64)],
    style: SeriesStyle,
) -> Result<(), DrawError> {
    for p in points {
        draw_marker(root, style.marker, chart.backend_coord(p), style.color)?;
    }
    Ok(())
}

/// Marker `m` centred on `at` (px): white inside and outlined in `color`,
/// so that it shows over any line.
fn draw_marker(
    area: &Root<'_>,
    m: Marker,
    at: (i32, i32),
    color: RGBColor,
) -> Result<(), DrawError> {
    const R: i32 = 5;
    let (x, y) = at;
    let outline = color.stroke_width(2);
    match m {
        Marker::Circle => {
            area.draw(&Circle::new(at, R, WHITE.filled()))?;
            area.draw(&Circle::new(at, R, outline))?;
        }
        Marker::Cross => {
            area.draw(&PathElement::new([(x - R, y - R), (x + R, y + R)], outline))?;
            area.draw(&PathElement::new([(x - R, y + R), (x + R, y - R)], outline))?;
        }
        Marker::Triangle => {
            let corners = [(x, y - R - 1), (x + R + 1, y + R), (x - R - 1, y + R)];
            draw_outlined(area, &corners, color)?;
        }
        Marker::Square => {
            let corners = [
                (x - R, y - R),
                (x + R, y - R),
                (x + R, y + R),
                (x - R, y + R),
            ];
            draw_outlined(area, &corners, color)?;
        }
        Marker::Diamond => {
            let corners = [
                (x, y - R - 1),
                (x + R + 1, y),
                (x, y + R + 1),
                (x - R - 1, y),
            ];
            draw_outlined(area, &corners, color)?;
        }
    }
    Ok(())
}

/// A white polygon of `corners` (px) outlined in `color`.
fn draw_outlined(
    area: &Root<'_>,
    corners: &[(i32, i32)],
    color: RGBColor,
) -> Result<(), DrawError> {
    area.draw(&Polygon::new(corners.to_vec(), WHITE.filled()))?;
    let closed: Vec<(i32, i32)> = corners.iter().chain(corners.first()).copied().collect();
    area.draw(&PathElement::new(closed, color.stroke_width(2)))?;
    Ok(())
}

/// Height of a row of a legend under a chart (px).
const LEGEND_ROW_PX: u32 = 24;
/// Left edge of a legend under a chart (px): in line with the y axis.
const LEGEND_LEFT_PX: i32 = 82;

/// The layout of a legend of `entries` under a chart `width` px wide: the
/// columns, and each column's width (px).
fn legend_columns(entries: &[(String, SeriesStyle)], width: u32) -> (usize, i32) {
    // A 48 px sample and a gap, then about 8 px per character of 14 px text.
    let longest = entries.iter().map(|(l, _)| l.chars().count()).max();
    let chars = i32::try_from(longest.unwrap_or(0)).unwrap_or(200);
    let column = chars.saturating_mul(8).saturating_add(80);
    let room = i32::try_from(width).unwrap_or(i32::MAX) - LEGEND_LEFT_PX - 12;
    let fit = usize::try_from(room / column).unwrap_or(1);
    (fit.clamp(1, entries.len().max(1)), column)
}

/// Splits `root` into the chart's area and a panel under it that holds the
/// legend of `entries`, so that the legend covers no data.
fn split_for_legend<'a>(
    root: &Root<'a>,
    entries: &[(String, SeriesStyle)],
) -> (Root<'a>, Root<'a>) {
    let (width, height) = root.dim_in_pixel();
    let (columns, _) = legend_columns(entries, width);
    let rows = u32::try_from(entries.len().div_ceil(columns)).unwrap_or(1);
    root.split_vertically(height.saturating_sub(rows * LEGEND_ROW_PX + 10))
}

/// Draws the legend of `entries` in `area`, row by row: a sample of each
/// line (its dash and marker) and its label.
fn draw_line_legend(area: &Root<'_>, entries: &[(String, SeriesStyle)]) -> Result<(), DrawError> {
    let (width, _) = area.dim_in_pixel();
    let (columns, column) = legend_columns(entries, width);
    let row_px = LEGEND_ROW_PX as i32;
    let font = ("sans-serif", 14)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (k, (label, style)) in entries.iter().enumerate() {
        let col = i32::try_from(k % columns).unwrap_or(0);
        let row = i32::try_from(k / columns).unwrap_or(0);
        let (x, y) = (LEGEND_LEFT_PX + col * column, row * row_px + row_px / 2);
        let stroke = style.color.stroke_width(2);
        let ends = [(x, y), (x + 48, y)];
        match style.dash {
            None => area.draw(&PathElement::new(ends, stroke))?,
            Some((on, off)) => area.draw(&DashedPathElement::new(ends, on, off, stroke))?,
        }
        draw_marker(area, style.marker, (x + 24, y), style.color)?;
        area.draw(&Text::new(label.clone(), (x + 58, y), font.clone()))?;
    }
    Ok(())
}

// ------------------------------------------------------------- load curves

/// Draws mean JCT against load, a line (dashed and marked per policy) over
/// a band per policy, the legend under the chart. The JCT stays in hours,
/// as in the sweep's table and CSV beside it (and Gavel's Figure 8).
fn draw_load_curves(root: &Root<'_>, curves: &[CurvePoint]) -> Result<(), DrawError> {
    let policies = policies_of(curves);
    let max_y = curves.iter().map(load_top_h).fold(0.0_f64, f64::max);
    let max_y = if max_y > 0.0 { max_y * 1.08 } else { 1.0 };
    let entries: Vec<(String, SeriesStyle)> = policies
        .iter()
        .enumerate()
        .map(|(i, p)| (p.to_string(), series_style(i)))
        .collect();
    let (plot, legend) = split_for_legend(root, &entries);
    let (lo_x, hi_x) = load_range(curves);
    let mut chart = ChartBuilder::on(&plot)
        .caption(load_caption(curves), ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(lo_x..hi_x, 0.0..max_y)?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .x_desc("input job rate (jobs/hour)")
        .y_desc(HOURS.label("mean job completion time"))
        .draw()?;
    let of = |policy: &str| -> Vec<&CurvePoint> {
        curves.iter().filter(|c| c.policy == policy).collect()
    };
    // Every band first, then every line: no band hides a line.
    for (i, policy) in policies.iter().enumerate() {
        draw_band(&mut chart, &of(policy), palette(i))?;
    }
    for (policy, (_, style)) in policies.iter().zip(&entries) {
        let line: Vec<(f64, f64)> = of(policy)
            .iter()
            .map(|c| (c.jobs_per_hour, c.mean_jct_h))
            .collect();
        draw_styled_line(&mut chart, line.clone(), *style)?;
        draw_markers(&chart, root, &line, *style)?;
    }
    draw_line_legend(&legend, &entries)
}

/// The policies of `curves`, in order of first appearance.
fn policies_of(curves: &[CurvePoint]) -> Vec<&str> {
    let mut policies: Vec<&str> = Vec::new();
    for c in curves {
        if !policies.contains(&c.policy.as_str()) {
            policies.push(&c.policy);
        }
    }
    policies
}

/// The highest a point reaches (h): its mean or its interval's top.
fn load_top_h(c: &CurvePoint) -> f64 {
    c.ci95_h
        .map_or(c.mean_jct_h, |(_, hi)| hi.max(c.mean_jct_h))
}

/// The x range of a load plot: the loads, with a margin of a tenth of the
/// span each side (of the load itself with one load), never below 0.
fn load_range(curves: &[CurvePoint]) -> (f64, f64) {
    let loads = || curves.iter().map(|c| c.jobs_per_hour);
    let (lo_x, hi_x) = (
        loads().fold(f64::INFINITY, f64::min),
        loads().fold(0.0_f64, f64::max),
    );
    let pad = if hi_x > lo_x {
        (hi_x - lo_x) * 0.1
    } else {
        hi_x.max(1.0) * 0.1
    };
    if lo_x.is_finite() {
        ((lo_x - pad).max(0.0), hi_x + pad)
    } else {
        (0.0, 1.0)
    }
}

/// A load plot's title, saying whether there are bands.
fn load_caption(curves: &[CurvePoint]) -> &'static str {
    if curves.iter().any(|c| c.ci95_h.is_some()) {
        "Mean JCT against load (band: 95% confidence interval over seeds)"
    } else {
        "Mean JCT against load (one seed: no interval)"
    }
}

/// A policy's confidence band over the loads of `points` (none with fewer
/// than two intervals).
fn draw_band(
    chart: &mut Chart<'_, '_>,
    points: &[&CurvePoint],
    color: RGBColor,
) -> Result<(), DrawError> {
    let band: Vec<(f64, f64, f64)> = points
        .iter()
        .filter_map(|c| c.ci95_h.map(|(lo, hi)| (c.jobs_per_hour, lo.max(0.0), hi)))
        .collect();
    if band.len() < 2 {
        return Ok(());
    }
    let outline: Vec<(f64, f64)> = band
        .iter()
        .map(|&(x, _, hi)| (x, hi))
        .chain(band.iter().rev().map(|&(x, lo, _)| (x, lo)))
        .collect();
    chart.draw_series(std::iter::once(Polygon::new(
        outline,
        color.mix(0.15).filled(),
    )))?;
    Ok(())
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
    /// The x range (s).
    end_s: f64,
    /// The x axis' unit.
    unit: TimeUnit,
    /// When each forked job ran forked (see [`forked_intervals`]).
    forked: HashMap<u32, Vec<(f64, f64)>>,
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
        let end_s = end_seconds(r);
        let (bars, columns) = rasterize_budgeted(&r.spans, &row_of, rows.len(), end_s);
        let column_s = end_s / columns as f64;
        let mut forked = forked_intervals(r);
        for intervals in forked.values_mut() {
            *intervals = snap(intervals, column_s);
        }
        Self {
            rows,
            groups,
            total_gpus: r.gpu_type_of.len(),
            bars,
            end_s,
            unit: TimeUnit::for_span(end_s),
            forked,
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

    /// Whether bars get job ids: where rows are tall enough for 12 px text.
    fn labelled(&self) -> bool {
        self.row_px() >= 12
    }

    /// Height of the whole image (px).
    fn height_px(&self) -> u32 {
        let rows = u32::try_from(self.rows.len()).unwrap_or(u32::MAX);
        (rows.saturating_mul(self.row_px())).max(120) + 130 + NOTE_PX
    }

    /// Chart y of the top of `row` (rows count from the top, chart y from
    /// the bottom).
    fn top(&self, row: usize) -> f64 {
        self.rows.len() as f64 - row as f64
    }

    /// Draws the timeline of `r` on `root`, with lines under it that say
    /// how to read it.
    fn draw(&self, root: &Root<'_>, r: &RunResult) -> Result<(), DrawError> {
        let (_, height) = root.dim_in_pixel();
        let (chart_area, note) = root.split_vertically(height.saturating_sub(NOTE_PX));
        self.draw_note(&note)?;
        self.draw_chart(&chart_area, r)
    }

    /// The note under the chart: what bars, colors and background mean, and
    /// (where there is some) what the hatching means, beside a sample.
    fn draw_note(&self, area: &Root<'_>) -> Result<(), DrawError> {
        let font = ("sans-serif", 13).into_font();
        let labels = if self.labelled() {
            "labelled with its id where the bar has room"
        } else {
            "rows too thin to label"
        };
        let text = format!(
            "Bars: the job a GPU runs, one color per job ({labels}). \
             Tinted background: the GPU is idle (tint = its type)."
        );
        area.draw(&Text::new(text, (14, 4), font.clone()))?;
        if !self.forked.is_empty() {
            let sample = [(14, 22), (44, 38)];
            area.draw(&Rectangle::new(sample, RGBColor(110, 110, 110).filled()))?;
            area.draw(&Rectangle::new(sample, HATCH_MARK.filled()))?;
            area.draw(&Text::new(FORKED_NOTE, (52, 24), font))?;
        }
        Ok(())
    }

    /// The chart itself: type bands, bars, hatching over forked copies and
    /// job ids on bars with room.
    fn draw_chart(&self, root: &Root<'_>, r: &RunResult) -> Result<(), DrawError> {
        let mut chart = self.chart(root, r)?;
        self.draw_type_bands(&mut chart, root, r)?;
        chart.draw_series(self.bars.iter().map(|b| {
            let color = job_color(b.job);
            Rectangle::new(self.corners(b, b.start_s, b.end_s), color.filled())
        }))?;
        chart.draw_series(self.bars.iter().flat_map(|b| {
            self.forked_parts(b)
                .map(|(s, e)| Rectangle::new(self.corners(b, s, e), HATCH_MARK.filled()))
        }))?;
        if self.labelled() {
            self.draw_labels(&chart, root)?;
        }
        Ok(())
    }

    /// The chart's axes, title and mesh.
    fn chart<'a, 'b>(&self, root: &'a Root<'b>, r: &RunResult) -> Result<Chart<'a, 'b>, DrawError> {
        let shown = if self.rows.len() < self.total_gpus {
            format!("{} of {} GPUs shown", self.rows.len(), self.total_gpus)
        } else {
            format!("{} GPUs", self.total_gpus)
        };
        let title = format!(
            "{}: GPU timeline ({shown}; color = job id)",
            r.summary.policy
        );
        let n = self.rows.len() as f64;
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(110)
            .build_cartesian_2d(0.0..self.unit.of(self.end_s), 0.0..n.max(1.0))?;
        chart
            .configure_mesh()
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 15))
            .disable_y_mesh()
            .y_labels(0)
            .x_labels(12)
            .x_label_formatter(&tick)
            .x_desc(self.unit.label("time"))
            .y_desc("GPUs, by type")
            .draw()?;
        Ok(chart)
    }

    /// A tinted band and a label per GPU type.
    fn draw_type_bands(
        &self,
        chart: &mut Chart<'_, '_>,
        root: &Root<'_>,
        r: &RunResult,
    ) -> Result<(), DrawError> {
        let end = self.unit.of(self.end_s);
        for &(t, first, count, of_type) in &self.groups {
            let band = tint(palette(t), if t % 2 == 0 { 0.88 } else { 0.8 });
            chart.draw_series(std::iter::once(Rectangle::new(
                [(0.0, self.top(first)), (end, self.top(first + count))],
                band.filled(),
            )))?;
            let mid = self.top(first) - count as f64 / 2.0;
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
        Ok(())
    }

    /// Corners of bar `b`'s rectangle from `start_s` to `end_s`: its row,
    /// less a tenth of a row top and bottom.
    fn corners(&self, b: &Bar, start_s: f64, end_s: f64) -> [(f64, f64); 2] {
        [
            (self.unit.of(start_s), self.top(b.row) - 0.1),
            (self.unit.of(end_s), self.top(b.row + 1) + 0.1),
        ]
    }

    /// The stretches (s) of bar `b` in which its job ran forked.
    fn forked_parts<'s>(&'s self, b: &'s Bar) -> impl Iterator<Item = (f64, f64)> + 's {
        let forked = self.forked.get(&b.job).map_or(&[][..], Vec::as_slice);
        let from = forked.partition_point(|&(_, end)| end <= b.start_s);
        forked[from..]
            .iter()
            .take_while(|&&(start, _)| start < b.end_s)
            .map(|&(start, end)| (start.max(b.start_s), end.min(b.end_s)))
    }

    /// Job ids on the bars wide enough for them.
    fn draw_labels(&self, chart: &Chart<'_, '_>, root: &Root<'_>) -> Result<(), DrawError> {
        for b in &self.bars {
            let mid = self.top(b.row) - 0.5;
            let (x0, y) = chart.backend_coord(&(self.unit.of(b.start_s), mid));
            let (x1, _) = chart.backend_coord(&(self.unit.of(b.end_s), mid));
            let label = b.job.to_string();
            // About 8 px per character at 12 px.
            let half = 4 * i32::try_from(label.len()).unwrap_or(9) + 3;
            if x1 - x0 < 2 * half {
                continue;
            }
            let (x, color) = ((x0 + x1) / 2, job_color(b.job));
            if self.forked_parts(b).next().is_some() {
                // Stripes would blur the id: it sits on a patch of plain color.
                let patch = [(x - half, y - 8), (x + half, y + 8)];
                root.draw(&Rectangle::new(patch, color.filled()))?;
            }
            let style = ("sans-serif", 12)
                .into_font()
                .color(&ink_on(color))
                .pos(Pos::new(HPos::Center, VPos::Center));
            root.draw(&Text::new(label, (x, y), style))?;
        }
        Ok(())
    }
}

/// Per job that ran HadarE copies (`copy_rounds` > 0): the intervals (s) in
/// which it ran on more GPUs than its gang, sorted and disjoint. Spans do
/// not say which copy a GPU ran, so this is what can be known from them:
/// more GPUs than a gang means several copies at once. (Copies on no more
/// GPUs than the gang, as when HadarE runs a gang as single-GPU copies, go
/// unmarked.)
fn forked_intervals(r: &RunResult) -> HashMap<u32, Vec<(f64, f64)>> {
    let gangs: HashMap<u32, u32> = r
        .jobs
        .iter()
        .filter(|j| j.copy_rounds > 0)
        .map(|j| (j.id, j.scale_factor.max(1)))
        .collect();
    let mut events: HashMap<u32, Vec<(f64, i32)>> = HashMap::new();
    for s in r.spans.iter().filter(|s| s.end_s > s.start_s) {
        if gangs.contains_key(&s.job) {
            let e = events.entry(s.job).or_default();
            e.push((s.start_s, 1));
            e.push((s.end_s, -1));
        }
    }
    events
        .into_iter()
        .filter_map(|(job, e)| {
            let over = over_gang(e, gangs.get(&job).copied().unwrap_or(1));
            (!over.is_empty()).then_some((job, over))
        })
        .collect()
}

/// The intervals in which more than `gang` GPUs are busy, from `events`:
/// (time, +1) where a span starts, (time, -1) where one ends. Touching
/// intervals merge.
fn over_gang(mut events: Vec<(f64, i32)>, gang: u32) -> Vec<(f64, f64)> {
    // Ends before starts at one instant: a gang that moves GPUs between
    // rounds is not two gangs.
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut out: Vec<(f64, f64)> = Vec::new();
    let (mut busy, mut since) = (0_i64, None);
    for (t, delta) in events {
        busy += i64::from(delta);
        match (busy > i64::from(gang), since) {
            (true, None) => since = Some(t),
            (false, Some(start)) => {
                since = None;
                match out.last_mut() {
                    Some(last) if last.1 >= start => last.1 = t,
                    _ if t > start => out.push((start, t)),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    out
}

/// `intervals` (sorted) widened to whole columns of `width` s and merged
/// where they meet: like the bars, drawn at screen resolution (a round's
/// copies that end apart would otherwise leave slivers thinner than a
/// pixel, one element each).
fn snap(intervals: &[(f64, f64)], width: f64) -> Vec<(f64, f64)> {
    if width.is_nan() || width <= 0.0 {
        return intervals.to_vec();
    }
    let mut out: Vec<(f64, f64)> = Vec::new();
    for &(start, end) in intervals {
        let (start, end) = (
            (start / width).floor() * width,
            (end / width).ceil() * width,
        );
        match out.last_mut() {
            Some(last) if last.1 >= start => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
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
/// there are at most [`MAX_TIMELINE_BARS`] bars; and the columns used.
fn rasterize_budgeted(
    spans: &[GpuSpan],
    row_of: &[Option<usize>],
    rows: usize,
    end_s: f64,
) -> (Vec<Bar>, usize) {
    let mut columns = PLOT_PX;
    loop {
        let bars = rasterize(spans, row_of, rows, end_s, columns);
        if bars.len() <= MAX_TIMELINE_BARS || columns <= 16 {
            return (bars, columns);
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

/// Draws the busy GPUs of `r`'s rounds, each type's in a band of its own as
/// tall as its GPUs, stacked up to the cluster's size; the legend sits
/// beside the chart.
fn draw_utilization(root: &Root<'_>, r: &RunResult) -> Result<(), DrawError> {
    let end_s = end_seconds(r);
    let unit = TimeUnit::for_span(end_s);
    let total: u32 = r.gpus_per_type.iter().sum();
    let (width, _) = root.dim_in_pixel();
    let (plot, legend) = root.split_horizontally(width.saturating_sub(LEGEND_PX));
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            format!(
                "{}: busy GPUs, a band per type ({total} GPUs)",
                r.summary.policy
            ),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..unit.of(end_s), 0.0..f64::from(total.max(1)))?;
    let count = |v: &f64| format!("{v:.0}");
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .x_labels(12)
        .y_labels(usize::try_from(total.clamp(2, 12)).unwrap_or(12) + 1)
        .x_label_formatter(&tick)
        .y_label_formatter(&count)
        .x_desc(unit.label("time"))
        .y_desc("GPUs busy")
        .draw()?;

    // Each type has a band as tall as its GPUs, those of the types before it
    // below; its busy GPUs fill it from the bottom, so that its idle ones are
    // the empty rest of its own band (stacking the busy counts alone put one
    // type's idle GPUs in another's band).
    let mut keys = Vec::new();
    let mut floor = 0.0;
    for (t, &gpus) in r.gpus_per_type.iter().enumerate() {
        if gpus == 0 {
            continue;
        }
        let top = floor + f64::from(gpus);
        let upper = series_points(&r.rounds, end_s, unit, |x| floor + busy(x, t));
        let color = palette(t);
        let (first, last) = (
            upper.first().map_or(0.0, |p| p.0),
            upper.last().map_or(0.0, |p| p.0),
        );
        let outline: Vec<(f64, f64)> = upper
            .iter()
            .copied()
            .chain([(last, floor), (first, floor)])
            .collect();
        chart.draw_series(std::iter::once(Polygon::new(
            outline,
            tint(color, 0.35).filled(),
        )))?;
        chart.draw_series(LineSeries::new(upper, color.stroke_width(1)))?;
        // The band's top: its GPUs, busy or not.
        chart.draw_series(LineSeries::new(
            [(0.0, top), (unit.of(end_s), top)],
            color.mix(0.6).stroke_width(1),
        ))?;
        keys.push((format!("{} ({gpus})", type_name(r, t)), color));
        floor = top;
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

/// A step line (x in `unit`) of `value` per round: exact when there are
/// few rounds, else averaged over [`PLOT_PX`] columns of `0..end_s`.
fn series_points(
    rounds: &[RoundRecord],
    end_s: f64,
    unit: TimeUnit,
    value: impl Fn(&RoundRecord) -> f64,
) -> Vec<(f64, f64)> {
    if rounds.len() <= PLOT_PX {
        step_points(rounds, unit, value)
    } else {
        binned_points(rounds, end_s, PLOT_PX, unit, value)
    }
}

/// A step line (x in `unit`) holding `value` over each round, at 0 in gaps
/// between rounds.
fn step_points(
    rounds: &[RoundRecord],
    unit: TimeUnit,
    value: impl Fn(&RoundRecord) -> f64,
) -> Vec<(f64, f64)> {
    let mut points = Vec::with_capacity(2 * rounds.len());
    let mut prev_end: Option<f64> = None;
    for x in rounds {
        if let Some(end) = prev_end.filter(|&end| x.start_s > end + 1e-9) {
            points.push((unit.of(end), 0.0));
            points.push((unit.of(x.start_s), 0.0));
        }
        let v = value(x);
        points.push((unit.of(x.start_s), v));
        points.push((unit.of(x.end_s), v));
        prev_end = Some(x.end_s);
    }
    points
}

/// A step line (x in `unit`) of `value` averaged over time in each of
/// `columns` equal columns of `0..end_s` (time without a round counts 0).
fn binned_points(
    rounds: &[RoundRecord],
    end_s: f64,
    columns: usize,
    unit: TimeUnit,
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
                (unit.of(col as f64 * width), v),
                (unit.of((col + 1) as f64 * width), v),
            ]
        })
        .collect()
}

// ----------------------------------------------------------------- JCT CDF

/// Draws the CDF of the measured, completed jobs' JCT, one line per result
/// (each with its dash and markers), the legend under the chart.
fn draw_jct_cdf(root: &Root<'_>, results: &[RunResult]) -> Result<(), DrawError> {
    let jcts: Vec<Vec<f64>> = results.iter().map(measured_jct_s).collect();
    let max_s = jcts
        .iter()
        .filter_map(|v| v.last().copied())
        .fold(0.0_f64, f64::max);
    let unit = TimeUnit::for_span(max_s);
    let max_x = if max_s > 0.0 {
        unit.of(max_s) * 1.02
    } else {
        1.0
    };
    let entries: Vec<(String, SeriesStyle)> = results
        .iter()
        .zip(&jcts)
        .enumerate()
        .map(|(i, (r, jct))| (cdf_label(r, jct), series_style(i)))
        .collect();
    let (plot, legend) = split_for_legend(root, &entries);
    let mut chart = ChartBuilder::on(&plot)
        .caption("JCT CDF (measured, completed jobs)", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_x, 0.0..1.0)?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .x_labels(12)
        .y_labels(11)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .x_desc(unit.label("job completion time"))
        .y_desc("fraction of jobs")
        .draw()?;
    let scaled: Vec<Vec<f64>> = jcts
        .iter()
        .map(|v| v.iter().map(|&s| unit.of(s)).collect())
        .collect();
    for (jct, (_, style)) in scaled.iter().zip(&entries) {
        draw_styled_line(&mut chart, cdf_points(jct), *style)?;
    }
    // Markers after every line, so that no line covers them.
    for (i, (jct, (_, style))) in scaled.iter().zip(&entries).enumerate() {
        let marks = cdf_marker_points(jct, i, scaled.len());
        draw_markers(&chart, root, &marks, *style)?;
    }
    draw_line_legend(&legend, &entries)
}

/// A CDF line's legend label: the policy and its jobs.
fn cdf_label(r: &RunResult, jct: &[f64]) -> String {
    if jct.is_empty() {
        format!("{} (no completed jobs)", r.summary.policy)
    } else {
        format!("{} ({} jobs)", r.summary.policy, jct.len())
    }
}

/// The JCTs (s) of `r`'s measured, completed jobs, ascending.
fn measured_jct_s(r: &RunResult) -> Vec<f64> {
    let mut v: Vec<f64> = r
        .jobs
        .iter()
        .filter(|j| j.measured)
        .filter_map(|j| j.jct_s)
        .filter(|x| x.is_finite())
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

/// Where line `i` of `lines` puts its markers on the CDF of ascending
/// `sorted`: at [`CDF_MARKERS`] fractions of the jobs, shifted per line so
/// that lines that coincide still show each one's markers. Each marker
/// sits on the step where the CDF passes its fraction.
fn cdf_marker_points(sorted: &[f64], i: usize, lines: usize) -> Vec<(f64, f64)> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let shift = (i + 1) as f64 / (lines + 1) as f64;
    (0..CDF_MARKERS)
        .map(|k| {
            let y = (k as f64 + shift) / CDF_MARKERS as f64;
            let at = ((y * n as f64).ceil() as usize).clamp(1, n) - 1;
            (sorted[at], y)
        })
        .collect()
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
            starts_per_job: 0.0,
            restart_gpu_hours: 0.0,
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
            starts: 1,
            restart_gpu_s: 0.0,
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
        assert!(timeline.contains("time (h)"));
        assert!(timeline.contains("<rect"));

        assert!(timeline.contains("Tinted background: the GPU is idle"));

        let util = read(&out.join("max_min_fairness.utilization.svg"));
        assert!(util.contains("max_min_fairness: busy GPUs, a band per type (3 GPUs)"));
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
        let pts = step_points(&rounds, HOURS, |x| busy(x, 0));
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
        let binned = binned_points(&rounds, 7200.0, 4, HOURS, |x| busy(x, 0));
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

    /// The y (px) of the SVG text element that reads `text`.
    fn text_y(svg: &str, text: &str) -> f64 {
        let at = svg.find(&format!("\n{text}\n")).expect(text);
        let tag = &svg[svg[..at].rfind("<text").expect("a text tag")..at];
        let y = tag.split(" y=\"").nth(1).expect("y").split('"').next();
        y.expect("y").parse().expect("a number")
    }

    #[test]
    fn time_units_follow_the_span() {
        let unit = |s: f64| TimeUnit::for_span(s).name;
        assert_eq!(unit(0.0), "s");
        assert_eq!(unit(f64::NAN), "s");
        assert_eq!(unit(119.9), "s");
        assert_eq!(unit(120.0), "min");
        assert_eq!(unit(2.0 * HOUR - 1.0), "min");
        assert_eq!(unit(2.0 * HOUR), "h");
        assert_eq!(unit(48.0 * HOUR - 1.0), "h");
        assert_eq!(unit(48.0 * HOUR), "days");
        assert_eq!(MINUTES.of(90.0), 1.5);
        assert_eq!(MINUTES.label("time"), "time (min)");
        assert_eq!(tick(&20.0), "20");
        assert_eq!(tick(&0.25), "0.25");
        assert_eq!(tick(&-0.0), "0");
    }

    #[test]
    fn a_run_of_seconds_is_plotted_in_seconds() {
        // The fixture, a hundred times faster: 72 s.
        let mut r = result("fifo");
        for s in &mut r.spans {
            (s.start_s, s.end_s) = (s.start_s / 100.0, s.end_s / 100.0);
        }
        for x in &mut r.rounds {
            (x.start_s, x.end_s) = (x.start_s / 100.0, x.end_s / 100.0);
        }
        for j in &mut r.jobs {
            j.jct_s = j.jct_s.map(|v| v / 100.0);
        }
        let dir = tempfile::tempdir().expect("tempdir");
        write_plots(dir.path(), &[r]).expect("write");
        let timeline = read(&dir.path().join("fifo.gpu_timeline.svg"));
        assert!(timeline.contains("time (s)"), "{timeline:.2000}");
        assert!(read(&dir.path().join("fifo.utilization.svg")).contains("time (s)"));
        let cdf = read(&dir.path().join("jct_cdf.svg"));
        assert!(cdf.contains("job completion time (s)"));
    }

    #[test]
    fn jobs_get_distinct_colors() {
        let colors: Vec<RGBColor> = (0..100).map(job_color).collect();
        let distance = |a: RGBColor, b: RGBColor| {
            let d = |x: u8, y: u8| (f64::from(x) - f64::from(y)).powi(2);
            (d(a.0, b.0) + d(a.1, b.1) + d(a.2, b.2)).sqrt()
        };
        for (i, &a) in colors.iter().enumerate() {
            for (j, &b) in colors.iter().enumerate().skip(i + 1) {
                assert!(distance(a, b) >= 15.0, "jobs {i} and {j}: {a:?}, {b:?}");
            }
        }
        // Consecutive ids, often side by side, are far apart.
        for pair in colors.windows(2) {
            assert!(distance(pair[0], pair[1]) >= 80.0, "{pair:?}");
        }
    }

    #[test]
    fn styles_of_policies_differ() {
        let styles: Vec<SeriesStyle> = (0..4).map(series_style).collect();
        for (i, a) in styles.iter().enumerate() {
            for b in &styles[i + 1..] {
                assert!(a.dash != b.dash && a.marker != b.marker, "{a:?} {b:?}");
            }
        }
        let cdf = cdf_marker_points(&[1.0, 2.0, 3.0, 4.0], 0, 2);
        assert_eq!(cdf.len(), CDF_MARKERS);
        let other = cdf_marker_points(&[1.0, 2.0, 3.0, 4.0], 1, 2);
        assert!(cdf.iter().zip(&other).all(|(a, b)| a.1 < b.1));
        assert!(cdf_marker_points(&[], 0, 1).is_empty());
    }

    #[test]
    fn forked_copies_are_hatched() {
        assert_eq!(
            over_gang(vec![(0.0, 1), (10.0, -1), (5.0, 1), (15.0, -1)], 1),
            [(5.0, 10.0)]
        );
        // A gang that moves GPUs between rounds is not forked.
        assert!(over_gang(vec![(0.0, 1), (5.0, -1), (5.0, 1), (10.0, -1)], 1).is_empty());
        // Nor is a gang of two on two GPUs.
        assert!(over_gang(vec![(0.0, 1), (5.0, -1), (0.0, 1), (5.0, -1)], 2).is_empty());
        // A copy that moves at a round's end leaves one interval.
        let moved = vec![
            (0.0, 1),
            (10.0, -1),
            (0.0, 1),
            (5.0, -1),
            (5.0, 1),
            (10.0, -1),
        ];
        assert_eq!(over_gang(moved, 1), [(0.0, 10.0)]);

        // Job 1 (gang 1) runs on two GPUs at once from 3600 s on.
        let mut r = result("hadare");
        r.jobs[1].copy_rounds = 2;
        r.spans.push(span(2, 1, 3600.0, 7200.0));
        assert_eq!(
            Timeline::new(&r).forked.get(&1),
            Some(&vec![(3600.0, 7200.0)])
        );
        let dir = tempfile::tempdir().expect("tempdir");
        write_plots(dir.path(), &[r.clone(), result("fifo")]).expect("write");
        let svg = read(&dir.path().join("hadare.gpu_timeline.svg"));
        assert!(svg.contains("<pattern id=\"hadar-copies\""));
        assert!(svg.contains("fill=\"url(#hadar-copies)\""));
        assert!(svg.contains("Hatched: the job runs as several HadarE copies"));
        assert!(!svg.contains("#010203"));
        // Without copies nothing is hatched, even on more GPUs than a gang.
        let plain = read(&dir.path().join("fifo.gpu_timeline.svg"));
        assert!(!plain.contains("hadar-copies") && !plain.contains("Hatched"));
        r.jobs[1].copy_rounds = 0;
        assert!(Timeline::new(&r).forked.is_empty());
        // Gaps thinner than a column close.
        let slivers = [(0.0, 9.5), (10.0, 19.5), (35.0, 36.0)];
        assert_eq!(snap(&slivers, 10.0), [(0.0, 20.0), (30.0, 40.0)]);
    }

    #[test]
    fn bars_are_labelled_beyond_forty_jobs() {
        // 60 jobs, one an hour on one GPU each of 3: every bar has room.
        let mut r = result("many");
        r.spans = (0..60u32)
            .map(|j| {
                span(
                    j % 3,
                    j,
                    f64::from(j / 3) * 3600.0,
                    f64::from(j / 3 + 1) * 3600.0,
                )
            })
            .collect();
        let dir = tempfile::tempdir().expect("tempdir");
        write_plots(dir.path(), &[r]).expect("write");
        let svg = read(&dir.path().join("many.gpu_timeline.svg"));
        assert!(svg.contains("\n59\n") && svg.contains("\n41\n"));
        assert!(svg.contains("labelled with its id where the bar has room"));
    }

    #[test]
    fn legends_sit_under_the_data() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_plots(dir.path(), &[result("fifo"), result("hadar")]).expect("write");
        let cdf = read(&dir.path().join("jct_cdf.svg"));
        let axis = text_y(&cdf, "job completion time (h)");
        assert!(text_y(&cdf, "fifo (2 jobs)") > axis);
        assert!(text_y(&cdf, "hadar (2 jobs)") > axis);

        let point = |policy: &str, load: f64, mean: f64| CurvePoint {
            policy: policy.into(),
            jobs_per_hour: load,
            seeds: 3,
            mean_jct_h: mean,
            ci95_h: Some((mean - 1.0, mean + 1.0)),
            complete: true,
            flagged: 0,
        };
        let curves = [
            point("a", 1.0, 10.0),
            point("a", 2.0, 30.0),
            point("b", 1.0, 10.0),
            point("b", 2.0, 30.0),
        ];
        let path = dir.path().join("jct_vs_load.svg");
        write_load_plot(&path, &curves).expect("write");
        let svg = read(&path);
        let axis = text_y(&svg, "input job rate (jobs/hour)");
        assert!(text_y(&svg, "a") > axis && text_y(&svg, "b") > axis);
        assert!(svg.contains("mean job completion time (h)"));
    }
}
