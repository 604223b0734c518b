//! Layered configuration: built-in defaults (the flags' own), then
//! `/etc/hadar/hadar.toml`, `~/.config/hadar/hadar.toml`, `./hadar.toml`
//! (or `--config FILE` instead of it), then `HADAR_<KEY>` variables, then
//! the command line.
//!
//! A key is a long flag's name with underscores (`round_seconds`), at the
//! top level. Layers are merged key by key (the later wins) and the result is
//! handed to clap as arguments, but for flags the user gives on the command
//! line (which win); every value is checked by the same parser as the
//! flag's. So there is one definition of each setting (its flag) and no
//! second parser to drift; a value clap refuses is named with its source.
//! The `[backend.NAME]` tables (a backend's own settings) are taken as they
//! are: a cluster file's table of the same name wins over them.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::exit::CliError;

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Source(pub String);

/// The merged configuration.
#[derive(Debug, Default)]
pub struct Config {
    /// Settings by key, with where each came from.
    pub values: BTreeMap<String, (toml::Value, Source)>,
    /// `[backend.NAME]` tables, with where each came from.
    pub backends: BTreeMap<String, (toml::Table, Source)>,
    /// The files read, in order.
    pub files: Vec<PathBuf>,
}

/// The subcommands whose flags a configuration sets.
const CONFIGURED: [&str; 3] = ["run", "simulate", "sweep"];

/// Flags that are not settings (they say what to do, not how).
/// `fresh` discards a sweep's runs: only ever on the command line.
const NOT_SETTINGS: [&str; 6] = ["help", "version", "config", "verbose", "explain", "fresh"];

/// Flags that are settings of other subcommands but not of these: a
/// simulation's `out` in a configuration file is not where sweeps go.
const NOT_SETTINGS_OF: [(&str, &str); 1] = [("sweep", "out")];

/// Each configurable key, with the subcommands that have it.
fn known_keys() -> BTreeMap<String, Vec<&'static str>> {
    let cmd = crate::Cli::command();
    let mut keys: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
    for sub in CONFIGURED {
        let Some(c) = cmd.find_subcommand(sub) else {
            continue;
        };
        for a in c.get_arguments() {
            if let Some(long) = a.get_long() {
                if !NOT_SETTINGS.contains(&long) && !NOT_SETTINGS_OF.contains(&(sub, long)) {
                    keys.entry(long.replace('-', "_")).or_default().push(sub);
                }
            }
        }
    }
    keys
}

/// The default files, in order of precedence (lowest first).
fn default_files(explicit: Option<&Path>) -> Vec<(PathBuf, bool)> {
    let mut files = vec![(PathBuf::from("/etc/hadar/hadar.toml"), false)];
    let user = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    if let Some(dir) = user {
        files.push((dir.join("hadar/hadar.toml"), false));
    }
    match explicit {
        Some(f) => files.push((f.to_path_buf(), true)),
        None => files.push((PathBuf::from("hadar.toml"), false)),
    }
    files
}

/// The nearest known key, for the error.
fn nearest<'a>(key: &str, known: impl Iterator<Item = &'a String>) -> Option<&'a String> {
    known
        .map(|k| (hadar_core::scheduler::edit_distance(key, k), k))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, k)| k)
}

