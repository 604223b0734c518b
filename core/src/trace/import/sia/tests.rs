use super::profile::{self, placement_id, Profile};
use super::*;

/// A `sia-simulator` directory with one application (bert: 2 epochs,
/// slowdown 1.2, restart 120 s) profiled on `aws`.
fn sia_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let app = dir.path().join("traces/bert");
    std::fs::create_dir_all(&app).unwrap();
    // Columns in another order than the header of other types: found by name.
    std::fs::write(
        app.join("placements-aws.csv"),
        "local_bsz,step_time,sync_time,placement\n4,2.0,0.2,2\n2,1.0,0.1,2\n2,0.5,0.05,1\n4,4.0,0.4,4\n",
    )
    .unwrap();
    std::fs::write(
        app.join("validation-4.csv"),
        "progress,iteration,metric,grad_sqr,grad_var\n10,5,0.1,3,3\n30,9,0.2,3,3\n",
    )
    .unwrap();
    std::fs::write(
        app.join("validation-8.csv"),
        "progress,iteration,metric,grad_sqr,grad_var\n12,5,0.1,1,1\n24,9,0.2,1,1\n",
    )
    .unwrap();
    dir
}

#[test]
fn placements_are_whole_nodes_then_one_partial_smallest_rotation_first() {
    assert_eq!(placement_id(10, 4), "244");
    assert_eq!(placement_id(12, 8), "48");
    assert_eq!(placement_id(16, 8), "88");
    assert_eq!(placement_id(6, 4), "24");
    assert_eq!(placement_id(3, 4), "3");
}

#[test]
fn a_lone_rigid_run_is_booked_epoch_by_epoch_in_whole_seconds() {
    let dir = sia_dir();
    let p = Profile::read(dir.path(), "bert", "aws").unwrap();
    // 2 GPUs, batch 8: 4 a GPU, no accumulation, a step of 2 s. The
    // effective batch 8 is validated (grad 1, 1), scale 8/4 = 2: gain
    // 2 / 1.5 = 4/3. Epochs need 10 and 24 - 10 = 14 progress (the least
    // of the validation runs); goodput (4/3) / 2 s / 1.2 = 5/9 a second:
    // 18 s and 25.2 -> 25 s.
    let run = p.lone_run(2, 8, 4).unwrap();
    assert_eq!(
        (run.placement.as_str(), run.atomic_bsz, run.accum_steps),
        ("2", 4, 0)
    );
    assert_eq!(run.seconds, 43.0);
    assert!((run.iterations - 18.0).abs() < 1e-9, "{}", run.iterations);
    // Batch 6: 3 a GPU, step and sync halfway (1.5 s, 0.15 s); grad stats
    // halfway between batches 4 and 8 (2, 2), scale 1.5: gain 4/3.333 = 1.2.
    let run = p.lone_run(2, 6, 4).unwrap();
    let goodput: f64 = 1.2 / 1.5 / 1.2;
    assert_eq!(
        run.seconds,
        (10.0 / goodput).round() + (14.0 / goodput).round()
    );
}

#[test]
fn one_gpu_above_the_initial_batch_accumulates_and_a_large_batch_is_capped() {
    let dir = sia_dir();
    let p = Profile::read(dir.path(), "bert", "aws").unwrap();
    // One GPU, batch 8 > 4 (the smallest validated): at least one
    // accumulation step, as Sia forces; the largest local batch on one GPU
    // is 2: 8 = 2 x 4 passes.
    let run = p.lone_run(1, 8, 4).unwrap();
    assert_eq!((run.atomic_bsz, run.accum_steps), (2, 3));
    // 4 GPUs, batch 64: 16 a GPU, more than the 4 measured: 4 passes of 4
    // capped by the largest validated batch (8 / (4 x 4) = 0): a batch
    // beyond the validated ones.
    assert_eq!(
        p.lone_run(4, 64, 4).unwrap_err(),
        profile::NoRun::NotValidated(64)
    );
    assert_eq!(
        p.lone_run(4, 64, 4).unwrap_err().to_string(),
        "a batch of 64 was not validated"
    );
    // A placement never measured.
    let e = p.lone_run(3, 6, 4).unwrap_err();
    assert_eq!(e.to_string(), "placement 3 was not profiled");
}

