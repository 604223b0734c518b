//! The records of a run that only grow (every round, closed GPU span, timed
//! solve and warning), kept in `history.jsonl` beside `state.json`: each
//! save appends what is new, and `state.json` records how much of the file
//! is the run's ([`Mark`]). So a save costs the same in round 10 and in
//! round 100,000 (the whole record in `state.json`, rewritten a few times a
//! round, made the time to save grow with the rounds and a run's total with
//! their square).
//!
//! A run killed between an append and the save of `state.json` leaves a
//! tail past the mark: it is not the run's (the state it belongs to was
//! never saved), so readers stop at the mark and the next append writes
//! over it.

use std::io::{BufRead, Read, Seek, Write};
use std::path::{Path, PathBuf};

use hadar_core::metrics::{DecisionRecord, GpuSpan, RoundRecord};
use hadar_core::state::LoopState;
use serde::{Deserialize, Serialize};

use crate::state::io;
use crate::RunError;

/// How much of `history.jsonl` a saved state owns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// Bytes of the file that are the run's.
    pub bytes: u64,
    /// Entries of each kind in them.
    pub rounds: usize,
    /// Closed spans.
    pub spans: usize,
    /// Timed solves.
    pub decisions: usize,
    /// Warnings.
    pub warnings: usize,
}

impl Mark {
    /// The entries `state` holds, as a mark of `bytes` bytes.
    fn of(state: &LoopState, bytes: u64) -> Self {
        Self {
            bytes,
            rounds: state.rounds.len(),
            spans: state.spans.len(),
            decisions: state.decisions.len(),
            warnings: state.warnings.len(),
        }
    }
}

