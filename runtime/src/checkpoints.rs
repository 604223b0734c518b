//! A job's latest checkpoint: the ended tasks' checkpoints (fetched through
//! the backend, keyed by the task: [`crate::parallel::fetch_checkpoints`])
//! become the job's latest: one task's is copied, several copies' are
//! merged, weighted by the iterations each did.

use std::path::{Path, PathBuf};

use crate::state::{copy_atomic, create_dir_durably, io, rename_durably};
use crate::RunError;

/// The job's latest checkpoint (what its next task resumes from).
pub(crate) fn latest(dir: &Path, job: u32) -> PathBuf {
    dir.join("jobs")
        .join(job.to_string())
        .join("latest.safetensors")
}

/// Where fetched checkpoints land before they are installed.
pub(crate) fn incoming(dir: &Path) -> Result<PathBuf, RunError> {
    let incoming = dir.join("checkpoints");
    std::fs::create_dir_all(&incoming).map_err(|e| io(&incoming, e))?;
    Ok(incoming)
}

/// What [`install`] made of a job's fetched checkpoints.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Installed {
    /// The iterations they add.
    pub(crate) iterations: u64,
    /// The copies left out of a merge (as fetched; moved to
    /// `checkpoints/<why>/`), and why: their tasks failed.
    pub(crate) left_out: Vec<(PathBuf, LeftOut)>,
    /// What to say of them (the run's warnings, after the job's name).
    pub(crate) said: Vec<String>,
}

/// Why a copy's checkpoint was left out of a merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeftOut {
    /// It holds NaN or infinite values: they would spread into the average.
    Diverged,
    /// It is not a safetensors file (a merge reads the tensors; a single
    /// copy is taken as it is, whatever its format).
    Unreadable,
}

impl LeftOut {
    /// The directory of `checkpoints/` it is set aside in.
    fn dir(self) -> &'static str {
        match self {
            Self::Diverged => "diverged",
            Self::Unreadable => "unreadable",
        }
    }
}

impl Installed {
    /// Whether a checkpoint was taken (some copy was not left out).
    pub(crate) fn took_any(&self, fetched: usize) -> bool {
        fetched > self.left_out.len()
    }

    /// Whether `path` was left out.
    pub(crate) fn left_out(&self, path: &Path) -> bool {
        self.left_out.iter().any(|(p, _)| p == path)
    }
}

/// The step a merge of copies records: where the job stands, `base` plus
/// the iterations the copies added, never past the job's `total`. Copies
/// are given shares that add up to what is left, but one that does not
/// stop at its share, or a stop that comes late, works past the total: the
/// model is then the total's (as the report says), the extra work in its
/// weights only (before, the step said 30,355 of a job of 30,000).
pub(crate) fn merged_step(base: u64, added: u64, total: u64) -> u64 {
    base.saturating_add(added).min(total)
}

