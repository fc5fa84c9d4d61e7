//! Each misuse a GPU would punish, committed on purpose through the
//! backend's API, is caught by the fake driver; afterwards every call fails
//! with the sticky 700, which the backend reports as a lost context.

use cubie_mem::backend::{Backend, BackendError};
use cubie_mem::cuda::{CudaBackend, GroupStream, LaunchDims, PtxModule};
use cubie_mem::{MemError, Registration};
use cubie_mem_examples::euler_decay::EULER_DECAY_PTX;

use super::*;

/// Launches `euler_decay` on `instance`'s group stream over the raw device
/// address `address` (a number, not a view: nothing orders the launch).
fn launch_on_raw_address(
    cuda: &CudaBackend,
    stream: &GroupStream,
    address: u64,
    elements: u32,
) -> Result<(), MemError> {
    let module = PtxModule::from_ptx(cuda, EULER_DECAY_PTX)?;
    let euler = module.function("euler_decay")?;
    let dt = 0.5f64;
    // SAFETY: deliberately unsound: the address is passed as a plain u64,
    // so the stream is not ordered after the memory's allocation or free.
    // The fake driver runs the kernel on host memory and reports it.
    unsafe {
        stream
            .launch_builder(&euler)
            .arg(&address)
            .arg(&address)
            .arg(&dt)
            .arg(&elements)
            .launch(LaunchDims::for_elements(elements, 128))
    }
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn memory_used_on_a_stream_not_ordered_after_its_allocation_is_caught() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let stream = GroupStream::of(&mgr, &solver).unwrap();
    let other = cuda.create_stream().unwrap();
    let ptr = cuda.alloc_device(1024 * 8, &*other).unwrap();
    let error = launch_on_raw_address(&cuda, &stream, ptr.0, 1024).unwrap_err();
    assert!(
        matches!(
            error,
            MemError::Backend {
                error: BackendError::Driver { code: 700, .. }
                    | BackendError::ContextLost { code: 700, .. },
                ..
            }
        ),
        "{error:?}"
    );
    fake.assert_caught("before its allocation");
    // The backend remembers the lost context: every later call is refused.
    let later = cuda.mem_info().unwrap_err();
    assert!(
        matches!(later, BackendError::ContextLost { code: 700, .. }),
        "{later}"
    );
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn memory_used_after_its_stream_ordered_free_is_caught() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let stream = GroupStream::of(&mgr, &solver).unwrap();
    let group = mgr.stream(&solver).unwrap();
    let ptr = cuda.alloc_device(1024 * 8, &*group).unwrap();
    cuda.free_device(ptr, 1024 * 8, &*group).unwrap();
    launch_on_raw_address(&cuda, &stream, ptr.0, 1024).unwrap_err();
    fake.assert_caught("after its stream-ordered free");
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn page_locked_memory_written_by_two_unordered_copies_is_caught() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let (a, b) = (cuda.create_stream().unwrap(), cuda.create_stream().unwrap());
    let device = cuda.alloc_device(4096, &*a).unwrap();
    a.copy_to_device(device, 0, &[7u8; 4096]).unwrap();
    let mut block = cuda.alloc_pinned(4096).unwrap();
    let target = block.bytes_mut().as_mut_ptr();
    // SAFETY: deliberately unsound: two downloads into the same page-locked
    // bytes on streams that nothing orders.
    let second = unsafe {
        a.copy_from_device_async(target, 4096, device, 0).unwrap();
        b.copy_from_device_async(target, 4096, device, 0)
    };
    assert!(second.is_err(), "the second copy is refused");
    fake.assert_caught("in flight");
    drop(block);
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_failed_free_at_teardown_leaves_the_pool_instead_of_destroying_it_under_memory() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let stream = cuda.create_stream().unwrap();
    let _leftover = cuda.alloc_device(1 << 20, &*stream).unwrap();
    fake.command("fail=cuMemFree_v2:1");
    drop((stream, cuda));
    fake.assert_clean();
}
