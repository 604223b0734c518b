//! The trainer's opt-in MLP (`HADAR_TRAINER_MODEL=mlp`): it learns, its
//! checkpoints are safetensors with a `step`, `hadar merge` averages every
//! float tensor of copies, and the default model is untouched.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use safetensors::{Dtype, SafeTensors};

fn trainer(dir: &Path, total: u64, model: Option<&str>) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hadar-trainer"));
    c.env("HADAR_TOTAL_ITERATIONS", total.to_string())
        .env("HADAR_CHECKPOINT_DIR", dir);
    if let Some(m) = model {
        c.env("HADAR_TRAINER_MODEL", m);
    }
    c
}

fn done(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("HADAR_DONE"))
        .map(|j| serde_json::from_str(j.trim()).expect("JSON"))
        .expect("a HADAR_DONE line")
}

/// Every tensor of a checkpoint: dtype, shape and values as f64.
fn tensors(path: &Path) -> BTreeMap<String, (Dtype, Vec<usize>, Vec<f64>)> {
    let bytes = std::fs::read(path).expect("read");
    let st = SafeTensors::deserialize(&bytes).expect("safetensors");
    st.tensors()
        .into_iter()
        .map(|(name, t)| {
            let values = match t.dtype() {
                Dtype::F32 => t
                    .data()
                    .chunks_exact(4)
                    .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                    .collect(),
                Dtype::I64 => t
                    .data()
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")) as f64)
                    .collect(),
                other => panic!("unexpected dtype {other}"),
            };
            (name, (t.dtype(), t.shape().to_vec(), values))
        })
        .collect()
}

#[test]
fn the_mlp_learns_and_writes_its_tensors_and_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = done(
        &trainer(dir.path(), 1000, Some("mlp"))
            .output()
            .expect("run"),
    );
    assert_eq!(d["step"], 1000);
    // Chance is 25%; the mixture's best is about 90% (10% of labels flipped).
    assert!(d["accuracy"].as_f64().expect("accuracy") >= 0.8, "{d}");
    let t = tensors(&dir.path().join("checkpoint.safetensors"));
    let shapes: Vec<(&str, Vec<usize>)> = t
        .iter()
        .map(|(n, (_, s, _))| (n.as_str(), s.clone()))
        .collect();
    assert_eq!(
        shapes,
        [
            ("b1", vec![64]),
            ("b2", vec![4]),
            ("step", vec![1]),
            ("w1", vec![64, 16]),
            ("w2", vec![4, 64]),
        ]
    );
    assert_eq!(t["step"].0, Dtype::I64);
    assert_eq!(t["step"].2, [1000.0]);
}

#[test]
fn the_default_model_keeps_its_checkpoint_tensors() {
    let dir = tempfile::tempdir().expect("tempdir");
    done(&trainer(dir.path(), 10, None).output().expect("run"));
    let t = tensors(&dir.path().join("checkpoint.safetensors"));
    let shapes: Vec<(&str, Dtype, Vec<usize>)> = t
        .iter()
        .map(|(n, (d, s, _))| (n.as_str(), *d, s.clone()))
        .collect();
    assert_eq!(
        shapes,
        [
            ("bias", Dtype::F32, vec![4]),
            ("step", Dtype::I64, vec![1]),
            ("weight", Dtype::F32, vec![4, 16]),
        ]
    );
}

#[test]
fn merge_averages_every_float_tensor_of_mlp_copies() {
    // Two copies from the same start, other data orders, unequal work: the
    // merge weighs each by its iterations (300 and 100).
    let (a, b, m) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let run = |dir: &Path, seed: &str, total: u64| {
        done(
            &trainer(dir, total, Some("mlp"))
                .env("HADAR_SEED", seed)
                .output()
                .expect("run"),
        )
    };
    run(a.path(), "1", 300);
    run(b.path(), "2", 100);
    let (pa, pb) = (
        a.path().join("checkpoint.safetensors"),
        b.path().join("checkpoint.safetensors"),
    );
    let merged = m.path().join("resume.safetensors");
    hadar_checkpoint::merge(&[(&pa, 300), (&pb, 100)], &merged).expect("merge");
    let (ta, tb, tm) = (tensors(&pa), tensors(&pb), tensors(&merged));
    assert_eq!(tm.keys().collect::<Vec<_>>(), ta.keys().collect::<Vec<_>>());
    for name in ["w1", "b1", "w2", "b2"] {
        let (va, vb, vm) = (&ta[name].2, &tb[name].2, &tm[name].2);
        assert_eq!(tm[name].1, ta[name].1, "{name}: shape kept");
        assert!(va != vb, "{name}: the copies differ, so the test can fail");
        for ((x, y), z) in va.iter().zip(vb).zip(vm) {
            let want = 0.75 * x + 0.25 * y;
            assert!(
                (z - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "{name}: {z} != {want}"
            );
        }
    }
    assert_eq!(
        tm["step"].2,
        [300.0],
        "step from the copy with the most work"
    );
    // The trainer resumes from the merged file (at its total: it evaluates
    // without training), and the average of two learning copies has learned.
    let d = run(m.path(), "3", 300);
    assert_eq!(d["iterations"], 0);
    assert!(d["accuracy"].as_f64().expect("accuracy") >= 0.8, "{d}");
}

#[test]
fn bad_settings_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (var, value, says) in [
        (
            "HADAR_TRAINER_MODEL",
            "resnet",
            "is not a model: use `softmax`",
        ),
        ("HADAR_TRAINER_BATCH", "0", "at least one example"),
        ("HADAR_TRAINER_BATCH", "many", "is not a valid value"),
    ] {
        let out = trainer(dir.path(), 10, None)
            .env(var, value)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(1), "{var}={value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{var}={value}: {err}");
    }
}

#[test]
fn the_batch_size_is_settable() {
    // Same seed, same start: a different batch size is a different run.
    let run = |batch: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        done(
            &trainer(dir.path(), 50, Some("mlp"))
                .env("HADAR_TRAINER_BATCH", batch)
                .output()
                .expect("run"),
        )["loss"]
            .as_f64()
            .expect("loss")
    };
    assert_eq!(run("32"), run("32"), "deterministic");
    assert_ne!(run("32"), run("128"));
}
