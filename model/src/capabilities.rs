//! What a round executor can do. It lives here, not beside the
//! `RoundExecutor` trait in `hadar-core`, because backends declare it too:
//! `hadar-backend` re-exports it without depending on the schedulers.

use serde::Serialize;

/// What an executor can do (OpenDAL-style capability flags). The loop and
/// the planner read them; nothing else about an executor is known to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Capabilities {
    /// Time is virtual: rounds cost no wall-clock time.
    pub virtual_time: bool,
    /// Two jobs' tasks may share the same GPUs in a round (space sharing, at
    /// the table's measured co-location rates).
    pub share_gpus: bool,
    /// One task may span several nodes (a gang over two machines). Without
    /// it the loop never hands over a task whose GPUs are on two nodes.
    pub multi_node: bool,
    /// Task directories are on a filesystem this machine shares (files need
    /// no copying; checkpoints are still fetched through the backend).
    pub shared_fs: bool,
}
