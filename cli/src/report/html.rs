//! `hadar simulate --out DIR`'s `report.html`: one self-contained page (no
//! external assets) with the comparison table, its notes, the settings, the
//! warnings and every plot of the run, inline.

use std::path::{Path, PathBuf};

use super::summary::Comparison;
use crate::exit::CliError;

/// Text made safe inside HTML.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The report's title and its settings line.
#[derive(Debug)]
pub struct Heading<'a> {
    /// `hadar simulate`, `hadar run`.
    pub title: &'a str,
    /// The settings line printed under the table.
    pub settings: &'a str,
    /// More tables after the comparison, each under its title.
    pub tables: &'a [(&'a str, &'a super::table::Table)],
}

/// Writes `dir/report.html`: `c`, the warnings (each with its policy) and
/// the `plots` (SVG files) inline, in this order; returns its path.
pub fn write_report(
    dir: &Path,
    c: &Comparison,
    heading: &Heading<'_>,
    warnings: &[String],
    plots: &[PathBuf],
) -> Result<PathBuf, CliError> {
    let mut body = format!("<h1>{}</h1>\n<pre class=\"header\">", esc(heading.title));
    body += &esc(&c.header.join("\n"));
    body += "</pre>\n";
    body += &c.table.render_html(esc);
    for n in &c.notes {
        body += &format!("<p class=\"note\">{}</p>\n", esc(n));
    }
    body += &format!(
        "<p class=\"note\">settings: {}</p>\n",
        esc(heading.settings)
    );
    for (title, table) in heading.tables {
        body += &format!("<h2>{}</h2>\n{}", esc(title), table.render_html(esc));
    }
    if !warnings.is_empty() {
        body += "<h2>Warnings</h2>\n<ul>\n";
        for w in warnings {
            body += &format!("<li>{}</li>\n", esc(w));
        }
        body += "</ul>\n";
    }
    for p in comparison_first(plots) {
        let svg = std::fs::read_to_string(p).map_err(|e| CliError::output(p.display(), e))?;
        let name = p
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        body += &format!(
            "<h2>{}</h2>\n<div class=\"plot\">{}</div>\n",
            esc(&name),
            strip_prolog(&svg)
        );
    }
    let title = esc(heading.title);
    let page = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n"
    );
    let path = dir.join("report.html");
    crate::cmd::trace::write_atomically(&path, page.as_bytes())?;
    Ok(path)
}

/// The plots in the report's order: the one that sets the policies side by
/// side (the JCT distributions) before each policy's own, which a reader
/// otherwise scrolled past to reach it.
fn comparison_first(plots: &[PathBuf]) -> Vec<&PathBuf> {
    let (both, each): (Vec<&PathBuf>, Vec<&PathBuf>) = plots.iter().partition(|p| {
        p.file_name()
            .is_some_and(|n| n == super::plots::JCT_CDF_FILE)
    });
    both.into_iter().chain(each).collect()
}

/// An SVG file's text from its `<svg` element on (an XML declaration is not
/// allowed inside HTML).
fn strip_prolog(svg: &str) -> &str {
    svg.find("<svg").map_or(svg, |i| &svg[i..])
}

const STYLE: &str = "body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em 2em; color: #1d2330; } \
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin-top: 2em; } \
pre.header { background: #f0f2f5; padding: .6em .8em; white-space: pre-wrap; } \
table { border-collapse: collapse; } th, td { padding: .25em .7em; border-bottom: 1px solid #e3e6ea; } \
th { background: #f0f2f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; } \
p.note { color: #5a6272; max-width: 70em; } .plot svg { max-width: 100%; height: auto; }";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(strip_prolog("<?xml version=\"1.0\"?>\n<svg x>"), "<svg x>");
    }

    #[test]
    fn the_comparison_plot_comes_first() {
        let plots: Vec<PathBuf> = [
            "o/fifo.gpu_timeline.svg",
            "o/fifo.utilization.svg",
            "o/jct_cdf.svg",
        ]
        .map(PathBuf::from)
        .to_vec();
        let names: Vec<_> = comparison_first(&plots)
            .iter()
            .filter_map(|p| p.file_name()?.to_str())
            .collect();
        assert_eq!(
            names,
            [
                "jct_cdf.svg",
                "fifo.gpu_timeline.svg",
                "fifo.utilization.svg"
            ]
        );
    }
}
