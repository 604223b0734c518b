//! The throughput model's lines of the simulate summary (measured mode).

use hadar_core::metrics::RunResult;

/// One paragraph per policy that ran with measured rates: the exploration
/// share and how many rounds estimates took to come within 10% of the truth.
pub fn print(results: &[RunResult]) {
    let with: Vec<_> = results
        .iter()
        .filter_map(|r| Some((&r.summary.policy, r.summary.knowledge.as_ref()?)))
        .collect();
    if with.is_empty() {
        return;
    }
    let s = with[0].1.settings;
    println!(
        "\nthroughputs measured, not known (progress noise {:.0}%, exploration bonus {:.0}%):",
        s.progress_noise * 100.0,
        s.exploration_bonus * 100.0
    );
    for (policy, k) in with {
        print!(
            "  {policy}: {} measurements, {} re-plans on new rates, exploring {:.2}% of GPU time",
            k.measurements,
            k.replans,
            k.exploration_share * 100.0
        );
        match &k.convergence {
            Some(c) => println!(
                "; within 10% of the truth after p50 {:.0} / p90 {:.0} / max {:.0} rounds \
                 ({} of {} job-type pairs at arrival, {} never)",
                c.p50_rounds, c.p90_rounds, c.max_rounds, c.at_arrival, c.pairs, c.never
            ),
            None => println!(),
        }
    }
}
