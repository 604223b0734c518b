//! A policy from outside the core, added as one file and one registration
//! line (`registry.register(&GREEDY_FASTEST)`): the registry knows it by
//! name, the simulator runs it through the one round loop like any built-in
//! policy, and the round loop's plan check holds it to the same rules.

use hadar_core::error::Result;
use hadar_core::experiment::{Experiment, SimSettings};
use hadar_core::reproduce::{gavel_runs, workload_of};
use hadar_core::scheduler::gpus::GpuPicker;
use hadar_core::scheduler::{
    Decision, Family, Policy, PolicyKind, Registry, RoundContext, Scheduler,
};
use hadar_core::workload::Workload;

/// Each round, jobs in arrival order, each on the fastest GPU type that
/// still has room for its gang: no LP, no fairness, no memory of last round.
static GREEDY_FASTEST: Policy = Policy {
    name: "greedy_fastest",
    aliases: &["greedy"],
    about: "each job in arrival order on the fastest type with room for its gang",
    family: Family::Other,
    forks: false,
    build: |_, workload, _| Ok(Box::new(GreedyFastest::new(workload))),
};

struct GreedyFastest {
    picker: GpuPicker,
}

impl GreedyFastest {
    fn new(workload: &Workload) -> Self {
        Self {
            picker: GpuPicker::new(workload.cluster()),
        }
    }
}

impl Scheduler for GreedyFastest {
    fn name(&self) -> &str {
        GREEDY_FASTEST.name
    }

    fn plan(&mut self, ctx: &RoundContext<'_>) -> Result<Decision> {
        let w = ctx.workload;
        let mut left = w.cluster().gpus_per_type();
        self.picker.reset();
        let mut tasks = Vec::new();
        for &job in &ctx.state.active {
            let rates = w.rates_of(job.index());
            let gangs = w.gangs_of(job.index());
            let fastest = (0..rates.len())
                .filter(|&t| rates[t] > 0.0 && gangs[t] > 0 && gangs[t] <= left[t])
                .max_by(|&a, &b| rates[a].total_cmp(&rates[b]));
            if let Some(t) = fastest {
                left[t] -= gangs[t];
                let gpus = self.picker.pick(w.cluster(), t, gangs[t] as usize);
                tasks.push(hadar_core::plan::Task { job, copy: 0, gpus });
            }
        }
        Ok(Decision {
            tasks,
            solved: false,
        })
    }
}

fn run_a() -> Experiment {
    let runs = gavel_runs().expect("embedded results");
    let r = runs.iter().find(|r| r.run == "A").expect("run A");
    Experiment::new(workload_of(r).expect("workload"), SimSettings::default()).expect("experiment")
}

#[test]
fn a_registered_policy_is_known_by_name_and_runs_through_the_loop() {
    let mut registry = Registry::builtin();
    assert!(registry.parse("greedy_fastest").is_err(), "not built in");
    registry.register(&GREEDY_FASTEST).expect("a new name");

    let kind = registry.parse("Greedy").expect("its alias, any case");
    assert_eq!(kind, PolicyKind::of(&GREEDY_FASTEST));
    assert!(registry.all().contains(&kind));
    assert!(!kind.is_gavel() && !kind.forks());

    let exp = run_a();
    let r = exp.run(kind, &mut |_| {}).expect("simulation");
    assert_eq!(r.summary.policy, "greedy_fastest");
    assert_eq!(r.summary.jobs_completed, exp.workload().jobs().len());
    // It is its own policy, not a built-in under another name: with no
    // LP and no fairness its mean JCT on run A is well above Gavel's
    // (about 90,500 s against 74,000 s).
    let gavel = exp.run(PolicyKind::MAX_MIN_FAIRNESS_PERF, &mut |_| {});
    let gavel = gavel.expect("simulation").summary;
    assert!(
        r.summary.avg_jct_s > 1.1 * gavel.avg_jct_s,
        "{} vs {}",
        r.summary.avg_jct_s,
        gavel.avg_jct_s
    );
}

#[test]
fn a_second_policy_cannot_take_a_name_or_alias_already_known() {
    static CLASH: Policy = Policy {
        name: "fifo-perf",
        aliases: &[],
        about: "",
        family: Family::Other,
        forks: false,
        build: |_, workload, _| Ok(Box::new(GreedyFastest::new(workload))),
    };
    let mut registry = Registry::builtin();
    let err = registry.register(&CLASH).unwrap_err().to_string();
    assert!(err.contains("fifo_perf already answers"), "{err}");
    assert_eq!(registry.all().len(), PolicyKind::builtin().len());
}
