//! The page-locked cache skips the zero-fill where the caller overwrites
//! every byte (staging buffers, pinned host arrays made from data), new
//! blocks and recycled ones alike, and keeps it where a user could read
//! before writing (pinned host arrays made without data).

use cubie_mem::HostMemoryKind;
use cubie_mem::backend::Backend;
use cubie_mem::cuda::CudaBackend;

use super::{Fake, manager};

/// A byte no zero-fill leaves behind: the fake driver fills new page-locked
/// blocks with it.
const SENTINEL: u8 = 0xA5;

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_block_for_overwrite_is_never_zero_filled_and_a_zeroed_one_is_cleared() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mut first = cuda.alloc_pinned_for_overwrite(8192).unwrap();
    assert!(
        first.bytes().iter().all(|&b| b == SENTINEL),
        "a new block for overwrite is as the driver handed it over"
    );
    first.bytes_mut()[..4096].fill(1);
    drop(first);
    let pages = fake.calls("cuMemHostAlloc");

    let recycled = cuda.alloc_pinned_for_overwrite(8192).unwrap();
    assert_eq!(fake.calls("cuMemHostAlloc"), pages, "served from the cache");
    assert!(
        recycled.bytes()[..4096].iter().all(|&b| b == 1),
        "a recycled block for overwrite is as its last user left it"
    );
    drop(recycled);

    let zeroed = cuda.alloc_pinned(8192).unwrap();
    assert_eq!(fake.calls("cuMemHostAlloc"), pages, "served from the cache");
    assert!(
        zeroed.bytes().iter().all(|&b| b == 0),
        "alloc_pinned zero-fills"
    );
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_staged_block_goes_back_to_the_cache_and_a_host_array_on_it_still_reads_zeros() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(cubie_mem::Registration::new().on_invalidate(|| {}))
        .unwrap();
    // A pageable array's upload fills a staging buffer with the sentinel
    // (the pool takes its blocks for overwrite: see the staging pool's
    // unit tests).
    let request = cubie_mem::ArrayRequest::of::<u8>([8192]).unchunkable();
    mgr.queue_request(&solver, [("y", request)]).unwrap();
    let y = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<u8>("y")
        .unwrap();
    let pageable = mgr
        .create_host_array(
            [8192],
            HostMemoryKind::Pageable,
            Some(&[SENTINEL; 8192][..]),
            &solver,
        )
        .unwrap();
    let pool = cubie_mem::StagingPool::for_manager(&mgr);
    mgr.chunk_streamer(&solver, &cubie_mem::ChunkPlan::new(8192, 1, 8192).unwrap())
        .unwrap()
        .with_pool(pool.clone())
        .copy_in(&pageable, &y, 0, 0)
        .unwrap();
    // Back to the backend's page-locked cache.
    pool.clear();
    let pages = fake.calls("cuMemHostAlloc");

    let host = mgr
        .create_host_array::<u8>([8192], HostMemoryKind::Pinned, None, &solver)
        .unwrap();
    assert_eq!(fake.calls("cuMemHostAlloc"), pages, "served from the cache");
    assert!(
        host.as_slice().iter().all(|&b| b == 0),
        "a host array made without data reads zeros"
    );
    drop(host);

    // One made from data takes a block unfilled and holds the data.
    let data: Vec<u8> = (0..8192).map(|i| (i % 251) as u8).collect();
    let host = mgr
        .create_host_array([8192], HostMemoryKind::Pinned, Some(&data), &solver)
        .unwrap();
    assert_eq!(fake.calls("cuMemHostAlloc"), pages, "served from the cache");
    assert_eq!(host.as_slice(), &data[..]);
}
