//! Throughput tables: iterations per second for (job type, gang size, GPU type).
//!
//! Two formats are read: Gavel's oracle JSON (as it is, co-location pairs
//! included) and a plain CSV of our own,
//! `model,scale_factor,gpu_type,steps_per_second`, for users who measure
//! their own GPUs. Gavel's two tables are embedded (MIT, see
//! `core/data/gavel/NOTICE`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use crate::error::{read_to_string, Error, Location, Result};

/// Gavel's simulation oracle, embedded.
pub const GAVEL_SIMULATION_JSON: &str = include_str!("../data/gavel/simulation_throughputs.json");
/// Gavel's physical-cluster oracle, embedded.
pub const GAVEL_PHYSICAL_JSON: &str =
    include_str!("../data/gavel/physical_cluster_throughputs.json");

/// Names accepted in place of a path for the embedded tables.
pub const EMBEDDED_TABLES: [&str; 2] = ["gavel", "gavel-physical"];

/// A job type at a gang size: the key of a throughput entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobKey {
    /// Model string.
    pub model: String,
    /// Gang size.
    pub scale_factor: u32,
}

/// The rates of one job key on one GPU type.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rates {
    /// Steps/s of the whole job running alone (all its GPUs). 0 means it cannot run there.
    pub isolated: f64,
    /// Steps/s when sharing its GPUs with another job: `(other, [self rate, other rate])`.
    pub colocated: Vec<(JobKey, [f64; 2])>,
}

/// A throughput table.
#[derive(Clone, Default)]
pub struct ThroughputTable {
    /// GPU type -> job key -> rates.
    by_type: BTreeMap<String, HashMap<JobKey, Rates>>,
    /// Where it came from, for messages.
    source: String,
}

impl ThroughputTable {
    /// Loads `spec`: an embedded table's name (`gavel`, `gavel-physical`),
    /// a `.json` file in Gavel's format or a `.csv` file in ours.
    pub fn load(spec: &str) -> Result<Self> {
        match spec {
            "gavel" => Self::from_gavel_json(GAVEL_SIMULATION_JSON, "<embedded gavel>"),
            "gavel-physical" => {
                Self::from_gavel_json(GAVEL_PHYSICAL_JSON, "<embedded gavel-physical>")
            }
            _ => {
                let path = Path::new(spec);
                let text = read_to_string(path)?;
                let source = path.display().to_string();
                if spec.ends_with(".csv") {
                    Self::from_csv(&text, &source)
                } else if spec.ends_with(".json") {
                    Self::from_gavel_json(&text, &source)
                } else {
                    Err(Error::parse(
                        Location::new(source),
                        "unknown throughput table format; expected a .json file in Gavel's \
                         format, a .csv file (model,scale_factor,gpu_type,steps_per_second), \
                         or an embedded table name (gavel, gavel-physical)",
                    ))
                }
            }
        }
    }

    /// Gavel's embedded simulation table.
    pub fn gavel() -> Self {
        // The embedded file is checked by a test; a failure here is a build defect.
        Self::from_gavel_json(GAVEL_SIMULATION_JSON, "<embedded gavel>")
            .unwrap_or_else(|e| panic!("embedded Gavel table is invalid: {e}"))
    }

