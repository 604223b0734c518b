//! The Slurm commands the backend runs, as argument vectors, and the parsers
//! of what they print. Pure functions: unit-tested without a cluster.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The field separator of every format string Hadar passes to `sinfo` and
/// `squeue`: ASCII unit separator, which Slurm names never contain.
pub const SEP: char = '\u{1f}';

/// A node as `sinfo` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmNode {
    /// Its name.
    pub name: String,
    /// Compact state (`idle`, `mix`, `alloc`, `down*`, ...).
    pub state: String,
    /// Its GPUs: (raw type as Slurm names it, count). An untyped GRES has type "".
    pub gpus: Vec<(String, u32)>,
    /// Its `NodeAddr` (where its peers reach it; empty if `sinfo` did not say).
    pub addr: String,
}

impl SlurmNode {
    /// Whether steps can run there: its slurmd responds and it takes work.
    pub fn usable(&self) -> bool {
        usable_state(&self.state)
    }
}

/// Whether a compact `sinfo %t` state takes work: responding (`*` marks a
/// node whose slurmd does not answer) and idle, mixed or allocated.
pub fn usable_state(state: &str) -> bool {
    !state.ends_with('*')
        && !state.ends_with('~')
        && matches!(
            state.trim_end_matches(['+', '$', '-', '#', '!', '%', '@', '^']),
            "idle" | "mix" | "alloc" | "comp" | "resv" | "plnd"
        )
}

/// Whether a compact `sinfo %t` state says the node is lost: its slurmd
/// does not answer (`*`), or it is down or failed.
pub fn lost_state(state: &str) -> bool {
    state.ends_with('*') || state.starts_with("down") || state.starts_with("fail")
}

/// `sinfo` listing every node of the partition (one call: name, state,
/// GRES, `NodeAddr`).
pub fn sinfo_argv(partition: Option<&str>) -> Vec<String> {
    let mut v = vec!["sinfo".to_string(), "-h".into(), "-N".into()];
    if let Some(p) = partition {
        v.push(format!("--partition={p}"));
    }
    v.push(format!("--format=%N{SEP}%t{SEP}%G{SEP}%o"));
    v
}

/// Parses `sinfo_argv`'s output; nodes listed twice (several partitions) once.
pub fn parse_sinfo(out: &str) -> Result<Vec<SlurmNode>, String> {
    let mut nodes: Vec<SlurmNode> = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(SEP).collect();
        let (name, state, gres, addr) = match f[..] {
            [name, state, gres] => (name, state, gres, ""),
            [name, state, gres, addr] => (name, state, gres, addr.trim()),
            _ => return Err(format!("unexpected sinfo line {line:?}")),
        };
        if nodes.iter().any(|n| n.name == name) {
            continue;
        }
        nodes.push(SlurmNode {
            name: name.to_string(),
            state: state.trim().to_string(),
            gpus: parse_gres(gres),
            addr: addr.to_string(),
        });
    }
    Ok(nodes)
}

/// The GPUs in a GRES string: `gpu:v100:2`, `gpu:4`, `gpu:a100:4(S:0-1),gpu:t4:2`,
/// `(null)`. Other GRES (`shard`, `mps`) are not GPUs Hadar schedules.
pub fn parse_gres(gres: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut item = String::new();
    let mut items = Vec::new();
    for c in gres.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => items.push(std::mem::take(&mut item)),
            _ if depth == 0 => item.push(c),
            _ => {}
        }
    }
    items.push(item);
    for item in items {
        let parts: Vec<&str> = item.trim().split(':').collect();
        match parts[..] {
            ["gpu", count] => {
                if let Ok(n) = count.parse() {
                    out.push((String::new(), n));
                }
            }
            ["gpu", kind, count, ..] => {
                if let Ok(n) = count.parse() {
                    out.push((kind.to_string(), n));
                }
            }
            _ => {}
        }
    }
    out
}

/// Raw GPU type names as sites spell them, and the throughput table's name
/// for each (a site's own `[backend.slurm.aliases]` come first).
pub const DEFAULT_ALIASES: &[(&str, &str)] = &[
    ("nvidia_a100-sxm4-80gb", "a100"),
    ("nvidia_a100-sxm4-40gb", "a100"),
    ("nvidia_a100-pcie-40gb", "a100"),
    ("nvidia_a100_80gb_pcie", "a100"),
    ("nvidia_h100_80gb_hbm3", "h100"),
    ("tesla_v100-sxm2-16gb", "v100"),
    ("tesla_v100-sxm2-32gb", "v100"),
    ("tesla_v100-pcie-32gb", "v100"),
    ("tesla_p100-pcie-16gb", "p100"),
    ("tesla_k80", "k80"),
    ("tesla_t4", "t4"),
];

