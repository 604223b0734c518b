//! Retries calls that failed without effect.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::{Backend, BackendError, Capabilities, StopPolicy, TaskHandle, TaskSpec, TaskStatus};

/// Retries a call whose error the backend marked transient
/// ([`BackendError::is_transient`]), at most `attempts` times in all, with
/// a doubling delay. Every other error returns at once: a launch that may
/// have started something is never repeated.
#[derive(Debug)]
pub struct Retry {
    inner: Arc<dyn Backend>,
    attempts: u32,
    first_delay: Duration,
}

impl Retry {
    /// Up to `attempts` tries (at least 1), waiting `first_delay`, then
    /// twice as long, and so on, between them.
    pub fn new(inner: Arc<dyn Backend>, attempts: u32, first_delay: Duration) -> Self {
        Self {
            inner,
            attempts: attempts.max(1),
            first_delay,
        }
    }

    async fn call<T, F, Fut>(&self, mut f: F) -> Result<T, BackendError>
    where
        F: FnMut() -> Fut + Send,
        Fut: std::future::Future<Output = Result<T, BackendError>> + Send,
    {
        let mut delay = self.first_delay;
        let mut tries = 1;
        loop {
            match f().await {
                Err(e) if e.is_transient() && tries < self.attempts => {
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2);
                    tries += 1;
                }
                other => return other,
            }
        }
    }
}

#[async_trait::async_trait]
impl Backend for Retry {
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
        self.call(|| self.inner.open()).await
    }
    async fn close(&self) -> Result<(), BackendError> {
        self.call(|| self.inner.close()).await
    }
    async fn launch(&self, spec: &TaskSpec) -> Result<TaskHandle, BackendError> {
        self.call(|| self.inner.launch(spec)).await
    }
    async fn status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        self.call(|| self.inner.status(task)).await
    }
    async fn stop(
        &self,
        task: &TaskHandle,
        policy: &StopPolicy,
    ) -> Result<TaskStatus, BackendError> {
        self.call(|| self.inner.stop(task, policy)).await
    }
    async fn find(&self, task: &TaskHandle) -> Result<Option<TaskHandle>, BackendError> {
        self.call(|| self.inner.find(task)).await
    }
    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError> {
        self.call(|| self.inner.cleanup(task)).await
    }
    async fn fetch(
        &self,
        task: &TaskHandle,
        name: &str,
        local: &Path,
    ) -> Result<bool, BackendError> {
        self.call(|| self.inner.fetch(task, name, local)).await
    }
    async fn log_tail(
        &self,
        task: &TaskHandle,
        bytes: u64,
    ) -> Result<Option<String>, BackendError> {
        self.call(|| self.inner.log_tail(task, bytes)).await
    }
}
