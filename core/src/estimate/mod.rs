//! The throughput model: what the scheduler believes of each job kind's
//! speed on each GPU type, from the rates a user gave (if any) and from
//! measured progress.
//!
//! Evidence is kept per *kind*, a model string at a gang size: two jobs of
//! one kind are taken to be the same program (a trace's job type; in a
//! real run each job is its own kind, its name). A rate is, in order:
//! 1. measured: the median of the kind's latest [`WINDOW`] measurements
//!    on that type (in log space, so an outlier moves nothing);
//! 2. given: the rate a jobs file gave, until one is measured;
//! 3. inferred from sharing: a kind measured on that type only beside other
//!    jobs (space sharing) ran at its rate alone times a factor, taken as
//!    the median factor of the pairs measured there (and a job never runs
//!    faster beside another than alone);
//! 4. estimated through type ratios ([`ratio`]): the kind's rates on other
//!    types times the type-to-type ratios learned from every kind measured
//!    on both;
//! 5. a prior: the median rate of the kinds of its gang size measured on
//!    that type, else of any kind measured there, else 1 step/s.
//!
//! Space sharing: a kind's rate beside another is its rate alone times a
//! factor, measured per pair, else estimated from the kind's and the other
//! kind's measured pairs ([`Sharing::factor`]), else (nothing measured yet)
//! [`SHARE_PRIOR`].

pub mod ratio;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use ratio::{median, through_ratios, type_ratios};

/// Measurements kept per (kind, type); the estimate is their median. 16:
/// with 10% noise a median of 16 is within about 3% of the truth.
pub const WINDOW: usize = 16;
/// The factor of a job's rate alone that it keeps beside another, before
/// any pair was measured: time-slicing's share.
pub const SHARE_PRIOR: f64 = 0.5;

/// A model string at a gang size: the unit of evidence.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Kind {
    /// Model string (a trace's job type; a real run's job name).
    pub model: String,
    /// Gang size.
    pub scale_factor: u32,
}

impl Kind {
    /// The kind of `model` at `scale_factor` GPUs.
    pub fn new(model: &str, scale_factor: u32) -> Self {
        Self {
            model: model.to_string(),
            scale_factor,
        }
    }
}

/// Where an estimate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Measured on that type.
    Measured,
    /// Given by the user (a jobs file), not yet measured.
    Given,
    /// Measured on that type only beside other jobs (space sharing): its
    /// rates there divided by the typical factor of a shared GPU.
    Shared,
    /// The kind's measured rates on other types times learned type ratios.
    Ratio,
    /// Nothing known of the kind: a typical kind's rate.
    Prior,
}

impl Source {
    /// Whether the rate was measured.
    pub fn is_measured(self) -> bool {
        self == Self::Measured
    }
}

/// A believed rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Steps/s of the kind's whole gang (0: cannot run there).
    pub rate: f64,
    /// Where it comes from.
    pub source: Source,
}

/// What is known of one kind on one type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Evidence {
    kind: Kind,
    gpu_type: String,
    /// A rate given up front, used until one is measured.
    given: Option<f64>,
    /// Natural logs of the latest measurements, oldest first (`-inf`: a
    /// whole round without progress).
    samples: Vec<f64>,
    /// Measurements ever made.
    count: u64,
}

/// A kind's measured rates beside another model (same gang size) on a type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PairEvidence {
    kind: Kind,
    other: String,
    gpu_type: String,
    samples: Vec<f64>,
}

/// The model: all evidence, serializable (a real run saves it with its state).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RateModel {
    /// Sorted by (kind, type), for binary search.
    rates: Vec<Evidence>,
    /// Sorted by (kind, other, type).
    pairs: Vec<PairEvidence>,
}

/// Pushes `x` into a window of the latest [`WINDOW`] samples.
fn push_sample(samples: &mut Vec<f64>, x: f64) {
    if samples.len() == WINDOW {
        samples.remove(0);
    }
    samples.push(x);
}

impl RateModel {
    fn slot(&mut self, kind: &Kind, gpu_type: &str) -> &mut Evidence {
        let at = self
            .rates
            .binary_search_by(|e| (&e.kind, e.gpu_type.as_str()).cmp(&(kind, gpu_type)));
        let i = match at {
            Ok(i) => i,
            Err(i) => {
                self.rates.insert(
                    i,
                    Evidence {
                        kind: kind.clone(),
                        gpu_type: gpu_type.to_string(),
                        given: None,
                        samples: Vec::new(),
                        count: 0,
                    },
                );
                i
            }
        };
        &mut self.rates[i]
    }