    /// Parses Gavel's oracle JSON:
    /// `{gpu_type: {"('<model>', <sf>)": {"null": rate, "('<other>', <sf>)": [self, other]}}}`.
    pub fn from_gavel_json(text: &str, source: &str) -> Result<Self> {
        let location = Location::new(source);
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            Error::parse(
                location.line(e.line()),
                format!("not valid JSON ({e}); expected Gavel's throughput oracle format"),
            )
        })?;
        let top = value
            .as_object()
            .ok_or_else(|| Error::parse(location.clone(), "expected a JSON object of GPU types"))?;
        if top.is_empty() {
            return Err(Error::parse(location, "the table has no GPU types"));
        }
        let mut by_type = BTreeMap::new();
        for (gpu, entries) in top {
            let at = location.field(gpu.as_str());
            let entries = entries
                .as_object()
                .ok_or_else(|| Error::parse(at.clone(), "expected an object of job keys"))?;
            let mut map = HashMap::with_capacity(entries.len());
            for (key, rates) in entries {
                let at = location.field(format!("{gpu}.{key}"));
                let job = parse_gavel_key(key).ok_or_else(|| {
                    Error::parse(
                        at.clone(),
                        "expected a key of the form ('<model>', <scale factor>)",
                    )
                })?;
                let rates = rates.as_object().ok_or_else(|| {
                    Error::parse(at.clone(), "expected an object with a \"null\" rate")
                })?;
                if !rates.contains_key("null") {
                    return Err(Error::parse(
                        at.clone(),
                        "no \"null\" rate (the job's rate alone on the GPU)",
                    ));
                }
                let mut out = Rates::default();
                for (other, r) in rates {
                    if other == "null" {
                        out.isolated = r.as_f64().and_then(rate).ok_or_else(|| {
                            Error::parse(at.field("null"), format!("expected {A_RATE}"))
                        })?;
                    } else {
                        let other_key = parse_gavel_key(other).ok_or_else(|| {
                            Error::parse(at.clone(), format!("bad co-location key `{other}`"))
                        })?;
                        let pair = r
                            .as_array()
                            .filter(|a| a.len() == 2)
                            .and_then(|a| Some([rate(a[0].as_f64()?)?, rate(a[1].as_f64()?)?]))
                            .ok_or_else(|| {
                                Error::parse(
                                    at.clone(),
                                    format!(
                                        "co-location `{other}`: expected [self rate, other \
                                         rate], each {A_RATE}"
                                    ),
                                )
                            })?;
                        out.colocated.push((other_key, pair));
                    }
                }
                map.insert(job, out);
            }
            by_type.insert(gpu.clone(), map);
        }
        Ok(Self {
            by_type,
            source: source.to_string(),
        })
    }

    /// Parses our CSV format: a header `model,scale_factor,gpu_type,steps_per_second`
    /// (any column order), one rate per line.
    pub fn from_csv(text: &str, source: &str) -> Result<Self> {
        let location = Location::new(source);
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .comment(Some(b'#'))
            .from_reader(text.as_bytes());
        let headers = reader
            .headers()
            .map_err(|e| Error::parse(location.line(1), e.to_string()))?
            .clone();
        let idx = csv_columns(&headers, &location)?;
        let mut by_type: BTreeMap<String, HashMap<JobKey, Rates>> = BTreeMap::new();
        for record in reader.records() {
            let record = record.map_err(|e| {
                let line = e.position().map_or(0, |p| p.line() as usize);
                Error::parse(location.line(line), e.to_string())
            })?;
            let line = record.position().map_or(0, |p| p.line() as usize);
            let at = location.line(line);
            let (gpu, key, rate) = csv_rate(&record, &idx, &at)?;
            let entry = by_type.entry(gpu).or_default();
            if entry.contains_key(&key) {
                return Err(Error::parse(
                    at,
                    format!(
                        "duplicate rate for ({}, {}) on this GPU type",
                        key.model, key.scale_factor
                    ),
                ));
            }
            entry.insert(
                key,
                Rates {
                    isolated: rate,
                    colocated: Vec::new(),
                },
            );
        }
        if by_type.is_empty() {
            return Err(Error::parse(
                location,
                "the table has no rates (empty file?)",
            ));
        }
        Ok(Self {
            by_type,
            source: source.to_string(),
        })
    }

    /// Writes the isolated rates in our CSV format, sorted.
    pub fn to_csv(&self) -> String {
        let mut rows: Vec<(&JobKey, &str, f64)> = Vec::new();
        for (gpu, map) in &self.by_type {
            for (key, rates) in map {
                rows.push((key, gpu, rates.isolated));
            }
        }
        rows.sort_by(|a, b| a.0.cmp(b.0).then(a.1.cmp(b.1)));
        let mut out = String::from("model,scale_factor,gpu_type,steps_per_second\n");
        for (key, gpu, rate) in rows {
            let model = if key.model.contains(',') || key.model.contains('"') {
                format!("\"{}\"", key.model.replace('"', "\"\""))
            } else {
                key.model.clone()
            };
            out.push_str(&format!("{model},{},{gpu},{rate}\n", key.scale_factor));
        }
        out
    }

    /// Where the table came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The same table, said to come from `source`.
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// GPU types of the table, `*_unconsolidated` ones included.
    pub fn gpu_types(&self) -> impl Iterator<Item = &str> {
        self.by_type.keys().map(String::as_str)
    }

    /// Whether the table knows `gpu_type`.
    pub fn has_gpu_type(&self, gpu_type: &str) -> bool {
        self.by_type.contains_key(gpu_type)
    }

    /// The rates of `model` at gang size `scale_factor` on `gpu_type`.
    pub fn rates(&self, model: &str, scale_factor: u32, gpu_type: &str) -> Option<&Rates> {
        // Avoid allocating a key on the lookup path: find by borrowed parts.
        let map = self.by_type.get(gpu_type)?;
        map.get(&JobKey {
            model: model.to_string(),
            scale_factor,
        })
    }

    /// Isolated steps/s of the whole job, or `None` if the table lacks the entry.
    pub fn isolated(&self, model: &str, scale_factor: u32, gpu_type: &str) -> Option<f64> {
        self.rates(model, scale_factor, gpu_type)
            .map(|r| r.isolated)
    }

    /// Every model, with the gang sizes the table has for it (on any GPU type).
    pub fn models(&self) -> BTreeMap<&str, BTreeSet<u32>> {
        let mut out: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
        for map in self.by_type.values() {
            for key in map.keys() {
                out.entry(key.model.as_str())
                    .or_default()
                    .insert(key.scale_factor);
            }
        }
        out
    }

    /// Inserts or replaces an isolated rate (for tests and measured updates).
    pub fn set_isolated(&mut self, model: &str, scale_factor: u32, gpu_type: &str, rate: f64) {
        self.by_type
            .entry(gpu_type.to_string())
            .or_default()
            .entry(JobKey {
                model: model.to_string(),
                scale_factor,
            })
            .or_default()
            .isolated = rate;
    }

    /// Inserts or replaces the measured rates of `a` and `b` (equal gang
    /// size `scale_factor`) sharing GPUs of `gpu_type`: `[a's, b's]`, stored
    /// under both keys as Gavel's table does.
    pub fn set_colocated(
        &mut self,
        a: &str,
        b: &str,
        scale_factor: u32,
        gpu_type: &str,
        rates: [f64; 2],
    ) {
        let key = |m: &str| JobKey {
            model: m.to_string(),
            scale_factor,
        };
        let by_key = self.by_type.entry(gpu_type.to_string()).or_default();
        for (this, other, pair) in [(a, b, rates), (b, a, [rates[1], rates[0]])] {
            let list = &mut by_key.entry(key(this)).or_default().colocated;
            list.retain(|(k, _)| *k != key(other));
            list.push((key(other), pair));
        }
    }
}