/// The throughput table's name for a raw Slurm GPU type: the site's alias,
/// the built-in one, else the raw name lowercased less a vendor prefix and a
/// model suffix (`nvidia_l40s-48gb` -> `l40s`).
pub fn gpu_alias(raw: &str, site: &BTreeMap<String, String>) -> String {
    if let Some(n) = site.get(raw) {
        return n.clone();
    }
    let lower = raw.to_ascii_lowercase();
    if let Some((_, n)) = DEFAULT_ALIASES.iter().find(|(r, _)| *r == lower) {
        return (*n).to_string();
    }
    let mut s = lower.as_str();
    for prefix in [
        "nvidia_", "nvidia-", "tesla_", "tesla-", "nvidia", "amd_", "amd-",
    ] {
        if let Some(rest) = s.strip_prefix(prefix) {
            s = rest;
            break;
        }
    }
    for prefix in ["tesla_", "tesla-", "geforce_", "geforce-"] {
        if let Some(rest) = s.strip_prefix(prefix) {
            s = rest;
        }
    }
    s.split(['-', '_']).next().unwrap_or(s).to_string()
}

/// Expands a Slurm host list (`gpu[01-03,07],k80a`) into names.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut item = String::new();
    let mut items = Vec::new();
    for c in list.trim().chars() {
        match c {
            '[' => {
                depth += 1;
                item.push(c);
            }
            ']' => {
                depth -= 1;
                item.push(c);
            }
            ',' if depth == 0 => items.push(std::mem::take(&mut item)),
            _ => item.push(c),
        }
    }
    items.push(item);
    for item in items.into_iter().filter(|i| !i.is_empty()) {
        let Some((prefix, rest)) = item.split_once('[') else {
            out.push(item);
            continue;
        };
        let (ranges, suffix) = rest
            .split_once(']')
            .ok_or_else(|| format!("unbalanced host list {list:?}"))?;
        for range in ranges.split(',') {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            let width = lo.len();
            let (a, b): (u64, u64) = match (lo.parse(), hi.parse()) {
                // (The width, leading zeros included, is a u64's at most:
                // `format!` panics past 65,535.)
                (Ok(a), Ok(b)) if a <= b && b - a < 100_000 && width <= 20 => (a, b),
                _ => return Err(format!("bad range {range:?} in host list {list:?}")),
            };
            for i in a..=b {
                out.push(format!("{prefix}{i:0width$}{suffix}"));
            }
        }
    }
    Ok(out)
}

/// A step of the controller's listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// `JOB.STEP`.
    pub id: String,
    /// Its name.
    pub name: String,
}

/// `squeue` listing this user's job steps (one call for all of them).
pub fn squeue_steps_argv() -> Vec<String> {
    vec![
        "squeue".into(),
        "-h".into(),
        "--me".into(),
        "--steps".into(),
        format!("--format=%i{SEP}%j"),
    ]
}

/// Parses `squeue_steps_argv`'s output.
pub fn parse_steps(out: &str) -> Vec<Step> {
    out.lines()
        .filter_map(|l| {
            let (id, name) = l.split_once(SEP)?;
            Some(Step {
                id: id.trim().to_string(),
                name: name.to_string(),
            })
        })
        .collect()
}

/// `squeue` finding this user's allocation called `name` (its het
/// components, with their time left).
pub fn squeue_allocation_argv(name: &str) -> Vec<String> {
    vec![
        "squeue".into(),
        "-h".into(),
        "--me".into(),
        format!("--name={name}"),
        format!("--format=%i{SEP}%A{SEP}%T{SEP}%N{SEP}%L"),
    ]
}

/// One component of an allocation, as `squeue_allocation_argv` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// The het job offset (`None`: not a heterogeneous job).
    pub het: Option<usize>,
    /// Its own job id.
    pub job: u64,
    /// `RUNNING`, `PENDING`, ...
    pub state: String,
    /// Its nodes (none while pending).
    pub nodes: Vec<String>,
    /// Time left before its time limit (`None`: no limit, or not known).
    pub time_left: Option<Duration>,
}

