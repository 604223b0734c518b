//! What a real run saves: the loop's state and the runtime's own (tasks
//! running, what each job's latest checkpoint holds, metrics), in one file
//! written atomically after every change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hadar_backend::TaskHandle;
use hadar_core::state::LoopState;
use serde::{Deserialize, Serialize};

use crate::RunError;

/// A task the runtime started, as saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Running {
    /// Job id.
    pub job: u32,
    /// Copy index.
    pub copy: u32,
    /// (node, GPU index on the node).
    pub gpus: Vec<(String, u32)>,
    /// The backend's handle.
    pub handle: TaskHandle,
    /// Iterations it reported so far.
    pub iterations: u64,
    /// When it started (s since the run's start).
    pub started_s: f64,
    /// When its reported iterations last grew (s since the run's start).
    #[serde(default)]
    pub progress_s: f64,
    /// The longest wait between two of its reports that showed progress (s).
    #[serde(default)]
    pub gap_s: f64,
    /// The global step of the checkpoint it resumed from (0: from scratch;
    /// `None`: unknown), so that its own checkpoint says what it added.
    #[serde(default)]
    pub base_step: Option<u64>,
    /// The rendezvous port its ranks hold (protocol version 2): not handed
    /// to another task while this one is recorded.
    #[serde(default)]
    pub port: Option<u16>,
    /// The types of its GPUs, in the order of `gpus` (for `hadar status`;
    /// empty in states of older versions).
    #[serde(default)]
    pub gpu_types: Vec<String>,
    /// It failed (exited with an error before its job was done, hung, or
    /// its gang broke): its directory stays on its nodes for a look at its
    /// logs, whenever its checkpoint is collected (rounds later, maybe,
    /// or by the next run: hence saved).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

