//! Rendering results: tables for people, JSON and CSV for programs, SVG plots.

pub mod jobs_csv;
pub mod plots;
pub mod table;

/// Seconds as hours with two decimals.
pub fn hours(s: f64) -> String {
    format!("{:.2}", s / 3600.0)
}

/// A policy name made safe as a file-name stem.
pub fn file_stem(policy: &str) -> String {
    let stem: String = policy
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if stem.is_empty() {
        "policy".to_string()
    } else {
        stem
    }
}