#[test]
fn a_workload_becomes_a_jobs_file_whose_rates_give_sias_times() {
    let dir = sia_dir();
    let types = parse_cluster("aws=1").unwrap();
    let csv = "name,time,application,num_replicas,batch_size,category\nbert-0,0,bert,2,8,rigid\nbert-1,30.5,bert,2,8,rigid\nbert-2,60,bert,8,8,rigid\n";
    let err = import(csv, "w.csv", dir.path(), &types, Shapes::Submitted)
        .unwrap_err()
        .to_string();
    // 8 GPUs do not fit one node of 4.
    assert!(
        err.contains("bert-2") && err.contains("runs on no type"),
        "{err}"
    );
    assert!(err.starts_with("w.csv:4: field `num_replicas`"), "{err}");
    let csv = csv[..csv.rfind("bert-2").unwrap()].replace("bert-1", "bert \"1\"");
    let imp = import(&csv, "w.csv", dir.path(), &types, Shapes::Submitted).unwrap();
    assert_eq!(imp.summary.jobs, 2);
    assert_eq!(imp.summary.kinds.len(), 1);
    let k = &imp.summary.kinds[0];
    assert_eq!((k.jobs, k.iterations, k.restart_s), (2, 18, 120.0));
    assert_eq!(k.seconds["t4"], 43.0);
    assert!(imp.jobs.contains("gpu_types = [\"t4\"]"), "{}", imp.jobs);
    let file: toml::Value = toml::from_str(&imp.jobs).unwrap();
    let job = &file["job"][1];
    assert_eq!(job["name"].as_str(), Some("bert \"1\""));
    assert_eq!(job["arrival"].as_float(), Some(30.5));
    assert_eq!(job["gang"].as_integer(), Some(2));
    assert_eq!(job["restart_cost"].as_float(), Some(120.0));
    let rate = job["throughput"]["t4"].as_float().unwrap();
    assert!((18.0 / rate - 43.0).abs() < 1e-9);
    assert!(
        imp.cluster.contains("count = 1\ngpus = { \"t4\" = 4 }"),
        "{}",
        imp.cluster
    );
}

#[test]
fn bad_inputs_are_refused_with_their_place() {
    let dir = sia_dir();
    let types = parse_cluster("aws=1").unwrap();
    let cases = [
        (
            "name,time,application,num_replicas,batch_size\nx,0,gpt9,1,4\n",
            "gpt9",
        ),
        (
            "name,time,application,num_replicas,batch_size\nx,0,bert,0,4\n",
            "num_replicas",
        ),
        (
            "name,time,application,num_replicas,batch_size\nx,-1,bert,1,4\n",
            "time",
        ),
        (
            "name,time,application,num_replicas,batch_size\nx,2e9,bert,1,4\n",
            "31 years",
        ),
        (
            "name,time,application,num_replicas,batch_size\nx,0,bert,1,4\nx,1,bert,1,4\n",
            "twice",
        ),
        ("name,time,application\nx,0,bert\n", "num_replicas"),
        ("name,time,application,num_replicas,batch_size\n", "no jobs"),
        (
            "name,time,application,num_replicas,batch_size\nx\ty,0,bert,1,4\n",
            "printable",
        ),
    ];
    for (csv, want) in cases {
        let e = import(csv, "w.csv", dir.path(), &types, Shapes::Submitted)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{csv}: {e}");
    }
    for arg in ["aws", "aws=0", "gcp=1", "aws=1,aws=2", ""] {
        assert!(parse_cluster(arg).is_err(), "{arg}");
    }
    for (arg, hint) in [
        ("AWS=1", "did you mean aws?"),
        ("t4=1", "did you mean aws?"),
    ] {
        let e = parse_cluster(arg).unwrap_err().to_string();
        assert!(e.contains(hint), "{arg}: {e}");
    }
    let csv = "name,time,application,num_replicas,batch_size,category\nx,0,bert,1,4,rigidd\n";
    let imp = import(csv, "w.csv", dir.path(), &types, Shapes::Submitted).unwrap();
    assert!(
        imp.summary.notes[0].contains("rigidd"),
        "{:?}",
        imp.summary.notes
    );
    let e = import(
        "name,time,application,num_replicas,batch_size\nx,0,bert,1,4\n",
        "w.csv",
        dir.path(),
        &parse_cluster("rtx=1").unwrap(),
        Shapes::Submitted,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("placements-rtx.csv"), "{e}");
}