/// Parses `squeue_allocation_argv`'s output into components, by leader:
/// `(leader job id, component)`.
pub fn parse_allocation(out: &str) -> Result<Vec<(u64, Component)>, String> {
    let mut v = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(SEP).collect();
        let [shown, id, state, nodes, left] = f[..] else {
            return Err(format!("unexpected squeue line {line:?}"));
        };
        let bad = || format!("bad job id in {line:?}");
        let job: u64 = id.trim().parse().map_err(|_| bad())?;
        let (leader, het) = match shown.trim().split_once('+') {
            Some((l, k)) => (
                l.parse().map_err(|_| bad())?,
                Some(k.parse().map_err(|_| bad())?),
            ),
            None => (job, None),
        };
        let nodes = if nodes.trim().is_empty() || nodes.starts_with('(') {
            vec![]
        } else {
            expand_hostlist(nodes)?
        };
        v.push((
            leader,
            Component {
                het,
                job,
                state: state.trim().to_string(),
                nodes,
                // `INVALID` while pending, `UNLIMITED` without a limit.
                time_left: parse_duration(left.trim()).ok().flatten(),
            },
        ));
    }
    Ok(v)
}

/// A Slurm duration (`--time`, `squeue %L`): `MINUTES`, `MINUTES:SECONDS`,
/// `HOURS:MINUTES:SECONDS`, `DAYS-HOURS`, `DAYS-HOURS:MINUTES`,
/// `DAYS-HOURS:MINUTES:SECONDS`; `UNLIMITED` or `INFINITE` is `None`.
pub fn parse_duration(s: &str) -> Result<Option<Duration>, String> {
    if matches!(s, "UNLIMITED" | "INFINITE" | "infinite" | "unlimited") {
        return Ok(None);
    }
    let bad = || format!("{s:?} is not a Slurm time (MINUTES, HH:MM:SS or DAYS-HH:MM:SS)");
    let num = |p: &str| -> Result<u64, String> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.len() > 9 {
            return Err(bad());
        }
        p.parse().map_err(|_| bad())
    };
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (Some(num(d)?), r),
        None => (None, s),
    };
    let parts = rest
        .split(':')
        .map(num)
        .collect::<Result<Vec<u64>, String>>()?;
    let seconds = match (days, &parts[..]) {
        (Some(d), &[h]) => d * 86_400 + h * 3600,
        (Some(d), &[h, m]) => d * 86_400 + h * 3600 + m * 60,
        (Some(d), &[h, m, sec]) => d * 86_400 + h * 3600 + m * 60 + sec,
        (None, &[m]) => m * 60,
        (None, &[m, sec]) => m * 60 + sec,
        (None, &[h, m, sec]) => h * 3600 + m * 60 + sec,
        _ => return Err(bad()),
    };
    Ok(Some(Duration::from_secs(seconds)))
}

/// One group of nodes with the same GPUs: one component of the allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Raw GPU type ("" for untyped GRES).
    pub raw_type: String,
    /// GPUs per node.
    pub gpus: u32,
    /// Its nodes.
    pub nodes: Vec<String>,
}

/// The allocation's `salloc` command: one job over every usable node, whole
/// nodes, all their GPUs (`--gpus` = their sum: with the nodes named, the
/// only fit), kept when a node fails (`--no-kill`: Hadar reschedules its
/// tasks), warned with `signal` before its time limit. (Not one
/// heterogeneous component per GPU type: Slurm 22.05 ends every component
/// when a node of one fails, and starts such jobs only from the backfill
/// scheduler.)
pub fn salloc_argv(
    name: &str,
    partition: Option<&str>,
    time_limit: Option<&str>,
    signal: &str,
    wait_s: u32,
    extra: &[String],
    groups: &[Group],
) -> Vec<String> {
    let nodes: Vec<&str> = groups
        .iter()
        .flat_map(|g| g.nodes.iter().map(String::as_str))
        .collect();
    let gpus: u32 = groups.iter().map(|g| g.gpus * g.nodes.len() as u32).sum();
    let mut v = vec![
        "salloc".to_string(),
        "--no-shell".into(),
        format!("--immediate={wait_s}"),
        format!("--job-name={name}"),
        "--no-kill".into(),
        format!("--signal={signal}"),
    ];
    if let Some(p) = partition {
        v.push(format!("--partition={p}"));
    }
    if let Some(t) = time_limit {
        v.push(format!("--time={t}"));
    }
    v.extend(extra.iter().cloned());
    v.push("--exclusive".into());
    v.push(format!("--nodes={}", nodes.len()));
    v.push(format!("--nodelist={}", nodes.join(",")));
    if gpus > 0 {
        v.push(format!("--gpus={gpus}"));
    }
    v
}

