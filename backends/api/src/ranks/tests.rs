use super::*;
use crate::NodeGpus;

fn spec(ranks: Ranks, placement: &[(&str, &[(u32, &str)])]) -> TaskSpec {
    TaskSpec {
        run: "r".into(),
        job: 3,
        job_name: "j".into(),
        copy: 0,
        round: 1,
        placement: placement
            .iter()
            .map(|(node, gpus)| NodeGpus {
                node: node.to_string(),
                gpus: gpus.iter().map(|g| g.0).collect(),
                gpu_types: gpus.iter().map(|g| g.1.to_string()).collect(),
            })
            .collect(),
        argv: vec!["t".into()],
        env: vec![("RANK".into(), "9".into()), ("MINE".into(), "1".into())],
        workdir: "/w".into(),
        inputs: vec![],
        total_iterations: 10,
        deadline_unix_s: 0.0,
        seed: 0,
        token: "tok".into(),
        options: toml::Table::new(),
        ranks,
        rendezvous: Some(Rendezvous {
            addr: "10.0.0.1".into(),
            port: 29500,
        }),
        batch_shares: vec![],
    }
}

fn get<'a>(env: &'a [(String, String)], k: &str) -> Option<&'a str> {
    env.iter()
        .find(|(key, _)| key == k)
        .map(|(_, v)| v.as_str())
}

#[test]
fn a_rank_per_gpu_across_nodes_gets_torchruns_variables() {
    let s = spec(
        Ranks::Gpu,
        &[("a", &[(0, "v100"), (1, "v100")]), ("b", &[(3, "k80")])],
    );
    let ranks = s.ranks();
    assert_eq!(ranks.len(), 3);
    assert_eq!(
        ranks
            .iter()
            .map(|r| (r.rank, r.node, r.local_rank))
            .collect::<Vec<_>>(),
        vec![(0, 0, 0), (1, 0, 1), (2, 1, 0)]
    );
    let env = s.rank_environment(&ranks[2]);
    for (k, v) in [
        ("HADAR_PROTOCOL", "2"),
        ("RANK", "2"),
        ("LOCAL_RANK", "0"),
        ("WORLD_SIZE", "3"),
        ("LOCAL_WORLD_SIZE", "1"),
        ("GROUP_RANK", "1"),
        ("GROUP_WORLD_SIZE", "2"),
        ("MASTER_ADDR", "10.0.0.1"),
        ("MASTER_PORT", "29500"),
        ("CUDA_VISIBLE_DEVICES", "3"),
        ("HADAR_GPU_TYPE", "k80"),
        ("HADAR_NODE", "b"),
        ("HADAR_BATCH_SHARE", "0.333333"),
        ("MINE", "1"),
    ] {
        assert_eq!(get(&env, k), Some(v), "{k}");
    }
    // The job's own RANK never overrides the protocol's; each key once.
    assert_eq!(env.iter().filter(|(k, _)| k == "RANK").count(), 1);
    assert_eq!(
        env.iter()
            .filter(|(k, _)| k == "CUDA_VISIBLE_DEVICES")
            .count(),
        1
    );
}

#[test]
fn a_rank_per_node_holds_the_nodes_gpus_and_shares_follow_speed() {
    let mut s = spec(
        Ranks::Node,
        &[("a", &[(0, "v100"), (1, "v100")]), ("b", &[(3, "k80")])],
    );
    s.batch_shares = vec![3.0, 3.0, 2.0];
    let ranks = s.ranks();
    assert_eq!(ranks.len(), 2);
    assert_eq!(ranks[0].gpus, vec![0, 1]);
    assert!((ranks[0].batch_share - 0.75).abs() < 1e-12);
    assert!((ranks[1].batch_share - 0.25).abs() < 1e-12);
    assert_eq!(
        get(&s.rank_environment(&ranks[0]), "CUDA_VISIBLE_DEVICES"),
        Some("0,1")
    );
    // Shares that do not fit the placement are replaced by equal ones.
    s.batch_shares = vec![1.0, f64::NAN, 1.0];
    assert!((s.ranks()[0].batch_share - 2.0 / 3.0).abs() < 1e-12);
}

#[test]
fn version_one_is_one_process_with_the_leading_nodes_gpus_and_no_rank_variables() {
    let s = spec(Ranks::Task, &[("a", &[(0, "v100"), (2, "v100")])]);
    let ranks = s.ranks();
    assert_eq!(ranks.len(), 1);
    let env = s.rank_environment(&ranks[0]);
    assert_eq!(env, s.environment());
    assert_eq!(get(&env, "HADAR_PROTOCOL"), Some("1"));
    // A version-1 job may set torchrun's variables itself.
    assert_eq!(get(&env, "RANK"), Some("9"));
    assert_eq!(get(&env, "WORLD_SIZE"), None);
    assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some("0,2"));
}