/// A `sia_dir` whose bert on `aws` gets faster with GPUs, less than in
/// proportion (the fixture's own slows down).
fn scaling_sia_dir() -> tempfile::TempDir {
    let dir = sia_dir();
    std::fs::write(
        dir.path().join("traces/bert/placements-aws.csv"),
        "placement,local_bsz,step_time,sync_time\n1,2,0.5,0.05\n1,4,1.0,0.1\n\
         2,2,0.6,0.1\n2,4,1.1,0.2\n4,1,0.5,0.2\n4,2,0.8,0.3\n4,4,1.3,0.4\n",
    )
    .unwrap();
    dir
}

#[test]
fn tuned_shapes_are_the_fastest_run_at_the_efficiency_asked() {
    let dir = scaling_sia_dir();
    let p = Profile::read(dir.path(), "bert", "aws").unwrap();
    let all: Vec<(u32, u64, f64)> = (1..=4)
        .flat_map(|g| [4, 8].map(move |b| (g, b)))
        .filter_map(|(g, b)| Some((g, b, p.lone_run(g, b, 4).ok()?.seconds)))
        .collect();
    let least = all
        .iter()
        .map(|&(g, _, s)| f64::from(g) * s)
        .fold(f64::INFINITY, f64::min);
    let mut chosen = Vec::new();
    for floor in [0.1, 0.5, 0.75, 1.0] {
        let (g, b, run) = p.tuned_run(4, 4, floor).unwrap();
        assert_eq!(run.seconds, p.lone_run(g, b, 4).unwrap().seconds);
        assert!(
            least / (f64::from(g) * run.seconds) >= floor,
            "{floor}: {g} GPUs"
        );
        // No run efficient enough is faster.
        for &(g2, b2, s2) in &all {
            if least / (f64::from(g2) * s2) >= floor {
                assert!(s2 >= run.seconds, "{floor}: {g2} GPUs batch {b2} is faster");
            }
        }
        chosen.push((g, b));
    }
    // At 1 the least GPU time; lower floors buy speed with GPUs.
    let at_one = chosen[3];
    assert_eq!(
        f64::from(at_one.0) * p.lone_run(at_one.0, at_one.1, 4).unwrap().seconds,
        least
    );
    assert_eq!(chosen, [(4, 4), (4, 4), (2, 4), (1, 4)]);
    // A type too small for any profiled placement has no shape.
    assert!(p.tuned_run(4, 0, 0.5).is_none());
}

