//! `hadar-fork-calibrate` on a tiny configuration: the shape of its JSON and
//! markdown output, and its errors.

use std::process::Command;

fn calibrate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hadar-fork-calibrate"))
        .args(args)
        .output()
        .expect("run")
}

const TINY: [&str; 14] = [
    "--seeds",
    "2",
    "--copies",
    "1,2",
    "--rounds",
    "5,20",
    "--lrs",
    "0.4",
    "--target",
    "0.6",
    "--max-iterations",
    "300",
    "--noise-draws",
    "2",
];

#[test]
fn json_output_has_every_cell_and_the_fit() {
    let out = calibrate(&[&TINY[..], &["--json"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["settings"]["round_lengths"], serde_json::json!([5, 20]));
    assert_eq!(v["settings"]["batch"], 32);
    assert_eq!(v["reference_iterations"].as_array().expect("runs").len(), 2);
    let cells = v["cells"].as_array().expect("cells");
    // k = 1 is the reference, not a cell: one k times two round lengths.
    assert_eq!(cells.len(), 2);
    for c in cells {
        assert_eq!(c["copies"], 2);
        assert_eq!(c["iterations_per_copy"].as_array().expect("runs").len(), 2);
        let p = c["predicted"].as_f64().expect("S(k)");
        assert!(p > 1.0 && p <= 2.0, "S(2) = {p}");
    }
    assert!(v["noise_scale"]["used"].as_f64().expect("B_noise") > 0.0);
    assert!(v["noise_scale"]["exact_at_start"].as_f64().expect("exact") > 0.0);
    assert_eq!(v["rho"].as_array().expect("rho").len(), 2);
    assert!(v["rho_all"].as_f64().expect("rho") > 0.0);
}

#[test]
fn markdown_output_is_a_table_with_the_fit() {
    let out = calibrate(&TINY);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("| H | k | lr | reached |"), "{s}");
    // A header, its rule, the reference and two cells.
    assert_eq!(s.lines().filter(|l| l.starts_with('|')).count(), 5, "{s}");
    assert!(s.contains("rho (least squares"), "{s}");
    assert!(s.contains("B_noise ="), "{s}");
}

#[test]
fn bad_settings_are_clear_errors() {
    for (args, says) in [
        (&["--copies", "0"][..], "--copies"),
        (&["--target", "1.5"][..], "--target 1.5"),
        (&["--lrs=0.4,0"][..], "0 is not a positive learning rate"),
        (&["--seeds", "0"][..], "--seeds 0"),
    ] {
        let out = calibrate(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
