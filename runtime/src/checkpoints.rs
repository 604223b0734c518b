//! A job's latest checkpoint: the ended tasks' checkpoints (fetched through
//! the backend, keyed by the task: [`crate::parallel::fetch_checkpoints`])
//! become the job's latest: one task's is copied, several copies' are
//! merged, weighted by the iterations each did.

use std::path::{Path, PathBuf};

use crate::state::{copy_atomic, io, rename_durably};
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

/// Makes `files` (fetched checkpoints with the iterations each task did)
/// the job's latest; returns the iterations they add. `base` is the step
/// of the checkpoint the tasks resumed from (0 for a job's first; `None`:
/// unknown): a merge of copies records `base` plus the iterations it adds
/// as its `step`, where the job stands (the merge itself takes integer
/// tensors from one copy, whose step counts its own work only).
pub(crate) fn install(
    dir: &Path,
    job: u32,
    files: &[(PathBuf, u64)],
    base: Option<u64>,
) -> Result<u64, RunError> {
    if files.is_empty() {
        return Ok(0);
    }
    let out = latest(dir, job);
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
    }
    let mut files = files.to_vec();
    let mut dropped = false;
    loop {
        if files.is_empty() {
            // Every copy diverged: the job keeps its last checkpoint.
            tracing::warn!("job {job}: every copy holds NaN or infinite values: none kept");
            return Ok(0);
        }
        // One copy is taken as it is, unless a diverged one was just left
        // out: then it is checked too (a merge of one).
        let zero = files.iter().all(|(_, it)| *it == 0);
        if (files.len() == 1 && !dropped) || zero {
            copy_atomic(&files[0].0, &out)?;
            break;
        }
        // Merged beside the latest, given its step, then renamed over it.
        let merging = out.with_extension("merging");
        match hadar_checkpoint::merge(&files, &merging) {
            // A diverged copy (NaN or infinite weights) is left out: its
            // values would spread into the average; the others are kept,
            // and its iterations count as lost.
            Err(hadar_checkpoint::MergeError::NonFinite { path, name }) => {
                tracing::warn!(
                    "job {job}: the copy {} holds NaN or infinite values (tensor {name}): \
                     merged without it",
                    path.display()
                );
                files.retain(|(p, _)| *p != path);
                dropped = true;
            }
            other => {
                other?;
                if let Some(base) = base {
                    let added: u64 = files.iter().map(|(_, it)| it).sum();
                    hadar_checkpoint::write_step(&merging, base + added)?;
                }
                // (`merge` and `write_step` sync the file; the rename is
                // synced too: the tasks' directories, and the copies in
                // them, may be removed next.)
                rename_durably(&merging, &out)?;
                break;
            }
        }
    }
    Ok(files.iter().map(|(_, it)| it).sum())
}
