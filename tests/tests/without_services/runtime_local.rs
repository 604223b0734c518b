//! Real runs on the local backend: the example trainer scheduled round by
//! round by Hadar and HadarE, and a run interrupted and resumed.

use std::sync::Arc;
use std::time::Duration;

use hadar_backend::StopPolicy;
use hadar_backend_local::LocalBackend;
use hadar_core::cluster::{Cluster, GpuId};
use hadar_core::job::JobId;
use hadar_core::plan::Task;
use hadar_core::scheduler::{Decision, PolicyKind, RoundContext, Scheduler};
use hadar_runtime::jobs::parse_jobs;
use hadar_runtime::{load_state, run, CustomScheduler, LeftBehind, RunConfig, RunError};
use hadar_tests::conformance::local_trainer;

const CLUSTER: &str = r#"
[[node]]
name = "fast"
gpus = { v100 = 2 }
[[node]]
name = "slow"
gpus = { k80 = 2 }
"#;

fn jobs_toml(iterations: u64) -> String {
    jobs_with(iterations, "throughput = { v100 = 3000.0, k80 = 1000.0 }\n")
}

/// Four trainer jobs (gangs 1, 2, 1, 1), each with the `rates` line.
fn jobs_with(iterations: u64, rates: &str) -> String {
    let trainer = local_trainer().display().to_string();
    let mut s = String::new();
    for (i, (gang, arrival)) in [(1, 0.0), (2, 0.0), (1, 0.5), (1, 1.0)].iter().enumerate() {
        s.push_str(&format!(
            "[[job]]\nname = \"job{i}\"\ncommand = [\"{trainer}\"]\niterations = {iterations}\n\
             gang = {gang}\narrival = {arrival}\n{rates}\
             env = {{ HADAR_TRAINER_ITER_US = \"300\" }}\n\n"
        ));
    }
    s
}

/// (kind, type) -> (measured rate, measurements) in a saved run's model.
fn measured_rates(dir: &std::path::Path) -> Vec<(String, String, f64, u64)> {
    let state = load_state(dir).expect("state").expect("saved");
    let model = state
        .loop_state
        .expect("the loop's state")
        .knowledge
        .expect("the run's throughput model")
        .model;
    model
        .entries()
        .filter_map(|(k, ty, m, _, n)| Some((k.model.clone(), ty.to_string(), m?, n)))
        .collect()
}

fn config(policy: PolicyKind, dir: &std::path::Path, iterations: u64) -> RunConfig {
    RunConfig {
        round_s: 1.0,
        // Most tests here look into the task directories after the run
        // (which launches there were, what each checkpoint held).
        keep_task_dirs: true,
        stop: StopPolicy::new(hadar_backend::Signal::Term, 5.0).expect("grace"),
        poll: Duration::from_millis(100),
        ..RunConfig::new(
            Arc::new(Cluster::from_toml_str(CLUSTER, "cluster.toml").expect("cluster")),
            parse_jobs(&jobs_toml(iterations), "jobs.toml").expect("jobs"),
            policy,
            dir.to_path_buf(),
        )
    }
}