#[test]
fn tuned_shapes_whose_gpus_change_with_the_type_are_alternatives() {
    let dir = scaling_sia_dir();
    // On rtx the profile has one GPU only.
    std::fs::write(
        dir.path().join("traces/bert/placements-rtx.csv"),
        "placement,local_bsz,step_time,sync_time\n1,2,0.4,0.04\n1,4,0.8,0.08\n",
    )
    .unwrap();
    let types = parse_cluster("aws=1,rtx=1").unwrap();
    let csv = "name,time,application,num_replicas,batch_size\nb-0,0,bert,1,4\nb-1,5,bert,2,8\n";
    let imp = import(
        csv,
        "w.csv",
        dir.path(),
        &types,
        Shapes::Tuned {
            min_efficiency: 0.1,
            elastic: false,
        },
    )
    .unwrap();
    // One kind: the application alone decides the shapes.
    assert_eq!(imp.summary.kinds.len(), 1);
    assert_eq!(
        (imp.summary.shapes, imp.summary.min_efficiency),
        ("tuned", Some(0.1))
    );
    let k = &imp.summary.kinds[0];
    assert_eq!((k.jobs, k.gpus, k.batch), (2, None, None));
    assert_eq!(k.gpus_on["rtx2080ti"], 1);
    assert!(k.gpus_on["t4"] > 1, "{:?}", k.gpus_on);
    let file: toml::Value = toml::from_str(&imp.jobs).unwrap();
    for job in file["job"].as_array().unwrap() {
        assert!(
            job.get("gang").is_none() && job.get("gpu_types").is_none(),
            "{job}"
        );
        let alts = job["alternatives"].as_array().unwrap();
        // Fastest first, each at its type's GPUs; rates give the times.
        let types: Vec<&str> = alts.iter().map(|a| a["type"].as_str().unwrap()).collect();
        let mut by_speed = types.clone();
        by_speed.sort_by(|a, b| k.seconds[*a].total_cmp(&k.seconds[*b]));
        assert_eq!(types, by_speed);
        for a in alts {
            let t = a["type"].as_str().unwrap();
            assert_eq!(a["gang"].as_integer(), Some(i64::from(k.gpus_on[t])));
            let rate = job["throughput"][t].as_float().unwrap();
            assert!((k.iterations as f64 / rate - k.seconds[t]).abs() < 1e-6);
        }
    }
    // Submitted shapes of the same workload keep each job's own GPUs.
    let imp = import(csv, "w.csv", dir.path(), &types, Shapes::Submitted).unwrap();
    assert_eq!(imp.summary.kinds.len(), 2);
    assert!(!imp.jobs.contains("alternatives"), "{}", imp.jobs);
}

#[test]
fn elastic_shapes_offer_each_type_s_other_gangs_with_their_rates() {
    let dir = scaling_sia_dir();
    let types = parse_cluster("aws=1").unwrap();
    let csv = "name,time,application,num_replicas,batch_size\nb-0,0,bert,1,4\n";
    let shapes = Shapes::Tuned {
        min_efficiency: 0.75,
        elastic: true,
    };
    let imp = import(csv, "w.csv", dir.path(), &types, shapes).unwrap();
    assert_eq!(imp.summary.shapes, "elastic");
    let k = &imp.summary.kinds[0];
    // First the gang at 0.75 (2 GPUs, as `tuned` gives), then the other
    // floors' (4 GPUs at 0.5 and below, 1 at 0.9 and above), each once.
    assert_eq!(k.gpus_on["t4"], 2);
    let more: Vec<u32> = k.more_on["t4"].iter().map(|m| m.0).collect();
    assert_eq!(more, [4, 1]);
    let file: toml::Value = toml::from_str(&imp.jobs).unwrap();
    let job = &file["job"][0];
    assert!(job.get("gang").is_none(), "{job}");
    let alts = job["alternatives"].as_array().unwrap();
    let listed: Vec<(i64, Option<f64>)> = alts
        .iter()
        .map(|a| {
            (
                a["gang"].as_integer().unwrap(),
                a.get("throughput").and_then(|t| t.as_float()),
            )
        })
        .collect();
    assert_eq!(listed.len(), 3);
    assert_eq!(
        (listed[0].0, listed[0].1),
        (2, None),
        "the type's first gang, rate in `throughput`"
    );
    for (&(g, rate), &(g2, _, secs)) in listed[1..].iter().zip(&k.more_on["t4"]) {
        assert_eq!(g, i64::from(g2));
        assert!((k.iterations as f64 / rate.unwrap() - secs).abs() < 1e-6);
    }
    assert!(imp.jobs.contains("(--shapes elastic"), "{}", imp.jobs);
}

