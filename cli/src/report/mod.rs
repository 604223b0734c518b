//! Rendering results: tables for people, JSON and CSV for programs, SVG plots.

pub mod jobs_csv;
pub mod knowledge;
pub mod plots;
pub mod settings;
pub mod summary;
pub mod table;

/// Text from a user or a file made safe for a terminal: control characters
/// (escape sequences, newlines) are shown escaped, never sent raw. JSON
/// output keeps the text exact.
pub fn escape(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

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
