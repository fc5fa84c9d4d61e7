//! The overlapped pipeline on the fake driver, read back from its order log:
//! the upload of chunk k + 1 and the download of chunk k - 1 are not ordered
//! after the kernel of chunk k (so a GPU may overlap them, as the simulated
//! device models), while every order the data needs is there, and no memory
//! is used before its allocation or after its free.

use std::collections::BTreeMap;

use cubie_mem::cuda::{CudaBackend, DeviceView, GroupStream};
use cubie_mem::{
    ArrayRequest, ChunkPlan, ChunkTarget, DeviceArray, HostMemoryKind, MemError, MemoryKind,
    PinnedArray, Registration,
};
use cubie_mem_examples::euler_decay::EulerDecay;
use serde_json::Value;

use super::*;

const CHUNKS: usize = 6;
const CHUNK_RUNS: usize = 4096;
const DT: f64 = 0.01;

/// One operation of the order log.
#[derive(Debug)]
struct Op {
    kind: String,
    stream: u64,
    seq: u64,
    clock: BTreeMap<u64, u64>,
}

impl Op {
    fn parse(line: &str) -> Op {
        let value: Value = serde_json::from_str(line).unwrap();
        let number = |key: &str| {
            value[key]
                .as_u64()
                .unwrap_or_else(|| panic!("{key} in {line}"))
        };
        Op {
            kind: value["kind"].as_str().unwrap().to_owned(),
            stream: number("stream"),
            seq: number("seq"),
            clock: value["clock"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(stream, seq)| (stream.parse().unwrap(), seq.as_u64().unwrap()))
                .collect(),
        }
    }

    /// Whether the device must finish `self` before it starts `later`.
    fn before(&self, later: &Op) -> bool {
        later
            .clock
            .get(&self.stream)
            .is_some_and(|&seq| seq >= self.seq)
    }
}

/// One buffer set: the state and the rates.
struct Set {
    y: DeviceArray<f64>,
    k: DeviceArray<f64>,
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn the_pipelines_copies_are_not_ordered_after_the_kernels_they_overlap() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(
            Registration::new()
                .stream_group("pipeline")
                .on_invalidate(|| {}),
        )
        .unwrap();
    let labels = ["y0", "k0", "y1", "k1"];
    mgr.queue_request(
        &solver,
        labels.map(|label| (label, ArrayRequest::of::<f64>([CHUNK_RUNS]).unchunkable())),
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let sets: Vec<Set> = (0..2)
        .map(|s| Set {
            y: response.take(labels[2 * s]).unwrap(),
            k: response.take(labels[2 * s + 1]).unwrap(),
        })
        .collect();
    let runs = CHUNKS * CHUNK_RUNS;
    let (y0, rates) = euler_inputs(runs);
    let mut y = mgr
        .create_host_array([runs], HostMemoryKind::Pinned, Some(&y0), &solver)
        .unwrap();
    let k = mgr
        .create_host_array([runs], HostMemoryKind::Pinned, Some(&rates), &solver)
        .unwrap();
    let plan = ChunkPlan::new(runs, CHUNKS, CHUNK_RUNS).unwrap();
    let kernel = EulerDecay::load(&cuda).unwrap();
    let stream = GroupStream::of(&mgr, &solver).unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    fake.command(&format!("log={}", log.path().display()));
    mgr.chunk_streamer(&solver, &plan)
        .unwrap()
        .pipeline_sets(&sets)
        .inout_with(&mut y, |set| set.y.along(0))
        .input_with(&k, |set| set.k.along(0))
        .run(|_, set| kernel.step(&stream, &set.y, &set.k, DT))
        .unwrap();
    fake.command("log=");
    fake.assert_clean();
    assert_one_euler_step(y.as_slice(), &y0, &rates, DT);

    let ops: Vec<Op> = std::fs::read_to_string(log.path())
        .unwrap()
        .lines()
        .map(Op::parse)
        .collect();
    let of = |kind: &str| -> Vec<&Op> { ops.iter().filter(|op| op.kind == kind).collect() };
    let (uploads, kernels, downloads) = (of("h2d"), of("kernel"), of("d2h"));
    assert_eq!(kernels.len(), CHUNKS);
    assert_eq!(uploads.len(), 2 * CHUNKS, "k then y for each chunk");
    assert_eq!(downloads.len(), CHUNKS);
    let upload = |chunk: usize| [uploads[2 * chunk], uploads[2 * chunk + 1]];
    for chunk in 0..CHUNKS {
        for up in upload(chunk) {
            assert!(
                up.before(kernels[chunk]),
                "chunk {chunk} computes after its upload"
            );
        }
        assert!(
            kernels[chunk].before(downloads[chunk]),
            "chunk {chunk} downloads its results"
        );
        if chunk + 2 < CHUNKS {
            let y_up = upload(chunk + 2)[1];
            assert!(
                downloads[chunk].before(y_up),
                "set {} is refilled after chunk {chunk}'s results left it",
                chunk % 2
            );
        }
    }
    for chunk in 1..CHUNKS - 1 {
        for up in upload(chunk + 1) {
            assert!(
                !kernels[chunk].before(up),
                "the upload of chunk {} waits for the kernel of chunk {chunk}",
                chunk + 1
            );
        }
        assert!(
            !kernels[chunk].before(downloads[chunk - 1]),
            "the download of chunk {} waits for the kernel of chunk {chunk}",
            chunk - 1
        );
    }
}

/// An array of a buffer set, in device memory or in page-locked host
/// memory that the kernel uses in place.
enum Memory {
    Device(DeviceArray<f64>),
    Pinned(PinnedArray<f64>),
}

impl Memory {
    fn take(response: &mut cubie_mem::ArrayResponse, label: &str, pinned: bool) -> Self {
        if pinned {
            Memory::Pinned(response.take_pinned(label).unwrap())
        } else {
            Memory::Device(response.take(label).unwrap())
        }
    }

