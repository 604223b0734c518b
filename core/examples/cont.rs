use std::sync::Arc;
use hadar_core::*;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rate: f64 = args.get(1).map(|s| s.parse().unwrap()).unwrap_or(5.0);
    let policy = args.get(2).cloned().unwrap_or("max_min_fairness_perf".into());
    let table = Arc::new(throughput::ThroughputTable::gavel());
    let mut spec = trace::generate::GeneratorSpec::new(trace::generate::GeneratorKind::PhillyLike, 6000, 0);
    spec.jobs_per_hour = Some(rate);
    let jobs = trace::generate::generate(&spec, &table).unwrap();
    let cluster = Arc::new(cluster::Cluster::from_short_form("v100=36,p100=36,k80=36", 1).unwrap());
    let w = Arc::new(workload::Workload::new(jobs, cluster, table, "gen").unwrap());
    let t = std::time::Instant::now();
    let mut settings = sim::SimSettings { window: Some((4000, 5000)), makespan_bound: false, ..Default::default() }; if std::env::var("SIMPLEX").is_ok() { settings.scheduler.solver = lp::LpSolver::Simplex; }
    let exp = sim::Experiment::new(w, settings).unwrap();
    let r = exp.run(scheduler::PolicyKind::parse(&policy).unwrap(), &mut |_| {}).unwrap();
    let s = &r.summary;
    println!("rate {rate} {policy}: avg jct {:.2}h bound {:.2}h ratio {:.2} p99 {:.1}h util {:.3} rounds {} decisions {} mean {:.4}s max {:.4}s wall {:.2}s (total {:.2}s)", s.avg_jct_s/3600.0, s.jct_lower_bound_s/3600.0, s.jct_over_bound, s.p99_jct_s/3600.0, s.utilization, s.rounds, s.decisions, s.decision_mean_s, s.decision_max_s, s.wall_s, t.elapsed().as_secs_f64());
}