/// Runs to the end; returns the names of the task directories it made.
async fn finish(policy: PolicyKind) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(policy, dir.path(), 3000);
    // Watched as `hadar serve` and `hadar status --watch` watch it.
    let mut watcher = hadar_tests::live::Watcher::new(dir.path());
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |e| {
        watcher.event(&e)
    })
    .await
    .expect("run");
    watcher.check("local");
    assert_eq!(report.jobs.len(), 4);
    // The report is a simulation's: every job measured, finished, with a
    // makespan, JCTs and bounds from the jobs' estimates.
    let summary = &report.result.summary;
    assert_eq!((summary.jobs_completed, summary.jobs_measured), (4, 4));
    assert!(
        summary.makespan_s > 0.0 && summary.avg_jct_s > 0.0,
        "{summary:?}"
    );
    assert!(
        summary.lower_bound_s.is_some_and(|b| b > 0.0),
        "{summary:?}"
    );
    assert!(summary.jct_lower_bound_s > 0.0, "{summary:?}");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.jct_s.expect("jct") > 0.0);
        // Its collected checkpoint holds all its iterations.
        assert_eq!(j.iterations, 3000, "{j:?}");
        // Real learning: the trainer's test accuracy, reported at the end.
        assert!(j.metrics["accuracy"] >= 0.9, "{j:?}");
    }
    assert!(
        summary.utilization > 0.0 && summary.utilization <= 1.0,
        "{summary:?}"
    );
    assert!(summary.rounds >= 2);
    for j in &report.jobs {
        assert_eq!(j.accuracy, j.metrics.get("accuracy").copied());
    }
    // Measured throughput replaces the jobs file's estimates: the "k80"
    // GPUs here are the same CPU as the "v100" ones, far faster than the
    // 1000 iterations/s the file guessed.
    let measured = measured_rates(dir.path());
    // A rate is measured from a task that kept its GPUs for a whole round:
    // HadarE's copies come and go with the jobs' progress, so whether one
    // did in a run this short depends on the machine's pace.
    if policy == PolicyKind::HADAR {
        assert!(!measured.is_empty(), "rates were measured");
    }
    if let Some(k80) = measured.iter().find(|m| m.1 == "k80") {
        assert!(k80.2 > 1200.0, "{k80:?}");
    }
    // Each job's model says where the job stands: its step is the total
    // (a merge of copies adds their shares up; it took one copy's step).
    let state = load_state(dir.path()).expect("state").expect("saved");
    for (name, p) in state.job_names.iter().zip(&state.jobs) {
        assert_eq!(p.step, Some(3000), "{name}: {p:?}");
    }
    std::fs::read_dir(dir.path().join("tasks"))
        .expect("tasks")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hadar_runs_real_jobs_to_completion() {
    let tasks = finish(PolicyKind::HADAR).await;
    assert!(
        tasks.iter().all(|t| t.contains("-copy0-")),
        "no copies: {tasks:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hadare_runs_and_merges_copies() {
    let tasks = finish(PolicyKind::HADARE).await;
    // Copies ran (copy index >= 1), so their checkpoints were merged.
    assert!(tasks.iter().any(|t| !t.contains("-copy0-")), "{tasks:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_run_resumes_without_redoing_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(PolicyKind::HADAR, dir.path(), 6000);
    // Start, then drop the run mid-way (as a killed `hadar run` would stop):
    // its tasks keep running, its state is on disk.
    let first = tokio::time::timeout(
        Duration::from_millis(2500),
        run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {}),
    )
    .await;
    assert!(first.is_err(), "the first run was cut short");
    let saved = load_state(dir.path()).expect("state").expect("saved");
    let rounds_before = saved.loop_state.as_ref().expect("a round").rounds.clone();
    assert!(!rounds_before.is_empty(), "the rounds are read back");
    // state.json holds none of them: they are appended to history.jsonl, so
    // that a save costs the same in every round.
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("state.json")).expect("state.json"))
            .expect("json");
    assert_eq!(raw["loop_state"]["rounds"], serde_json::json!([]), "{raw}");
    let done_before: u64 = saved
        .loop_state
        .expect("a round was saved")
        .jobs
        .jobs
        .iter()
        .map(|j| j.done_steps)
        .sum();
    assert!(done_before > 0, "progress was saved");
    let measured_before = measured_rates(dir.path());
    // A new runtime with a new backend picks it up.
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("resumed run");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.metrics["accuracy"] >= 0.9, "{j:?}");
    }
    // No job ran twice at once: task directories are unique per job, round and copy.
    let tasks = std::fs::read_dir(dir.path().join("tasks"))
        .expect("tasks")
        .count();
    assert!(tasks >= 4);
    // Every round of both runs is in the record, the first run's as saved.
    let after = load_state(dir.path()).expect("state").expect("saved");
    let rounds_after = after.loop_state.expect("the loop's state").rounds;
    assert_eq!(rounds_after.len(), report.result.summary.rounds);
    assert_eq!(rounds_after[..rounds_before.len()], rounds_before[..]);
    // What was measured before the cut was kept, and added to.
    let measured_after = measured_rates(dir.path());
    for (kind, ty, _, n) in &measured_before {
        assert!(
            measured_after
                .iter()
                .any(|m| (&m.0, &m.1) == (kind, ty) && m.3 >= *n),
            "{kind} on {ty}: {measured_before:?} then {measured_after:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_file_without_throughputs_runs_on_measured_rates() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Long enough (about 4 s a job) that tasks keep their GPUs for whole
    // rounds: a task's first round carries its start-up and measures
    // nothing, so jobs done within two rounds would teach the model nothing.
    let mut cfg = config(PolicyKind::HADAR, dir.path(), 12_000);
    cfg.jobs = parse_jobs(&jobs_with(12_000, ""), "jobs.toml").expect("jobs without rates");
    assert!(cfg.jobs.iter().all(|j| j.throughput.is_empty()));
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("run");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.metrics["accuracy"] >= 0.9, "{j:?}");
    }
    // Every rate the scheduler planned with came from the run: nothing was
    // given, and the rates measured are the trainer's (300 us/iteration on
    // any "GPU" here: far above the 1 iteration/s assumed at the start).
    let measured = measured_rates(dir.path());
    assert!(!measured.is_empty(), "rates were measured");
    for (kind, ty, rate, n) in &measured {
        assert!(*n >= 1 && *rate > 100.0, "{kind} on {ty}: {rate} from {n}");
    }
    let knowledge = report.result.summary.knowledge.expect("measured mode");
    assert!(knowledge.measurements >= measured.len() as u64);
}

/// A scheduler that gives the first active job the tasks `tasks` makes
/// for it, every round, and nothing to the others.
#[derive(Clone, Copy)]
struct FirstJob(&'static str, fn(JobId) -> Vec<Task>);

impl Scheduler for FirstJob {
    fn name(&self) -> &str {
        self.0
    }
    fn plan(&mut self, ctx: &RoundContext<'_>) -> hadar_core::Result<Decision> {
        let tasks = ctx
            .state
            .active
            .iter()
            .take(1)
            .flat_map(|&j| (self.1)(j))
            .collect();
        Ok(Decision {
            tasks,
            solved: false,
        })
    }
}

/// [`config`] with the plans made by [`FirstJob`].
fn first_job_config(
    policy: PolicyKind,
    dir: &std::path::Path,
    iterations: u64,
    scheduler: FirstJob,
) -> RunConfig {
    let mut cfg = config(policy, dir, iterations);
    cfg.custom_scheduler = Some(CustomScheduler(Arc::new(move |_| Ok(Box::new(scheduler)))));
    cfg
}

/// Runs the first active job as two copies on the same two GPUs every round.
fn two_copies(job: JobId) -> Vec<Task> {
    (0..2)
        .map(|c| Task {
            job,
            copy: c,
            gpus: vec![GpuId(c)],
        })
        .collect()
}

/// HadarE averages a job's copies at every round boundary, also when the
/// plan keeps them where they are: each round starts new copies from the
/// merged checkpoint (before, copies that kept their GPUs ran on unmerged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_that_keep_their_gpus_are_still_merged_every_round() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Two copies at 300 us an iteration do at most about 6,700 iterations
    // in a 1 s round: 12,000 take two rounds or more however fast they
    // start (6,000 ended in the first round once, on a loaded CI machine).
    let cfg = first_job_config(
        PolicyKind::HADARE,
        dir.path(),
        12_000,
        FirstJob("two-copies", two_copies),
    );
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("run");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert!(j.metrics["accuracy"] >= 0.9, "{j:?}");
    }
    let tasks: Vec<String> = std::fs::read_dir(dir.path().join("tasks"))
        .expect("tasks")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let rounds_of_job0_copy1: std::collections::BTreeSet<&str> = tasks
        .iter()
        .filter(|t| t.starts_with("job0-") && t.contains("-copy1-"))
        .filter_map(|t| t.split('-').nth(1))
        .collect();
    assert!(
        rounds_of_job0_copy1.len() >= 2,
        "job 0's second copy started in one round only (never merged): {tasks:?}"
    );
    // The round whose merge finished a job started no copies of it: the
    // run ends with no task recorded (before, they lived on past the end).
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert!(state.running.is_empty(), "{:?}", state.running);
    assert!(state.launching.is_empty(), "{:?}", state.launching);
}

