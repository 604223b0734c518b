//! Extra `srun` options for a job's steps (`[job.slurm] srun_args`) and for
//! every step (`[backend.slurm] srun_args`): argument vectors passed word by
//! word, never through a shell, less the options Hadar itself sets or reads
//! (refused when the file is read, naming the option and why).

/// The `srun` options Hadar sets on every step, or whose effect would break
/// how it follows a step: (long name, short letter, why it is Hadar's).
const RESERVED: &[(&str, Option<char>, &str)] = &[
    ("jobid", None, "Hadar runs every step in its own allocation"),
    ("nodelist", Some('w'), "Hadar picks the node"),
    ("nodefile", Some('F'), "Hadar picks the node"),
    ("exclude", Some('x'), "Hadar picks the node"),
    ("relative", Some('r'), "Hadar picks the node"),
    ("nodes", Some('N'), "a task runs on one node"),
    ("ntasks", Some('n'), "a task is one process"),
    ("ntasks-per-node", None, "a task is one process"),
    (
        "multi-prog",
        None,
        "the job's command is the step's program",
    ),
    ("het-group", None, "Hadar's allocation has one component"),
    ("gres", None, "Hadar gives the step the GPUs it schedules"),
    (
        "gpus",
        Some('G'),
        "Hadar gives the step the GPUs it schedules",
    ),
    (
        "gpus-per-node",
        None,
        "Hadar gives the step the GPUs it schedules",
    ),
    (
        "gpus-per-task",
        None,
        "Hadar gives the step the GPUs it schedules",
    ),
    (
        "gpus-per-socket",
        None,
        "Hadar gives the step the GPUs it schedules",
    ),
    (
        "tres-per-task",
        None,
        "Hadar gives the step the GPUs it schedules",
    ),
    (
        "exact",
        None,
        "Hadar sets it: a step holds only what it asked for",
    ),
    (
        "exclusive",
        None,
        "Hadar sets --exact: a step holds only what it asked for",
    ),
    (
        "overlap",
        None,
        "steps of one allocation must not share GPUs",
    ),
    (
        "oversubscribe",
        Some('s'),
        "steps of one allocation must not share GPUs",
    ),
    (
        "job-name",
        Some('J'),
        "Hadar finds its steps again by their names",
    ),
    (
        "output",
        Some('o'),
        "Hadar reads the task's progress from its log",
    ),
    (
        "error",
        Some('e'),
        "Hadar reads the task's progress from its log",
    ),
    ("input", Some('i'), "Hadar closes the task's standard input"),
    ("open-mode", None, "Hadar appends to the task's log"),
    (
        "label",
        Some('l'),
        "a prefix on each line would hide the job protocol's reports",
    ),
    (
        "chdir",
        Some('D'),
        "a task runs in its own directory (HADAR_CHECKPOINT_DIR)",
    ),
    ("kill-on-bad-exit", Some('K'), "Hadar sets it"),
    (
        "whole",
        None,
        "Hadar sets --exact: a step holds only what it asked for",
    ),
    (
        "external-launcher",
        None,
        "a task is a step Hadar launches and follows",
    ),
    (
        "signal",
        None,
        "Hadar stops steps itself (stop_signal, stop_grace_seconds)",
    ),
    (
        "export",
        None,
        "Hadar passes the job protocol's variables; use the job's `env`",
    ),
    (
        "verbose",
        Some('v'),
        "Hadar reads srun's messages to follow the step",
    ),
    (
        "quiet",
        Some('Q'),
        "Hadar reads srun's messages to follow the step",
    ),
    ("pty", None, "Hadar reads the task's output from its log"),
    (
        "clusters",
        Some('M'),
        "the step runs in Hadar's allocation on this cluster",
    ),
    (
        "no-allocate",
        Some('Z'),
        "the step runs in Hadar's allocation",
    ),
    ("uid", None, "the step runs as the user who runs Hadar"),
    ("gid", None, "the step runs as the user who runs Hadar"),
    ("test-only", None, "the step must run"),
    ("help", Some('h'), "the step must run"),
    ("usage", None, "the step must run"),
    ("version", Some('V'), "the step must run"),
];

