//! Round switches in parallel: a round's stops and launches run side by
//! side, not one after another.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hadar_backend::protocol::CHECKPOINT_FILE;
use hadar_backend::{Backend, BackendError, StopPolicy, TaskHandle, TaskSpec, TaskStatus};
use tokio::task::JoinSet;

/// Backend calls in flight at once during a round switch.
pub const IN_FLIGHT: usize = 64;

/// Runs `call` for each item concurrently, at most [`IN_FLIGHT`] at once
/// (a backend bounds its own calls per node further, e.g. SSH sessions per
/// host); results in the items' order. A call that panics is reported as
/// an error on its item, not lost.
pub async fn each<I, T, F, Fut>(
    items: Vec<I>,
    call: F,
    backend: &Arc<dyn Backend>,
) -> Vec<Result<T, BackendError>>
where
    I: Send + 'static,
    T: Send + 'static,
    F: Fn(Arc<dyn Backend>, I) -> Fut,
    Fut: std::future::Future<Output = Result<T, BackendError>> + Send + 'static,
{
    let limit = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut set = JoinSet::new();
    let n = items.len();
    for (i, item) in items.into_iter().enumerate() {
        let fut = call(Arc::clone(backend), item);
        let limit = Arc::clone(&limit);
        set.spawn(async move {
            let _permit = limit.acquire_owned().await;
            (i, fut.await)
        });
    }
    let mut out: Vec<Option<Result<T, BackendError>>> = (0..n).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((i, r)) => out[i] = Some(r),
            Err(e) => {
                // A panicking call: report it on every slot still empty.
                let msg = format!("a backend call failed: {e}");
                for slot in out.iter_mut().filter(|s| s.is_none()) {
                    *slot = Some(Err(BackendError::Invalid(msg.clone())));
                }
            }
        }
    }
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(BackendError::Invalid("a backend call was lost".into()))))
        .collect()
}

/// Stops `tasks` side by side with `policy`; each one's final status.
pub async fn stop_all(
    backend: &Arc<dyn Backend>,
    tasks: Vec<TaskHandle>,
    policy: StopPolicy,
) -> Vec<Result<TaskStatus, BackendError>> {
    stop_each(backend, tasks.into_iter().map(|t| (t, policy)).collect()).await
}

/// Stops each task with its own policy (a job's own stop signal), side by side.
pub async fn stop_each(
    backend: &Arc<dyn Backend>,
    tasks: Vec<(TaskHandle, StopPolicy)>,
) -> Vec<Result<TaskStatus, BackendError>> {
    each(
        tasks,
        |b, (t, policy)| async move { b.stop(&t, &policy).await },
        backend,
    )
    .await
}

/// Launches `specs` side by side.
pub async fn launch_all(
    backend: &Arc<dyn Backend>,
    specs: Vec<TaskSpec>,
) -> Vec<Result<TaskHandle, BackendError>> {
    each(specs, |b, s| async move { b.launch(&s).await }, backend).await
}

/// Fetches each task's checkpoint into `into` side by side, named after
/// its task directory: `Some(path)` where the task left one, `None` where
/// it did not or its node is gone.
pub async fn fetch_checkpoints(
    backend: &Arc<dyn Backend>,
    tasks: Vec<TaskHandle>,
    into: &Path,
) -> Vec<Result<Option<PathBuf>, BackendError>> {
    let into = into.to_path_buf();
    each(
        tasks,
        move |b, t| {
            let name = t
                .workdir
                .file_name()
                .map_or_else(|| t.id.clone(), |n| n.to_string_lossy().into_owned());
            let local = into.join(format!("{name}.safetensors"));
            async move {
                match b.fetch(&t, CHECKPOINT_FILE, &local).await {
                    Ok(true) => Ok(Some(local)),
                    Ok(false) => Ok(None),
                    // A node gone with its checkpoint: the job goes back further.
                    Err(e) if e.lost_node().is_some() => Ok(None),
                    Err(e) => Err(e),
                }
            }
        },
        backend,
    )
    .await
}