/// One line of the file, as written (borrowed: nothing is cloned to save).
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum EntryRef<'a> {
    Round(&'a RoundRecord),
    Span(&'a GpuSpan),
    Decision(&'a DecisionRecord),
    Warning(&'a str),
}

/// One line of the file, as read.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Entry {
    Round(RoundRecord),
    Span(GpuSpan),
    Decision(DecisionRecord),
    Warning(String),
}

/// The most history read back, far above what a run writes (a round's
/// records are a few hundred bytes, plus a span per GPU whose job changed).
const MAX_HISTORY_BYTES: u64 = 4 << 30;

/// The history file of the state directory `dir`.
pub fn history_path(dir: &Path) -> PathBuf {
    dir.join("history.jsonl")
}

/// Appends the entries of `state` past `mark` to the history file and
/// syncs it; returns the new mark. Writes nothing when nothing is new.
pub fn append(dir: &Path, state: &LoopState, mark: Mark) -> Result<Mark, RunError> {
    let path = history_path(dir);
    let new = Mark::of(state, mark.bytes);
    if new == mark {
        return Ok(mark);
    }
    if new.rounds < mark.rounds
        || new.spans < mark.spans
        || new.decisions < mark.decisions
        || new.warnings < mark.warnings
    {
        // The loop holds fewer records than were saved: it was not given
        // them back (a bug); writing would record counts the file
        // contradicts.
        return Err(io(
            &path,
            std::io::Error::other(format!(
                "the round loop holds fewer records than were saved ({new:?} below {mark:?})"
            )),
        ));
    }
    let mut lines = Vec::new();
    let mut line = |e: EntryRef| -> Result<(), RunError> {
        serde_json::to_writer(&mut lines, &e).map_err(|e| io(&path, std::io::Error::other(e)))?;
        lines.push(b'\n');
        Ok(())
    };
    for r in state.rounds.get(mark.rounds..).unwrap_or_default() {
        line(EntryRef::Round(r))?;
    }
    for s in state.spans.get(mark.spans..).unwrap_or_default() {
        line(EntryRef::Span(s))?;
    }
    for d in state.decisions.get(mark.decisions..).unwrap_or_default() {
        line(EntryRef::Decision(d))?;
    }
    for w in state.warnings.get(mark.warnings..).unwrap_or_default() {
        line(EntryRef::Warning(w))?;
    }
    // A FIFO would block the open; a device or a directory is not ours.
    if let Ok(meta) = std::fs::metadata(&path) {
        if !meta.is_file() {
            return Err(io(
                &path,
                std::io::Error::other(
                    "not a regular file (a directory, FIFO, socket or device); move it away",
                ),
            ));
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| io(&path, e))?;
    let len = f.metadata().map_err(|e| io(&path, e))?.len();
    if len < mark.bytes {
        return Err(io(
            &path,
            std::io::Error::other(format!(
                "it holds {len} bytes where state.json records {}: it was cut short or \
                 replaced; move the state directory away, or start over with --fresh (which \
                 sets it aside)",
                mark.bytes
            )),
        ));
    }
    // A tail past the mark is a killed run's unsaved append: written over.
    f.set_len(mark.bytes).map_err(|e| io(&path, e))?;
    f.seek(std::io::SeekFrom::Start(mark.bytes))
        .map_err(|e| io(&path, e))?;
    f.write_all(&lines).map_err(|e| io(&path, e))?;
    f.sync_data().map_err(|e| io(&path, e))?;
    Ok(Mark {
        bytes: mark.bytes + lines.len() as u64,
        ..new
    })
}

/// Puts the history `mark` records back into `state` (read from the file
/// of `dir`, up to the mark), replacing what `state` holds of it.
pub(crate) fn restore(dir: &Path, state: &mut LoopState, mark: Mark) -> Result<(), RunError> {
    let path = history_path(dir);
    let bad = |what: String| {
        io(
            &path,
            std::io::Error::other(format!(
                "{what}; the state directory is corrupt or mixed with another run's: move it \
                 away, or start over with --fresh (which sets it aside)"
            )),
        )
    };
    let meta = std::fs::metadata(&path).map_err(|e| io(&path, e))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".into()));
    }
    if mark.bytes > MAX_HISTORY_BYTES {
        return Err(bad(format!(
            "state.json says it holds {} bytes, more than any run writes ({MAX_HISTORY_BYTES})",
            mark.bytes
        )));
    }
    if meta.len() < mark.bytes {
        return Err(bad(format!(
            "it holds {} bytes where state.json records {}",
            meta.len(),
            mark.bytes
        )));
    }
    let file = std::fs::File::open(&path).map_err(|e| io(&path, e))?;
    let reader = std::io::BufReader::new(file.take(mark.bytes));
    state.rounds.clear();
    state.spans.clear();
    state.decisions.clear();
    state.warnings.clear();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| io(&path, e))?;
        let entry: Entry = serde_json::from_str(&line)
            .map_err(|e| bad(format!("line {} is not a history entry ({e})", i + 1)))?;
        match entry {
            Entry::Round(r) => state.rounds.push(r),
            Entry::Span(s) => state.spans.push(s),
            Entry::Decision(d) => state.decisions.push(d),
            Entry::Warning(w) => state.warnings.push(w),
        }
    }
    let found = Mark::of(state, mark.bytes);
    if found != mark {
        return Err(bad(format!(
            "its first {} bytes hold {} rounds, {} spans, {} solves and {} warnings where \
             state.json records {}, {}, {} and {}",
            mark.bytes,
            found.rounds,
            found.spans,
            found.decisions,
            found.warnings,
            mark.rounds,
            mark.spans,
            mark.decisions,
            mark.warnings
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(rounds: usize) -> LoopState {
        let mut s: LoopState = serde_json::from_str(
            r#"{"jobs":{"jobs":[],"active":[]},"admitted":0,"now_s":0,"round":0,"done":0,
                "idle_rounds":0,"rounds":[],"spans":[],"open_spans":[],"gpu_busy_s":[],
                "decisions":[],"gone":[],"warnings":[]}"#,
        )
        .expect("a loop state");
        for i in 0..rounds {
            s.rounds.push(RoundRecord {
                start_s: i as f64,
                end_s: i as f64 + 1.0,
                active_jobs: 1,
                busy_gpus: vec![1],
            });
            s.spans.push(GpuSpan {
                gpu: 0,
                job: 0,
                start_s: i as f64,
                end_s: i as f64 + 1.0,
            });
            s.warnings.push(format!("warning {i}"));
        }
        s
    }

    #[test]
    fn appends_only_what_is_new_and_restores_up_to_the_mark() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut full = state(3);
        let m1 = append(dir.path(), &full, Mark::default()).expect("append");
        assert_eq!((m1.rounds, m1.spans, m1.warnings), (3, 3, 3));
        let again = append(dir.path(), &full, m1).expect("nothing new");
        assert_eq!(again, m1);
        full.rounds.extend(state(5).rounds.into_iter().skip(3));
        full.decisions.push(DecisionRecord {
            sim_time_s: 1.0,
            active_jobs: 2,
            seconds: 0.5,
        });
        let m2 = append(dir.path(), &full, m1).expect("append");
        assert_eq!((m2.rounds, m2.decisions), (5, 1));
        let mut back = full.without_history();
        assert!(back.rounds.is_empty());
        restore(dir.path(), &mut back, m2).expect("restore");
        assert_eq!(back.rounds, full.rounds);
        assert_eq!(back.spans, full.spans);
        assert_eq!(back.decisions, full.decisions);
        assert_eq!(back.warnings, full.warnings);
        // Restoring at the older mark ignores what was appended after it.
        let mut old = full.without_history();
        restore(dir.path(), &mut old, m1).expect("restore");
        assert_eq!(old.rounds.len(), 3);
    }

    #[test]
    fn a_killed_run_s_unsaved_tail_is_written_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = state(2);
        let m1 = append(dir.path(), &first, Mark::default()).expect("append");
        // Appended, then killed before state.json recorded it.
        append(dir.path(), &state(4), m1).expect("append");
        // The resumed run saves other entries from the same mark.
        let mut other = state(2);
        other.warnings.push("after the resume".into());
        let m2 = append(dir.path(), &other, m1).expect("append");
        let mut back = other.without_history();
        restore(dir.path(), &mut back, m2).expect("restore");
        assert_eq!(back.rounds.len(), 2);
        assert_eq!(
            back.warnings.last().map(String::as_str),
            Some("after the resume")
        );
        let len = std::fs::metadata(history_path(dir.path()))
            .expect("file")
            .len();
        assert_eq!(len, m2.bytes, "the tail is gone");
    }

    #[test]
    fn a_history_that_does_not_match_its_mark_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = state(2);
        let m = append(dir.path(), &s, Mark::default()).expect("append");
        let mut back = s.without_history();
        let longer = Mark {
            bytes: m.bytes + 10,
            ..m
        };
        let e = restore(dir.path(), &mut back, longer).expect_err("short file");
        assert!(
            e.to_string().contains("bytes where state.json records"),
            "{e}"
        );
        let more = Mark { rounds: 3, ..m };
        let e = restore(dir.path(), &mut back, more).expect_err("counts");
        assert!(e.to_string().contains("2 rounds"), "{e}");
        std::fs::write(history_path(dir.path()), "x".repeat(m.bytes as usize)).expect("write");
        let e = restore(dir.path(), &mut back, m).expect_err("garbage");
        assert!(
            e.to_string().contains("line 1 is not a history entry"),
            "{e}"
        );
        let e = append(dir.path(), &state(3), longer).expect_err("short file");
        assert!(e.to_string().contains("cut short"), "{e}");
    }
}
