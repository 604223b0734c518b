//! Reading the traces' CSV tables: columns found by name, every error with
//! its file, line and column.

use std::rc::Rc;

use crate::error::{Error, Location, Result};

/// More GPUs than any machine has: a larger count is a corrupt field.
const MAX_GPUS_PER_NODE: f64 = 1024.0;

/// Whether a table starts with a header line.
#[derive(Debug, Clone, Copy)]
pub(super) enum Header {
    /// It does; columns are found by name, in any order, extra ones ignored.
    Required,
    /// It does not (PAI's tables): these are its columns, in order. A first
    /// line that repeats them (a file saved with its header) is skipped.
    Absent(&'static [&'static str]),
}

/// A CSV table being read.
pub(super) struct Table<'a> {
    reader: csv::Reader<&'a [u8]>,
    header: Rc<[String]>,
    source: Rc<str>,
    skip_header_row: bool,
}

impl std::fmt::Debug for Table<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("source", &self.source)
            .finish()
    }
}

/// One row, with what its errors need to say where they are.
#[derive(Debug)]
pub(super) struct Row {
    record: csv::StringRecord,
    line: usize,
    header: Rc<[String]>,
    source: Rc<str>,
}

impl<'a> Table<'a> {
    pub(super) fn parse(text: &'a str, source: &str, header: Header) -> Result<Self> {
        let text = without_bom(text);
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(matches!(header, Header::Required))
            .trim(csv::Trim::All)
            .comment(Some(b'#'))
            .flexible(true)
            .from_reader(text.as_bytes());
        let (names, skip_header_row): (Vec<String>, bool) = match header {
            Header::Required => {
                let h = reader
                    .headers()
                    .map_err(|e| csv_error(source, e))?
                    .iter()
                    .map(str::to_string)
                    .collect();
                (h, false)
            }
            Header::Absent(names) => (names.iter().map(|s| s.to_string()).collect(), true),
        };
        if names.iter().all(String::is_empty) {
            return Err(Error::parse(
                Location::new(source),
                "the file is empty; expected a CSV table with a header line",
            ));
        }
        Ok(Self {
            reader,
            header: names.into(),
            source: source.into(),
            skip_header_row,
        })
    }

    /// The positions of these columns, or an error naming those missing.
    pub(super) fn columns<const N: usize>(&self, names: [&str; N]) -> Result<[usize; N]> {
        let mut out = [0; N];
        let mut missing = Vec::new();
        for (slot, name) in out.iter_mut().zip(names) {
            match self.optional(name) {
                Some(i) => *slot = i,
                None => missing.push(name),
            }
        }
        if missing.is_empty() {
            Ok(out)
        } else {
            Err(Error::parse(
                Location::new(&*self.source).line(1),
                format!(
                    "no column {}; its header has {}",
                    missing
                        .iter()
                        .map(|m| format!("`{m}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    escape(&self.header.join(","))
                ),
            ))
        }
    }

    /// The position of a column the format may lack.
    pub(super) fn optional(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    /// The rows, each checked to have every column.
    pub(super) fn rows(self) -> impl Iterator<Item = Result<Row>> + 'a {
        let Table {
            reader,
            header,
            source,
            skip_header_row,
        } = self;
        let mut first = skip_header_row;
        reader.into_records().filter_map(move |r| {
            let record = match r {
                Ok(r) => r,
                Err(e) => return Some(Err(csv_error(&source, e))),
            };
            let line = record.position().map_or(0, |p| p.line() as usize);
            if std::mem::take(&mut first) && record.iter().eq(header.iter().map(String::as_str)) {
                return None;
            }
            if record.len() < header.len() {
                return Some(Err(Error::parse(
                    Location::new(&*source).line(line),
                    format!(
                        "{} fields where the table has {} ({})",
                        record.len(),
                        header.len(),
                        header.join(",")
                    ),
                )));
            }
            Some(Ok(Row {
                record,
                line,
                header: header.clone(),
                source: source.clone(),
            }))
        })
    }
}

impl Row {
    /// The field in column `i` (trimmed).
    pub(super) fn get(&self, i: usize) -> &str {
        self.record.get(i).unwrap_or("")
    }

    /// Where column `i` of this row is.
    pub(super) fn at(&self, i: usize) -> Location {
        Location::new(&*self.source)
            .line(self.line)
            .field(self.header.get(i).map_or("?", String::as_str))
    }

    /// Column `i` as a number; `None` when empty or a missing-value mark
    /// (`None`, `nan`, `NaN`, `null`), as the traces write them.
    pub(super) fn number(&self, i: usize) -> Result<Option<f64>> {
        number(self.get(i), &self.at(i))
    }

    /// Column `i` as a count of GPUs, a share of one or a count that
    /// multiplies them ([`count`]).
    pub(super) fn count(&self, i: usize) -> Result<Option<f64>> {
        count(self.get(i), &self.at(i))
    }

    /// Column `i` as a machine's number of GPUs (missing: 0).
    pub(super) fn gpus(&self, i: usize) -> Result<u32> {
        let n = self.count(i)?.unwrap_or(0.0);
        if n < 0.0 || n.fract() != 0.0 || n > MAX_GPUS_PER_NODE {
            return Err(Error::parse(
                self.at(i),
                format!(
                    "`{n}` is not a machine's number of GPUs (a whole number from 0 to {MAX_GPUS_PER_NODE})"
                ),
            ));
        }
        Ok(n as u32)
    }

    /// Column `i` as a time stamp ([`super::time::seconds`]); `None` when missing.
    pub(super) fn time(&self, i: usize) -> Result<Option<f64>> {
        time(self.get(i), &self.at(i))
    }
}

/// `text` without a leading UTF-8 byte order mark: a file saved by a
/// spreadsheet or a Windows editor may start with one, and every importer
/// that reads text (CSV and JSON) takes such a file as it takes any other.
pub(super) fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// Whether a field is one of the traces' marks of a missing value.
pub(super) fn missing(s: &str) -> bool {
    matches!(
        s.trim(),
        "" | "None" | "none" | "nan" | "NaN" | "null" | "NULL"
    )
}

/// A number, or `None` when missing; anything else is an error.
pub(super) fn number(s: &str, at: &Location) -> Result<Option<f64>> {
    if missing(s) {
        return Ok(None);
    }
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(Some(x)),
        _ => Err(Error::parse(
            at.clone(),
            format!("`{}` is not a number", escape(s)),
        )),
    }
}

/// A count of GPUs (or a share of one, or of instances that multiply
/// them), or `None` when empty or marked missing (`None`, `null`). NaN is
/// refused as inf is: in a count it is a corrupt value, not a missing one
/// (the traces leave a count they lack empty), and taken as missing it
/// would make a GPU job a CPU job, silently left out.
pub(super) fn count(s: &str, at: &Location) -> Result<Option<f64>> {
    if s.trim().eq_ignore_ascii_case("nan") {
        return Err(Error::parse(
            at.clone(),
            format!(
                "`{}` is not a number of GPUs: NaN, like inf, is a corrupt value (a field \
                 with no count is left empty)",
                escape(s.trim())
            ),
        ));
    }
    number(s, at)
}

/// The error for a job id met a second time, at `at`, first on line `first`.
pub(super) fn repeated_id(id: &str, at: Location, first: usize) -> Error {
    Error::parse(
        at,
        format!(
            "job id `{}` appears twice (first on line {first}): the trace gives each job one \
             row, so a repeat is a corrupt file, or two files in one (import each on its own)",
            escape(id)
        ),
    )
}

/// A time stamp, or `None` when missing; anything else is an error.
pub(super) fn time(s: &str, at: &Location) -> Result<Option<f64>> {
    if missing(s) {
        return Ok(None);
    }
    super::time::seconds(s).map(Some).ok_or_else(|| {
        Error::parse(
            at.clone(),
            format!(
                "`{}` is not a time; expected YYYY-MM-DD HH:MM:SS, with an offset such as +08:00 or none",
                escape(s)
            ),
        )
    })
}

/// A relative speed: a finite number of at least 0 (0: cannot run there).
pub(super) fn speed(s: &str, at: &Location) -> Result<f64> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(Error::parse(
            at.clone(),
            format!(
                "`{}` is not a speed; give a number of at least 0 relative to the other types (1 for the reference, 0 where the jobs cannot run)",
                escape(s)
            ),
        )),
    }
}

