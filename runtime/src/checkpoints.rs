//! Collecting stopped tasks' checkpoints: each is fetched through the
//! backend (keyed by the task), then one task's becomes the job's latest, or
//! several copies' are merged, weighted by the iterations each did.

use std::path::{Path, PathBuf};

use hadar_backend::protocol::CHECKPOINT_FILE;
use hadar_backend::Backend;

use crate::state::{copy_atomic, io, Running};
use crate::RunError;

/// The job's latest checkpoint (what its next task resumes from).
pub(crate) fn latest(dir: &Path, job: u32) -> PathBuf {
    dir.join("jobs")
        .join(job.to_string())
        .join("latest.safetensors")
}

/// Makes the stopped tasks' checkpoints the job's latest. Returns the
/// iterations the collected checkpoints add (tasks without a checkpoint,
/// or on a node that is gone, add none: their work is lost).
pub(crate) async fn collect(
    dir: &Path,
    job: u32,
    tasks: &[Running],
    backend: &dyn Backend,
) -> Result<u64, RunError> {
    let incoming = dir.join("checkpoints");
    std::fs::create_dir_all(&incoming).map_err(|e| io(&incoming, e))?;
    let mut files: Vec<(PathBuf, u64)> = Vec::new();
    for r in tasks {
        let name = r
            .handle
            .workdir
            .file_name()
            .map_or_else(|| format!("job{job}"), |n| n.to_string_lossy().into_owned());
        let local = incoming.join(format!("{name}.safetensors"));
        match backend.fetch(&r.handle, CHECKPOINT_FILE, &local).await {
            Ok(true) => files.push((local, r.iterations)),
            Ok(false) => {}
            // A node gone with its checkpoint: the job goes back further.
            Err(e) if e.lost_node().is_some() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if files.is_empty() {
        return Ok(0);
    }
    let out = latest(dir, job);
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
    }
    if files.len() == 1 || files.iter().all(|(_, it)| *it == 0) {
        copy_atomic(&files[0].0, &out)?;
    } else {
        hadar_checkpoint::merge(&files, &out)?;
    }
    Ok(files.iter().map(|(_, it)| it).sum())
}