impl Running {
    /// Where it runs, for people: `h1 v100#0, h2 k80#0` (node, type, GPU).
    pub fn placement(&self) -> String {
        self.gpus
            .iter()
            .enumerate()
            .map(|(i, (node, gpu))| {
                let ty = self.gpu_types.get(i).map_or("gpu", String::as_str);
                format!("{node} {ty}#{gpu}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One job's runtime state.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct JobProgress {
    /// Iterations held in its latest collected checkpoint.
    pub held: u64,
    /// Whether a checkpoint at its total has been collected.
    pub complete: bool,
    /// Last metrics reported (`accuracy`, `loss`, ...).
    pub metrics: BTreeMap<String, f64>,
    /// Iterations done and then lost: by tasks that left no checkpoint, with
    /// a lost node, or with a checkpoint deleted from the state directory.
    #[serde(default)]
    pub lost: u64,
    /// The global step its latest checkpoint records, if it records one.
    #[serde(default)]
    pub step: Option<u64>,
    /// How many of its tasks in a row ended without leaving a checkpoint.
    #[serde(default)]
    pub without_checkpoint: u32,
    /// How many of those were killed as hung (no progress).
    #[serde(default)]
    pub hung_in_a_row: u32,
    /// Where its tasks ran: each distinct placement once, in the order
    /// first used ([`placement_label`]), at most [`MAX_PLACEMENTS`].
    #[serde(default)]
    pub ran_on: Vec<String>,
    /// Tasks launched for it so far (its first start and every restart or
    /// move after it; for the live view's restart counts).
    #[serde(default)]
    pub starts: u64,
    /// Its task sets that ended without leaving a checkpoint, in all.
    #[serde(default)]
    pub failures: u64,
    /// Its tasks stopped as hung, in all.
    #[serde(default)]
    pub hung: u64,
    /// Its restart cost as measured: the mean time from a task's launch to
    /// its first progress (s), over [`JobProgress::restarts_measured`] tasks.
    #[serde(default)]
    pub restart_s: Option<f64>,
    /// Tasks whose launch-to-first-progress time is in `restart_s`.
    #[serde(default)]
    pub restarts_measured: u64,
}

impl JobProgress {
    /// Books one task's launch-to-first-progress time into `restart_s`.
    pub fn measured_restart(&mut self, seconds: f64) {
        let n = self.restarts_measured as f64;
        let mean = self.restart_s.unwrap_or(0.0);
        self.restart_s = Some((mean * n + seconds.max(0.0)) / (n + 1.0));
        self.restarts_measured += 1;
    }
}

/// The most placements [`JobProgress::ran_on`] keeps (a long run moves a
/// job often; the state stays small).
pub const MAX_PLACEMENTS: usize = 16;

impl JobProgress {
    /// Notes that a task of the job ran on `gpus` (node, index) of `types`.
    pub fn ran_on(&mut self, gpus: &[(String, u32)], types: &[String]) {
        let label = placement_label(gpus, types);
        if self.ran_on.len() < MAX_PLACEMENTS && !self.ran_on.contains(&label) {
            self.ran_on.push(label);
        }
    }
}

/// A task's GPUs for humans, node by node: `v100a:v100+k80a:k80`, or
/// `g1:2xa100` for two GPUs of one type on one node.
pub fn placement_label(gpus: &[(String, u32)], types: &[String]) -> String {
    // Nodes in placement order, each with its GPUs counted by type.
    let mut parts: Vec<(&str, BTreeMap<&str, usize>)> = Vec::new();
    for (i, (node, _)) in gpus.iter().enumerate() {
        let ty = types.get(i).map_or("?", String::as_str);
        let at = match parts.iter().position(|(n, _)| n == node) {
            Some(at) => at,
            None => {
                parts.push((node, BTreeMap::new()));
                parts.len() - 1
            }
        };
        *parts[at].1.entry(ty).or_default() += 1;
    }
    parts
        .into_iter()
        .map(|(node, kinds)| {
            let kinds: Vec<String> = kinds
                .into_iter()
                .map(|(ty, n)| {
                    if n > 1 {
                        format!("{n}x{ty}")
                    } else {
                        ty.to_string()
                    }
                })
                .collect();
            format!("{node}:{}", kinds.join(","))
        })
        .collect::<Vec<_>>()
        .join("+")
}

/// The saved state of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunState {
    /// The run's id (tokens and names of its tasks).
    pub run_id: String,
    /// Unix time of the start (s).
    pub started_unix_s: f64,
    /// The jobs file's fingerprint (names, iterations, gangs).
    pub jobs_fingerprint: String,
    /// The jobs' names, by id.
    pub job_names: Vec<String>,
    /// Per job, by id.
    pub jobs: Vec<JobProgress>,
    /// Tasks running.
    pub running: Vec<Running>,
    /// Tasks being launched: recorded before the launch (write-ahead), with
    /// an empty id, so that a run killed before the launch's handle is saved
    /// finds them again by token instead of starting them twice.
    #[serde(default)]
    pub launching: Vec<Running>,
    /// Launch rounds so far: part of each task's name, so that no two
    /// launches share a directory or a token.
    #[serde(default)]
    pub launches: u64,
    /// The loop's state after its last round (none before the first).
    /// Its records that only grow are in `history.jsonl` where
    /// [`RunState::history`] is set (and inline in states of older versions).
    pub loop_state: Option<LoopState>,
    /// How much of `history.jsonl` holds this state's growing records.
    #[serde(default)]
    pub history: Option<crate::history::Mark>,
    /// Whether every job finished.
    pub finished: bool,
    /// When it finished (Unix seconds).
    #[serde(default)]
    pub finished_unix_s: Option<f64>,
    /// What the run believes each job runs at on each type, and from where
    /// (as of the last saved round; for `hadar status`).
    #[serde(default)]
    pub rates: Vec<crate::rates::BelievedRate>,
    /// The backend its tasks run on (none in states of older versions).
    #[serde(default)]
    pub backend: Option<String>,
    /// The state directory it was saved in (absolute): a copy of the
    /// directory is told from the run itself.
    #[serde(default)]
    pub home: Option<PathBuf>,
    /// What the run was started with, for viewers (`hadar status`,
    /// `hadar serve`): none in states of older versions.
    #[serde(default)]
    pub info: Option<RunInfo>,
    /// How long its round switches took (stops, checkpoints collected,
    /// launches), for viewers.
    #[serde(default)]
    pub switches: Switches,
    /// Ended tasks whose checkpoints are installed and whose directories
    /// go ([`hadar_backend::Backend::cleanup`]) after the next save: saved
    /// with the state that no longer records them, so that a run killed
    /// before it removed them leaves the next run to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to_clean: Vec<TaskHandle>,
    /// Why the run last stopped before its jobs finished (its error, with
    /// what became of the tasks), for `hadar status`; cleared when a run
    /// resumes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// Round switches' durations: from a round's start until its tasks are
/// launched (the time a round's GPUs wait for the plan to take effect).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Switches {
    /// Switches so far.
    pub count: u64,
    /// Their seconds in all.
    pub total_s: f64,
    /// The longest.
    pub max_s: f64,
    /// The latest.
    pub last_s: f64,
}

impl Switches {
    /// Counts a switch of `s` seconds.
    pub fn add(&mut self, s: f64) {
        self.count += 1;
        self.total_s += s;
        self.max_s = self.max_s.max(s);
        self.last_s = s;
    }
}

/// The settings and the cluster a run works with, as its viewers need them
/// (set at every start, so a resumed run shows what it runs with now).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The policy's name.
    pub policy: String,
    /// Round length (s).
    pub round_s: f64,
    /// Each job's total iterations, by id.
    pub totals: Vec<u64>,
    /// Each job's arrival (s after the start), by id.
    pub arrivals: Vec<f64>,
    /// Each job's gang (GPUs at once; the first alternative's), by id.
    #[serde(default)]
    pub gangs: Vec<u32>,
    /// Every GPU of the cluster: node, index on the node, type.
    pub gpus: Vec<(String, u32, String)>,
}

impl RunState {
    /// Refuses a state whose ids do not fit the jobs of `totals` (their
    /// iterations, by id: a state file edited by hand, or of another run):
    /// every id is checked before it is used, and a job marked complete
    /// must hold its total (as iterations banked or its checkpoint's step).
    pub fn check(&self, path: &Path, totals: &[u64]) -> Result<(), RunError> {
        let jobs = totals.len();
        let bad = |what: String| {
            Err(io(
                path,
                std::io::Error::other(format!(
                    "{what}; the file is corrupt or of another run: move it away, or start \
                     over with --fresh"
                )),
            ))
        };
        if self.jobs.len() != jobs || self.job_names.len() != jobs {
            return bad(format!(
                "it records {} jobs ({} names) where the jobs file has {jobs}",
                self.jobs.len(),
                self.job_names.len()
            ));
        }
        for (i, (p, total)) in self.jobs.iter().zip(totals).enumerate() {
            if p.complete && p.held < *total && p.step.is_none_or(|s| s < *total) {
                return bad(format!(
                    "job {i} is marked complete with {} of its {total} iterations held",
                    p.held
                ));
            }
        }
        for r in self.running.iter().chain(&self.launching) {
            if r.job as usize >= jobs {
                return bad(format!("a task of job {} (there are {jobs} jobs)", r.job));
            }
            if r.handle.nodes.is_empty() {
                return bad(format!("a task of job {} has no node", r.job));
            }
        }
        if let Some(l) = &self.loop_state {
            if l.jobs.jobs.len() != jobs {
                return bad(format!(
                    "its round loop records {} jobs where the jobs file has {jobs}",
                    l.jobs.jobs.len()
                ));
            }
        }
        Ok(())
    }
}

/// The state file of a run in `dir`.
pub fn state_path(dir: &Path) -> PathBuf {
    dir.join("state.json")
}

pub(crate) fn io(path: &Path, source: std::io::Error) -> RunError {
    RunError::State {
        path: path.to_path_buf(),
        source,
    }
}

/// The largest state file read: a run of a thousand jobs saves a few MiB.
const MAX_STATE_BYTES: u64 = 256 << 20;

/// Reads a run's saved state with its whole history (`history.jsonl`);
/// `None` if there is none.
pub fn load_state(dir: &Path) -> Result<Option<RunState>, RunError> {
    let mut state = read_state(dir)?;
    if let Some(s) = state.as_mut() {
        restore_history(dir, s)?;
    }
    Ok(state)
}

/// Puts back into `state` (read by [`read_state`]) the loop's records that
/// `history.jsonl` holds.
pub(crate) fn restore_history(dir: &Path, state: &mut RunState) -> Result<(), RunError> {
    if let (Some(mark), Some(l)) = (state.history, state.loop_state.as_mut()) {
        crate::history::restore(dir, l, mark)?;
    }
    Ok(())
}

/// Reads `state.json` alone: the loop's records that only grow are left
/// in `history.jsonl` (enough to find a run's tasks, to stop them with
/// `--fresh` or to tell a copy, also where that file is damaged).
pub(crate) fn read_state(dir: &Path) -> Result<Option<RunState>, RunError> {
    let path = state_path(dir);
    // A state file is a few MiB at most; a link to a device is refused.
    let state: RunState = match hadar_core::error::read_bounded(&path, MAX_STATE_BYTES) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            io(
                &path,
                std::io::Error::other(format!(
                    "not a state file of this version of hadar ({e}); use another --state \
                     directory, or move this one away once no task of it runs"
                )),
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path, e)),
    };
    Ok(Some(state))
}

