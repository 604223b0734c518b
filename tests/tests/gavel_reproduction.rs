//! Our Gavel-style baselines against the numbers Gavel's own simulator
//! printed on its runs A, B and H (embedded in `core/data/gavel/results.csv`).

use hadar_core::bounds::makespan_lower_bound;
use hadar_core::reproduce::{check, workload_of};

#[test]
fn every_baseline_is_within_five_percent_of_gavel() {
    let rows = check(0.05, &mut |_| {}).expect("simulations run");
    let checked: Vec<_> = rows.iter().filter(|r| r.checked).collect();
    // 7 policies over runs A, B and H: 19 (run, policy) pairs are checked.
    assert_eq!(checked.len(), 19, "pairs checked");
    let outside: Vec<String> = checked
        .iter()
        .filter(|r| !r.within)
        .map(|r| {
            format!(
                "{} {}: makespan x{:.3}, JCT x{:.3}",
                r.gavel.run, r.gavel.policy, r.makespan_ratio, r.jct_ratio
            )
        })
        .collect();
    assert!(outside.is_empty(), "outside 5%: {outside:#?}");
    // Every policy we name exists in Gavel's results for some run.
    for policy in [
        "max_min_fairness_perf",
        "min_total_duration_perf",
        "finish_time_fairness_perf",
        "fifo_perf",
        "max_min_fairness",
        "min_total_duration",
    ] {
        assert!(
            checked.iter().any(|r| r.gavel.policy == policy),
            "{policy} is checked somewhere"
        );
    }
}

#[test]
fn no_schedule_beats_the_lp_lower_bound() {
    let rows = check(0.05, &mut |_| {}).expect("simulations run");
    for r in &rows {
        let bound = makespan_lower_bound(&workload_of(&r.gavel).expect("workload")).expect("bound");
        assert!(
            r.makespan_s >= bound * (1.0 - 1e-9),
            "{} {}: makespan {} below the bound {}",
            r.gavel.run,
            r.gavel.policy,
            r.makespan_s,
            bound
        );
        // Gavel's own schedules respect it too.
        assert!(r.gavel.makespan_s >= bound * (1.0 - 1e-9));
    }
}