impl std::fmt::Debug for ThroughputTable {
    // The full table is large; show what identifies it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThroughputTable")
            .field("source", &self.source)
            .field("gpu_types", &self.by_type.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The most iterations per second a rate may claim: far above any real
/// job's, and far below where the LP's arithmetic breaks (a rate of 5e307
/// tripped the solver's assertion).
pub const MAX_RATE: f64 = 1e9;

/// What [`rate`] accepts, for error messages.
pub const A_RATE: &str = "a rate (iterations/s, from 0 to 1e9)";

/// `x` if it is a rate: finite, from 0 to [`MAX_RATE`].
pub fn rate(x: f64) -> Option<f64> {
    (x.is_finite() && (0.0..=MAX_RATE).contains(&x)).then_some(x)
}

/// Where the CSV header puts each of `model`, `scale_factor`, `gpu_type`
/// and `steps_per_second`, in that order.
fn csv_columns(headers: &csv::StringRecord, location: &Location) -> Result<[usize; 4]> {
    const COLUMNS: [&str; 4] = ["model", "scale_factor", "gpu_type", "steps_per_second"];
    let mut idx = [0usize; 4];
    for (i, name) in COLUMNS.iter().enumerate() {
        idx[i] = headers.iter().position(|h| h == *name).ok_or_else(|| {
            Error::parse(
                location.line(1).field(*name),
                format!(
                    "missing column; the header must name {} (found: {})",
                    COLUMNS.join(","),
                    headers.iter().collect::<Vec<_>>().join(",")
                ),
            )
        })?;
    }
    Ok(idx)
}

/// One CSV line (at `at`, its columns at `idx`): its GPU type, job key and
/// rate, each checked.
fn csv_rate(
    record: &csv::StringRecord,
    idx: &[usize; 4],
    at: &Location,
) -> Result<(String, JobKey, f64)> {
    let model = record[idx[0]].to_string();
    if model.is_empty() {
        return Err(Error::parse(at.field("model"), "empty model name"));
    }
    let scale_factor: u32 = record[idx[1]]
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            Error::parse(
                at.field("scale_factor"),
                format!(
                    "`{}` is not a gang size (a whole number >= 1)",
                    &record[idx[1]]
                ),
            )
        })?;
    let gpu = record[idx[2]].to_string();
    if gpu.is_empty() {
        return Err(Error::parse(at.field("gpu_type"), "empty GPU type"));
    }
    let rate: f64 = record[idx[3]].parse().ok().and_then(rate).ok_or_else(|| {
        Error::parse(
            at.field("steps_per_second"),
            format!("`{}` is not {A_RATE}", &record[idx[3]]),
        )
    })?;
    let key = JobKey {
        model,
        scale_factor,
    };
    Ok((gpu, key, rate))
}