    fn target(&self) -> ChunkTarget<'_, f64> {
        match self {
            Memory::Device(array) => array.along(0),
            Memory::Pinned(array) => array.along(0),
        }
    }

    fn view<'a>(&'a self, stream: &GroupStream) -> Result<DeviceView<'a, f64>, MemError> {
        match self {
            Memory::Device(array) => stream.view(array),
            Memory::Pinned(array) => stream.view_pinned(array),
        }
    }
}

/// One buffer set: the state and the rates.
struct MixedSet {
    y: Memory,
    k: Memory,
}

/// Euler steps over `CHUNKS` chunks in two sets whose state and rates are
/// pinned as asked, from and into page-locked host arrays: their copies
/// are direct, so nothing but the pipeline's own waits orders the host's
/// gathers and scatters of pinned sets with the kernels, which the fake
/// runs lazily. A gather before the kernel that last read the set ran, or
/// a scatter before the chunk's own kernel ran, changes the results.
fn pinned_sets_pipeline(y_pinned: bool, k_pinned: bool) {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(
            Registration::new()
                .stream_group("pinned-pipeline")
                .on_invalidate(|| {}),
        )
        .unwrap();
    let request = |pinned: bool| {
        let request = ArrayRequest::of::<f64>([CHUNK_RUNS]).unchunkable();
        if pinned {
            request.memory(MemoryKind::Pinned)
        } else {
            request
        }
    };
    mgr.queue_request(
        &solver,
        [
            ("y0", request(y_pinned)),
            ("k0", request(k_pinned)),
            ("y1", request(y_pinned)),
            ("k1", request(k_pinned)),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let sets: Vec<MixedSet> = (0..2)
        .map(|s| MixedSet {
            y: Memory::take(&mut response, ["y0", "y1"][s], y_pinned),
            k: Memory::take(&mut response, ["k0", "k1"][s], k_pinned),
        })
        .collect();
    let runs = CHUNKS * CHUNK_RUNS;
    let (y0, rates) = euler_inputs(runs);
    let mut y = mgr
        .create_host_array([runs], HostMemoryKind::Pinned, Some(&y0), &solver)
        .unwrap();
    let k = mgr
        .create_host_array([runs], HostMemoryKind::Pinned, Some(&rates), &solver)
        .unwrap();
    let plan = ChunkPlan::new(runs, CHUNKS, CHUNK_RUNS).unwrap();
    let kernel = EulerDecay::load(&cuda).unwrap();
    let stream = GroupStream::of(&mgr, &solver).unwrap();
    mgr.chunk_streamer(&solver, &plan)
        .unwrap()
        .pipeline_sets(&sets)
        .inout_with(&mut y, |set| set.y.target())
        .input_with(&k, |set| set.k.target())
        .run(|_, set| kernel.step_views(&stream, &set.y.view(&stream)?, &set.k.view(&stream)?, DT))
        .unwrap();
    fake.assert_clean();
    assert_one_euler_step(y.as_slice(), &y0, &rates, DT);
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn pinned_rates_are_gathered_only_after_the_kernel_that_read_the_set() {
    pinned_sets_pipeline(false, true);
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_pinned_state_is_scattered_only_after_its_kernel_ran() {
    pinned_sets_pipeline(true, false);
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_pipeline_over_pinned_sets_alone_runs_its_kernels_in_place() {
    pinned_sets_pipeline(true, true);
}