/// A copy that finishes its share of the job long before the other copy
/// waits for it, and the two are banked as one merge at the total: banked
/// alone, the first was installed, then replaced by the other's model
/// (its work counted, its weights gone). (Before copies had shares, the
/// copy ran to the job's total alone, and the merge's step counted both
/// copies' work past the total.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_done_with_its_share_first_is_merged_with_the_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let total = 3000;
    let trainer = local_trainer().display().to_string();
    // Copy 0 trains slowly (its 1,500 iterations take 7.5 s); copy 1
    // waits, then runs its 1,500 in milliseconds, well inside one 100 ms
    // poll. (Both on the fast node: even shares.)
    let script = r#"if [ "$HADAR_COPY" = 1 ]; then sleep 0.6; HADAR_TRAINER_ITER_US=0 exec "$0"; fi; exec "$0""#;
    let jobs = format!(
        "[[job]]\nname = \"race\"\ncommand = [\"sh\", \"-c\", '{script}', \"{trainer}\"]\n\
         iterations = {total}\nthroughput = {{ v100 = 3000.0, k80 = 1000.0 }}\n\
         env = {{ HADAR_TRAINER_ITER_US = \"5000\" }}\n"
    );
    let mut cfg = first_job_config(
        PolicyKind::HADARE,
        dir.path(),
        total,
        FirstJob("two-copies", two_copies),
    );
    cfg.jobs = parse_jobs(&jobs, "jobs.toml").expect("jobs");
    cfg.round_s = 30.0;
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("run");
    assert_eq!(report.jobs[0].state, "finished", "{:?}", report.jobs[0]);
    let checkpoint = |copy: u32| {
        let task = std::fs::read_dir(dir.path().join("tasks"))
            .expect("tasks")
            .map(|e| e.expect("entry").path())
            .find(|p| {
                let name = p.file_name().expect("name").to_string_lossy();
                name.starts_with("job0-round0-") && name.contains(&format!("-copy{copy}-"))
            })
            .unwrap_or_else(|| panic!("no task dir of copy {copy}"));
        task.join("checkpoint.safetensors")
    };
    let step = |p: &std::path::Path| {
        hadar_checkpoint::read_step(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .expect("a step")
    };
    let (slow, fast) = (checkpoint(0), checkpoint(1));
    assert_eq!(step(&fast), total / 2, "copy 1 ran its share");
    assert_eq!(step(&slow), total / 2, "copy 0 ran its share");
    // The job's model is the merge of both: its step is the total, and its
    // weights are neither copy's.
    let latest = dir.path().join("jobs/0/latest.safetensors");
    assert_eq!(step(&latest), total);
    let bytes = |p: &std::path::Path| std::fs::read(p).expect("read");
    assert_ne!(bytes(&latest), bytes(&fast), "copy 1's model alone");
    assert_ne!(bytes(&latest), bytes(&slow), "copy 0's model alone");
    // One round: copy 1 was not started again while it waited.
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert_eq!(state.jobs[0].starts, 2, "{:?}", state.jobs[0]);
}

/// Runs the first active job as three copies: two on the fast node's
/// GPUs, one on the slow node's.
fn three_copies(job: JobId) -> Vec<Task> {
    [0, 1, 2]
        .into_iter()
        .map(|g| Task {
            job,
            copy: g,
            gpus: vec![GpuId(g)],
        })
        .collect()
}

/// HadarE's merged checkpoint holds exactly the job's total: each round's
/// copies are given shares of what is left that add up to it (a copy stops
/// at its share's end, `HADAR_TOTAL_ITERATIONS`), and the merge's step never
/// passes the total. Before, copies all ran towards the total until their
/// reports added up to it, then worked on through the poll and the stop:
/// the probe's merged checkpoints held 30,355 of 30,000 and 41,342 of
/// 40,000 while the report said the total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hadare_copies_leave_exactly_the_total_in_the_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let total = 12_000;
    let trainer = local_trainer().display().to_string();
    let mut cfg = first_job_config(
        PolicyKind::HADARE,
        dir.path(),
        total,
        FirstJob("three-copies", three_copies),
    );
    cfg.jobs = parse_jobs(
        &format!(
            "[[job]]\nname = \"exact\"\ncommand = [\"{trainer}\"]\niterations = {total}\n\
             throughput = {{ v100 = 3000.0, k80 = 1000.0 }}\n\
             env = {{ HADAR_TRAINER_ITER_US = \"300\" }}\n"
        ),
        "jobs.toml",
    )
    .expect("jobs");
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("run");
    let job = &report.jobs[0];
    assert_eq!(job.state, "finished", "{job:?}");
    assert_eq!(job.iterations, total, "{job:?}");
    assert!(job.metrics["accuracy"] >= 0.9, "{job:?}");
    let latest = dir.path().join("jobs/0/latest.safetensors");
    let step = hadar_checkpoint::read_step(&latest)
        .expect("checkpoint")
        .expect("a step");
    assert_eq!(step, total, "the merged checkpoint's step");
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert_eq!(state.jobs[0].step, Some(total), "{:?}", state.jobs[0]);
    assert_eq!(state.jobs[0].held, total, "{:?}", state.jobs[0]);
    // Copies ran, in more than one round (merged, then resumed from it).
    let tasks: Vec<String> = std::fs::read_dir(dir.path().join("tasks"))
        .expect("tasks")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(tasks.iter().any(|t| t.contains("-copy2-")), "{tasks:?}");
    assert!(tasks.iter().any(|t| !t.contains("-round0-")), "{tasks:?}");
}