/// A workload of 200,000 jobs: the duplicate check once scanned every job
/// read for each row (2 x 10^10 comparisons here: minutes even in a release
/// build); with a set of names it takes well under a second. The time is
/// not asserted (it depends on the machine): a quadratic step makes this
/// test hang, which is what it guards against.
#[test]
fn a_large_workload_is_imported_in_linear_time() {
    const JOBS: usize = 200_000;
    let dir = sia_dir();
    let types = parse_cluster("aws=1").unwrap();
    let mut csv = String::from("name,time,application,num_replicas,batch_size\n");
    for i in 0..JOBS {
        // Names with a long common prefix: each comparison of the old scan
        // was as slow as it gets.
        csv.push_str(&format!("bert-of-a-large-workload-{i},{i},bert,2,8\n"));
    }
    let imp = import(&csv, "w.csv", dir.path(), &types, Shapes::Submitted).unwrap();
    assert_eq!(imp.summary.jobs, JOBS);
    assert_eq!(imp.summary.kinds.len(), 1);
    assert_eq!(imp.summary.kinds[0].jobs, JOBS);
    assert_eq!(imp.jobs.matches("[[job]]").count(), JOBS);
    // A duplicate at the very end is still found, with both lines.
    csv.push_str("bert-of-a-large-workload-0,0,bert,2,8\n");
    let e = read_workload(&csv, "w.csv").unwrap_err().to_string();
    let last = JOBS + 2;
    assert!(
        e.contains(&format!("w.csv:{last}")) && e.contains("first on line 2"),
        "{e}"
    );
}

/// The jobs file is written a job at a time, each kind's table serialized
/// once and each job's name and arrival put in it: its bytes are those of
/// the whole document, for every shape, whatever the names (quotes,
/// backslashes, a name that looks like a line of the table) and arrivals.
#[test]
fn a_jobs_file_written_a_job_at_a_time_is_the_whole_document() {
    let dir = scaling_sia_dir();
    let types = parse_cluster("aws=1").unwrap();
    let csv = "name,time,application,num_replicas,batch_size\n\
               b-0,0,bert,1,4\nb-1,5,bert,2,8\nb-2,7.5,bert,4,4\n\
               \"q\"\"uote\",1e8,bert,1,4\nback\\slash,123456789.125,bert,2,8\n\
               it's,0.1,bert,1,4\n\u{fc}n\u{ef} c\u{f6}de,3,bert,4,4\n\
               arrival = 5,5,bert,1,4\n\"a,b\",0.30000000000000004,bert,1,4\n";
    let jobs = read_workload(csv, "w.csv").unwrap();
    for shapes in [
        Shapes::Submitted,
        Shapes::Tuned {
            min_efficiency: 0.1,
            elastic: false,
        },
        Shapes::Tuned {
            min_efficiency: 0.75,
            elastic: true,
        },
    ] {
        let kinds = kinds_of(&jobs, dir.path(), &types, shapes).unwrap();
        let whole = toml::to_string(&JobsFile {
            job: jobs
                .iter()
                .map(|j| job_entry(j, &kinds[&kind_key(j, shapes)], &types))
                .collect(),
        })
        .unwrap();
        // Every job's table is a template's (none serialized whole).
        for j in &jobs {
            let table = job_table(j, &kinds[&kind_key(j, shapes)], &types);
            let own = own_lines(j).unwrap();
            let mut filled = String::new();
            Template::of(&table, &own).unwrap().fill(&own, &mut filled);
            assert_eq!(filled, table);
        }
        let file = jobs_file(&jobs, &kinds, shapes, &types, "w.csv");
        let body = &file[file.find("[[job]]").unwrap()..];
        assert_eq!(body, whole, "{shapes:?}");
    }
}