    fn find(&self, kind: &Kind, gpu_type: &str) -> Option<&Evidence> {
        self.rates
            .binary_search_by(|e| (&e.kind, e.gpu_type.as_str()).cmp(&(kind, gpu_type)))
            .ok()
            .map(|i| &self.rates[i])
    }

    /// Records a rate the user gave (steps/s of the whole gang).
    pub fn give(&mut self, kind: &Kind, gpu_type: &str, rate: f64) {
        self.slot(kind, gpu_type).given = Some(rate);
    }

    /// Records a measured rate (steps/s of the whole gang; 0: it made no
    /// progress in a whole round). Non-finite or negative rates are dropped.
    pub fn observe(&mut self, kind: &Kind, gpu_type: &str, rate: f64) {
        if !(rate >= 0.0 && rate.is_finite()) {
            return;
        }
        let e = self.slot(kind, gpu_type);
        push_sample(&mut e.samples, rate.ln());
        e.count += 1;
    }

    /// Records `kind`'s measured rate while sharing its GPUs with a job of
    /// `other` (same gang size) on `gpu_type`.
    pub fn observe_pair(&mut self, kind: &Kind, other: &str, gpu_type: &str, rate: f64) {
        if !(rate > 0.0 && rate.is_finite()) {
            return;
        }
        let key = (kind, other, gpu_type);
        let at = self
            .pairs
            .binary_search_by(|p| (&p.kind, p.other.as_str(), p.gpu_type.as_str()).cmp(&key));
        let i = match at {
            Ok(i) => i,
            Err(i) => {
                self.pairs.insert(
                    i,
                    PairEvidence {
                        kind: kind.clone(),
                        other: other.to_string(),
                        gpu_type: gpu_type.to_string(),
                        samples: Vec::new(),
                    },
                );
                i
            }
        };
        push_sample(&mut self.pairs[i].samples, rate.ln());
    }

    /// The measured rate of `kind` on `gpu_type` (median of the latest
    /// measurements), if it was measured.
    pub fn measured(&self, kind: &Kind, gpu_type: &str) -> Option<f64> {
        let e = self.find(kind, gpu_type)?;
        median(&mut e.samples.clone()).map(f64::exp)
    }

    /// Whether `kind` was measured beside a job of `other` on `gpu_type`.
    pub fn pair_measured(&self, kind: &Kind, other: &str, gpu_type: &str) -> bool {
        let key = (kind, other, gpu_type);
        self.pairs
            .binary_search_by(|p| (&p.kind, p.other.as_str(), p.gpu_type.as_str()).cmp(&key))
            .is_ok()
    }

    /// Measurements ever made of `kind` on `gpu_type`.
    pub fn count(&self, kind: &Kind, gpu_type: &str) -> u64 {
        self.find(kind, gpu_type).map_or(0, |e| e.count)
    }

    /// Every (kind, type) with a measured or given rate: `(kind, type,
    /// measured, given, measurements)`, sorted.
    pub fn entries(&self) -> impl Iterator<Item = (&Kind, &str, Option<f64>, Option<f64>, u64)> {
        self.rates.iter().map(|e| {
            let m = median(&mut e.samples.clone()).map(f64::exp);
            (&e.kind, e.gpu_type.as_str(), m, e.given, e.count)
        })
    }