/// [`FirstJob`]'s plans, recording the restart costs the run hands over.
struct Learning {
    plans: FirstJob,
    told: Arc<std::sync::Mutex<Vec<(JobId, f64)>>>,
}

impl Scheduler for Learning {
    fn name(&self) -> &str {
        "learning"
    }
    fn plan(&mut self, ctx: &RoundContext<'_>) -> hadar_core::Result<Decision> {
        self.plans.plan(ctx)
    }
    fn learn_restarts(&mut self, measured: &[(JobId, f64)]) {
        self.told.lock().expect("lock").extend_from_slice(measured);
    }
}

/// A real run measures each job's restart cost (launch to first progress)
/// and hands it to the policy, which plans with it as it does with rates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_learns_the_restart_costs_the_run_measures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let told: Arc<std::sync::Mutex<Vec<(JobId, f64)>>> = Arc::default();
    let mut cfg = config(PolicyKind::HADAR, dir.path(), 3000);
    let record = told.clone();
    cfg.custom_scheduler = Some(CustomScheduler(Arc::new(move |_| {
        Ok(Box::new(Learning {
            plans: FirstJob("two-copies", two_copies),
            told: record.clone(),
        }))
    })));
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("run");
    let told = told.lock().expect("lock").clone();
    let state = load_state(dir.path()).expect("state").expect("saved");
    for (j, outcome) in report.jobs.iter().enumerate() {
        let measured = state.jobs[j].restart_s.expect("a restart measured");
        assert!(measured > 0.0 && measured < 30.0, "{measured}");
        assert_eq!(outcome.restart_s, Some(measured));
        assert!(
            told.iter().any(|&(k, s)| k == JobId(j as u32) && s > 0.0),
            "job {j}'s restart never reached the policy: {told:?}"
        );
    }
}

/// Gives job 0 the same GPU twice.
fn invalid(job: JobId) -> Vec<Task> {
    vec![Task {
        job,
        copy: 0,
        gpus: vec![GpuId(0), GpuId(0)],
    }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_run_refuses_an_invalid_plan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = first_job_config(
        PolicyKind::HADAR,
        dir.path(),
        3000,
        FirstJob("invalid", invalid),
    );
    let err = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect_err("an invalid plan must stop the run");
    assert!(matches!(err, RunError::Core(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("invalid plan"), "{text}");
    // Nothing was launched.
    assert!(!dir.path().join("tasks").exists(), "a task started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_of_other_jobs_is_refused_not_discarded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(PolicyKind::HADAR, dir.path(), 300);
    let first = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("first run");
    let other = config(PolicyKind::HADAR, dir.path(), 400);
    let err = run(&other, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect_err("other jobs");
    let text = err.to_string();
    assert!(
        text.contains("job0:300:1") && text.contains("job0:400:1"),
        "{text}"
    );
    // The finished run, run again, reports without running anything.
    let again = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("again");
    assert!(again.already_finished);
    assert_eq!(again.result.summary.jobs_completed, 4);
    // Its figures are the run's, whenever it is reported again (its time
    // stopped at its end: the utilization fell as time passed).
    let (a, b) = (&first.result.summary, &again.result.summary);
    assert_eq!(a.makespan_s, b.makespan_s);
    assert_eq!(a.utilization, b.utilization);
}

/// Moves the first active job to the other GPU of the fast node every
/// round: each round stops its task.
struct Alternate(u32);

impl Scheduler for Alternate {
    fn name(&self) -> &str {
        "alternate"
    }
    fn plan(&mut self, ctx: &RoundContext<'_>) -> hadar_core::Result<Decision> {
        self.0 += 1;
        let tasks = ctx
            .state
            .active
            .iter()
            .take(1)
            .map(|&job| Task {
                job,
                copy: 0,
                gpus: vec![GpuId(self.0 % 2)],
            })
            .collect();
        Ok(Decision {
            tasks,
            solved: false,
        })
    }
}

/// A task's last report, the one its stop returns, counts in full: where it
/// is the only report that names metrics, they are the job's (before, a stop
/// booked only the iterations, and a job could finish without metrics).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_seen_only_at_the_stop_gives_the_job_its_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Silent until stopped; then a checkpoint and one report of the whole job.
    let script = "trap 'echo held > checkpoint.safetensors; \
                  echo \"HADAR_PROGRESS {\\\"iterations\\\": 100, \\\"accuracy\\\": 0.75}\"; exit 0' TERM; \
                  while :; do sleep 0.05; done";
    let jobs = format!(
        "[[job]]\nname = \"quiet\"\ncommand = [\"sh\", \"-c\", {script:?}]\niterations = 100\n\
         throughput = {{ v100 = 100.0, k80 = 50.0 }}\n"
    );
    let mut cfg = config(PolicyKind::HADAR, dir.path(), 100);
    cfg.jobs = parse_jobs(&jobs, "jobs.toml").expect("jobs");
    cfg.custom_scheduler = Some(CustomScheduler(Arc::new(|_| Ok(Box::new(Alternate(0))))));
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("run");
    let j = &report.jobs[0];
    assert_eq!(j.state, "finished", "{j:?}");
    assert_eq!(j.metrics.get("accuracy"), Some(&0.75), "{j:?}");
}

/// HadarE's copies merged at a round boundary can add up to a job's total
/// in the round whose plan still runs the job: that round starts no task of
/// it, and the run ends with nothing recorded or alive (before, the new
/// copies outlived the run: the probe's `--policy hadare`, gangs of 2,
/// 2 s rounds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_finished_by_a_merge_starts_no_more_copies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trainer = local_trainer().display().to_string();
    let mut jobs = String::new();
    for (name, iterations, gang) in [("a", 20000, 2), ("b", 40000, 2), ("c", 30000, 1)] {
        jobs.push_str(&format!(
            "[[job]]\nname = \"{name}\"\ncommand = [\"{trainer}\"]\niterations = {iterations}\n\
             gang = {gang}\nthroughput = {{ v100 = 3000.0, k80 = 1000.0 }}\n\
             env = {{ HADAR_TRAINER_ITER_US = \"300\" }}\n\n"
        ));
    }
    let mut cfg = config(PolicyKind::HADARE, dir.path(), 1);
    cfg.jobs = parse_jobs(&jobs, "jobs.toml").expect("jobs");
    cfg.round_s = 2.0;
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("run");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
    }
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert!(state.running.is_empty(), "{:?}", state.running);
    assert!(state.launching.is_empty(), "{:?}", state.launching);
    let alive = processes_under(dir.path());
    assert!(alive.is_empty(), "tasks outlived the run: {alive:?}");
}

/// Pids of the live processes whose checkpoint directory is under `root`.
fn processes_under(root: &std::path::Path) -> Vec<u32> {
    let prefix = format!("HADAR_CHECKPOINT_DIR={}/", root.display());
    let pids = std::fs::read_dir("/proc").expect("/proc").flatten();
    pids.filter_map(|e| {
        let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
        let env = std::fs::read(e.path().join("environ")).ok()?;
        env.split(|&b| b == 0)
            .any(|v| v.starts_with(prefix.as_bytes()))
            .then_some(pid)
    })
    .collect()
}

/// A relative remote directory is refused before anything starts (before,
/// tasks nested their checkpoints under their own directories, nothing was
/// collected, and the run blamed the job protocol).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_remote_dir_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(PolicyKind::HADAR, dir.path(), 1000);
    cfg.remote_dir = Some("rd".into());
    let err = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect_err("refused");
    let text = err.to_string();
    assert!(
        matches!(&err, RunError::Core(hadar_core::Error::Setting { .. })),
        "{err:?}"
    );
    assert!(text.contains("rd is a relative path"), "{text}");
    assert!(!dir.path().join("tasks").exists(), "a task started");
}

/// A state directory that cannot take the checkpoints (here `checkpoints`
/// is a file; a full disk fails the same way) loses nothing: the stopped
/// tasks stay recorded with their checkpoints in their directories, the
/// run says so, and the next run collects them (before, it said "stopped
/// after their checkpoints" and the resume found the work lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_that_cannot_be_collected_stay_recorded_for_the_next_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trainer = local_trainer().display().to_string();
    let jobs = format!(
        "[[job]]\nname = \"long\"\ncommand = [\"{trainer}\"]\niterations = 20000\n\
         throughput = {{ v100 = 3000.0, k80 = 1000.0 }}\n\
         env = {{ HADAR_TRAINER_ITER_US = \"300\" }}\n"
    );
    let mut cfg = config(PolicyKind::HADAR, dir.path(), 1);
    cfg.jobs = parse_jobs(&jobs, "jobs.toml").expect("jobs");
    // Cleaned up as by default: a task whose checkpoint was not collected
    // must keep it (the resumed run collects it, nothing lost).
    cfg.keep_task_dirs = false;
    let first = cfg.clone();
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(run(&first, Arc::new(LocalBackend::new()), &mut |_| {}))
    });
    wait_for_a_task(dir.path()).await;
    // (A bank between the two steps would make the directory again.)
    let incoming = dir.path().join("checkpoints");
    while {
        let _ = std::fs::remove_dir_all(&incoming);
        std::fs::write(&incoming, "in the way").is_err()
    } {}
    assert!(hadar_runtime::request_stop(dir.path()).expect("stop"));
    let err = handle.join().expect("join").expect_err("halted");
    let text = err.to_string();
    assert!(text.contains("not yet collected"), "{text}");
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert_eq!(state.running.len(), 1, "the task stays recorded");
    assert_eq!(state.jobs[0].held, 0);
    std::fs::remove_file(&incoming).expect("cleared");
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("resumed");
    let j = &report.jobs[0];
    assert_eq!(j.state, "finished", "{j:?}");
    assert_eq!(j.lost_iterations, 0, "nothing lost: {j:?}");
}