/// `gpu:TYPE:N` (`gpu:N` untyped).
pub fn gres(raw_type: &str, n: u32) -> String {
    if raw_type.is_empty() {
        format!("gpu:{n}")
    } else {
        format!("gpu:{raw_type}:{n}")
    }
}

/// The job id `salloc` granted, from its standard error.
pub fn parse_granted(stderr: &str) -> Option<u64> {
    stderr.lines().find_map(|l| {
        l.split_once("Granted job allocation ")
            .and_then(|(_, rest)| rest.trim().parse().ok())
    })
}

/// What a task's step is started with.
#[derive(Debug, Clone)]
pub struct StepArgs<'a> {
    /// The allocation's leader job id.
    pub job: u64,
    /// The node.
    pub node: &'a str,
    /// `gpu:N` (untyped: the allocation's GPUs are, and a node has one
    /// type), or `None` for no GPU.
    pub gres: Option<String>,
    /// The step's name.
    pub name: &'a str,
    /// The task's log.
    pub log: &'a Path,
    /// The task's directory.
    pub workdir: &'a Path,
    /// Site options for every step (`--mem=...`, `--cpus-per-task=...`).
    pub extra: &'a [String],
    /// The task's command.
    pub argv: &'a [String],
}

/// `srun` starting one task as a step of the allocation: only what it asks
/// for (`--exact`), one process on one node, output appended to the task's
/// log; `-v` makes srun say the step's id and when its task started. The
/// command follows `--`, one argument each: nothing is parsed by a shell.
pub fn srun_argv(s: &StepArgs<'_>) -> Vec<String> {
    let mut v = vec![
        "srun".to_string(),
        "-v".into(),
        format!("--jobid={}", s.job),
    ];
    v.extend([
        "--exact".to_string(),
        "--nodes=1".into(),
        "--ntasks=1".into(),
        format!("--nodelist={}", s.node),
        format!("--gres={}", s.gres.as_deref().unwrap_or("none")),
        format!("--job-name={}", s.name),
        format!("--chdir={}", s.workdir.display()),
        format!("--output={}", s.log.display()),
        format!("--error={}", s.log.display()),
        "--open-mode=append".into(),
        "--input=none".into(),
        "--kill-on-bad-exit=1".into(),
    ]);
    v.extend(s.extra.iter().cloned());
    v.push("--".into());
    v.extend(s.argv.iter().cloned());
    v
}

/// `scancel` sending `signal` (a name: `TERM`, `KILL`) to step `id` only.
pub fn scancel_signal_argv(id: &str, signal: &str) -> Vec<String> {
    vec![
        "scancel".into(),
        format!("--signal={signal}"),
        id.to_string(),
    ]
}

/// `scancel` ending step or job `id`.
pub fn scancel_argv(id: &str) -> Vec<String> {
    vec!["scancel".into(), id.to_string()]
}

/// The step id in an `srun -v` line (`srun: launching StepId=4.3 on host k80a, ...`).
pub fn parse_launching(line: &str) -> Option<String> {
    let rest = line.split_once("launching StepId=")?.1;
    let id: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    valid_step_id(&id).then_some(id)
}

/// The node an `srun` line says could not be reached to start a task
/// (`srun: error: Task launch for StepId=59.0 failed on node v100b:
/// Communication connection failure`): its slurmd is gone, though the
/// controller may not have noticed yet.
pub fn unreachable_node(line: &str) -> Option<String> {
    let rest = line.split_once("failed on node ")?.1;
    let (node, why) = rest.split_once(':')?;
    let why = why.to_ascii_lowercase();
    [
        "communication",
        "connect",
        "zero bytes",
        "timed out",
        "not responding",
    ]
    .iter()
    .any(|w| why.contains(w))
    .then(|| node.trim().to_string())
}

/// Whether an `srun -v` line says the task started.
pub fn is_started(line: &str) -> bool {
    line.contains("_task_start:") && line.contains("started")
}

