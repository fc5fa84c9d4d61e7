use proptest::prelude::*;

use super::env::tasks_per_node;
use super::*;

/// The shard that `vars` (`NAME=value` pairs) describe.
fn read(vars: &[(&str, &str)]) -> Result<Shard, MemError> {
    Shard::from_vars(|name| {
        vars.iter()
            .find(|(set, _)| *set == name)
            .map(|(_, value)| (*value).to_owned())
    })
}

/// The variables and the reason of the error `vars` give; fails when they
/// give a shard.
fn error(vars: &[(&str, &str)]) -> (Vec<(&'static str, String)>, ShardError) {
    match read(vars) {
        Ok(shard) => panic!("{vars:?} gave {shard}"),
        Err(MemError::Shard { variables, reason }) => (variables, reason),
        Err(other) => panic!("{vars:?} gave another error: {other}"),
    }
}

/// The reason of the error `vars` give.
fn reason(vars: &[(&str, &str)]) -> ShardError {
    error(vars).1
}

/// `NAME=value` pairs as an error's variables hold them.
fn set(vars: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    vars.iter()
        .map(|&(name, value)| (name, value.to_owned()))
        .collect()
}

fn figures(shard: &Shard) -> (usize, usize, usize, usize, Launcher) {
    (
        shard.rank(),
        shard.size(),
        shard.local_rank(),
        shard.local_size(),
        shard.launcher(),
    )
}

/// Slurm's variables for task `rank`, local rank `local` on node `node`,
/// of a step of 7 tasks placed 3, 3 and 1 on three nodes.
fn slurm_step(
    rank: &'static str,
    local: &'static str,
    node: &'static str,
) -> Vec<(&'static str, &'static str)> {
    vec![
        ("SLURM_PROCID", rank),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_STEP_NUM_TASKS", "7"),
        ("SLURM_NTASKS", "7"),
        ("SLURM_LOCALID", local),
        ("SLURM_NODEID", node),
        ("SLURM_STEP_TASKS_PER_NODE", "3(x2),1"),
        ("SLURM_TASKS_PER_NODE", "3(x2),1"),
    ]
}

#[test]
fn no_launcher_is_one_process() {
    let shard = read(&[("HOME", "/root"), ("SLURM_JOB_ID", "12")]).unwrap();
    assert_eq!(shard, Shard::single());
    assert_eq!(figures(&shard), (0, 1, 0, 1, Launcher::Single));
    assert_eq!(shard.runs(10), 0..10);
    assert_eq!(shard.devices(3), 0..3);
    // Empty values count as unset.
    assert_eq!(
        read(&[("OMPI_COMM_WORLD_RANK", ""), ("PMIX_RANK", " ")]).unwrap(),
        Shard::single()
    );
}

#[test]
fn open_mpi() {
    let shard = read(&[
        ("OMPI_COMM_WORLD_RANK", "4"),
        ("OMPI_COMM_WORLD_SIZE", "6"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "3"),
        ("PMIX_RANK", "4"),
    ])
    .unwrap();
    assert_eq!(figures(&shard), (4, 6, 1, 3, Launcher::OpenMpi));
}

#[test]
fn hydra() {
    let shard = read(&[
        ("PMI_RANK", "2"),
        ("PMI_SIZE", "4"),
        ("MPI_LOCALRANKID", "0"),
        ("MPI_LOCALNRANKS", "2"),
        // Left by an srun that started Hydra's proxies: not read.
        ("PMIX_RANK", "1"),
    ])
    .unwrap();
    assert_eq!(figures(&shard), (2, 4, 0, 2, Launcher::Hydra));
}

#[test]
fn slurm_step_picks_its_node_of_the_tasks_per_node_list() {
    let first = read(&slurm_step("1", "1", "0")).unwrap();
    assert_eq!(figures(&first), (1, 7, 1, 3, Launcher::Slurm));
    let last = read(&slurm_step("6", "0", "2")).unwrap();
    assert_eq!(figures(&last), (6, 7, 0, 1, Launcher::Slurm));
    // With srun --mpi=pmix, PMIX_RANK is the same rank.
    let mut pmix = slurm_step("6", "0", "2");
    pmix.push(("PMIX_RANK", "6"));
    assert_eq!(read(&pmix).unwrap(), last);
}

#[test]
fn slurm_falls_back_to_the_allocations_figures() {
    // SLURM_STEPID marks a step; size and list from SLURM_NTASKS and
    // SLURM_TASKS_PER_NODE.
    let shard = read(&[
        ("SLURM_PROCID", "3"),
        ("SLURM_STEPID", "2"),
        ("SLURM_NTASKS", "5"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_NODEID", "1"),
        ("SLURM_TASKS_PER_NODE", "3,2"),
    ])
    .unwrap();
    assert_eq!(figures(&shard), (3, 5, 0, 2, Launcher::Slurm));
    // SLURM_NTASKS_PER_NODE when no list is set.
    let shard = read(&[
        ("SLURM_PROCID", "3"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NTASKS_PER_NODE", "2"),
    ])
    .unwrap();
    assert_eq!(figures(&shard), (3, 4, 1, 2, Launcher::Slurm));
    // One count for every node needs no SLURM_NODEID.
    let shard = read(&[
        ("SLURM_PROCID", "5"),
        ("SLURM_STEP_NUM_TASKS", "8"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_STEP_TASKS_PER_NODE", "4(x2)"),
    ])
    .unwrap();
    assert_eq!(figures(&shard), (5, 8, 1, 4, Launcher::Slurm));
}

#[test]
fn tasks_per_node_forms() {
    assert_eq!(tasks_per_node("4"), Some(vec![(4, 1)]));
    assert_eq!(tasks_per_node("4(x2),3"), Some(vec![(4, 2), (3, 1)]));
    assert_eq!(tasks_per_node("2(x3),1"), Some(vec![(2, 3), (1, 1)]));
    assert_eq!(tasks_per_node("1(x4)"), Some(vec![(1, 4)]));
    assert_eq!(tasks_per_node("1,2,3"), Some(vec![(1, 1), (2, 1), (3, 1)]));
    for bad in [
        "", "x", "4(x)", "4(x2", "(x2)", "4(x0)", "-1", "4(x2),", "4x2", "4(2)", "a,1",
    ] {
        assert_eq!(tasks_per_node(bad), None, "{bad:?}");
    }
}

#[test]
fn slurm_list_errors_name_the_list() {
    const LIST: &str = "SLURM_STEP_TASKS_PER_NODE";
    let mut bad = slurm_step("1", "1", "0");
    bad.retain(|(name, _)| !name.ends_with("TASKS_PER_NODE"));
    bad.push((LIST, "3(x2"));
    assert_eq!(
        reason(&bad),
        ShardError::TasksPerNodeMalformed {
            variable: LIST,
            list: "3(x2".into()
        }
    );

    assert_eq!(
        reason(&slurm_step("1", "1", "3")),
        ShardError::NodeIdPastList {
            node: 3,
            nodes: 3,
            variable: LIST,
            list: "3(x2),1".into()
        }
    );

    let mut sum = slurm_step("1", "1", "0");
    sum[2].1 = "6";
    assert_eq!(
        reason(&sum),
        ShardError::TasksPerNodeTotal {
            variable: LIST,
            list: "3(x2),1".into(),
            total: Some(7),
            size_variable: "SLURM_STEP_NUM_TASKS",
            size: 6
        }
    );

    let huge = [
        ("SLURM_PROCID", "0"),
        ("SLURM_STEP_NUM_TASKS", "2"),
        ("SLURM_LOCALID", "0"),
        (LIST, "18446744073709551615(x2)"),
    ];
    assert!(matches!(
        reason(&huge),
        ShardError::TasksPerNodeTotal {
            total: None,
            size: 2,
            ..
        }
    ));

    let mut unknown_node = slurm_step("1", "1", "0");
    unknown_node.retain(|(name, _)| *name != "SLURM_NODEID");
    assert_eq!(
        reason(&unknown_node),
        ShardError::NodeIdUnset {
            variable: LIST,
            list: "3(x2),1".into()
        }
    );

    let mut no_list = slurm_step("1", "1", "0");
    no_list.retain(|(name, _)| !name.ends_with("TASKS_PER_NODE"));
    assert_eq!(reason(&no_list), ShardError::TasksPerNodeUnset);
}

#[test]
fn a_batch_script_of_several_tasks_is_refused() {
    // What a batch script of 4 tasks sees: no step variables.
    let script = [
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_NODEID", "0"),
        ("SLURM_TASKS_PER_NODE", "1(x4)"),
    ];
    assert_eq!(
        error(&script),
        (set(&script), ShardError::SlurmBatchScript { tasks: 4 })
    );
    // A job of one task: one process.
    let mut one = script;
    one[1].1 = "1";
    one[4].1 = "1";
    assert_eq!(figures(&read(&one).unwrap()), (0, 1, 0, 1, Launcher::Slurm));
}

#[test]
fn an_mpi_launcher_inside_slurm_is_read_not_slurm() {
    // mpirun in a batch script: its ranks inherit the script's variables.
    let shard = read(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "8"),
        ("OMPI_COMM_WORLD_RANK", "5"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
    ])
    .unwrap();
    assert_eq!(figures(&shard), (5, 8, 1, 4, Launcher::OpenMpi));
    let mut step = slurm_step("1", "0", "1");
    step.extend([
        ("PMI_RANK", "3"),
        ("PMI_SIZE", "4"),
        ("MPI_LOCALRANKID", "1"),
        ("MPI_LOCALNRANKS", "2"),
    ]);
    assert_eq!(
        figures(&read(&step).unwrap()),
        (3, 4, 1, 2, Launcher::Hydra)
    );
}

#[test]
fn launchers_that_disagree_are_refused() {
    let ompi = [
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
    ];
    let hydra = |rank| {
        let mut vars = ompi.to_vec();
        vars.extend([
            ("PMI_RANK", rank),
            ("PMI_SIZE", "2"),
            ("MPI_LOCALRANKID", rank),
            ("MPI_LOCALNRANKS", "2"),
        ]);
        vars
    };
    assert_eq!(read(&hydra("1")).unwrap().launcher(), Launcher::OpenMpi);
    let (variables, disagree) = error(&hydra("0"));
    assert_eq!(variables, set(&hydra("0")));
    let ShardError::LaunchersDisagree { open_mpi, hydra } = disagree else {
        panic!("{disagree:?}");
    };
    assert_eq!(figures(&open_mpi), (1, 2, 1, 2, Launcher::OpenMpi));
    assert_eq!(figures(&hydra), (0, 2, 0, 2, Launcher::Hydra));

    let mut pmix = ompi.to_vec();
    pmix.push(("PMIX_RANK", "0"));
    assert_eq!(
        reason(&pmix),
        ShardError::PmixRankDisagrees {
            launcher: Launcher::OpenMpi,
            rank: 1,
            pmix_rank: 0
        }
    );
    let mut pmix = slurm_step("2", "2", "0");
    pmix.push(("PMIX_RANK", "9"));
    assert_eq!(
        reason(&pmix),
        ShardError::PmixRankDisagrees {
            launcher: Launcher::Slurm,
            rank: 2,
            pmix_rank: 9
        }
    );
}

#[test]
fn pmi_alone_is_not_enough() {
    let alone = [("PMIX_RANK", "3")];
    assert_eq!(error(&alone), (set(&alone), ShardError::PmixRankAlone));
    let pmi = [("PMI_RANK", "1"), ("PMI_SIZE", "2")];
    assert_eq!(error(&pmi), (set(&pmi), ShardError::PmiWithoutLocalRanks));
}

#[test]
fn inconsistent_figures_are_refused_with_their_variables() {
    let ompi = |rank, size, local_rank, local_size| {
        [
            ("OMPI_COMM_WORLD_RANK", rank),
            ("OMPI_COMM_WORLD_SIZE", size),
            ("OMPI_COMM_WORLD_LOCAL_RANK", local_rank),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", local_size),
        ]
    };
    let open_mpi = Launcher::OpenMpi;
    let vars = ompi("3", "3", "0", "1");
    assert_eq!(
        error(&vars),
        (
            set(&vars),
            ShardError::RankNotBelowSize {
                rank: 3,
                size: 3,
                launcher: open_mpi
            }
        )
    );
    assert_eq!(
        reason(&ompi("0", "3", "2", "2")),
        ShardError::LocalRankNotBelowLocalSize {
            local_rank: 2,
            local_size: 2,
            launcher: open_mpi
        }
    );
    assert_eq!(
        reason(&ompi("0", "3", "0", "4")),
        ShardError::LocalSizeAboveSize {
            local_size: 4,
            size: 3,
            launcher: open_mpi
        }
    );
    assert_eq!(
        reason(&ompi("0", "0", "0", "0")),
        ShardError::RankNotBelowSize {
            rank: 0,
            size: 0,
            launcher: open_mpi
        }
    );
    for rank in ["one", "-1", "18446744073709551616"] {
        assert_eq!(
            reason(&ompi(rank, "3", "0", "1")),
            ShardError::NotANumber {
                variable: "OMPI_COMM_WORLD_RANK",
                value: rank.into()
            }
        );
    }

    assert_eq!(
        reason(&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")]),
        ShardError::Unset {
            variable: "OMPI_COMM_WORLD_LOCAL_RANK",
            launcher: open_mpi
        }
    );
    assert_eq!(
        reason(&[("MPI_LOCALRANKID", "0")]),
        ShardError::Unset {
            variable: "PMI_RANK",
            launcher: Launcher::Hydra
        }
    );

    let mut slurm = slurm_step("7", "0", "2");
    assert_eq!(
        reason(&slurm),
        ShardError::RankNotBelowSize {
            rank: 7,
            size: 7,
            launcher: Launcher::Slurm
        }
    );
    slurm[0].1 = "6";
    slurm[4].1 = "x";
    assert_eq!(
        reason(&slurm),
        ShardError::NotANumber {
            variable: "SLURM_LOCALID",
            value: "x".into()
        }
    );
}

#[test]
fn by_hand() {
    let shard = Shard::new(2, 3, 0, 1).unwrap();
    assert_eq!(figures(&shard), (2, 3, 0, 1, Launcher::Manual));
    assert_eq!(
        shard.to_string(),
        "rank 2 of 3 (local rank 0 of 1 on its node; given by hand)"
    );
    let manual = Launcher::Manual;
    assert_eq!(
        Shard::new(1, 2, 2, 2).unwrap_err(),
        MemError::Shard {
            variables: set(&[
                ("rank", "1"),
                ("size", "2"),
                ("local_rank", "2"),
                ("local_size", "2")
            ]),
            reason: ShardError::LocalRankNotBelowLocalSize {
                local_rank: 2,
                local_size: 2,
                launcher: manual
            }
        }
    );
    assert!(matches!(
        Shard::new(0, 1, 0, 2),
        Err(MemError::Shard {
            reason: ShardError::LocalSizeAboveSize {
                local_size: 2,
                size: 1,
                launcher: Launcher::Manual
            },
            ..
        })
    ));
    assert!(matches!(
        Shard::new(0, 0, 0, 0),
        Err(MemError::Shard {
            reason: ShardError::RankNotBelowSize {
                rank: 0,
                size: 0,
                ..
            },
            ..
        })
    ));
}

#[test]
fn runs_and_devices_by_example() {
    let runs = |rank, size, total| Shard::new(rank, size, 0, 1).unwrap().runs(total);
    assert_eq!(
        [runs(0, 3, 10), runs(1, 3, 10), runs(2, 3, 10)],
        [0..4, 4..7, 7..10]
    );
    assert_eq!(runs(4, 5, 3), 3..3);
    assert_eq!(runs(1, 2, usize::MAX), usize::MAX / 2 + 1..usize::MAX);
    let devices = |local_rank, local_size, visible| {
        Shard::new(local_rank, local_size, local_rank, local_size)
            .unwrap()
            .devices(visible)
    };
    assert_eq!(devices(0, 1, 4), 0..4);
    assert_eq!([devices(0, 2, 2), devices(1, 2, 2)], [0..1, 1..2]);
    assert_eq!([devices(0, 2, 3), devices(1, 2, 3)], [0..2, 2..3]);
    assert_eq!([devices(2, 3, 2), devices(1, 3, 2)], [0..1, 1..2]);
    assert_eq!(devices(0, 1, 0), 0..0);
}

proptest! {
    #![proptest_config(crate::proptest_cases(256))]
    #[test]
    fn every_run_belongs_to_one_rank(
        size in 1usize..64,
        total in prop_oneof![0usize..10_000, any::<usize>()],
    ) {
        let ranges: Vec<Range<usize>> = (0..size)
            .map(|rank| Shard::new(rank, size, 0, 1).unwrap().runs(total))
            .collect();
        prop_assert_eq!(ranges[0].start, 0);
        prop_assert_eq!(ranges[size - 1].end, total);
        for pair in ranges.windows(2) {
            prop_assert_eq!(pair[0].end, pair[1].start);
        }
        let lengths = ranges.iter().map(|r| r.end - r.start);
        let (shortest, longest) = (lengths.clone().min().unwrap(), lengths.max().unwrap());
        prop_assert!(longest - shortest <= 1);
        prop_assert_eq!(shortest, total / size);
    }

    #[test]
    fn the_ranks_of_a_node_use_its_devices_evenly(
        local_size in 1usize..24,
        visible in 0usize..40,
    ) {
        let mut users = vec![0usize; visible];
        let mut blocks = Vec::new();
        for local_rank in 0..local_size {
            let shard = Shard::new(local_rank, local_size, local_rank, local_size).unwrap();
            let devices = shard.devices(visible);
            prop_assert!(devices.end <= visible);
            prop_assert_eq!(devices.is_empty(), visible == 0);
            devices.clone().for_each(|device| users[device] += 1);
            blocks.push(devices);
        }
        if visible == 0 {
            return Ok(());
        }
        // Every device is used, by ranks whose counts differ by at most one.
        let (fewest, most) = (users.iter().min().unwrap(), users.iter().max().unwrap());
        prop_assert!(*fewest >= 1 && most - fewest <= 1, "{users:?}");
        if local_size <= visible {
            // Disjoint blocks in order, each of visible / local_size or one more.
            prop_assert!(users.iter().all(|&n| n == 1));
            for pair in blocks.windows(2) {
                prop_assert_eq!(pair[0].end, pair[1].start);
            }
            let sizes = blocks.iter().map(|b| b.len());
            prop_assert!(sizes.clone().max().unwrap() - sizes.min().unwrap() <= 1);
        } else {
            prop_assert!(blocks.iter().all(|b| b.len() == 1));
        }
    }
}