/// Saves `state` as the state file of `dir`, atomically (a synced
/// temporary file renamed over it).
pub fn save_state(dir: &Path, state: &RunState) -> Result<(), RunError> {
    let path = state_path(dir);
    // (Compact: it is rewritten a few times a round.)
    let text = serde_json::to_vec(state).map_err(|e| io(&path, std::io::Error::other(e)))?;
    write_atomic(&path, &text)
}

/// Writes `bytes` to `path` so that a reader (or a crash) sees the old file
/// or the new one, never half of one: a temporary file beside it, synced,
/// then renamed over it, and the rename synced too. The one way this crate
/// replaces a file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| io(&tmp, e))?;
    f.sync_all().map_err(|e| io(&tmp, e))?;
    rename_durably(&tmp, path)
}

/// Copies `from` over `to` atomically and durably (a temporary file,
/// synced, then renamed, the rename synced): once it returns, a power cut
/// leaves `to` whole, so that the task directory it came from may go.
pub(crate) fn copy_atomic(from: &Path, to: &Path) -> Result<(), RunError> {
    let tmp = to.with_extension("tmp");
    std::fs::copy(from, &tmp).map_err(|e| io(from, e))?;
    sync_file(&tmp)?;
    rename_durably(&tmp, to)
}

/// Renames `from` to `to` and syncs the directory that holds `to`, so that
/// the new name survives a power cut (the file's data must be synced
/// before).
pub(crate) fn rename_durably(from: &Path, to: &Path) -> Result<(), RunError> {
    std::fs::rename(from, to).map_err(|e| io(to, e))?;
    match to.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => sync_file(dir),
        None => Ok(()),
    }
}