/// The wall clock moved back an hour while no run watched (here: the saved
/// start moved an hour later): the resumed run goes on at once on the
/// monotonic clock (before, it sat idle for the hour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_moved_back_does_not_stall_a_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(PolicyKind::HADAR, dir.path(), 6000);
    let first = cfg.clone();
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(run(&first, Arc::new(LocalBackend::new()), &mut |_| {}))
    });
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(hadar_runtime::request_stop(dir.path()).expect("stop"));
    let stopped = handle.join().expect("join");
    assert!(
        matches!(stopped, Err(RunError::Halted { .. })),
        "{stopped:?}"
    );
    let path = dir.path().join("state.json");
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("state")).expect("json");
    let started = state["started_unix_s"].as_f64().expect("start");
    state["started_unix_s"] = (started + 3600.0).into();
    std::fs::write(&path, serde_json::to_vec(&state).expect("json")).expect("write");
    // A stall shows as this bound (an hour's wait), not as a slow run.
    let report = tokio::time::timeout(
        Duration::from_secs(120),
        run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {}),
    )
    .await
    .expect("the resumed run went on, not waiting for the clock")
    .expect("run");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
    }
}

/// A copy of a live run's state directory (`cp -a`) is refused, not
/// resumed: its tasks are the run's, which both would adopt (before, they
/// did). `--fresh` on the copy sets its files aside without touching the
/// run's tasks, and the run finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_state_directory_does_not_adopt_the_run_s_tasks() {
    let root = tempfile::tempdir().expect("tempdir");
    let (home, copy) = (root.path().join("run"), root.path().join("copy"));
    let cfg = config(PolicyKind::HADAR, &home, 12000);
    let first = cfg.clone();
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(run(&first, Arc::new(LocalBackend::new()), &mut |_| {}))
    });
    wait_for_a_task(&home).await;
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(&home)
        .arg(&copy)
        .status()
        .expect("cp");
    assert!(cp.success());
    let mut on_copy = cfg.clone();
    on_copy.state_dir = copy.clone();
    let err = run(&on_copy, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect_err("a copy");
    assert!(matches!(err, RunError::Copied { .. }), "{err}");
    on_copy.guards.fresh = true;
    let fresh = run(&on_copy, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("the copy starts over");
    assert!(fresh.jobs.iter().all(|j| j.state == "finished"));
    let report = handle.join().expect("join").expect("the run itself");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
        assert_eq!(j.lost_iterations, 0, "its tasks were left alone: {j:?}");
    }
}