    /// The believed rate of every kind in `kinds` on every type in `types`.
    pub fn estimate(&self, kinds: &[Kind], types: &[String]) -> Estimates {
        let nt = types.len();
        // Measured log rates and anchors (measured, else given) per kind.
        let mut logs = vec![vec![None; nt]; kinds.len()];
        let mut given = vec![vec![None; nt]; kinds.len()];
        for (k, kind) in kinds.iter().enumerate() {
            for (t, ty) in types.iter().enumerate() {
                if let Some(e) = self.find(kind, ty) {
                    logs[k][t] = median(&mut e.samples.clone());
                    given[k][t] = e.given.filter(|g| *g > 0.0).map(f64::ln);
                }
            }
        }
        let shared = self.alone_from_pairs();
        // Ratios from what each kind is believed to run at: measured, else
        // given (a jobs file's estimates relate its types before anything
        // is measured; measurements replace them).
        let believed: Vec<Vec<Option<f64>>> = logs
            .iter()
            .zip(&given)
            .map(|(l, g)| l.iter().zip(g).map(|(l, g)| l.or(*g)).collect())
            .collect();
        let ratios = type_ratios(&believed, nt);
        let typical = |t: usize, size: Option<u32>| {
            let mut v: Vec<f64> = kinds
                .iter()
                .zip(&believed)
                .filter(|(kind, _)| size.is_none_or(|s| kind.scale_factor == s))
                .filter_map(|(_, row)| row[t].filter(|x| x.is_finite()))
                .collect();
            median(&mut v)
        };
        let mut cells = Vec::with_capacity(kinds.len() * nt);
        for (k, kind) in kinds.iter().enumerate() {
            let anchors: Vec<Option<f64>> = (0..nt).map(|t| logs[k][t].or(given[k][t])).collect();
            for t in 0..nt {
                // A rate of 0 given means "cannot run there": kept, and
                // left out of the ratios (its log is -inf).
                let never = self
                    .find(kind, &types[t])
                    .is_some_and(|e| e.given == Some(0.0));
                let (log, source) = if let Some(m) = logs[k][t] {
                    (m, Source::Measured)
                } else if never {
                    (f64::NEG_INFINITY, Source::Given)
                } else if let Some(g) = given[k][t] {
                    (g, Source::Given)
                } else if let Some(&s) = shared.get(&(kind, types[t].as_str())) {
                    (s, Source::Shared)
                } else if let Some(r) = through_ratios(&anchors, &ratios, t) {
                    (r, Source::Ratio)
                } else if let Some(own) = median(
                    &mut anchors
                        .iter()
                        .flatten()
                        .copied()
                        .filter(|a| a.is_finite())
                        .collect::<Vec<_>>(),
                ) {
                    // Its own rate elsewhere, types taken as equal until a
                    // kind is measured on both.
                    (own, Source::Ratio)
                } else if let Some(p) = typical(t, Some(kind.scale_factor)).or(typical(t, None)) {
                    (p, Source::Prior)
                } else {
                    (0.0, Source::Prior)
                };
                cells.push(Estimate {
                    rate: log.exp(),
                    source,
                });
            }
        }
        Estimates {
            kinds: kinds.to_vec(),
            types: types.to_vec(),
            cells,
        }
    }

    /// Log rates alone of the (kind, type)s measured there only beside
    /// other jobs: per pair, the measured rate less the median log factor
    /// of the pairs measured on that type (against rates measured alone;
    /// time-slicing's [`SHARE_PRIOR`] before any), the median over the
    /// kind's pairs, and never below a rate it was measured at beside
    /// another. Without this a job that only ever ran as a guest keeps a
    /// guess for its rate alone, however far off, and the factor of its
    /// measured pairs (their rate over that guess) is as far off.
    fn alone_from_pairs(&self) -> HashMap<(&Kind, &str), f64> {
        let mut factors: HashMap<&str, Vec<f64>> = HashMap::new();
        let mut beside: HashMap<(&Kind, &str), Vec<f64>> = HashMap::new();
        for (p, m, alone) in self.pair_medians() {
            match alone {
                Some(a) if a.is_finite() => factors
                    .entry(p.gpu_type.as_str())
                    .or_default()
                    .push((m - a).min(0.0)),
                Some(_) => {}
                None => beside
                    .entry((&p.kind, p.gpu_type.as_str()))
                    .or_default()
                    .push(m),
            }
        }
        let factor: HashMap<&str, f64> = factors
            .into_iter()
            .filter_map(|(t, mut v)| Some((t, median(&mut v)?)))
            .collect();
        beside
            .into_iter()
            .filter_map(|(key, mut rates)| {
                let f = factor.get(key.1).copied().unwrap_or(SHARE_PRIOR.ln());
                let fastest = rates.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let alone = median(&mut rates)? - f;
                Some((key, alone.max(fastest)))
            })
            .collect()
    }

    /// Each measured pair with its median log rate and the kind's median
    /// log rate alone on that type, if measured (`-inf`: measured not to
    /// run there).
    fn pair_medians(&self) -> impl Iterator<Item = (&PairEvidence, f64, Option<f64>)> {
        self.pairs.iter().filter_map(|p| {
            let m = median(&mut p.samples.clone())?;
            let alone = self
                .find(&p.kind, &p.gpu_type)
                .and_then(|e| median(&mut e.samples.clone()));
            Some((p, m, alone))
        })
    }

