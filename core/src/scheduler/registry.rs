//! The policies `hadar` knows, in the manner of the backends' registry: each
//! policy is a [`Policy`] entry (its name, aliases, one line for `hadar
//! policies`, what it is, how to build it) declared in the module that holds
//! its scheduler, and listed once in [`Registry::builtin`]. Adding a policy
//! is one file and one line there; a library user or a test adds one to a
//! registry of its own with [`Registry::register`] (the CLI and
//! [`PolicyKind::parse`] know the built-in ones).
//!
//! A [`PolicyKind`] is a handle to an entry: cheap to copy and compare (by
//! name), and enough to build the scheduler, so the round loop, the
//! simulator and the reports never list policies themselves.

use std::fmt;
use std::hash::{Hash, Hasher};

use crate::error::{Error, Result};
use crate::scheduler::{gavel, hadar, Scheduler, SchedulerSettings};
use crate::workload::Workload;

/// Where a policy comes from, for the properties tests and tables check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// One of Gavel's policies, reimplemented as a baseline.
    Gavel,
    /// Hadar or HadarE.
    Hadar,
    /// Anything else (a user's policy).
    Other,
}

/// Builds a policy's scheduler for a workload.
pub type BuildFn = fn(PolicyKind, &Workload, &SchedulerSettings) -> Result<Box<dyn Scheduler>>;

/// One policy: what the registry knows of it.
#[derive(Debug)]
pub struct Policy {
    /// Canonical name (`hadar simulate --policy NAME`).
    pub name: &'static str,
    /// Other names it is accepted by.
    pub aliases: &'static [&'static str],
    /// One line for `hadar policies`.
    pub about: &'static str,
    /// Where it comes from.
    pub family: Family,
    /// Whether it runs copies of jobs (HadarE): its runs answer to the
    /// forked-job bounds.
    pub forks: bool,
    /// Builds its scheduler.
    pub build: BuildFn,
}

/// A handle to a registered [`Policy`].
#[derive(Clone, Copy)]
pub struct PolicyKind(&'static Policy);

impl PolicyKind {
    /// Gavel's heterogeneity-aware max-min fairness (LAS).
    pub const MAX_MIN_FAIRNESS_PERF: Self = Self(&gavel::MAX_MIN_FAIRNESS_PERF);
    /// Gavel's type-agnostic max-min fairness.
    pub const MAX_MIN_FAIRNESS: Self = Self(&gavel::MAX_MIN_FAIRNESS);
    /// Gavel's heterogeneity-aware makespan minimization.
    pub const MIN_TOTAL_DURATION_PERF: Self = Self(&gavel::MIN_TOTAL_DURATION_PERF);
    /// Gavel's type-agnostic makespan minimization.
    pub const MIN_TOTAL_DURATION: Self = Self(&gavel::MIN_TOTAL_DURATION);
    /// Gavel's heterogeneity-aware finish-time fairness (Themis-like).
    pub const FINISH_TIME_FAIRNESS_PERF: Self = Self(&gavel::FINISH_TIME_FAIRNESS_PERF);
    /// Gavel's type-agnostic finish-time fairness.
    pub const FINISH_TIME_FAIRNESS: Self = Self(&gavel::FINISH_TIME_FAIRNESS);
    /// First come, first served, fastest free type.
    pub const FIFO_PERF: Self = Self(&gavel::FIFO_PERF);
    /// First come, first served, random type.
    pub const FIFO: Self = Self(&gavel::FIFO);
    /// Hadar, aimed at average JCT.
    pub const HADAR: Self = Self(&hadar::HADAR);
    /// Hadar, aimed at makespan (the paper's "total time duration").
    pub const HADAR_MAKESPAN: Self = Self(&hadar::HADAR_MAKESPAN);
    /// HadarE: Hadar (JCT utility) plus forked job copies on idle GPUs.
    pub const HADARE: Self = Self(&hadar::HADARE);
    /// HadarE with the makespan utility.
    pub const HADARE_MAKESPAN: Self = Self(&hadar::HADARE_MAKESPAN);

    /// A handle to `policy` (registered or not: [`Registry::register`]
    /// makes it known by name).
    pub const fn of(policy: &'static Policy) -> Self {
        Self(policy)
    }

    /// The built-in policies, in the order tables list them.
    pub fn builtin() -> Vec<Self> {
        Registry::builtin().policies
    }

    /// Parses the name of a built-in policy (case and `-` for `_` do not
    /// matter; aliases accepted).
    pub fn parse(name: &str) -> Result<Self> {
        Registry::builtin().parse(name)
    }

    /// Canonical name.
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// The other names it is accepted by.
    pub fn aliases(self) -> &'static [&'static str] {
        self.0.aliases
    }

    /// One line for `hadar policies`.
    pub fn description(self) -> &'static str {
        self.0.about
    }

    /// Whether this is one of Gavel's policies (reimplemented as a baseline).
    pub fn is_gavel(self) -> bool {
        self.0.family == Family::Gavel
    }

    /// Whether it runs copies of jobs (HadarE).
    pub fn forks(self) -> bool {
        self.0.forks
    }

    /// Builds its scheduler for `workload`.
    pub fn build(
        self,
        workload: &Workload,
        settings: &SchedulerSettings,
    ) -> Result<Box<dyn Scheduler>> {
        (self.0.build)(self, workload, settings)
    }
}

