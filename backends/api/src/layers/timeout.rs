//! Bounds every call.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::{
    Backend, BackendError, Capabilities, StopPolicy, TaskHandle, TaskSpec, TaskStatus, KILL_WAIT,
};

/// Bounds every call by `limit` (a stop by its grace period and the kill
/// wait on top; a call that moves files by their size: see
/// [`MIN_TRANSFER_BYTES_PER_S`]). A call that runs out is reported as its
/// node being unreachable: a node that does not answer in time is treated
/// as lost and its jobs are rescheduled from their checkpoints.
#[derive(Debug)]
pub struct Timeout {
    inner: Arc<dyn Backend>,
    limit: Duration,
}

/// The slowest a transfer may go before its call counts as a silent node:
/// a launch, which stages its inputs (a resume checkpoint of many GB), gets
/// its inputs' size at this rate on top of the limit. (With the limit
/// alone, a big checkpoint's staging marked a healthy node lost.)
pub const MIN_TRANSFER_BYTES_PER_S: u64 = 10 << 20;

/// A fetch's bound: its size is known only once it is done, and a
/// checkpoint of 18 GB takes this long at [`MIN_TRANSFER_BYTES_PER_S`].
pub const FETCH_LIMIT: Duration = Duration::from_secs(30 * 60);

impl Timeout {
    /// Every call bounded by `limit`.
    pub fn new(inner: Arc<dyn Backend>, limit: Duration) -> Self {
        Self { inner, limit }
    }

    async fn call<T>(
        &self,
        node: &str,
        what: &str,
        limit: Duration,
        f: impl std::future::Future<Output = Result<T, BackendError>> + Send,
    ) -> Result<T, BackendError> {
        match tokio::time::timeout(limit, f).await {
            Ok(r) => r,
            Err(_) => Err(BackendError::Unreachable {
                node: node.to_string(),
                message: format!("{what} did not answer within {:.1} s", limit.as_secs_f64()),
            }),
        }
    }
}

#[async_trait::async_trait]
impl Backend for Timeout {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn renew_due(&self) -> bool {
        self.inner.renew_due()
    }
    fn rendezvous_addr(&self, node: &str) -> String {
        self.inner.rendezvous_addr(node)
    }
    async fn open(&self) -> Result<(), BackendError> {
        self.call("(all)", "open", self.limit, self.inner.open())
            .await
    }
    async fn close(&self) -> Result<(), BackendError> {
        self.call("(all)", "close", self.limit, self.inner.close())
            .await
    }
    async fn launch(&self, spec: &TaskSpec) -> Result<TaskHandle, BackendError> {
        let bytes: u64 = spec
            .inputs
            .iter()
            .filter_map(|f| std::fs::metadata(&f.local).ok())
            .map(|m| m.len())
            .sum();
        let limit = self.limit + Duration::from_secs(bytes / MIN_TRANSFER_BYTES_PER_S);
        self.call(spec.node(), "launch", limit, self.inner.launch(spec))
            .await
    }
    async fn status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        self.call(task.node(), "status", self.limit, self.inner.status(task))
            .await
    }
    async fn stop(
        &self,
        task: &TaskHandle,
        policy: &StopPolicy,
    ) -> Result<TaskStatus, BackendError> {
        let limit = self.limit + policy.grace + KILL_WAIT;
        self.call(task.node(), "stop", limit, self.inner.stop(task, policy))
            .await
    }
    async fn find(&self, task: &TaskHandle) -> Result<Option<TaskHandle>, BackendError> {
        self.call(task.node(), "find", self.limit, self.inner.find(task))
            .await
    }
    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError> {
        self.call(task.node(), "cleanup", self.limit, self.inner.cleanup(task))
            .await
    }
    async fn fetch(
        &self,
        task: &TaskHandle,
        name: &str,
        local: &Path,
    ) -> Result<bool, BackendError> {
        self.call(
            task.node(),
            "fetch",
            self.limit.max(FETCH_LIMIT),
            self.inner.fetch(task, name, local),
        )
        .await
    }
    async fn log_tail(
        &self,
        task: &TaskHandle,
        bytes: u64,
    ) -> Result<Option<String>, BackendError> {
        // A few KiB: the plain limit, not a transfer's.
        self.call(
            task.node(),
            "log_tail",
            self.limit,
            self.inner.log_tail(task, bytes),
        )
        .await
    }
}