#[test]
fn handle_ids_list_ranks_and_keep_the_plain_form_for_one() {
    let h = |id: &str| TaskHandle {
        id: id.into(),
        nodes: vec!["a".into(), "b".into()],
        workdir: "/w".into(),
        token: "t".into(),
    };
    assert_eq!(rank_ids(&h("42")).unwrap(), vec![(0, "42".to_string())]);
    let ids = vec![(0, "42".to_string()), (1, "7".to_string())];
    assert_eq!(join_rank_ids(&ids), "0:42,1:7");
    assert_eq!(rank_ids(&h("0:42,1:7")).unwrap(), ids);
    assert_eq!(join_rank_ids(&ids[..1]), "42");
    for bad in ["0:42,2:7", "0:42,x:7", "0:", "0:42,"] {
        assert!(rank_ids(&h(bad)).is_err(), "{bad}");
    }
}

#[test]
fn a_gang_breaks_when_one_rank_fails_and_ends_when_all_have() {
    use TaskState::{Broken, Exited, Running};
    let ok = Exited { code: Some(0) };
    assert_eq!(gang_state(&[Running, Running]), Running);
    // A clean exit while another rank finishes: still running.
    assert_eq!(gang_state(&[ok, Running]), Running);
    assert_eq!(
        gang_state(&[Running, Exited { code: Some(3) }]),
        Broken {
            rank: 1,
            code: Some(3)
        }
    );
    assert_eq!(
        gang_state(&[Running, Exited { code: None }]),
        Broken {
            rank: 1,
            code: None
        }
    );
    assert_eq!(gang_state(&[ok, ok]), ok);
    assert_eq!(
        gang_state(&[ok, Exited { code: Some(2) }]),
        Exited { code: Some(2) }
    );
    assert_eq!(gang_state(&[Exited { code: None }]), Exited { code: None });
    assert_eq!(gang_state(&[Running]), Running);
}

#[tokio::test]
async fn ranks_launch_side_by_side_and_a_failure_undoes_the_started_ones() {
    let s = spec(
        Ranks::Gpu,
        &[("a", &[(0, "v100"), (1, "v100")]), ("b", &[(0, "k80")])],
    );
    let h = launch_ranks(
        &s,
        |r| async move { Ok(format!("p{}", r.rank)) },
        |_| async { panic!("nothing to undo") },
    )
    .await
    .expect("launch");
    assert_eq!(h.id, "0:p0,0:p1,1:p2", "ids in rank order with their nodes");
    assert_eq!(h.nodes, ["a", "b"]);

    let undone = std::sync::Mutex::new(Vec::new());
    let err = launch_ranks(
        &s,
        |r| async move {
            if r.rank == 1 {
                Err(BackendError::Launch {
                    node: "a".into(),
                    message: "rank 1 cannot start".into(),
                })
            } else {
                Ok(format!("p{}", r.rank))
            }
        },
        |started| {
            let undone = &undone;
            async move {
                undone
                    .lock()
                    .unwrap()
                    .extend(started.into_iter().map(|(r, id)| (r.rank, id)));
            }
        },
    )
    .await
    .expect_err("rank 1 failed");
    let err = err.to_string();
    assert!(
        err.contains("node a") && err.contains("rank 1 of 3: rank 1 cannot start"),
        "{err}"
    );
    assert_eq!(
        *undone.lock().unwrap(),
        [(0, "p0".to_string()), (2, "p2".to_string())],
        "every rank that started, and only those"
    );
}

#[test]
fn a_launch_needs_a_command_and_a_version_one_task_one_node() {
    let two_nodes = [("a", &[(0, "v100")][..]), ("b", &[(0, "k80")][..])];
    assert!(check_launch(&spec(Ranks::Gpu, &two_nodes)).is_ok());
    let err = check_launch(&spec(Ranks::Task, &two_nodes))
        .expect_err("version 1 on two nodes")
        .to_string();
    assert!(
        err.contains("job j") && err.contains("set `ranks`"),
        "{err}"
    );
    let mut empty = spec(Ranks::Task, &two_nodes[..1]);
    empty.argv.clear();
    assert!(check_launch(&empty)
        .expect_err("no command")
        .to_string()
        .contains("empty command"));
}

#[test]
fn a_whole_gang_is_every_rank_of_one_world() {
    assert!(whole_gang(&[(0, 1)]));
    assert!(whole_gang(&[(0, 3), (1, 3), (2, 3)]));
    for part in [
        &[][..],
        &[(0, 2)],
        &[(1, 2)],
        &[(0, 2), (1, 3)],
        &[(0, 2), (0, 2)],
        &[(0, 2), (2, 2)],
    ] {
        assert!(!whole_gang(part), "{part:?}");
    }
}
