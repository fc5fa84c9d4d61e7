//! What a shard error's reason says to the user who reads it: the
//! variables and figures at fault, and the fix. One test per `ShardError`
//! variant, each made the way a process meets it; every other test asserts
//! on the variant and its fields (`error_messages.rs` checks the
//! `MemError::Shard` around it).

use cubie_mem::{MemError, Shard, ShardError};

/// The fix of every reason about figures a launcher set.
const FIX: &str = "these come from the launcher: start the program with it, and unset any of \
                   them set by hand or left from another job";

/// The reason of the error that the variables `vars` give.
fn reason(vars: &[(&str, &str)]) -> ShardError {
    let lookup = |name: &str| {
        vars.iter()
            .find(|(set, _)| *set == name)
            .map(|(_, value)| (*value).to_owned())
    };
    match Shard::from_vars(lookup) {
        Err(MemError::Shard { reason, .. }) => reason,
        other => panic!("{vars:?} gave {other:?}"),
    }
}

/// Open MPI's four variables.
fn open_mpi(figures: [&str; 4]) -> Vec<(&'static str, &str)> {
    let names = [
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ];
    names.into_iter().zip(figures).collect()
}

/// A Slurm step of 7 tasks placed 3, 3 and 1 on three nodes, seen from
/// task 1 on node `node`.
fn slurm_step(node: &str) -> Vec<(&'static str, &str)> {
    vec![
        ("SLURM_PROCID", "1"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_STEP_NUM_TASKS", "7"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NODEID", node),
        ("SLURM_STEP_TASKS_PER_NODE", "3(x2),1"),
    ]
}

#[test]
fn rank_not_below_size_message_names_both_and_the_fix_for_where_they_came_from() {
    let Err(MemError::Shard {
        reason: by_hand, ..
    }) = Shard::new(6, 6, 0, 1)
    else {
        panic!("Shard::new(6, 6, 0, 1) was accepted");
    };
    assert_eq!(
        by_hand.to_string(),
        "rank 6 is not below the job's size 6; give Shard::new the process's rank among the \
         job's size processes and its local rank among the local size processes of its node"
    );
    assert_eq!(
        reason(&open_mpi(["3", "3", "0", "1"])).to_string(),
        format!("rank 3 is not below the job's size 3; {FIX}")
    );
}

#[test]
fn local_rank_not_below_local_size_message_names_both() {
    assert_eq!(
        reason(&open_mpi(["0", "3", "2", "2"])).to_string(),
        format!("local rank 2 is not below the node's local size 2; {FIX}")
    );
}

#[test]
fn local_size_above_size_message_names_both() {
    assert_eq!(
        reason(&open_mpi(["0", "3", "0", "4"])).to_string(),
        format!("the node's local size 4 is more than the job's size 3; {FIX}")
    );
}

#[test]
fn not_a_number_message_names_the_variable_and_its_value() {
    assert_eq!(
        reason(&open_mpi(["one", "3", "0", "1"])).to_string(),
        format!("OMPI_COMM_WORLD_RANK=\"one\" is not a whole number; {FIX}")
    );
}

#[test]
fn unset_message_names_the_variable_and_the_launcher() {
    let vars = [("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")];
    assert_eq!(
        reason(&vars).to_string(),
        format!(
            "OMPI_COMM_WORLD_LOCAL_RANK is not set, and Open MPI's mpirun sets it beside the \
             others; {FIX}"
        )
    );
}

#[test]
fn launchers_disagree_message_names_both_shards() {
    let mut vars = open_mpi(["1", "2", "1", "2"]);
    vars.extend([
        ("PMI_RANK", "0"),
        ("PMI_SIZE", "2"),
        ("MPI_LOCALRANKID", "0"),
        ("MPI_LOCALNRANKS", "2"),
    ]);
    assert_eq!(
        reason(&vars).to_string(),
        "Open MPI's variables say rank 1 of 2 (local rank 1 of 2 on its node; Open MPI's mpirun) \
         but Hydra's say rank 0 of 2 (local rank 0 of 2 on its node; Hydra's mpiexec), and \
         nothing says which launcher started this process; unset the other one's"
    );
}

#[test]
fn pmix_rank_disagrees_message_names_both_ranks() {
    let mut vars = slurm_step("0");
    vars.push(("PMIX_RANK", "9"));
    assert_eq!(
        reason(&vars).to_string(),
        "Slurm's srun says rank 1 but PMIX_RANK says rank 9: the launcher that started this \
         process sets both alike, so one of them is left from another launch; unset it"
    );
}