/// Makes `files` (fetched checkpoints with the iterations each task did)
/// the job's latest, on disk (synced) when it returns. `base` is the step
/// of the checkpoint the tasks resumed from (0 for a job's first; `None`:
/// unknown): a merge of copies records [`merged_step`] as its `step`,
/// where the job stands (the merge itself takes integer tensors from one
/// copy, whose step counts its own work only). `total` is the job's.
pub(crate) fn install(
    dir: &Path,
    job: u32,
    files: &[(PathBuf, u64)],
    base: Option<u64>,
    total: u64,
) -> Result<Installed, RunError> {
    let mut done = Installed::default();
    if files.is_empty() {
        return Ok(done);
    }
    let out = latest(dir, job);
    if let Some(parent) = out.parent() {
        create_dir_durably(parent)?;
    }
    let mut files = files.to_vec();
    loop {
        if files.is_empty() {
            // Every copy was left out: the job keeps its last checkpoint.
            done.said
                .push("no copy's checkpoint could be merged: none kept".into());
            return Ok(done);
        }
        let dropped = !done.left_out.is_empty();
        // One copy is taken as it is, unless another was just left out:
        // then it is checked too (a merge of one).
        let zero = files.iter().all(|(_, it)| *it == 0);
        if (files.len() == 1 && !dropped) || zero {
            copy_atomic(&files[0].0, &out)?;
            break;
        }
        // Merged beside the latest, given its step, then renamed over it.
        let merging = out.with_extension("merging");
        let (path, why, what) = match hadar_checkpoint::merge(&files, &merging) {
            // A diverged copy (NaN or infinite weights) is left out: its
            // values would spread into the average; the others are kept,
            // and its iterations count as lost.
            Err(hadar_checkpoint::MergeError::NonFinite { path, name }) => (
                path,
                LeftOut::Diverged,
                format!("holds NaN or infinite values (tensor {name})"),
            ),
            // So is a copy that is not a safetensors file: else the merge
            // failed the run, and again at every resume (the file stays in
            // its task's directory).
            Err(hadar_checkpoint::MergeError::Invalid { path, reason }) => (
                path,
                LeftOut::Unreadable,
                format!(
                    "is not a safetensors file ({reason}; copies must write safetensors to \
                     be merged, docs/job-protocol.md)"
                ),
            ),
            other => {
                other?;
                if let Some(base) = base {
                    let added: u64 = files.iter().map(|(_, it)| it).sum();
                    hadar_checkpoint::write_step(&merging, merged_step(base, added, total))?;
                }
                // (`merge` and `write_step` sync the file; the rename is
                // synced too: the tasks' directories, and the copies in
                // them, may be removed next.)
                rename_durably(&merging, &out)?;
                break;
            }
        };
        let kept = set_aside(dir, job, &path, why);
        done.said.push(format!(
            "the copy {} {what}: merged without it",
            kept.display()
        ));
        files.retain(|(p, _)| *p != path);
        done.left_out.push((path, why));
    }
    done.iterations = files.iter().map(|(_, it)| it).sum();
    Ok(done)
}

/// Moves a copy's fetched checkpoint left out of a merge to
/// `checkpoints/diverged/<job>.safetensors` (or `unreadable/`), for a look
/// (the job's last one: a copy that keeps failing does not fill the disk);
/// the fetched copies left in `checkpoints/` are removed once their job's
/// checkpoint is installed. Returns where it is now (where it was, if it
/// could not be moved: then it stays there).
fn set_aside(dir: &Path, job: u32, path: &Path, why: LeftOut) -> PathBuf {
    let aside = dir.join("checkpoints").join(why.dir());
    let to = aside.join(format!("{job}.safetensors"));
    match std::fs::create_dir_all(&aside).and_then(|()| std::fs::rename(path, &to)) {
        Ok(()) => to,
        Err(_) => path.to_path_buf(),
    }
}

