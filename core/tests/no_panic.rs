//! No input makes a parser panic: arbitrary text gives `Ok` or an error.

use hadar_core::cluster::Cluster;
use hadar_core::throughput::ThroughputTable;
use hadar_core::trace::parse_trace;
use proptest::prelude::*;

/// Text made mostly of the characters these formats use, so that the
/// parsers get past their first checks.
fn texty() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "\t", "\n", ",", "=", ".", "-", "1", "0", "9", "e", "x", "v100", "k80", "(", ")", "'",
            "\"", "[", "]", "{", "}", ":", "null", "A3C", "-1", "1e400", "NaN", " ", "[[node]]",
            "gpus", "count", "name", "\u{e9}",
        ]),
        0..80,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn parsers_never_panic(text in texty(), raw in ".{0,200}") {
        for input in [&text, &raw] {
            let _ = parse_trace(input, "t");
            let _ = Cluster::from_short_form(input, 1);
            let _ = Cluster::from_toml_str(input, "c.toml");
            let _ = ThroughputTable::from_csv(input, "t.csv");
            let _ = ThroughputTable::from_gavel_json(input, "t.json");
        }
    }
}