/// A GPU type name as the cluster files take them.
pub(super) use crate::cluster::validate_type_name as type_name;

/// A name from a trace made safe for the files an import writes: letters,
/// digits and `_-.:/|` kept, anything else (tabs, newlines, commas,
/// quotes, spaces, control characters) turned into `_`.
pub(super) fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/' | '|') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A field as an error message may show it: control characters escaped, at
/// most 60 characters.
pub(super) fn escape(s: &str) -> String {
    let e: String = s.chars().flat_map(char::escape_debug).collect();
    if e.chars().count() > 60 {
        format!("{}...", e.chars().take(60).collect::<String>())
    } else {
        e
    }
}

fn csv_error(source: &str, e: csv::Error) -> Error {
    let line = e.position().map(|p| p.line() as usize);
    let at = match line {
        Some(l) => Location::new(source).line(l),
        None => Location::new(source),
    };
    Error::parse(at, format!("not a CSV table: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_by_name_and_errors_with_places() {
        let t = Table::parse("b,a\n2,1\n3\n", "t.csv", Header::Required).unwrap();
        let [a, b] = t.columns(["a", "b"]).unwrap();
        let rows: Vec<_> = t.rows().collect();
        let r = rows[0].as_ref().unwrap();
        assert_eq!((r.get(a), r.get(b)), ("1", "2"));
        let e = rows[1].as_ref().unwrap_err().to_string();
        assert!(e.contains("t.csv:3") && e.contains("1 fields"), "{e}");
        let t = Table::parse("x,y\n", "t.csv", Header::Required).unwrap();
        let e = t.columns(["x", "z", "w"]).unwrap_err().to_string();
        assert!(e.contains("no column `z`, `w`"), "{e}");
    }

    #[test]
    fn a_headerless_table_skips_a_repeated_header() {
        const COLS: &[&str] = &["m", "n"];
        let t = Table::parse("m,n\nq,1\n", "p.csv", Header::Absent(COLS)).unwrap();
        let rows: Vec<_> = t.rows().map(|r| r.unwrap().get(0).to_string()).collect();
        assert_eq!(rows, ["q"]);
        let t = Table::parse("q,1\n", "p.csv", Header::Absent(COLS)).unwrap();
        assert_eq!(t.rows().count(), 1);
    }

    #[test]
    fn fields() {
        let at = Location::new("f");
        assert_eq!(number(" nan", &at).unwrap(), None);
        assert_eq!(number("4550879.0", &at).unwrap(), Some(4_550_879.0));
        assert!(number("inf", &at).is_err());
        assert!(speed("-1", &at).is_err());
        assert_eq!(speed("0", &at).unwrap(), 0.0);
        assert!(type_name("v 100", &at).is_err());
        assert_eq!(clean("a\tb\nc,d e|f"), "a_b_c_d_e|f");
        assert_eq!(escape("a\u{1b}[31m"), "a\\u{1b}[31m");
    }
}