#[test]
fn pmix_rank_alone_message_says_where_the_sizes_are() {
    assert_eq!(
        reason(&[("PMIX_RANK", "3")]).to_string(),
        "PMIx puts only the rank in the environment: the job's size and this node's processes \
         are in its library alone (PMIx_Get of PMIX_JOB_SIZE, PMIX_LOCAL_RANK and \
         PMIX_LOCAL_SIZE); build the shard with Shard::new from those (or from MPI_Comm_size and \
         an MPI_COMM_TYPE_SHARED split), or start the program with srun, Open MPI's mpirun or \
         Hydra's mpiexec, which set them"
    );
}

#[test]
fn pmi_without_local_ranks_message_names_the_missing_variables() {
    assert_eq!(
        reason(&[("PMI_RANK", "1"), ("PMI_SIZE", "2")]).to_string(),
        "PMI_RANK and PMI_SIZE without MPI_LOCALRANKID and MPI_LOCALNRANKS (which Hydra's \
         mpiexec sets beside them) do not say which processes share this node, and so which \
         devices this one takes; start the program with Hydra's mpiexec, srun or Open MPI's \
         mpirun, or build the shard with Shard::new"
    );
}

#[test]
fn slurm_batch_script_message_names_the_tasks_and_srun() {
    let vars = [
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_LOCALID", "0"),
    ];
    assert_eq!(
        reason(&vars).to_string(),
        "SLURM_PROCID is set but none of SLURM_STEP_ID, SLURM_STEPID, SLURM_STEP_NUM_TASKS is, as \
         in a batch script, whose job has 4 tasks: this one process would take 1/4 of the runs; \
         start the program with srun (one process per task), or unset SLURM_PROCID to run it as \
         one process"
    );
}

#[test]
fn slurm_size_unset_message_names_both_variables() {
    assert_eq!(
        reason(&[("SLURM_PROCID", "0"), ("SLURM_STEP_ID", "0")]).to_string(),
        format!("neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is set, and srun sets both; {FIX}")
    );
}

#[test]
fn tasks_per_node_unset_message_names_the_variables_and_shard_new() {
    let mut vars = slurm_step("0");
    vars.retain(|(name, _)| *name != "SLURM_STEP_TASKS_PER_NODE");
    assert_eq!(
        reason(&vars).to_string(),
        "none of SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE and SLURM_NTASKS_PER_NODE is \
         set, so the tasks on this node are not known (srun sets the first two); start the \
         program with srun, or build the shard with Shard::new"
    );
}

#[test]
fn tasks_per_node_malformed_message_shows_the_form() {
    let mut vars = slurm_step("0");
    vars[5].1 = "3(x2";
    assert_eq!(
        reason(&vars).to_string(),
        format!(
            "SLURM_STEP_TASKS_PER_NODE=\"3(x2\" is not a list of task counts per node like \
             4(x2),3 (two nodes of 4 tasks, then one of 3); {FIX}"
        )
    );
}

#[test]
fn tasks_per_node_total_message_names_both_counts() {
    let mut vars = slurm_step("0");
    vars[2].1 = "6";
    assert_eq!(
        reason(&vars).to_string(),
        format!(
            "SLURM_STEP_TASKS_PER_NODE=3(x2),1 places 7 task(s) but SLURM_STEP_NUM_TASKS=6: they \
             describe different launches; {FIX}"
        )
    );
    vars[5].1 = "18446744073709551615(x2)";
    assert_eq!(
        reason(&vars).to_string(),
        format!(
            "SLURM_STEP_TASKS_PER_NODE=18446744073709551615(x2) places more than fit in a number \
             task(s) but SLURM_STEP_NUM_TASKS=6: they describe different launches; {FIX}"
        )
    );
}

#[test]
fn node_id_past_list_message_names_the_node_and_the_list() {
    assert_eq!(
        reason(&slurm_step("3")).to_string(),
        format!("SLURM_NODEID=3 is past the 3 node(s) of SLURM_STEP_TASKS_PER_NODE=3(x2),1; {FIX}")
    );
}

#[test]
fn node_id_unset_message_names_the_list() {
    let mut vars = slurm_step("0");
    vars.retain(|(name, _)| *name != "SLURM_NODEID");
    assert_eq!(
        reason(&vars).to_string(),
        format!(
            "SLURM_NODEID is not set, and SLURM_STEP_TASKS_PER_NODE=3(x2),1 gives the nodes \
             different task counts, so this node's is not known (srun sets SLURM_NODEID); {FIX}"
        )
    );
}