/// Creates directory `dir` (and those above it), each new one's name
/// synced in its parent: a checkpoint renamed durably into it is then
/// found after a power cut.
pub(crate) fn create_dir_durably(dir: &Path) -> Result<(), RunError> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_durably(parent)?;
        std::fs::create_dir(dir)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => Ok(()),
                _ => Err(e),
            })
            .map_err(|e| io(dir, e))?;
        return sync_file(parent);
    }
    std::fs::create_dir(dir).map_err(|e| io(dir, e))
}

/// Syncs a file's (or a directory's) data and metadata to disk.
fn sync_file(path: &Path) -> Result<(), RunError> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io(path, e))
}

#[cfg(test)]
mod tests {
    #[test]
    fn placements_are_labelled_node_by_node_and_kept_once() {
        let g = |v: &[(&str, u32)]| -> Vec<(String, u32)> {
            v.iter().map(|(n, i)| (n.to_string(), *i)).collect()
        };
        let t = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
        assert_eq!(
            super::placement_label(&g(&[("v100a", 0), ("k80a", 0)]), &t(&["v100", "k80"])),
            "v100a:v100+k80a:k80"
        );
        assert_eq!(
            super::placement_label(
                &g(&[("g1", 0), ("g1", 1), ("g1", 2)]),
                &t(&["a100", "a100", "t4"])
            ),
            "g1:2xa100,t4"
        );
        let mut p = super::JobProgress::default();
        for _ in 0..2 {
            p.ran_on(&g(&[("a", 0)]), &t(&["v100"]));
        }
        assert_eq!(p.ran_on, ["a:v100"], "once");
        for i in 0..40 {
            p.ran_on(&g(&[("n", i)]), &t(&[&format!("t{i}")]));
        }
        assert_eq!(p.ran_on.len(), super::MAX_PLACEMENTS, "bounded");
    }