/// Parses `('<model>', <sf>)`.
fn parse_gavel_key(key: &str) -> Option<JobKey> {
    let inner = key.strip_prefix("('")?.strip_suffix(')')?;
    let (model, sf) = inner.rsplit_once("', ")?;
    Some(JobKey {
        model: model.to_string(),
        scale_factor: sf.trim().parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_tables_parse() {
        let t = ThroughputTable::gavel();
        let r = t.isolated("ResNet-18 (batch size 16)", 1, "k80").unwrap();
        assert!((r - 4.795294551566172).abs() < 1e-12);
        let rates = t.rates("ResNet-18 (batch size 16)", 1, "k80").unwrap();
        assert!(!rates.colocated.is_empty(), "co-location pairs are kept");
        assert!(t.has_gpu_type("v100_unconsolidated"));
        assert_eq!(
            t.models()["ResNet-50 (batch size 64)"],
            BTreeSet::from([1, 2, 4, 8])
        );
        ThroughputTable::load("gavel-physical").unwrap();
    }

    #[test]
    fn csv_round_trip() {
        let text = "model,scale_factor,gpu_type,steps_per_second\n\
                    \"Net, big\",2,a100,10.5\nsmall,1,t4,3\n";
        let t = ThroughputTable::from_csv(text, "t.csv").unwrap();
        assert_eq!(t.isolated("Net, big", 2, "a100"), Some(10.5));
        let again = ThroughputTable::from_csv(&t.to_csv(), "again.csv").unwrap();
        assert_eq!(again.isolated("small", 1, "t4"), Some(3.0));
        assert_eq!(again.isolated("Net, big", 2, "a100"), Some(10.5));
    }

    #[test]
    fn csv_errors() {
        for (text, needle) in [
            ("", "missing column"),
            (
                "model,scale_factor,gpu_type\nx,1,v100\n",
                "steps_per_second",
            ),
            (
                "model,scale_factor,gpu_type,steps_per_second\nx,one,v100,1\n",
                "t.csv:2: field `scale_factor`",
            ),
            (
                "model,scale_factor,gpu_type,steps_per_second\nx,1,v100,fast\n",
                "t.csv:2: field `steps_per_second`",
            ),
            (
                "model,scale_factor,gpu_type,steps_per_second\nx,1,v100,-1\n",
                "not a rate",
            ),
            (
                "model,scale_factor,gpu_type,steps_per_second\nx,1,v100,5e307\n",
                "from 0 to 1e9",
            ),
            (
                "model,scale_factor,gpu_type,steps_per_second\nx,1,v100,1\nx,1,v100,2\n",
                "t.csv:3: duplicate",
            ),
            ("model,scale_factor,gpu_type,steps_per_second\n", "no rates"),
            (
                "model,scale_factor,gpu_type,steps_per_second\nx,1,v100\n",
                "t.csv:2",
            ),
        ] {
            let err = ThroughputTable::from_csv(text, "t.csv")
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn gavel_json_errors() {
        for (text, needle) in [
            ("", "not valid JSON"),
            ("[]", "object of GPU types"),
            ("{}", "no GPU types"),
            (
                r#"{"v100": {"bad key": {"null": 1}}}"#,
                "('<model>', <scale factor>)",
            ),
            (
                r#"{"v100": {"('a', 1)": {"null": "x"}}}"#,
                "a rate (iterations/s",
            ),
            (
                r#"{"v100": {"('a', 1)": {"null": 5e307}}}"#,
                "from 0 to 1e9",
            ),
            (
                r#"{"v100": {"('a', 1)": {"('b', 1)": [1, 1]}}}"#,
                "no \"null\" rate",
            ),
            (
                r#"{"v100": {"('a', 1)": {"null": 1, "('b', 1)": [1, -1]}}}"#,
                "each a rate",
            ),
            (
                r#"{"v100": {"('a', 1)": {"null": 1, "('b', 1)": [1]}}}"#,
                "[self rate, other rate]",
            ),
        ] {
            let err = ThroughputTable::from_gavel_json(text, "t.json")
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("t.json"), "{err}");
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