fn unknown(key: &str, source: &str, known: &BTreeMap<String, Vec<&str>>) -> CliError {
    let hint = nearest(key, known.keys())
        .map(|k| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default();
    CliError::Input(format!(
        "{source}: unknown key `{key}`{hint}; keys are the long flags of `hadar run`, \
         `hadar simulate` and `hadar sweep` with underscores (`hadar config show` lists what is set)"
    ))
}

impl Config {
    /// Reads every layer below the command line.
    pub fn load(explicit: Option<&Path>) -> Result<Self, CliError> {
        let known = known_keys();
        let mut config = Config::default();
        for (path, required) in default_files(explicit) {
            let text = match hadar_core::error::read_bounded(&path, 16 << 20) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => continue,
                Err(e) => {
                    return Err(CliError::Input(format!(
                        "cannot read the configuration file {}: {e}",
                        path.display()
                    )))
                }
            };
            let shown = path.display().to_string();
            let table: toml::Table =
                hadar_core::error::parse_toml(&text, &hadar_core::error::Location::new(&shown))?;
            config.add_file(table, &shown, &known)?;
            config.files.push(path);
        }
        for (name, value) in std::env::vars() {
            let Some(key) = name.strip_prefix("HADAR_") else {
                continue;
            };
            let key = key.to_ascii_lowercase();
            // Other HADAR_ variables (the job protocol's, HADAR_LOG) are not
            // settings: only a variable named for a key is one.
            if known.contains_key(&key) {
                config.values.insert(
                    key,
                    (toml::Value::String(value), Source(format!("${name}"))),
                );
            }
        }
        Ok(config)
    }

    fn add_file(
        &mut self,
        table: toml::Table,
        source: &str,
        known: &BTreeMap<String, Vec<&str>>,
    ) -> Result<(), CliError> {
        for (key, value) in table {
            match (key.as_str(), value) {
                // `[backend]`: `name` is the `--backend` flag, every table
                // in it a backend's own settings.
                ("backend", toml::Value::Table(t)) => {
                    for (k, v) in t {
                        match v {
                            toml::Value::Table(own) => {
                                self.backends.insert(k, (own, Source(source.into())));
                            }
                            v if k == "name" => {
                                self.values
                                    .insert("backend".into(), (v, Source(source.into())));
                            }
                            _ => return Err(unknown(&format!("backend.{k}"), source, known)),
                        }
                    }
                }
                (k, v) if known.contains_key(k) => {
                    self.values
                        .insert(k.to_string(), (v, Source(source.into())));
                }
                (k, _) => return Err(unknown(k, source, known)),
            }
        }
        Ok(())
    }

    /// The arguments that set `sub`'s flags from this configuration, but
    /// those the user gives on the command line (`given`).
    fn args_for(&self, sub: &str, given: &[OsString]) -> Result<Vec<OsString>, CliError> {
        let known = known_keys();
        let mut out = Vec::new();
        for (key, (value, source)) in &self.values {
            if !known.get(key).is_some_and(|subs| subs.contains(&sub)) {
                continue;
            }
            let flag = format!("--{}", key.replace('_', "-"));
            let on_command_line = given.iter().any(|a| {
                let a = a.to_string_lossy();
                a == flag || a.starts_with(&format!("{flag}="))
            });
            if on_command_line {
                continue;
            }
            let text = match value {
                toml::Value::Boolean(true) => {
                    out.push(flag.into());
                    continue;
                }
                toml::Value::Boolean(false) => continue,
                toml::Value::String(s) if s == "true" || s == "false" => {
                    // From a variable: a switch given as text.
                    if s == "true" {
                        out.push(flag.into());
                    }
                    continue;
                }
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Array(items) => items
                    .iter()
                    .map(|i| match i {
                        toml::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                other => {
                    return Err(CliError::Input(format!(
                        "{}: `{key}` = {other}: expected a value as its flag --{} takes",
                        source.0,
                        key.replace('_', "-")
                    )))
                }
            };
            out.push(format!("{flag}={text}").into());
        }
        Ok(out)
    }
}

/// `--config FILE` (or `--config=FILE`) on the command line, if given.
fn explicit_file(argv: &[OsString]) -> Option<PathBuf> {
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--" {
            break;
        }
        if s == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(f) = s.strip_prefix("--config=") {
            return Some(PathBuf::from(f));
        }
    }
    None
}

/// The command line with the configuration's settings placed right after
/// the subcommand (so that the user's own flags, later, win), and the
/// configuration.
pub fn with_config(argv: Vec<OsString>) -> Result<(Vec<OsString>, Config), CliError> {
    let explicit = explicit_file(&argv);
    let sub_at = argv
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, a)| {
            let s = a.to_string_lossy();
            !s.starts_with('-') && (CONFIGURED.contains(&s.as_ref()) || s == "config")
        })
        .map(|(i, _)| i);
    // `--config FILE`'s value is not a subcommand.
    let sub_at = sub_at.filter(|&i| argv[i - 1] != "--config");
    let Some(i) = sub_at else {
        return Ok((argv, Config::default()));
    };
    let config = Config::load(explicit.as_deref())?;
    let sub = argv[i].to_string_lossy().into_owned();
    if sub == "config" {
        return Ok((argv, config));
    }
    let injected = config.args_for(&sub, &argv[i + 1..])?;
    let mut out = argv[..=i].to_vec();
    out.extend(injected);
    out.extend(argv[i + 1..].iter().cloned());
    Ok((out, config))
}