/// The wait status of the task in an `srun -v` line
/// (`_task_finish: Received task exit notification ... (status=0x0300).`):
/// `Some(Some(code))` for an exit, `Some(None)` for a kill by signal.
pub fn parse_task_finish(line: &str) -> Option<Option<i32>> {
    if !line.contains("_task_finish:") {
        return None;
    }
    let hex = line.split_once("status=0x")?.1;
    let hex: String = hex.chars().take_while(char::is_ascii_hexdigit).collect();
    let status = i32::from_str_radix(&hex, 16).ok()?;
    Some(if status & 0x7f == 0 {
        Some((status >> 8) & 0xff)
    } else {
        None
    })
}

/// Whether `id` is a step id `JOB.STEP` (a job id above 0).
pub fn valid_step_id(id: &str) -> bool {
    let Some((job, step)) = id.split_once('.') else {
        return false;
    };
    !step.is_empty()
        && step.len() < 12
        && step.bytes().all(|b| b.is_ascii_digit())
        && !job.is_empty()
        && job.len() < 12
        && job.bytes().all(|b| b.is_ascii_digit())
        && job.parse::<u64>().is_ok_and(|j| j > 0)
}

/// How every step name Hadar gives begins.
pub const STEP_PREFIX: &str = "hadar-";

/// The step name of the task with `token`: `hadar-` then the token with
/// every character but `[A-Za-z0-9._-]` replaced (at most 64 of them), then
/// a hash of the exact token, so that two tokens never share a name.
pub fn step_name(token: &str) -> String {
    let clean: String = token
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    format!("{STEP_PREFIX}{clean}-{:016x}", fnv1a(token.as_bytes()))
}

/// The step name of rank `rank` (on the task's node `node`) of a task of
/// `world` ranks: a task of one rank keeps [`step_name`] (version 1, and
/// states saved before ranks existed); a gang's steps add their rank, node
/// index and world size, so that `find` rebuilds the gang from `squeue`
/// alone and knows when part of it is missing.
pub fn rank_step_name(token: &str, rank: u32, node: usize, world: usize) -> String {
    let base = step_name(token);
    if world <= 1 {
        base
    } else {
        format!("{base}.r{rank}.n{node}.w{world}")
    }
}

/// What a step name of the task whose [`step_name`] is `base` says:
/// `(rank, node index, world size)`, `None` for another task's step.
pub fn parse_rank_step_name(base: &str, name: &str) -> Option<(u32, usize, usize)> {
    if name == base {
        return Some((0, 0, 1));
    }
    let rest = name.strip_prefix(base)?.strip_prefix(".r")?;
    let (rank, rest) = rest.split_once(".n")?;
    let (node, world) = rest.split_once(".w")?;
    let (rank, node, world): (u32, usize, usize) =
        (rank.parse().ok()?, node.parse().ok()?, world.parse().ok()?);
    (world > 1 && (rank as usize) < world).then_some((rank, node, world))
}

