//! What a run believes each job runs at on each GPU type, and where each
//! belief comes from, saved with the run's state for `hadar status`.

use hadar_core::estimate::{RateModel, Source};
use serde::{Deserialize, Serialize};

use crate::jobs::RunJob;

/// One job's believed rate on one GPU type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BelievedRate {
    /// The job's name.
    pub job: String,
    /// The GPU type.
    pub gpu_type: String,
    /// Iterations/s of the job's whole gang.
    pub rate: f64,
    /// `measured`, `given` (the jobs file's, not measured yet),
    /// `estimated` (from other types through type ratios) or `prior`
    /// (nothing known: what similar jobs run at, else 1).
    pub source: String,
    /// Measurements taken of it.
    pub measurements: u64,
}

/// Every job's believed rate on every type of `gpu_types` it accepts (at
/// its gang there), as the scheduler plans with it (before the
/// exploration bonus).
pub fn believed(jobs: &[RunJob], gpu_types: &[String], model: &RateModel) -> Vec<BelievedRate> {
    let (kinds, kind_of) = crate::jobs::kinds(jobs, gpu_types);
    let estimates = model.estimate(&kinds, gpu_types);
    let nt = gpu_types.len();
    let mut out = Vec::with_capacity(jobs.len() * nt);
    for i in 0..jobs.len() {
        for (t, ty) in gpu_types.iter().enumerate() {
            let Some(k) = kind_of[i * nt + t] else {
                continue;
            };
            let kind = &kinds[k];
            let e = estimates.get(k, t);
            out.push(BelievedRate {
                job: kind.model.clone(),
                gpu_type: ty.clone(),
                rate: e.rate,
                source: source_name(e.source).to_string(),
                measurements: model.count(kind, ty),
            });
        }
    }
    out
}

fn source_name(s: Source) -> &'static str {
    match s {
        Source::Measured => "measured",
        Source::Given => "given",
        Source::Ratio | Source::Shared => "estimated",
        Source::Prior => "prior",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::parse_jobs;
    use hadar_core::estimate::Kind;

    #[test]
    fn each_rate_says_where_it_comes_from() {
        let text =
            "[[job]]\nname='a'\ncommand=['x']\niterations=1\nthroughput={v100=4.0,k80=1.0}\n\
                    [[job]]\nname='b'\ncommand=['x']\niterations=1\nthroughput={v100=2.0}\n\
                    [[job]]\nname='c'\ncommand=['x']\niterations=1\n";
        let jobs = parse_jobs(text, "j.toml").unwrap();
        let types = ["v100".to_string(), "k80".to_string()];
        let mut model = crate::jobs::given_rates(&jobs);
        model.observe(&Kind::new("a", 1), "v100", 8.0);
        let rates = believed(&jobs, &types, &model);
        let get = |job: &str, ty: &str| {
            let r = rates
                .iter()
                .find(|r| r.job == job && r.gpu_type == ty)
                .unwrap();
            // (Rates round-trip through logs: to 1e-9.)
            (
                r.source.as_str(),
                (r.rate * 1e9).round() / 1e9,
                r.measurements,
            )
        };
        assert_eq!(get("a", "v100"), ("measured", 8.0, 1));
        assert_eq!(get("a", "k80"), ("given", 1.0, 0));
        assert_eq!(get("b", "v100").0, "given");
        // b's k80 from the ratio a is believed to run at (8 measured : 1 given).
        let (from, rate, _) = get("b", "k80");
        assert_eq!(from, "estimated");
        assert!((rate - 0.25).abs() < 1e-9, "{rate}");
        // c: nothing given, nothing measured: what the jobs of its gang
        // size are believed to run at there (a's 8 measured, b's 2 given).
        let (from, rate, _) = get("c", "v100");
        assert_eq!(from, "prior");
        assert!((2.0..=8.0).contains(&rate), "{rate}");
        assert_eq!(get("c", "k80"), ("prior", 1.0, 0));
    }
}
