//! A plain text table: left-aligned first column, right-aligned numbers.

/// A table with a header row.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    left: usize,
    left_last: bool,
}

impl Table {
    /// A table with these column titles.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Self {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
            left: 1,
            left_last: false,
        }
    }

    /// Left-aligns the first `n` columns (text); the rest are right-aligned (numbers).
    pub fn left_columns(mut self, n: usize) -> Self {
        self.left = n;
        self
    }

    /// Left-aligns the last column too (text after the numbers).
    pub fn left_last_column(mut self) -> Self {
        self.left_last = true;
        self
    }

    /// Adds a row (missing cells are blank).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// Renders with two spaces between columns.
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut width = vec![0; cols];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (i, cell) in row.iter().enumerate().take(cols) {
                width[i] = width[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |row: &[String]| {
            let mut cells = Vec::with_capacity(cols);
            for (i, w) in width.iter().enumerate() {
                let cell = row.get(i).map_or("", String::as_str);
                // Padded by hand: `format!`'s width stops at 65,535 (a
                // longer cell panicked).
                let pad = " ".repeat(w - cell.chars().count());
                cells.push(if i < self.left || (self.left_last && i + 1 == cols) {
                    format!("{cell}{pad}")
                } else {
                    format!("{pad}{cell}")
                });
            }
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        };
        line(&self.header);
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        line(&rule);
        for row in &self.rows {
            line(row);
        }
        out
    }
}

impl Table {
    /// The table as an HTML `<table>`, each cell's text through `esc`
    /// (numbers right-aligned as in [`Table::render`]).
    pub fn render_html(&self, esc: impl Fn(&str) -> String) -> String {
        let cols = self.header.len();
        let mut out = String::from("<table>\n<tr>");
        for h in &self.header {
            out += &format!("<th>{}</th>", esc(h));
        }
        out += "</tr>\n";
        for row in &self.rows {
            out += "<tr>";
            for i in 0..cols {
                let cell = row.get(i).map_or("", String::as_str);
                let text = i < self.left || (self.left_last && i + 1 == cols);
                let class = if text { "" } else { " class=\"num\"" };
                out += &format!("<td{class}>{}</td>", esc(cell));
            }
            out += "</tr>\n";
        }
        out + "</table>\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns() {
        let mut t = Table::new(["policy", "h"]);
        t.row(["fifo", "1.00"]);
        t.row(["max_min_fairness_perf", "12.50"]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "policy                     h");
        assert_eq!(lines[2], "fifo                    1.00");
        assert_eq!(lines[3], "max_min_fairness_perf  12.50");
        let mut t = Table::new(["run", "policy", "h"]).left_columns(2);
        t.row(["A", "fifo", "1.00"]);
        t.row(["B", "max_min", "12.50"]);
        assert_eq!(t.render().lines().nth(2), Some("A    fifo      1.00"));
    }

    #[test]
    fn a_cell_wider_than_format_s_limit_is_padded() {
        let long = "n".repeat(70_000);
        let mut t = Table::new(["job", "h"]);
        t.row([long.as_str(), "1.0"]);
        t.row(["b", "22.0"]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[2], format!("{long}   1.0"));
        assert_eq!(lines[3].len(), 70_000 + 6);
    }
}
