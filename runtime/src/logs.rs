//! What a failed task printed last: its log's end, read through the
//! backend (the log lives on the task's node; [`Backend::log_tail`] reads
//! its end there), for the warning and the error that name the task. A
//! task that fails at once (a script not found, an import error, a
//! traceback) says why there, and nowhere else.

use std::time::Duration;

use hadar_backend::{Backend, TaskHandle, LOG_FILE};

/// How much of the log's end is read.
const TAIL_BYTES: u64 = 4096;
/// How many of its last lines are shown.
const TAIL_LINES: usize = 8;
/// The longest line shown (a progress bar redrawn with `\r` is one line).
const LINE_CHARS: usize = 240;
/// How long a log's end may take to read: it is for a message, and the
/// round waits for it.
const TAIL_WAIT: Duration = Duration::from_secs(10);

/// The last lines `task` printed (rank 0's standard output and error),
/// indented one per line (empty: it printed nothing); `None` if its log
/// cannot be read in time.
pub(crate) async fn tail(backend: &dyn Backend, task: &TaskHandle) -> Option<String> {
    match tokio::time::timeout(TAIL_WAIT, backend.log_tail(task, TAIL_BYTES)).await {
        Ok(Ok(Some(text))) => Some(last_lines(&text).unwrap_or_default()),
        _ => None,
    }
}

/// The last protocol report in `task`'s log (read through the backend),
/// for a task that ended while no run watched it: no poll saw its last
/// report, which carries the job's metrics. `None` if the log cannot be
/// read in time or holds no report.
pub(crate) async fn last_report(
    backend: &dyn Backend,
    task: &TaskHandle,
) -> Option<hadar_backend::Report> {
    match tokio::time::timeout(TAIL_WAIT, backend.log_tail(task, TAIL_BYTES)).await {
        Ok(Ok(Some(text))) => hadar_backend::protocol::last_report(&text),
        _ => None,
    }
}

/// Where `task`'s log is, for people: `node:/path/task.log`.
pub(crate) fn place(task: &TaskHandle) -> String {
    format!("{}:{}", task.node(), task.workdir.join(LOG_FILE).display())
}

/// The last [`TAIL_LINES`] non-empty lines of `text` (the first, maybe cut
/// by the read, dropped when more follow), each indented and at most
/// [`LINE_CHARS`] long.
fn last_lines(text: &str) -> Option<String> {
    let lines: Vec<&str> = text
        .split(['\n', '\r'])
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    let cut_first = text.len() as u64 >= TAIL_BYTES && lines.len() > 1;
    let lines = &lines[usize::from(cut_first)..];
    let shown: Vec<String> = lines[lines.len().saturating_sub(TAIL_LINES)..]
        .iter()
        .map(|l| {
            let mut s: String = l.chars().take(LINE_CHARS).collect();
            if l.chars().count() > LINE_CHARS {
                s.push_str(" ...");
            }
            format!("    {s}")
        })
        .collect();
    (!shown.is_empty()).then(|| shown.join("\n"))
}

/// Where a failed task's log is and its last lines, if they could be read;
/// `ranks`: a task of several processes, whose log is rank 0's.
pub(crate) fn crash_note(task: &TaskHandle, ranks: bool, tail: Option<&str>) -> String {
    let whose = if ranks {
        "rank 0's log (the others' are rank-R.log beside it, on their nodes)"
    } else {
        "its log"
    };
    match tail {
        Some("") => format!("{whose}: {} (it printed nothing)", place(task)),
        Some(t) => format!("{whose}: {}; it printed last:\n{t}", place(task)),
        None => format!("{whose}: {} (it could not be read)", place(task)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_are_shown_indented_and_cut() {
        let text = "start\nTraceback (most recent call last):\n  File \"train.py\", line 3\n\
                    ModuleNotFoundError: No module named 'torch'\n\n";
        let t = last_lines(text).expect("lines");
        assert_eq!(
            t,
            "    start\n    Traceback (most recent call last):\n      File \"train.py\", line 3\n    \
             ModuleNotFoundError: No module named 'torch'"
        );
        let many: String = (0..20).map(|i| format!("line {i}\n")).collect();
        let t = last_lines(&many).expect("lines");
        assert_eq!(t.lines().count(), TAIL_LINES);
        assert!(t.ends_with("line 19"), "{t}");
        let long = "x".repeat(1000);
        let t = last_lines(&long).expect("a line");
        assert!(t.ends_with("x ...") && t.len() < 300, "{t}");
        assert_eq!(last_lines("\n\n"), None);
        // A read that began mid-line drops the cut line.
        let cut = format!("{}\nlast", "y".repeat(TAIL_BYTES as usize));
        assert_eq!(last_lines(&cut).as_deref(), Some("    last"));
    }

    /// A log that is empty and one that cannot be read are told apart.
    #[test]
    fn an_empty_log_is_not_called_unreadable() {
        let task = TaskHandle {
            id: "1".into(),
            nodes: vec!["n1".into()],
            workdir: "/w/tasks/t".into(),
            token: "t".into(),
        };
        let empty = crash_note(&task, false, Some(""));
        assert!(empty.contains("it printed nothing"), "{empty}");
        assert!(empty.contains("n1:/w/tasks/t/task.log"), "{empty}");
        let unread = crash_note(&task, false, None);
        assert!(unread.contains("could not be read"), "{unread}");
        let said = crash_note(&task, true, Some("    boom"));
        assert!(
            said.contains("rank 0's log") && said.ends_with("    boom"),
            "{said}"
        );
    }
}
