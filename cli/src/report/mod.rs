//! Rendering results: tables for people, JSON and CSV for programs, SVG plots.

pub mod html;
pub mod jobs_csv;
pub mod knowledge;
pub mod plots;
pub mod settings;
pub mod summary;
pub mod table;

/// [`escape`] line by line: a text of several lines (an error with its
/// cause, a warning with a task's last output) keeps its line breaks.
pub fn escape_lines(s: &str) -> String {
    s.split('\n').map(escape).collect::<Vec<_>>().join("\n")
}

/// Text from a user or a file made safe for a terminal: control characters
/// (escape sequences, newlines) and the invisible ones that reorder or hide
/// text (bidirectional overrides, zero-width characters) are shown escaped
/// (`\u{202e}`), never sent raw. JSON output keeps the text exact.
pub fn escape(s: &str) -> String {
    if !s.chars().any(unsafe_for_terminal) {
        return s.to_string();
    }
    s.chars()
        .flat_map(|c| {
            if unsafe_for_terminal(c) {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Control characters, and format characters a reader cannot see: the
/// bidirectional marks, embeddings, overrides and isolates (U+061C,
/// U+200E-U+200F, U+202A-U+202E, U+2066-U+2069), zero-width ones
/// (U+200B-U+200D, U+2060, U+FEFF).
fn unsafe_for_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
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

/// `--out DIR` of `hadar simulate` and `hadar run`: per-job CSVs, the
/// summary JSON, the plots and `report.html`, which embeds them all.
pub fn write_outputs(
    dir: &std::path::Path,
    results: &[hadar_core::metrics::RunResult],
    summary_json: &str,
    comparison: &summary::Comparison,
    heading: &html::Heading<'_>,
) -> Result<(), crate::exit::CliError> {
    use crate::exit::CliError;
    std::fs::create_dir_all(dir).map_err(|e| CliError::output(dir.display(), e))?;
    for r in results {
        let name = format!("{}.jobs.csv", file_stem(&r.summary.policy));
        jobs_csv::write_jobs_csv(&dir.join(name), r)?;
    }
    let path = dir.join("summary.json");
    crate::cmd::trace::write_atomically(&path, summary_json.as_bytes())?;
    let plots = plots::write_plots(dir, results)?;
    let warnings: Vec<String> = results
        .iter()
        .flat_map(|r| {
            r.summary
                .warnings
                .iter()
                .map(|w| format!("{}: {w}", r.summary.policy))
        })
        .collect();
    html::write_report(dir, comparison, heading, &warnings, &plots)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_shows_what_would_reorder_or_hide_text() {
        assert_eq!(escape("plain ünïcode"), "plain ünïcode");
        assert_eq!(escape("a\nb\x1b[31m"), "a\\nb\\u{1b}[31m");
        assert_eq!(escape("evil\u{202e}gnp.exe"), "evil\\u{202e}gnp.exe");
        assert_eq!(escape("zero\u{200b}width"), "zero\\u{200b}width");
        assert_eq!(escape("\u{feff}bom"), "\\u{feff}bom");
    }
}
