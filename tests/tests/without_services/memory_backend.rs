//! A backend written in a few dozen lines gets the whole protocol suite:
//! tasks that "train" in memory (iterations by the clock, a checkpoint that
//! holds the step), shared by every instance made from one world, so that
//! a restarted orchestrator finds them again. Its [`FACTORY`] is one
//! registration line from being known by name, with a node key of its own
//! read from the cluster file and checked like any backend's.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hadar_backend::protocol::{Report, CHECKPOINT_FILE, RESUME_FILE};
use hadar_backend::registry::{nodes_with, BackendInputs, Factory, Registry};
use hadar_backend::{
    Backend, BackendError, Capabilities, StopPolicy, TaskHandle, TaskSpec, TaskState, TaskStatus,
};
use hadar_core::cluster::Cluster;
use hadar_core::error::Location;
use hadar_tests::conformance::{Harness, Target};

#[derive(Debug)]
struct Task {
    started: Instant,
    /// Step it resumed from, and its job's total.
    base: u64,
    total: u64,
    iter_us: u64,
    /// Iterations when it was stopped.
    stopped: Option<u64>,
    files: HashMap<String, Vec<u8>>,
}

impl Task {
    fn iterations(&self) -> u64 {
        let ran = self.started.elapsed().as_micros() as u64 / self.iter_us.max(1);
        self.stopped
            .unwrap_or(ran)
            .min(self.total.saturating_sub(self.base))
    }
}

#[derive(Debug, Default, Clone)]
struct Memory(Arc<Mutex<HashMap<String, Task>>>);

impl Memory {
    fn with<T>(&self, id: &str, f: impl FnOnce(&mut Task) -> T) -> Result<T, BackendError> {
        let mut tasks = self.0.lock().expect("the world");
        let task = tasks
            .get_mut(id)
            .ok_or_else(|| BackendError::Invalid(format!("no task {id}")))?;
        Ok(f(task))
    }
}

#[async_trait::async_trait]
impl Backend for Memory {
    fn name(&self) -> &str {
        "memory"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            shared_fs: true,
            ..Capabilities::default()
        }
    }
    async fn launch(&self, spec: &TaskSpec) -> Result<TaskHandle, BackendError> {
        let mut files = HashMap::new();
        for f in &spec.inputs {
            let bytes =
                std::fs::read(&f.local).map_err(|e| BackendError::io("memory", &f.local, e))?;
            files.insert(f.name.clone(), bytes);
        }
        let base = files
            .get(RESUME_FILE)
            .and_then(|b| String::from_utf8_lossy(b).parse().ok())
            .unwrap_or(0);
        let var = |k: &str| {
            spec.environment()
                .into_iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v)
        };
        let iter_us = var("HADAR_TRAINER_ITER_US")
            .and_then(|v| v.parse().ok())
            .unwrap_or(100);
        let id = spec.token.clone();
        self.0.lock().expect("the world").insert(
            id.clone(),
            Task {
                started: Instant::now(),
                base,
                total: spec.total_iterations,
                iter_us,
                stopped: None,
                files,
            },
        );
        Ok(spec.handle(id))
    }
    async fn status(&self, task: &TaskHandle) -> Result<TaskStatus, BackendError> {
        self.with(&task.id, |t| {
            let it = t.iterations();
            let step = t.base + it;
            let done = step >= t.total;
            if done || t.stopped.is_some() {
                t.files
                    .insert(CHECKPOINT_FILE.into(), step.to_string().into_bytes());
            }
            TaskStatus {
                state: if done || t.stopped.is_some() {
                    TaskState::Exited { code: Some(0) }
                } else {
                    TaskState::Running
                },
                // Like the trainer: a first report after some work.
                report: (it > 0).then(|| Report {
                    iterations: it,
                    step: Some(step),
                    metrics: [("accuracy".to_string(), step as f64 / (step as f64 + 100.0))].into(),
                    done,
                }),
            }
        })
    }
    async fn stop(&self, task: &TaskHandle, _: &StopPolicy) -> Result<TaskStatus, BackendError> {
        self.with(&task.id, |t| t.stopped = Some(t.iterations()))?;
        self.status(task).await
    }
    async fn cleanup(&self, task: &TaskHandle) -> Result<(), BackendError> {
        self.0.lock().expect("the world").remove(&task.id);
        Ok(())
    }
    async fn find(&self, task: &TaskHandle) -> Result<Option<TaskHandle>, BackendError> {
        // Its ids are the tokens.
        let world = self.0.lock().expect("the world");
        Ok(world
            .get(&task.token)
            .filter(|t| t.stopped.is_none())
            .map(|_| TaskHandle {
                id: task.token.clone(),
                ..task.clone()
            }))
    }
    async fn fetch(
        &self,
        task: &TaskHandle,
        name: &str,
        local: &Path,
    ) -> Result<bool, BackendError> {
        if name.is_empty() || name.contains('/') || name == ".." {
            return Err(BackendError::Invalid(format!(
                "{name:?} is not a file name"
            )));
        }
        let bytes = self.with(&task.id, |t| t.files.get(name).cloned())?;
        match bytes {
            Some(b) => std::fs::write(local, b)
                .map(|()| true)
                .map_err(|e| BackendError::io("memory", local, e)),
            None => Ok(false),
        }
    }
}