    /// What is known of space sharing, summed up for look-ups.
    pub fn sharing(&self) -> Sharing {
        let mut shared = HashMap::new();
        let mut logs: Vec<(&PairEvidence, f64)> = Vec::new();
        for (p, m, alone) in self.pair_medians() {
            shared.insert((p.kind.clone(), p.other.clone(), p.gpu_type.clone()), m);
            if let Some(a) = alone.filter(|a| a.is_finite()) {
                logs.push((p, (m - a).min(0.0)));
            }
        }
        let mut rows: HashMap<(Kind, String), Vec<f64>> = HashMap::new();
        let mut cols: HashMap<(Kind, String), Vec<f64>> = HashMap::new();
        let mut all = Vec::with_capacity(logs.len());
        for (p, f) in logs {
            rows.entry((p.kind.clone(), p.gpu_type.clone()))
                .or_default()
                .push(f);
            let other = Kind::new(&p.other, p.kind.scale_factor);
            cols.entry((other, p.gpu_type.clone())).or_default().push(f);
            all.push(f);
        }
        let medians = |m: HashMap<(Kind, String), Vec<f64>>| {
            m.into_iter()
                .filter_map(|(k, mut v)| Some((k, median(&mut v)?)))
                .collect()
        };
        Sharing {
            shared,
            rows: medians(rows),
            cols: medians(cols),
            all: median(&mut all),
        }
    }
}

/// Space sharing, summed up: a kind's rate beside another is its rate
/// alone times a factor. Measured per pair; else, in log space, how much
/// the kind keeps beside anyone (its row) plus how much others keep beside
/// the other (its column) less the median over all pairs: an additive
/// model of each kind's sensitivity and each kind's pressure.
#[derive(Debug, Clone, Default)]
pub struct Sharing {
    /// Median log rate measured per (kind, other model, type).
    shared: HashMap<(Kind, String, String), f64>,
    /// Median log factor of a kind beside anyone, per (kind, type).
    rows: HashMap<(Kind, String), f64>,
    /// Median log factor of anyone beside a kind, per (kind, type).
    cols: HashMap<(Kind, String), f64>,
    /// Median log factor over every measured pair.
    all: Option<f64>,
}

impl Sharing {
    /// Whether any pair was measured (against a measured rate alone).
    pub fn any(&self) -> bool {
        self.all.is_some()
    }

    /// The factor of `kind`'s rate alone (`alone`, as believed) that it
    /// keeps beside a job of `other` on `gpu_type`, and whether the pair
    /// was measured; `prior` when nothing is known.
    pub fn factor(
        &self,
        kind: &Kind,
        other: &str,
        gpu_type: &str,
        alone: f64,
        prior: f64,
    ) -> (f64, bool) {
        let key = (kind.clone(), other.to_string(), gpu_type.to_string());
        if let Some(m) = self.shared.get(&key) {
            if alone > 0.0 {
                return ((m - alone.ln()).exp().min(1.0), true);
            }
        }
        let row = self.rows.get(&(kind.clone(), gpu_type.to_string()));
        let other = Kind::new(other, kind.scale_factor);
        let col = self.cols.get(&(other, gpu_type.to_string()));
        let log = match (row, col, self.all) {
            (Some(r), Some(c), Some(g)) => r + c - g,
            (Some(r), None, _) => *r,
            (None, Some(c), _) => *c,
            (_, _, Some(g)) => g,
            _ => return (prior, false),
        };
        (log.min(0.0).exp(), false)
    }
}

/// Believed rates of a set of kinds on a set of types.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimates {
    kinds: Vec<Kind>,
    types: Vec<String>,
    cells: Vec<Estimate>,
}

impl Estimates {
    /// The kinds, in the order given.
    pub fn kinds(&self) -> &[Kind] {
        &self.kinds
    }

    /// The types, in the order given.
    pub fn types(&self) -> &[String] {
        &self.types
    }

    /// Kind `k`'s (by position) estimate on type `t` (by position).
    pub fn get(&self, k: usize, t: usize) -> Estimate {
        self.cells[k * self.types.len() + t]
    }

    /// Whether any rate differs from `other`'s by more than `change`
    /// (relative), or changed source; tables of different shapes differ.
    pub fn moved(&self, other: &Estimates, change: f64) -> bool {
        if self.kinds != other.kinds || self.types != other.types {
            return true;
        }
        self.cells.iter().zip(&other.cells).any(|(a, b)| {
            a.source != b.source
                || (a.rate - b.rate).abs() > change * a.rate.abs().max(b.rate.abs())
        })
    }
}

#[cfg(test)]
mod tests;