/// Where each setting that became a flag came from: said under clap's
/// error when it refuses one.
pub fn explain_error(config: &Config, message: &str) {
    for (key, (_, source)) in &config.values {
        let flag = format!("--{}", key.replace('_', "-"));
        if message.contains(&format!("'{flag}")) || message.contains(&format!("{flag} ")) {
            eprintln!(
                "note: {flag} was set by {} (`{key}`)",
                crate::report::escape(&source.0)
            );
        }
    }
}

/// `hadar config show`: each setting, its value, and where it came from.
pub fn show(config: &Config, json: bool) -> Result<(), CliError> {
    let known = known_keys();
    if json {
        let values: serde_json::Map<String, serde_json::Value> = config
            .values
            .iter()
            .map(|(k, (v, s))| {
                (
                    k.clone(),
                    serde_json::json!({
                        "value": serde_json::to_value(v).unwrap_or_default(),
                        "source": s.0,
                        "applies_to": known.get(k),
                    }),
                )
            })
            .collect();
        let backends: serde_json::Map<String, serde_json::Value> = config
            .backends
            .iter()
            .map(|(k, (t, s))| {
                (
                    k.clone(),
                    serde_json::json!({
                        "table": serde_json::to_value(t).unwrap_or_default(),
                        "source": s.0,
                    }),
                )
            })
            .collect();
        let text = serde_json::to_string_pretty(&serde_json::json!({
            "files": config.files,
            "settings": values,
            "backends": backends,
        }))
        .map_err(|e| CliError::output("stdout", std::io::Error::other(e)))?;
        println!("{text}");
        return Ok(());
    }
    if config.files.is_empty() {
        println!("# no configuration file (looked for /etc/hadar/hadar.toml, ~/.config/hadar/hadar.toml, ./hadar.toml)");
    } else {
        for f in &config.files {
            println!("# read {}", crate::report::escape(&f.display().to_string()));
        }
    }
    if config.values.is_empty() && config.backends.is_empty() {
        println!("# nothing set: every flag has its default (see hadar run --help, hadar simulate --help)");
    }
    for (k, (v, s)) in &config.values {
        println!(
            "{k} = {}    # {} (hadar {})",
            crate::report::escape(&v.to_string()),
            crate::report::escape(&s.0),
            known.get(k).map_or(String::new(), |subs| subs.join(", "))
        );
    }
    for (name, (t, s)) in &config.backends {
        println!(
            "[backend.{}]    # {}",
            crate::report::escape(name),
            crate::report::escape(&s.0)
        );
        for line in toml::to_string(t).unwrap_or_default().lines() {
            println!("{}", crate::report::escape(line));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_long_flags_of_run_simulate_and_sweep() {
        let keys = known_keys();
        assert_eq!(keys["policy"], vec!["run", "simulate", "sweep"]);
        assert_eq!(keys["state"], vec!["run"]);
        assert_eq!(keys["round_seconds"], vec!["run", "simulate", "sweep"]);
        assert_eq!(keys["out"], vec!["run", "simulate"]);
        assert!(!keys.contains_key("fresh"));
        assert!(keys.contains_key("hadar_horizon"));
        assert!(!keys.contains_key("help") && !keys.contains_key("config"));
    }

    #[test]
    fn values_become_flags_before_the_user_s_own() {
        let mut c = Config::default();
        let src = Source("f".into());
        c.values
            .insert("policy".into(), ("fifo".into(), src.clone()));
        c.values
            .insert("json".into(), (toml::Value::Boolean(true), src.clone()));
        c.values.insert("state".into(), ("s".into(), src.clone()));
        c.values.insert(
            "round_seconds".into(),
            (toml::Value::Float(2.5), src.clone()),
        );
        let args: Vec<String> = c
            .args_for("simulate", &["--json".into()])
            .unwrap()
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        // `state` is run's only; `--json` is on the command line already.
        assert_eq!(args, ["--policy=fifo", "--round-seconds=2.5"]);
    }

    #[test]
    fn an_unknown_key_names_the_file_and_the_nearest_key() {
        let known = known_keys();
        let mut c = Config::default();
        let err = c
            .add_file("round_second = 3".parse().unwrap(), "/x/hadar.toml", &known)
            .unwrap_err()
            .to_string();
        assert!(err.contains("/x/hadar.toml"), "{err}");
        assert!(err.contains("unknown key `round_second`"), "{err}");
        assert!(err.contains("did you mean `round_seconds`?"), "{err}");
    }
}