/// `srun`'s short options that take a value (`-c 4`, `-c4`): the rest of
/// such a word, or the next word, is that value, not more options.
const SHORT_WITH_VALUE: &str = "AbcdDeiJLmMnNoprqSTtwWxBCFG";

/// Why `words` cannot be given to `srun`: the first word that names an
/// option Hadar controls (also as an abbreviation `srun` would accept, or
/// inside a cluster of short options), or a word that is not an option
/// where one is expected.
pub fn check_srun_args(words: &[String]) -> Result<(), String> {
    let mut value_next = false;
    for word in words {
        // A value is not an option: a word after an option that may take
        // one, but that looks like an option, is checked as one (an srun
        // flag missing from `takes_value`'s list must not hide `--gres`).
        if std::mem::take(&mut value_next) && !word.starts_with('-') {
            continue;
        }
        if word == "--" || !word.starts_with('-') || word == "-" {
            return Err(format!(
                "{word:?} is not an srun option: give options only (`--mem=4G`, or `--mem`, \
                 `4G`); the job's command is its `command`"
            ));
        }
        if let Some(long) = word.strip_prefix("--") {
            let (name, has_value) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            // srun accepts any unambiguous prefix of a long option.
            if let Some((full, _, why)) = RESERVED
                .iter()
                .find(|(full, _, _)| full.starts_with(name) && !name.is_empty())
            {
                let spelled = if *full == name {
                    String::new()
                } else {
                    format!(" (srun reads it as --{full})")
                };
                return Err(format!("`--{name}`{spelled} is set by Hadar: {why}"));
            }
            value_next = !has_value && takes_value(name);
            continue;
        }
        for (i, c) in word[1..].char_indices() {
            if let Some((full, _, why)) = RESERVED.iter().find(|(_, s, _)| *s == Some(c)) {
                return Err(format!(
                    "`-{c}` (--{full}) in {word:?} is set by Hadar: {why}"
                ));
            }
            if SHORT_WITH_VALUE.contains(c) {
                // `-c4`: the value follows in the word; `-c`: in the next one.
                value_next = i + c.len_utf8() == word.len() - 1;
                break;
            }
        }
    }
    if value_next {
        return Err(format!(
            "{:?} needs a value after it",
            words.last().map_or("", String::as_str)
        ));
    }
    Ok(())
}

/// Whether a long option without `=` takes the next word as its value.
/// Options that take none, or an optional one given only with `=`.
fn takes_value(name: &str) -> bool {
    const FLAGS: &[&str] = &[
        "contiguous",
        "disable-status",
        "hold",
        "immediate",
        "no-kill",
        "overcommit",
        "preserve-env",
        "quit-on-interrupt",
        "reboot",
        "resv-ports",
        "spread-job",
        "unbuffered",
        "use-min-nodes",
        "compress",
        "nice",
        "propagate",
        "send-libs",
        "bcast",
        "x11",
    ];
    !FLAGS.contains(&name)
}

/// A job's extra step options from its backend table (`[job.slurm]`, or
/// the generic `options`): `srun_args`, a list of strings, checked.
pub fn job_srun_args(options: &toml::Table) -> Result<Vec<String>, String> {
    let Some(v) = options.get("srun_args") else {
        return Ok(vec![]);
    };
    let words = v
        .as_array()
        .and_then(|a| {
            a.iter()
                .map(|w| w.as_str().map(str::to_string))
                .collect::<Option<Vec<String>>>()
        })
        .ok_or_else(|| {
            format!("srun_args must be a list of strings (`[\"--mem=4G\"]`), not {v}")
        })?;
    check_srun_args(&words).map_err(|m| format!("srun_args: {m}"))?;
    Ok(words)
}