/// Waits until the run in `dir` records a running task (its state saved).
async fn wait_for_a_task(dir: &std::path::Path) {
    for _ in 0..600 {
        if load_state(dir)
            .ok()
            .flatten()
            .is_some_and(|s| !s.running.is_empty())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no task was recorded in {} within 30 s", dir.display());
}

/// A history file cut short (a disk that lost its tail) is refused with
/// what to do, and `--fresh` (which reads only state.json to find the
/// old run's tasks) sets the directory aside and starts over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_history_is_refused_and_fresh_starts_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(PolicyKind::HADAR, dir.path(), 600);
    run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("run");
    let history = dir.path().join("history.jsonl");
    let len = std::fs::metadata(&history).expect("history").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&history)
        .expect("open")
        .set_len(len / 2)
        .expect("cut");
    let e = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect_err("a damaged history");
    let said = e.to_string();
    assert!(
        said.contains("history.jsonl") && said.contains("--fresh"),
        "{said}"
    );
    cfg.guards.fresh = true;
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("started over");
    assert!(report.jobs.iter().all(|j| j.state == "finished"));
}

/// HadarE's copies together do the job's total, not more: each stops at
/// its share of what is left (their merge holds the total), not left to
/// run towards the total each by itself until the round ends (with 30 s
/// rounds, two copies at about 3,000 iterations/s each would do twice the
/// job's work before one of them finished it alone), nor stopped only
/// once their reports add up to it (they work on through the poll and the
/// stop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_that_together_reach_the_total_are_stopped_then() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(PolicyKind::HADARE, dir.path(), 20_000);
    let trainer = local_trainer().display().to_string();
    cfg.jobs = parse_jobs(
        &format!(
            "[[job]]\nname = \"big\"\ncommand = [\"{trainer}\"]\niterations = 20000\n\
             throughput = {{ v100 = 3000.0, k80 = 1000.0 }}\n\
             env = {{ HADAR_TRAINER_ITER_US = \"300\" }}\n"
        ),
        "jobs.toml",
    )
    .expect("jobs");
    cfg.round_s = 30.0;
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("run");
    assert_eq!(report.jobs[0].state, "finished");
    let tasks: Vec<String> = std::fs::read_dir(dir.path().join("tasks"))
        .expect("tasks")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        tasks.iter().any(|t| !t.contains("-copy0-")),
        "copies ran: {tasks:?}"
    );
    // Each copy stopped at its share: the merge holds the total exactly.
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert_eq!(state.jobs[0].held, 20_000, "{:?}", state.jobs[0]);
    assert_eq!(state.jobs[0].step, Some(20_000), "{:?}", state.jobs[0]);
}

/// The task directories under `dir` (a run's state), and those of them that
/// still hold their log.
fn task_dirs(dir: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir.join("tasks")) else {
        return (vec![], vec![]);
    };
    let all: Vec<std::path::PathBuf> = entries.map(|e| e.expect("entry").path()).collect();
    let name = |p: &std::path::PathBuf| p.file_name().expect("name").to_string_lossy().into();
    let logged = all
        .iter()
        .filter(|p| p.join("task.log").exists())
        .map(name)
        .collect();
    (all.iter().map(name).collect(), logged)
}

/// Once a task has ended, its checkpoint is collected and the state saved,
/// the runtime removes what it left on its node (`Backend::cleanup`: its
/// directory); `keep_task_dirs` keeps it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_tasks_are_cleaned_up_unless_kept() {
    for keep in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cfg = config(PolicyKind::HADAR, dir.path(), 3000);
        cfg.keep_task_dirs = keep;
        let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
            .await
            .expect("run");
        for j in &report.jobs {
            assert_eq!(j.state, "finished", "{j:?}");
        }
        hadar_tests::assert_checkpoints_installed(dir.path(), report.jobs.len());
        let (dirs, logged) = task_dirs(dir.path());
        if keep {
            assert!(dirs.len() >= 4, "{dirs:?}");
            assert_eq!(logged, dirs, "kept");
        } else {
            assert!(dirs.is_empty(), "left behind: {dirs:?}");
        }
    }
}

/// A task that failed keeps what it left (the warning points at its log),
/// also where the others' go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_task_keeps_its_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(PolicyKind::HADAR, dir.path(), 1);
    cfg.keep_task_dirs = false;
    cfg.jobs = parse_jobs(
        "[[job]]\nname = \"crashing\"\ncommand = [\"/bin/sh\", \"-c\", \
         \"echo starting; exit 2\"]\niterations = 5\n\
         throughput = { v100 = 2.0, k80 = 1.0 }\n",
        "jobs.toml",
    )
    .expect("jobs");
    let err = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect_err("five tasks without a checkpoint stop the run");
    assert!(
        err.to_string().contains("without writing a checkpoint"),
        "{err}"
    );
    let (dirs, logged) = task_dirs(dir.path());
    assert!(dirs.len() >= 5, "{dirs:?}");
    assert_eq!(logged, dirs, "every failed task's log stays");
}