    use super::*;
    use crate::LeftBehind;

    fn state(jobs: usize) -> RunState {
        RunState {
            run_id: "r".into(),
            started_unix_s: 0.0,
            jobs_fingerprint: String::new(),
            job_names: vec!["a".into(); jobs],
            jobs: vec![JobProgress::default(); jobs],
            running: vec![],
            launching: vec![],
            launches: 0,
            loop_state: None,
            history: None,
            finished: false,
            finished_unix_s: None,
            rates: Vec::new(),
            backend: None,
            home: None,
            info: None,
            switches: Default::default(),
            to_clean: Vec::new(),
            stopped: None,
        }
    }

    /// Tasks killed as hung are not blamed on the job protocol.
    #[test]
    fn tasks_that_hung_are_not_called_protocol_breakers() {
        let said = |left, hung, last: Option<&str>| {
            RunError::NoCheckpoint {
                job: "j".into(),
                times: 5,
                hung,
                dir: "/t".into(),
                last: last.map(String::from),
                left,
            }
            .to_string()
        };
        let with = |hung, last| said(LeftBehind::Nothing, hung, last);
        let e = |hung| with(hung, None);
        assert!(e(5).contains("killed as hung"), "{}", e(5));
        assert!(!e(5).contains("job protocol"), "{}", e(5));
        assert!(
            e(2).contains("does not follow the job protocol"),
            "{}",
            e(2)
        );
        // A task that failed is shown failing, with what it printed.
        let crashed = with(0, Some("status 2 ... it printed last:\n    No such file"));
        assert!(
            crashed.contains("the last exited with status 2"),
            "{crashed}"
        );
        assert!(crashed.contains("No such file"), "{crashed}");
        assert!(!crashed.contains("does not follow"), "{crashed}");
        // Copies that all diverged wrote checkpoints: said so, not blamed
        // on the protocol.
        let diverged = said(LeftBehind::Diverged, 0, None);
        assert!(diverged.contains("NaN or infinite"), "{diverged}");
        assert!(!diverged.contains("job protocol"), "{diverged}");
        // Tasks that failed with only their resume checkpoint left: said
        // so, with how the last one failed.
        let stale = said(
            LeftBehind::Resumed,
            0,
            Some("status 1 ... it printed last:\n    bad magic"),
        );
        assert!(stale.contains("exited with status 1"), "{stale}");
        assert!(
            stale.contains("only the checkpoint it resumed from"),
            "{stale}"
        );
        assert!(stale.contains("bad magic"), "{stale}");
        // Killed as hung after a resume: the hang is the cause said.
        let hung = said(LeftBehind::Resumed, 5, None);
        assert!(hung.contains("killed as hung"), "{hung}");
        assert!(!hung.contains("resumed from"), "{hung}");
        let unreadable = said(LeftBehind::Unreadable, 0, None);
        assert!(unreadable.contains("not safetensors"), "{unreadable}");
        assert!(!unreadable.contains("does not follow"), "{unreadable}");
    }