/// FNV-1a, 64 bits: a hash that is the same in every build.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinfo_lines_are_split_on_the_unit_separator() {
        let out = "k80a\u{1f}idle\u{1f}gpu:k80:4\ngone\u{1f}unk*\u{1f}gpu:k80:4\n\
                   a|b\u{1f}mix\u{1f}gpu:nvidia_a100-sxm4-80gb:4(S:0-1),gpu:t4:2,shard:8\n\
                   k80a\u{1f}idle\u{1f}gpu:k80:4\n";
        let nodes = parse_sinfo(out).unwrap();
        assert_eq!(nodes.len(), 3, "a node listed twice counts once");
        assert_eq!(nodes[0].gpus, [("k80".to_string(), 4)]);
        assert!(nodes[0].usable());
        assert!(!nodes[1].usable(), "not responding");
        assert_eq!(nodes[2].name, "a|b");
        assert_eq!(
            nodes[2].gpus,
            [
                ("nvidia_a100-sxm4-80gb".to_string(), 4),
                ("t4".to_string(), 2)
            ]
        );
        assert!(parse_sinfo("only|two\u{1f}fields").is_err());
        let with_addr = parse_sinfo("sa\u{1f}idle\u{1f}gpu:v100:1\u{1f}10.77.0.21 \n").unwrap();
        assert_eq!(with_addr[0].addr, "10.77.0.21");
        assert_eq!(nodes[0].addr, "", "an sinfo without the address");
        assert_eq!(parse_gres("gpu:8"), [(String::new(), 8)]);
        assert_eq!(parse_gres("(null)"), []);
        for s in ["down*", "drain", "idle*", "unk", "fail", "idle~"] {
            assert!(!usable_state(s), "{s}");
        }
        for s in ["idle", "mix", "alloc", "mix-", "idle+", "plnd"] {
            assert!(usable_state(s), "{s}");
            assert!(!lost_state(s), "{s}");
        }
        for s in ["down*", "down", "idle*", "fail", "mix*"] {
            assert!(lost_state(s), "{s}");
        }
    }

    #[test]
    fn raw_gpu_types_map_to_table_names() {
        let mut site = BTreeMap::new();
        site.insert("weird_card".to_string(), "k80".to_string());
        for (raw, name) in [
            ("nvidia_a100-sxm4-80gb", "a100"),
            ("NVIDIA_H100_80GB_HBM3", "h100"),
            ("tesla_v100-sxm2-16gb", "v100"),
            ("nvidia_l40s-48gb", "l40s"),
            ("nvidia_geforce_rtx_3090", "rtx"),
            ("v100", "v100"),
            ("weird_card", "k80"),
        ] {
            assert_eq!(gpu_alias(raw, &site), name, "{raw}");
        }
    }

    #[test]
    fn host_lists_expand() {
        assert_eq!(
            expand_hostlist("gpu[01-03,07],k80a").unwrap(),
            ["gpu01", "gpu02", "gpu03", "gpu07", "k80a"]
        );
        assert_eq!(expand_hostlist("v100a,v100b").unwrap(), ["v100a", "v100b"]);
        assert!(expand_hostlist("n[1-").is_err());
        assert!(expand_hostlist("n[3-1]").is_err());
        let zeros = "0".repeat(70_000);
        assert!(expand_hostlist(&format!("n[{zeros}1-{zeros}2]")).is_err());
    }

    #[test]
    fn allocations_are_read_with_their_components() {
        let out = "3+0\u{1f}3\u{1f}RUNNING\u{1f}v100[a-b]\u{1f}UNLIMITED\n";
        assert!(parse_allocation(out).is_err(), "letters are not a range");
        assert!(parse_allocation("3\u{1f}3\u{1f}RUNNING\u{1f}k80a\n").is_err());
        let out = "3+0\u{1f}3\u{1f}RUNNING\u{1f}v100a,v100b\u{1f}1-02:03:04\n\
                   3+1\u{1f}4\u{1f}RUNNING\u{1f}k80a\u{1f}1-02:03:04\n\
                   9\u{1f}9\u{1f}PENDING\u{1f}(Resources)\u{1f}INVALID\n";
        let a = parse_allocation(out).unwrap();
        assert_eq!(
            a[1],
            (
                3,
                Component {
                    het: Some(1),
                    job: 4,
                    state: "RUNNING".into(),
                    nodes: vec!["k80a".to_string()],
                    time_left: Some(Duration::from_secs(93_784)),
                }
            )
        );
        assert_eq!(a[2].0, 9);
        assert_eq!(a[2].1.nodes, Vec::<String>::new());
        assert_eq!(a[2].1.time_left, None, "INVALID while pending");
        assert_eq!(
            parse_granted("salloc: Pending\nsalloc: Granted job allocation 42\n"),
            Some(42)
        );
    }

    #[test]
    fn slurm_durations_are_read_in_every_form() {
        let d = |s: &str| parse_duration(s).unwrap().map(|d| d.as_secs());
        assert_eq!(d("90"), Some(5400), "minutes alone");
        assert_eq!(d("59:58"), Some(3598), "minutes:seconds");
        assert_eq!(d("2:03:04"), Some(7384));
        assert_eq!(d("2-00"), Some(172_800), "days-hours");
        assert_eq!(d("1-02:03"), Some(93_780));
        assert_eq!(d("1-02:03:04"), Some(93_784));
        assert_eq!(d("UNLIMITED"), None);
        assert_eq!(d("INFINITE"), None);
        for bad in [
            "",
            "1h",
            "1:2:3:4",
            "-5",
            "1--2",
            "a-1",
            "1-2:3:4:5",
            "INVALID",
            "1e9",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn salloc_holds_every_gpu_of_the_nodes() {
        let groups = [
            Group {
                raw_type: "v100".into(),
                gpus: 2,
                nodes: vec!["v100a".into(), "v100b".into()],
            },
            Group {
                raw_type: "k80".into(),
                gpus: 4,
                nodes: vec!["k80a".into()],
            },
        ];
        let v = salloc_argv(
            "hadar",
            Some("gpu"),
            None,
            "TERM@120",
            60,
            &["--account=lab".into()],
            &groups,
        );
        assert_eq!(
            v.join(" "),
            "salloc --no-shell --immediate=60 --job-name=hadar --no-kill --signal=TERM@120 \
             --partition=gpu --account=lab --exclusive --nodes=3 --nodelist=v100a,v100b,k80a --gpus=8"
        );
    }

    #[test]
    fn steps_are_argument_vectors_with_the_command_after_dashes() {
        let argv = vec![
            "trainer".to_string(),
            "$(rm -rf /); x".into(),
            "--job-name=evil".into(),
        ];
        let v = srun_argv(&StepArgs {
            job: 12,
            node: "k80a",
            gres: Some(gres("", 2)),
            name: &step_name("run-job'; rm -rf /"),
            log: Path::new("/shared/t/task.log"),
            workdir: Path::new("/shared/t"),
            extra: &[],
            argv: &argv,
        });
        let dashes = v.iter().position(|a| a == "--").unwrap();
        assert_eq!(&v[dashes + 1..], &argv[..], "the command, untouched, last");
        assert!(v.contains(&"--jobid=12".to_string()));
        assert!(v.contains(&"--exact".to_string()));
        assert!(v.contains(&"--nodelist=k80a".to_string()));
        assert!(v.contains(&"--gres=gpu:2".to_string()));
        let name = v.iter().find(|a| a.starts_with("--job-name=")).unwrap();
        assert!(
            name.starts_with("--job-name=hadar-run-job___rm_-rf__-"),
            "{name}"
        );
        assert_eq!(
            scancel_signal_argv("12.3", "TERM"),
            ["scancel", "--signal=TERM", "12.3"]
        );
    }

    #[test]
    fn step_names_differ_for_tokens_that_clean_alike() {
        assert_ne!(step_name("a b"), step_name("a_b"));
        assert_eq!(step_name("x"), step_name("x"));
        let long = "y".repeat(500);
        assert!(step_name(&long).len() < 100);
        assert!(step_name("a\nb\u{1f}c")
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)));
    }

    #[test]
    fn rank_step_names_carry_rank_node_and_world() {
        let base = step_name("tok");
        assert_eq!(
            rank_step_name("tok", 0, 0, 1),
            base,
            "one rank: version 1's name"
        );
        let n = rank_step_name("tok", 2, 1, 3);
        assert_eq!(parse_rank_step_name(&base, &n), Some((2, 1, 3)));
        assert_eq!(parse_rank_step_name(&base, &base), Some((0, 0, 1)));
        assert!(n
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)));
        for other in [
            rank_step_name("tok2", 0, 0, 2),
            format!("{base}.r3.n0.w3"),
            format!("{base}.r1.n0.w1"),
            format!("{base}.rx.n0.w2"),
            format!("{base}x"),
        ] {
            assert_eq!(parse_rank_step_name(&base, &other), None, "{other}");
        }
    }

    #[test]
    fn srun_verbose_lines_say_the_step_and_its_end() {
        assert_eq!(
            parse_launching("srun: launching StepId=4.3 on host k80a, 1 tasks: 0").as_deref(),
            Some("4.3")
        );
        assert!(is_started(
            "srun: launch/slurm: _task_start: Node k80a, 1 tasks started"
        ));
        let fin = |s: &str| {
            parse_task_finish(&format!(
                "srun: launch/slurm: _task_finish: Received task exit notification for 1 task of StepId=4.3 (status={s})."
            ))
        };
        assert_eq!(fin("0x0300"), Some(Some(3)));
        assert_eq!(fin("0x0000"), Some(Some(0)));
        assert_eq!(fin("0x0009"), Some(None));
        for id in ["0.1", "1", "-1", "x", "1.", ".1", "1.2.3", "4.x"] {
            assert!(!valid_step_id(id), "{id}");
        }
        assert!(valid_step_id("4.0"));
        assert_eq!(
            unreachable_node(
                "srun: error: Task launch for StepId=59.0 failed on node v100b: Communication connection failure"
            )
            .as_deref(),
            Some("v100b")
        );
        assert_eq!(
            unreachable_node("srun: error: Task launch for StepId=59.0 failed on node v100b: Invalid job credential"),
            None
        );
    }
}
