//! `Shard` from outside the crate: the layouts a launcher gives, read from
//! variables set by hand, and what each rank takes of the runs and devices.

use std::collections::HashMap;

use cubie_mem::{Launcher, MemError, Shard, ShardError};

/// The shard that the variables `vars` describe.
fn read(vars: &HashMap<&str, String>) -> Result<Shard, MemError> {
    Shard::from_vars(|name| vars.get(name).cloned())
}

/// Each rank's (runs, devices) for a job whose ranks have `shards`.
fn layout(
    shards: &[Shard],
    total_runs: usize,
    visible: usize,
) -> Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> {
    shards
        .iter()
        .map(|shard| (shard.runs(total_runs), shard.devices(visible)))
        .collect()
}

#[test]
fn slurm_two_ranks_on_two_nodes_of_two_devices() {
    // srun -N2 -n2: one task per node, each node with 2 GPUs.
    let shards: Vec<Shard> = (0..2)
        .map(|rank| {
            let vars = HashMap::from([
                ("SLURM_PROCID", rank.to_string()),
                ("SLURM_STEP_ID", "0".into()),
                ("SLURM_STEP_NUM_TASKS", "2".into()),
                ("SLURM_NTASKS", "2".into()),
                ("SLURM_LOCALID", "0".into()),
                ("SLURM_NODEID", rank.to_string()),
                ("SLURM_STEP_TASKS_PER_NODE", "1(x2)".into()),
            ]);
            read(&vars).unwrap()
        })
        .collect();
    assert!(
        shards
            .iter()
            .all(|s| s.launcher() == Launcher::Slurm && s.local_size() == 1)
    );
    assert_eq!(
        layout(&shards, 1001, 2),
        [(0..501, 0..2), (501..1001, 0..2)]
    );
}

#[test]
fn open_mpi_three_ranks_on_one_node() {
    // mpirun -np 3 on one node: local ranks 0..3 of 3.
    let shards: Vec<Shard> = (0..3)
        .map(|rank| {
            let vars = HashMap::from([
                ("OMPI_COMM_WORLD_RANK", rank.to_string()),
                ("OMPI_COMM_WORLD_SIZE", "3".into()),
                ("OMPI_COMM_WORLD_LOCAL_RANK", rank.to_string()),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "3".into()),
            ]);
            read(&vars).unwrap()
        })
        .collect();
    assert!(shards.iter().all(|s| s.launcher() == Launcher::OpenMpi));
    // 3 ranks on 6 devices: 2 each; on 2 devices, shared round-robin.
    assert_eq!(
        layout(&shards, 10, 6),
        [(0..4, 0..2), (4..7, 2..4), (7..10, 4..6)]
    );
    assert_eq!(
        layout(&shards, 10, 2),
        [(0..4, 0..1), (4..7, 1..2), (7..10, 0..1)]
    );
}

#[test]
fn inconsistent_variables_are_a_shard_error() {
    let vars = HashMap::from([
        ("PMI_RANK", "4".to_string()),
        ("PMI_SIZE", "4".into()),
        ("MPI_LOCALRANKID", "0".into()),
        ("MPI_LOCALNRANKS", "1".into()),
    ]);
    let error = read(&vars).unwrap_err();
    assert!(
        matches!(&error, MemError::Shard { variables, reason }
        if variables[..2] == [("PMI_RANK", "4".to_owned()), ("PMI_SIZE", "4".to_owned())]
            && *reason == ShardError::RankNotBelowSize {
                rank: 4,
                size: 4,
                launcher: Launcher::Hydra,
            }),
        "{error:?}"
    );
}

#[test]
fn no_launcher_runs_everything_on_every_device() {
    let shard = read(&HashMap::new()).unwrap();
    assert_eq!(shard, Shard::single());
    assert_eq!(layout(&[shard], 7, 3), [(0..7, 0..3)]);
}
