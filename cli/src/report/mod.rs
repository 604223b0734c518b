//! Rendering results: tables for people, JSON and CSV for programs, SVG plots.

pub mod jobs_csv;
pub mod plots;
pub mod table;

/// Seconds as hours with two decimals.
pub fn hours(s: f64) -> String {
    format!("{:.2}", s / 3600.0)
}