/// Removes fetched checkpoints once they are installed (or not wanted):
/// each task's would otherwise stay in the state directory, one model a
/// task. Best effort: one left behind is a file, not a fault.
pub(crate) fn remove_fetched(files: &[(PathBuf, u64)]) {
    for (path, _) in files {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!("removing the fetched checkpoint {}: {e}", path.display());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file of one f32 tensor `w`.
    fn write(path: &Path, values: &[f32]) {
        let header = format!(
            r#"{{"w":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{}]}}}}"#,
            values.len(),
            values.len() * 4
        );
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        std::fs::write(path, bytes).expect("write");
    }

    /// Copies merged: the job's latest holds them; a diverged copy is set
    /// aside for a look (not removed with the others' fetched files).
    #[test]
    fn a_diverged_copy_is_set_aside_and_the_others_removed_once_installed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let into = incoming(dir.path()).expect("incoming");
        let files: Vec<(PathBuf, u64)> = ["a", "b", "nan"]
            .iter()
            .map(|n| (into.join(format!("{n}.safetensors")), 10))
            .collect();
        write(&files[0].0, &[1.0, 2.0]);
        write(&files[1].0, &[3.0, 4.0]);
        write(&files[2].0, &[f32::NAN, 0.0]);
        let done = install(dir.path(), 0, &files, Some(0), 100).expect("install");
        assert_eq!(done.iterations, 20);
        assert_eq!(done.left_out, [(files[2].0.clone(), LeftOut::Diverged)]);
        assert!(done.took_any(3));
        assert!(latest(dir.path(), 0).is_file());
        let aside = into.join("diverged").join("0.safetensors");
        assert!(aside.is_file(), "the diverged copy is kept");
        remove_fetched(&files[..2]);
        let left: Vec<_> = std::fs::read_dir(&into)
            .expect("read")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(left, ["diverged"], "fetched copies left");
        assert!(aside.is_file(), "the diverged copy went with them");
    }

    /// A safetensors file of an f32 tensor `w` and an I64 `step`.
    fn write_with_step(path: &Path, values: &[f32], step: i64) {
        let n = values.len() * 4;
        let header = format!(
            r#"{{"w":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{n}]}},"step":{{"dtype":"I64","shape":[],"data_offsets":[{n},{}]}}}}"#,
            values.len(),
            n + 8
        );
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        bytes.extend(step.to_le_bytes());
        std::fs::write(path, bytes).expect("write");
    }

    /// The merge's step is where the job stands, but never past its total:
    /// copies that did more than was left leave a model at the total (the
    /// weights are their average all the same). Below the total it is the
    /// base plus what they added.
    #[test]
    fn a_merge_of_copies_past_the_total_holds_the_total() {
        assert_eq!(merged_step(90, 25, 100), 100);
        assert_eq!(merged_step(90, 10, 100), 100);
        assert_eq!(merged_step(40, 25, 100), 65);
        assert_eq!(merged_step(u64::MAX, 1, 100), 100);

        let dir = tempfile::tempdir().expect("tempdir");
        let into = incoming(dir.path()).expect("incoming");
        let files: Vec<(PathBuf, u64)> = [("a", 15), ("b", 5)]
            .iter()
            .map(|(n, it)| (into.join(format!("{n}.safetensors")), *it))
            .collect();
        // Resumed from step 90 of 100: together they did 20, 10 too many.
        write_with_step(&files[0].0, &[1.0, 2.0], 105);
        write_with_step(&files[1].0, &[5.0, 6.0], 95);
        let done = install(dir.path(), 0, &files, Some(90), 100).expect("install");
        assert_eq!(done.iterations, 20);
        let out = latest(dir.path(), 0);
        let step = hadar_checkpoint::read_step(&out).expect("read");
        assert_eq!(step, Some(100), "the merged step is capped at the total");
        // The weights are the average, weighted by the copies' iterations.
        let bytes = std::fs::read(&out).expect("read");
        let len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len]).expect("header");
        let at = header["w"]["data_offsets"][0].as_u64().expect("offset") as usize + 8 + len;
        let w: Vec<f32> = bytes[at..at + 8]
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        assert_eq!(w, [2.0, 3.0]);
    }

    /// A copy that is not a safetensors file is left out of the merge and
    /// set aside; the others are merged. Copies that all are: none taken.
    #[test]
    fn a_copy_that_is_not_safetensors_is_left_out_of_the_merge() {
        let dir = tempfile::tempdir().expect("tempdir");
        let into = incoming(dir.path()).expect("incoming");
        let files: Vec<(PathBuf, u64)> = ["a", "b", "garbage"]
            .iter()
            .map(|n| (into.join(format!("{n}.safetensors")), 10))
            .collect();
        write(&files[0].0, &[1.0, 2.0]);
        write(&files[1].0, &[3.0, 4.0]);
        std::fs::write(&files[2].0, "garbage").expect("write");
        let done = install(dir.path(), 0, &files, Some(0), 100).expect("install");
        assert_eq!(done.iterations, 20);
        assert_eq!(done.left_out, [(files[2].0.clone(), LeftOut::Unreadable)]);
        assert!(done.left_out(&files[2].0));
        assert!(done.took_any(3));
        assert!(latest(dir.path(), 0).is_file(), "the others merged");
        let aside = into.join("unreadable").join("0.safetensors");
        assert_eq!(std::fs::read_to_string(&aside).expect("aside"), "garbage");

        let both: Vec<(PathBuf, u64)> = ["x", "y"]
            .iter()
            .map(|n| (into.join(format!("{n}.safetensors")), 10))
            .collect();
        for (p, _) in &both {
            std::fs::write(p, "not a checkpoint").expect("write");
        }
        let done = install(dir.path(), 1, &both, Some(0), 100).expect("install");
        assert!(!done.took_any(2), "{done:?}");
        assert!(!latest(dir.path(), 1).exists());
    }
}