/// A task that crashed after it wrote a checkpoint: its checkpoint is
/// collected (the job resumes from it), and its directory stays for its
/// log; the task that then finished the job leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_crashed_after_its_checkpoint_keeps_its_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = "if [ -f resume.safetensors ]; then echo whole > checkpoint.safetensors; \
                  echo 'HADAR_PROGRESS {\"iterations\": 50}'; exit 0; fi; \
                  echo half > checkpoint.safetensors; echo 'HADAR_PROGRESS {\"iterations\": 50}'; \
                  echo 'out of memory'; exit 3";
    let jobs = format!(
        "[[job]]\nname = \"flaky\"\ncommand = [\"sh\", \"-c\", {script:?}]\niterations = 100\n\
         throughput = {{ v100 = 100.0, k80 = 50.0 }}\n"
    );
    let mut cfg = config(PolicyKind::HADAR, dir.path(), 100);
    cfg.keep_task_dirs = false;
    cfg.jobs = parse_jobs(&jobs, "jobs.toml").expect("jobs");
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("run");
    assert_eq!(report.jobs[0].state, "finished", "{:?}", report.jobs[0]);
    // Said once its checkpoint is collected: the job resumes from it.
    let crash = warning(&report, "exited with status 3");
    assert!(
        crash.contains("resumes from its last checkpoint"),
        "{crash}"
    );
    assert!(crash.contains("out of memory"), "{crash}");
    let (dirs, logged) = task_dirs(dir.path());
    assert_eq!(
        dirs.len(),
        1,
        "the crashed task's directory alone: {dirs:?}"
    );
    assert_eq!(logged, dirs);
    let log = std::fs::read_to_string(dir.path().join("tasks").join(&dirs[0]).join("task.log"))
        .expect("log");
    assert!(log.contains("out of memory"), "{log}");
    let latest = std::fs::read_to_string(dir.path().join("jobs/0/latest.safetensors"))
        .expect("the job's checkpoint");
    assert_eq!(latest.trim(), "whole");
}

/// A run of one shell job named `name` (`sh -c script`, 100 iterations,
/// fast on V100s) under `policy`, its state in `dir`.
fn one_job(policy: PolicyKind, dir: &std::path::Path, name: &str, script: &str) -> RunConfig {
    let jobs = format!(
        "[[job]]\nname = {name:?}\ncommand = [\"sh\", \"-c\", {script:?}]\niterations = 100\n\
         throughput = {{ v100 = 100.0, k80 = 50.0 }}\n"
    );
    let mut cfg = config(policy, dir, 100);
    cfg.jobs = parse_jobs(&jobs, "jobs.toml").expect("jobs");
    cfg
}

/// The run's warning that contains `needle`.
fn warning<'r>(report: &'r hadar_runtime::RunReport, needle: &str) -> &'r str {
    let warnings = &report.result.summary.warnings;
    warnings
        .iter()
        .find(|w| w.contains(needle))
        .unwrap_or_else(|| panic!("no warning says {needle:?}: {warnings:?}"))
}

/// Runs `cfg` (within two minutes: a run that never ends fails the test)
/// to the error of a job whose last five tasks left no checkpoint that
/// could be kept, for the reason `left`.
async fn stopped_for(cfg: &RunConfig, left: LeftBehind) -> RunError {
    let ran = tokio::time::timeout(
        Duration::from_secs(120),
        run(cfg, Arc::new(LocalBackend::new()), &mut |_| {}),
    )
    .await
    .expect("the run ends");
    let err = ran.expect_err("the run stops");
    assert!(
        matches!(err, RunError::NoCheckpoint { left: l, times: 5, .. } if l == left),
        "{err:?}"
    );
    err
}

/// A job that fails each time it resumes, leaving only the checkpoint it
/// resumed from (it saves what it loaded, then crashes before training):
/// the run stops after five such tries, saying so, instead of retrying it
/// forever (each try's directory kept for its log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_fails_on_every_resume_stops_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script =
        "if [ -f resume.safetensors ]; then cp resume.safetensors checkpoint.safetensors; \
                  echo 'bad magic in checkpoint'; exit 1; fi; \
                  echo half > checkpoint.safetensors; echo 'HADAR_PROGRESS {\"iterations\": 50}'; \
                  exit 3";
    let mut cfg = one_job(PolicyKind::HADAR, dir.path(), "reload", script);
    cfg.keep_task_dirs = false;
    // (Bounded: before, this run never ended.)
    let err = stopped_for(&cfg, LeftBehind::Resumed).await;
    let said = err.to_string();
    assert!(
        said.contains("only the checkpoint it resumed from"),
        "{said}"
    );
    assert!(said.contains("bad magic in checkpoint"), "{said}");
    // The first task (it trained, then crashed) and the five failed resumes.
    let (dirs, logged) = task_dirs(dir.path());
    assert_eq!(dirs.len(), 6, "{dirs:?}");
    assert_eq!(logged, dirs, "every failed task's log stays");
    let latest = std::fs::read_to_string(dir.path().join("jobs/0/latest.safetensors"))
        .expect("the job's checkpoint");
    assert_eq!(latest.trim(), "half", "what the first task trained is kept");
}

/// HadarE copies whose checkpoints are not safetensors files cannot be
/// merged: each is left out and set aside, and five such rounds stop the
/// run saying why (before, the merge's error stopped the run at once, and
/// again at every resume: the files stayed in the task directories).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_whose_checkpoints_are_not_safetensors_stop_the_run_saying_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = "echo garbage > checkpoint.safetensors; \
                  echo 'HADAR_PROGRESS {\"iterations\": 10}'; exit 0";
    let mut cfg = one_job(PolicyKind::HADARE, dir.path(), "pickled", script);
    // (Never finished by the rounds that run one copy, taken as it is.)
    cfg.jobs[0].iterations = 100_000;
    let err = stopped_for(&cfg, LeftBehind::Unreadable).await;
    assert!(err.to_string().contains("not safetensors"), "{err}");
    let aside = dir.path().join("checkpoints/unreadable/0.safetensors");
    assert_eq!(
        std::fs::read_to_string(&aside)
            .expect("the last copy set aside")
            .trim(),
        "garbage"
    );
}