/// What it reads of a cluster file's `[[node]]`.
#[derive(serde::Deserialize)]
struct MemoryNode {
    memory_slots: Option<u32>,
}

/// How the registry makes it: `registry.register(FACTORY)`.
const FACTORY: Factory = Factory {
    name: "memory",
    about: "tasks that train in this process's memory",
    node_keys: &["memory_slots"],
    build: |inputs| {
        // Every node may say how many tasks it holds (its own key).
        let nodes: Vec<(usize, MemoryNode)> = nodes_with(
            inputs.cluster_toml,
            &Location::new(inputs.cluster_source),
            "memory_slots",
            "slots",
        )?;
        if let Some((i, _)) = nodes.iter().find(|(_, n)| n.memory_slots == Some(0)) {
            return Err(hadar_core::Error::setting(
                "memory_slots",
                format!("node {i} holds no task"),
            ));
        }
        Ok(Arc::new(Memory::default()))
    },
    job_options: None,
    check_table: None,
};

#[test]
fn registered_by_one_line_it_is_known_by_name_and_reads_its_node_key() {
    let mut registry = Registry::new();
    registry.register(hadar_backend_local::FACTORY);
    registry.register(FACTORY);
    assert_eq!(registry.names(), ["local", "memory"]);
    assert!(registry.node_keys().contains(&"memory_slots"));
    let text = "[[node]]\nname = \"m0\"\ngpus = { v100 = 2 }\nmemory_slots = 4\n";
    let keys = registry.node_keys();
    let cluster = Cluster::from_toml_str_with_keys(text, "cluster.toml", &keys).expect("cluster");
    let toml: toml::Table = text.parse().expect("toml");
    let inputs = |toml| BackendInputs {
        cluster: &cluster,
        cluster_toml: toml,
        cluster_source: "cluster.toml",
        table: None,
        base_dir: Path::new("."),
    };
    let b = registry
        .build("Memory", &inputs(&toml))
        .expect("built by name");
    assert_eq!(b.name(), "memory");
    // Its own key is checked by its own factory.
    let zero: toml::Table = text.replace("= 4", "= 0").parse().expect("toml");
    let Err(err) = registry.build("memory", &inputs(&zero)) else {
        panic!("a node that holds no task is refused");
    };
    assert!(err.to_string().contains("holds no task"), "{err}");
    // A cluster file with the key is refused where no registered backend reads it.
    let err = Cluster::from_toml_str_with_keys(text, "cluster.toml", &[]).unwrap_err();
    assert!(err.to_string().contains("memory_slots"), "{err}");
}

fn harness() -> Harness {
    let world = Memory::default();
    let again = world.clone();
    Harness {
        backend: Arc::new(world),
        restart: Box::new(move || Arc::new(again.clone())),
        target: Target {
            node: "memory".into(),
            workdir: "/memory".into(),
            trainer: "hadar-trainer".into(),
        },
        unreachable: None,
        keep: Box::new(()),
        peer: None,
        opt_out: vec![],
    }
}

hadar_tests::conformance_suite!(harness(), protocol);