    /// `complete` is believed only with its total held: a job marked
    /// complete by hand (or by a foreign file) does not finish unrun.
    #[test]
    fn a_job_marked_complete_must_hold_its_total() {
        let path = Path::new("/s/state.json");
        let mut s = state(2);
        s.jobs[1].complete = true;
        s.jobs[1].held = 50;
        let err = s.check(path, &[10, 100]).unwrap_err().to_string();
        assert!(
            err.contains("job 1 is marked complete with 50 of its 100"),
            "{err}"
        );
        s.jobs[1].step = Some(100);
        assert!(s.check(path, &[10, 100]).is_ok(), "its checkpoint's step");
        s.jobs[1] = JobProgress {
            complete: true,
            held: 100,
            ..JobProgress::default()
        };
        assert!(s.check(path, &[10, 100]).is_ok(), "its iterations banked");
        assert!(s.check(path, &[10]).is_err(), "another count of jobs");
    }

    #[test]
    fn a_run_with_tasks_alive_keeps_its_backend() {
        let dir = Path::new("/s");
        let mut s = state(1);
        assert!(
            crate::same_backend(dir, &s, "docker").is_ok(),
            "an old state"
        );
        s.backend = Some("local".into());
        assert!(
            crate::same_backend(dir, &s, "docker").is_ok(),
            "nothing alive"
        );
        s.running.push(task(0, vec!["n".into()]));
        assert!(crate::same_backend(dir, &s, "local").is_ok());
        let err = crate::same_backend(dir, &s, "docker")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`--backend local`"), "{err}");
        s.running.clear();
        s.launching.push(task(0, vec!["n".into()]));
        assert!(
            crate::same_backend(dir, &s, "ssh").is_err(),
            "a launch recorded"
        );
    }

    /// A failed task's mark is saved (its directory must outlast a run that
    /// collects its checkpoint later), and states without it still load.
    #[test]
    fn a_failed_task_s_mark_is_saved() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = state(1);
        let mut failed = task(0, vec!["n".into()]);
        failed.failed = true;
        s.running = vec![failed, task(0, vec!["m".into()])];
        save_state(dir.path(), &s).expect("save");
        let text = std::fs::read_to_string(state_path(dir.path())).expect("read");
        assert_eq!(text.matches("\"failed\"").count(), 1, "{text}");
        let back = load_state(dir.path()).expect("load").expect("saved");
        let marks: Vec<bool> = back.running.iter().map(|r| r.failed).collect();
        assert_eq!(marks, [true, false]);
    }

    fn task(job: u32, nodes: Vec<String>) -> Running {
        Running {
            job,
            copy: 0,
            gpus: vec![],
            handle: hadar_backend::TaskHandle {
                id: "7".into(),
                nodes,
                workdir: "/w".into(),
                token: "t".into(),
            },
            iterations: 0,
            started_s: 0.0,
            progress_s: 0.0,
            gap_s: 0.0,
            base_step: None,
            port: None,
            gpu_types: vec![],
            failed: false,
        }
    }

    /// Every id from the file is checked before use: a job id out of range
    /// or a task without a node is an error that says what, not a panic.
    #[test]
    fn ids_out_of_range_are_refused() {
        let path = Path::new("/s/state.json");
        assert!(state(2).check(path, &[1, 1]).is_ok());
        let err = state(2).check(path, &[1, 1, 1]).unwrap_err().to_string();
        assert!(
            err.contains("records 2 jobs") && err.contains("--fresh"),
            "{err}"
        );
        let mut s = state(2);
        s.running.push(task(9, vec!["n".into()]));
        let err = s.check(path, &[1, 1]).unwrap_err().to_string();
        assert!(err.contains("a task of job 9 (there are 2 jobs)"), "{err}");
        let mut s = state(2);
        s.launching.push(task(1, vec![]));
        let err = s.check(path, &[1, 1]).unwrap_err().to_string();
        assert!(err.contains("has no node"), "{err}");
    }
}