impl PartialEq for PolicyKind {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for PolicyKind {}

impl Hash for PolicyKind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name.hash(state);
    }
}

impl fmt::Debug for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PolicyKind({})", self.0.name)
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

/// The policies known by name.
#[derive(Debug, Clone)]
pub struct Registry {
    policies: Vec<PolicyKind>,
}

impl Registry {
    /// Hadar's and Gavel's policies, in the order tables list them.
    pub fn builtin() -> Self {
        Self {
            policies: vec![
                PolicyKind::HADAR,
                PolicyKind::HADAR_MAKESPAN,
                PolicyKind::HADARE,
                PolicyKind::HADARE_MAKESPAN,
                PolicyKind::MAX_MIN_FAIRNESS_PERF,
                PolicyKind::MIN_TOTAL_DURATION_PERF,
                PolicyKind::FINISH_TIME_FAIRNESS_PERF,
                PolicyKind::FIFO_PERF,
                PolicyKind::MAX_MIN_FAIRNESS,
                PolicyKind::MIN_TOTAL_DURATION,
                PolicyKind::FINISH_TIME_FAIRNESS,
                PolicyKind::FIFO,
            ],
        }
    }

    /// Adds `policy`, refusing a name or alias another policy already has.
    pub fn register(&mut self, policy: &'static Policy) -> Result<&mut Self> {
        let names = || std::iter::once(policy.name).chain(policy.aliases.iter().copied());
        for name in names() {
            if let Some(taken) = self.find(&normalize(name)) {
                return Err(Error::setting(
                    "policy",
                    format!("cannot register `{name}`: {taken} already answers to that name"),
                ));
            }
        }
        self.policies.push(PolicyKind(policy));
        Ok(self)
    }

    /// Every policy, in registration order.
    pub fn all(&self) -> &[PolicyKind] {
        &self.policies
    }

    /// The policy called `name` or one of its aliases (case and `-` for `_`
    /// do not matter), or an error listing the names with the nearest one.
    pub fn parse(&self, name: &str) -> Result<PolicyKind> {
        let n = normalize(name);
        if let Some(kind) = self.find(&n) {
            return Ok(kind);
        }
        let names: Vec<&str> = self.policies.iter().map(|k| k.name()).collect();
        let near = names
            .iter()
            .map(|k| (edit_distance(&n, k), *k))
            .min()
            .filter(|(d, _)| *d <= 3)
            .map(|(_, k)| format!(" (did you mean `{k}`?)"))
            .unwrap_or_default();
        Err(Error::setting(
            "policy",
            format!(
                "unknown policy `{name}`{near}; known: {} (`hadar policies` lists them with \
                 their aliases)",
                names.join(", ")
            ),
        ))
    }

    fn find(&self, normalized: &str) -> Option<PolicyKind> {
        self.policies.iter().copied().find(|k| {
            normalize(k.name()) == normalized
                || k.aliases().iter().any(|a| normalize(a) == normalized)
        })
    }
}

fn normalize(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace('-', "_")
}

/// Levenshtein distance, for "did you mean" (names are short).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_alias_parses_to_its_policy_and_typos_get_a_suggestion() {
        for k in PolicyKind::builtin() {
            assert_eq!(PolicyKind::parse(k.name()).unwrap(), k);
            for a in k.aliases() {
                assert_eq!(PolicyKind::parse(a).unwrap(), k, "{a}");
            }
        }
        assert_eq!(PolicyKind::parse("Hadar").unwrap(), PolicyKind::HADAR);
        let err = PolicyKind::parse("fifo-prf").unwrap_err().to_string();
        assert!(err.contains("did you mean `fifo_perf`?"), "{err}");
        let err = PolicyKind::parse("zzzzzzzz").unwrap_err().to_string();
        assert!(!err.contains("did you mean"), "{err}");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn builtin_names_and_aliases_are_unique_and_a_taken_name_is_refused() {
        let mut fresh = Registry {
            policies: Vec::new(),
        };
        for k in PolicyKind::builtin() {
            fresh.register(k.0).unwrap();
        }
        assert_eq!(fresh.all(), Registry::builtin().all());
        static LAS_AGAIN: Policy = Policy {
            name: "mine",
            aliases: &["LAS"],
            about: "",
            family: Family::Other,
            forks: false,
            build: |_, w, s| PolicyKind::HADAR.build(w, s),
        };
        let err = fresh.register(&LAS_AGAIN).unwrap_err().to_string();
        assert!(err.contains("max_min_fairness already answers"), "{err}");
        assert_eq!(fresh.all().len(), 12);
    }
}
