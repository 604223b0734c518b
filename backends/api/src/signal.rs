//! Stop signals by name: backends pass names on the wire (`kill -TERM`,
//! `scancel --signal=TERM`, Docker's `StopSignal`), never bare numbers, and a
//! number a user typed is checked against this list before anything is sent.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A signal Hadar may send to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Signal {
    /// SIGHUP (1).
    Hup,
    /// SIGINT (2).
    Int,
    /// SIGQUIT (3).
    Quit,
    /// SIGKILL (9): cannot be caught; the end of every stop sequence.
    Kill,
    /// SIGUSR1 (10 on Linux).
    Usr1,
    /// SIGUSR2 (12 on Linux).
    Usr2,
    /// SIGTERM (15): the default stop signal.
    Term,
}

const ALL: [Signal; 7] = [
    Signal::Hup,
    Signal::Int,
    Signal::Quit,
    Signal::Kill,
    Signal::Usr1,
    Signal::Usr2,
    Signal::Term,
];

impl Signal {
    /// The name without `SIG`, as `kill -NAME` and `scancel --signal=NAME` take it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hup => "HUP",
            Self::Int => "INT",
            Self::Quit => "QUIT",
            Self::Kill => "KILL",
            Self::Usr1 => "USR1",
            Self::Usr2 => "USR2",
            Self::Term => "TERM",
        }
    }

    /// The Linux signal number (for `kill(2)` on this machine).
    pub fn number(self) -> i32 {
        match self {
            Self::Hup => 1,
            Self::Int => 2,
            Self::Quit => 3,
            Self::Kill => 9,
            Self::Usr1 => 10,
            Self::Usr2 => 12,
            Self::Term => 15,
        }
    }

    /// Every signal, for help texts.
    pub fn all() -> &'static [Signal] {
        &ALL
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SIG{}", self.name())
    }
}

/// A signal name or number that is not one Hadar sends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a stop signal Hadar sends; use one of TERM, INT, HUP, QUIT, USR1, USR2, KILL \
     (names with or without SIG, or their Linux numbers)"
)]
pub struct UnknownSignal(pub String);

impl FromStr for Signal {
    type Err = UnknownSignal;

    /// `TERM`, `SIGTERM`, `sigterm` or `15`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if let Ok(n) = t.parse::<i32>() {
            return ALL
                .into_iter()
                .find(|x| x.number() == n)
                .ok_or_else(|| UnknownSignal(s.to_string()));
        }
        let upper = t.to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        ALL.into_iter()
            .find(|x| x.name() == bare)
            .ok_or_else(|| UnknownSignal(s.to_string()))
    }
}

impl From<Signal> for String {
    fn from(s: Signal) -> Self {
        s.name().to_string()
    }
}

impl TryFrom<String> for Signal {
    type Error = UnknownSignal;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_parse_and_nothing_else_does() {
        assert_eq!("TERM".parse::<Signal>(), Ok(Signal::Term));
        assert_eq!("sigint".parse::<Signal>(), Ok(Signal::Int));
        assert_eq!("9".parse::<Signal>(), Ok(Signal::Kill));
        assert_eq!(" SIGUSR1 ".parse::<Signal>(), Ok(Signal::Usr1));
        for bad in ["0", "999", "-15", "", "SIGFOO", "TERM;rm", "1e3"] {
            assert!(bad.parse::<Signal>().is_err(), "{bad:?} accepted");
        }
        for s in Signal::all() {
            assert_eq!(s.name().parse::<Signal>(), Ok(*s));
            assert_eq!(s.number().to_string().parse::<Signal>(), Ok(*s));
        }
        let json = serde_json::to_string(&Signal::Term).unwrap();
        assert_eq!(json, "\"TERM\"");
        assert_eq!(
            serde_json::from_str::<Signal>("\"KILL\"").unwrap(),
            Signal::Kill
        );
        assert!(serde_json::from_str::<Signal>("\"NOPE\"").is_err());
    }
}