/// The keys of `[job.slurm]`.
pub const JOB_KEYS: &[&str] = &["srun_args"];

/// Checks a job's Slurm table (`[job.slurm]` over `options`) when the jobs
/// file is read.
pub fn check_job_options(options: &toml::Table) -> Result<(), String> {
    job_srun_args(options).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn harmless_options_pass_in_every_spelling() {
        for ok in [
            &["--mem=4G", "--constraint=fast"][..],
            &["--mem", "4G", "--comment", "a b; $(id)"],
            &["-c", "4", "-C", "fast"],
            &["-c4", "--cpu-bind=cores", "--unbuffered", "--time=10"],
            &["--mem-per-gpu=8G", "--gpu-bind=closest", "--propagate"],
            // A value may start with `-` when joined by `=`.
            &["--comment=--jobid=1", "--nice=-5"],
        ] {
            assert_eq!(check_srun_args(&words(ok)), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn options_hadar_controls_are_refused_with_the_reason() {
        for (bad, needle) in [
            (&["--jobid=7"][..], "`--jobid` is set by Hadar"),
            (&["--mem=1G", "--nodelist", "x"], "`--nodelist`"),
            (&["-w", "x"], "`-w` (--nodelist)"),
            (&["-wx"], "`-w` (--nodelist)"),
            (&["-uw", "x"], "`-w` (--nodelist)"),
            (&["--gres=gpu:2"], "GPUs it schedules"),
            (&["--gpus-per-task=1"], "`--gpus-per-task`"),
            (&["-n2"], "a task is one process"),
            (&["--exact"], "`--exact`"),
            (&["--overlap"], "must not share GPUs"),
            (&["--job-name=x"], "finds its steps again"),
            (&["--output=/tmp/x"], "log"),
            (&["--signal=USR1@60"], "stop_signal"),
            (&["--export=NONE"], "use the job's `env`"),
            (&["-l"], "job protocol"),
            (&["--nodel=x"], "srun reads it as --nodelist"),
            (&["--ove"], "srun reads it as --overlap"),
            (&["--whole"], "`--whole`"),
            // A word after an option that looks like an option is one: a
            // flag missing from the list of those without a value does not
            // hide it.
            (&["--some-new-flag", "--gres=gpu:8"], "GPUs it schedules"),
            (&["--comment", "--jobid=1"], "`--jobid`"),
            (&["-c", "-w", "x"], "`-w` (--nodelist)"),
        ] {
            let err = check_srun_args(&words(bad)).expect_err(&format!("{bad:?}"));
            assert!(err.contains(needle), "{bad:?}: {err}");
        }
    }

    #[test]
    fn words_that_are_not_options_are_refused() {
        for (bad, needle) in [
            (&["hostname"][..], "not an srun option"),
            (&["--", "rm"], "not an srun option"),
            (&["--mem"], "needs a value"),
            (&["-c"], "needs a value"),
        ] {
            let err = check_srun_args(&words(bad)).expect_err(&format!("{bad:?}"));
            assert!(err.contains(needle), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_job_table_gives_a_checked_list() {
        let t: toml::Table =
            toml::from_str("srun_args = ['--mem=4G', '--comment', 'x y']").unwrap();
        assert_eq!(job_srun_args(&t).unwrap(), ["--mem=4G", "--comment", "x y"]);
        assert_eq!(
            job_srun_args(&toml::Table::new()).unwrap(),
            Vec::<String>::new()
        );
        for bad in [
            "srun_args = '--mem=4G'",
            "srun_args = [1]",
            "srun_args = ['--gres=gpu:1']",
        ] {
            let t: toml::Table = toml::from_str(bad).unwrap();
            let err = check_job_options(&t).expect_err(bad);
            assert!(err.starts_with("srun_args"), "{bad}: {err}");
        }
    }
}