/// Work a task did but no checkpoint holds is said lost, with where the
/// task's log is; a crash of a job with no checkpoint yet says it starts
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_work_is_said_with_the_task_s_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("tried");
    let script = format!(
        "if [ -f '{m}' ]; then echo whole > checkpoint.safetensors; \
         echo 'HADAR_PROGRESS {{\"iterations\": 100}}'; exit 0; fi; touch '{m}'; \
         echo 'HADAR_PROGRESS {{\"iterations\": 50}}'; exit 3",
        m = marker.display()
    );
    let cfg = one_job(PolicyKind::HADAR, dir.path(), "lossy", &script);
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("run");
    assert_eq!(report.jobs[0].state, "finished", "{:?}", report.jobs[0]);
    let lost = warning(&report, "50 iterations were lost");
    // ("whole" is no safetensors file: taken as it is, said once.)
    let format = warning(&report, "its checkpoint is not a safetensors file");
    assert!(format.contains("kept as it is"), "{format}");
    let told = report.result.summary.warnings.iter();
    assert_eq!(told.filter(|w| w.contains("not a safetensors")).count(), 1);
    assert!(lost.contains("/tasks/job0-round0-copy0-l1-"), "{lost}");
    assert!(lost.contains("task.log"), "{lost}");
    let crash = warning(&report, "exited with status 3");
    assert!(crash.contains("starts again from the beginning"), "{crash}");
}

/// A task that fails as it is stopped (between the last poll and a round's
/// switch): said, and its directory kept for its log, as a failure a poll
/// sees; the resumed task that ends cleanly leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_fails_at_its_stop_keeps_its_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Silent until stopped; then half the work in a checkpoint, and an
    // error exit unless it resumed: then 143, as a shell wrapper says "ended
    // by the stop's TERM" (not a failure).
    let script = "trap 'code=3; [ -f resume.safetensors ] && code=143; \
                  echo half > checkpoint.safetensors; \
                  echo \"HADAR_PROGRESS {\\\"iterations\\\": 50}\"; echo failing; exit $code' TERM; \
                  while :; do sleep 0.05; done";
    let jobs = format!(
        "[[job]]\nname = \"stopped\"\ncommand = [\"sh\", \"-c\", {script:?}]\niterations = 100\n\
         throughput = {{ v100 = 100.0, k80 = 50.0 }}\n"
    );
    let mut cfg = config(PolicyKind::HADAR, dir.path(), 100);
    cfg.keep_task_dirs = false;
    cfg.jobs = parse_jobs(&jobs, "jobs.toml").expect("jobs");
    cfg.custom_scheduler = Some(CustomScheduler(Arc::new(|_| Ok(Box::new(Alternate(0))))));
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("run");
    assert_eq!(report.jobs[0].state, "finished", "{:?}", report.jobs[0]);
    assert!(
        report
            .result
            .summary
            .warnings
            .iter()
            .any(|w| w.contains("exited with status 3 when it was stopped")),
        "{:?}",
        report.result.summary.warnings
    );
    let (dirs, logged) = task_dirs(dir.path());
    assert_eq!(dirs.len(), 1, "the failed task's directory alone: {dirs:?}");
    assert_eq!(logged, dirs);
    assert!(dirs[0].contains("-l1-"), "the first launch's: {dirs:?}");
}

/// The removals a run owed when it was killed (its state saved without the
/// tasks, their directories not yet removed) are saved with the state and
/// carried out by the next run: none is left forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removals_owed_by_a_killed_run_are_done_by_the_next() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(PolicyKind::HADAR, dir.path(), 3000);
    run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("run");
    let (dirs, _) = task_dirs(dir.path());
    assert!(!dirs.is_empty(), "kept: {dirs:?}");
    // What the state of a run killed before its cleanup holds.
    let path = dir.path().join("state.json");
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("state")).expect("json");
    let owed: Vec<serde_json::Value> = dirs
        .iter()
        .map(|d| {
            serde_json::json!({"id": "999999", "nodes": ["fast"],
                "workdir": dir.path().join("tasks").join(d), "token": d})
        })
        .collect();
    state["to_clean"] = owed.into();
    std::fs::write(&path, serde_json::to_vec(&state).expect("json")).expect("write");
    let mut again = cfg.clone();
    again.keep_task_dirs = false;
    run(&again, Arc::new(LocalBackend::new()), &mut |_| {})
        .await
        .expect("resumed");
    let (left, _) = task_dirs(dir.path());
    assert!(left.is_empty(), "left: {left:?}");
    let state = load_state(dir.path()).expect("state").expect("saved");
    assert!(state.to_clean.is_empty(), "{:?}", state.to_clean);
}

/// A task recorded as running under a pid that is no longer its own (the
/// pid taken by another process; a state restored from a copy) is found
/// again by its token and followed: the stranger is neither signalled nor
/// taken for the task, and the task is not launched beside itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_saved_pid_is_another_process_s_is_followed_by_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(PolicyKind::HADAR, dir.path(), 6000);
    let first = tokio::time::timeout(
        Duration::from_millis(2500),
        run(&cfg, Arc::new(LocalBackend::new()), &mut |_| {}),
    )
    .await;
    assert!(first.is_err(), "the first run was cut short");
    let mut stranger = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("sleep");
    let path = dir.path().join("state.json");
    let mut raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("state.json")).expect("json");
    let task = raw["running"][0]["handle"]["id"]
        .as_str()
        .expect("a task recorded as running")
        .to_string();
    raw["running"][0]["handle"]["id"] = stranger.id().to_string().into();
    std::fs::write(&path, serde_json::to_vec(&raw).expect("json")).expect("state.json");
    let mut warnings = Vec::new();
    let report = run(&cfg, Arc::new(LocalBackend::new()), &mut |e| {
        if let hadar_runtime::Event::Warning(w) = e {
            warnings.push(w);
        }
    })
    .await
    .expect("resumed run");
    let alive = stranger.try_wait().expect("wait").is_none();
    let _ = stranger.kill();
    let _ = stranger.wait();
    assert!(alive, "the stranger was signalled");
    for j in &report.jobs {
        assert_eq!(j.state, "finished", "{j:?}");
    }
    let followed = format!("runs as {task} (found by its token)");
    assert!(
        warnings.iter().any(|w| w.contains(&followed)),
        "{followed:?} not in {warnings:?}"
    );
}
