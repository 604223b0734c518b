//! The run's readers under arbitrary input: a jobs file and a saved state
//! give `Ok` or an error, never a panic, and what a jobs file lets through
//! holds what the run relies on (names fit for tables and logs, commands a
//! process can be given, rates the LP can take).

use hadar_runtime::jobs::parse_jobs;
use hadar_runtime::RunState;
use proptest::prelude::*;

/// Strings with the characters that broke readers before: control and
/// invisible characters, NULs, `=`, quotes, very long runs.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,40}",
        prop::collection::vec(
            prop::sample::select(vec![
                "a",
                "=",
                "\0",
                "\n",
                "\t",
                "\u{1b}[31m",
                "\u{202e}",
                "\u{200b}",
                "\"",
                "'",
                "\\",
                " ",
                "/",
                "-",
                "é",
            ]),
            0..20
        )
        .prop_map(|p| p.concat()),
        (1usize..300).prop_map(|n| "n".repeat(n)),
    ]
}

/// Numbers around every edge the readers check.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|x| format!("{x:?}")),
        prop::sample::select(vec![
            "0",
            "-1",
            "1e9",
            "1.000001e9",
            "5e307",
            "inf",
            "-inf",
            "nan",
            "1e-300",
            "18446744073709551615",
            "18446744073709551616",
        ])
        .prop_map(str::to_string),
    ]
}

/// A jobs file of one job with these values, each quoted as TOML quotes it.
fn jobs_file(fields: [String; 4], iterations: &str, rate: &str) -> String {
    let q = |s: &str| toml::Value::String(s.to_string()).to_string();
    let [name, program, key, value] = fields;
    format!(
        "[[job]]\nname = {}\ncommand = [{}, \"--x\"]\niterations = {iterations}\n\
         throughput = {{ v100 = {rate} }}\nenv = {{ {} = {} }}\n",
        q(&name),
        q(&program),
        q(&key),
        q(&value),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn a_jobs_file_is_refused_or_fit_to_run(
        fields in [hostile(), hostile(), hostile(), hostile()],
        iterations in number(),
        rate in number(),
    ) {
        let text = jobs_file(fields, &iterations, &rate);
        if let Ok(jobs) = parse_jobs(&text, "jobs.toml") {
            for j in &jobs {
                prop_assert!(!j.name.is_empty() && j.name.chars().count() <= 200, "{text}");
                prop_assert!(!j.name.chars().any(char::is_control), "{text}");
                prop_assert!(!j.command[0].is_empty(), "{text}");
                prop_assert!(j.command.iter().all(|a| !a.contains('\0')), "{text}");
                for (k, v) in &j.env {
                    prop_assert!(!k.is_empty() && !k.contains('=') && !k.contains('\0'), "{text}");
                    prop_assert!(!v.contains('\0'), "{text}");
                }
                for r in j.throughput.values() {
                    prop_assert!(r.is_finite() && (0.0..=1e9).contains(r), "{text}");
                }
                prop_assert!(j.iterations >= 1, "{text}");
            }
        }
    }

    #[test]
    fn any_text_as_a_jobs_file_or_a_state_never_panics(raw in ".{0,300}") {
        let _ = parse_jobs(&raw, "jobs.toml");
        if let Ok(state) = serde_json::from_str::<RunState>(&raw) {
            let _ = state.check(std::path::Path::new("state.json"), &[1, 2]);
        }
    }
}
