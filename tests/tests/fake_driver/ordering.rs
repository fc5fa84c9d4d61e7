//! What the backend does on its own (teardown, modules, the retry after
//! running out of memory) never commits a misuse, even where a GPU would
//! rarely show it; events are reused; memory lands on the device it was
//! asked of.

use cubie_mem::backend::Backend;
use cubie_mem::cuda::{CudaBackend, GroupStream, LaunchDims, PtxModule};
use cubie_mem::{ArrayRequest, Registration};
use cubie_mem_examples::euler_decay::EULER_DECAY_PTX;

use super::*;

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn teardown_waits_for_work_queued_on_a_destroyed_stream() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let stream = cuda.create_stream().unwrap();
    let len = 1 << 20;
    let device = cuda.alloc_device(len, &*stream).unwrap();
    let source = cuda.alloc_pinned(len).unwrap();
    // SAFETY: the block outlives the copy: the backend's teardown below
    // waits for the whole context before anything is freed.
    unsafe {
        stream
            .copy_to_device_async(device, 0, source.bytes().as_ptr(), len as usize)
            .unwrap();
    }
    drop((stream, cuda));
    fake.assert_clean();
    drop(source);
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_module_is_unloaded_only_after_its_kernels_ran() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let (mgr, solver, y) = one_array(&cuda, 4096);
    y.copy_from_host(&[1.0; 4096]).unwrap();
    let stream = GroupStream::of(&mgr, &solver).unwrap();
    {
        let module = PtxModule::from_ptx(&cuda, EULER_DECAY_PTX).unwrap();
        let euler = module.function("euler_decay").unwrap();
        let view = stream.view(&y).unwrap();
        let (dt, n) = (0.5f64, 4096u32);
        // SAFETY: euler_decay's parameters; the view holds `n` elements.
        unsafe {
            stream
                .launch_builder(&euler)
                .arg(&view)
                .arg(&view)
                .arg(&dt)
                .arg(&n)
                .launch(LaunchDims::for_elements(n, 256))
                .unwrap();
        }
        // The module drops here, its kernel still queued.
    }
    assert_eq!(y.to_vec().unwrap(), vec![0.5; 4096]);
    fake.assert_clean();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn an_allocation_retried_after_running_out_reclaims_frees_of_destroyed_streams() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let large = cuda.mem_info().unwrap().free / 4 * 3;
    let first = cuda.create_stream().unwrap();
    let ptr = cuda.alloc_device(large, &*first).unwrap();
    cuda.free_device(ptr, large, &*first).unwrap();
    // Not synchronised: the free is still queued when its stream goes.
    drop(first);
    let second = cuda.create_stream().unwrap();
    let again = cuda.alloc_device(large, &*second).unwrap();
    cuda.free_device(again, large, &*second).unwrap();
    second.synchronize().unwrap();
    fake.assert_clean();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn ordering_across_streams_reuses_its_events() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let (a, b) = (cuda.create_stream().unwrap(), cuda.create_stream().unwrap());
    let device = cuda.alloc_device(4096, &*a).unwrap();
    b.wait(&*a.record().unwrap()).unwrap();
    let mut back = [0u8; 64];
    b.copy_from_device(&mut back, device, 0).unwrap();
    let created = fake.calls("cuEventCreate");
    for round in 0..200 {
        let (on, next) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
        on.copy_to_device(device, 0, &[round as u8; 64]).unwrap();
        next.wait(&*on.record().unwrap()).unwrap();
    }
    let more = fake.calls("cuEventCreate") - created;
    assert!(
        more <= 2,
        "200 orderings across streams created {more} new events"
    );
    a.copy_from_device(&mut back, device, 0).unwrap();
    assert_eq!(back, [199u8; 64]);
    cuda.free_device(device, 4096, &*a).unwrap();
    fake.assert_clean();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn memory_lands_on_the_device_it_was_asked_of() {
    let fake = Fake::open();
    for ordinal in [0u32, 1] {
        let cuda = CudaBackend::new(ordinal).unwrap();
        assert_eq!(cuda.ordinal(), ordinal);
        let mgr = manager(&cuda);
        let solver = mgr
            .register(Registration::new().on_invalidate(|| {}))
            .unwrap();
        mgr.queue_request(
            &solver,
            [("x", ArrayRequest::of::<u32>([1000]).unchunkable())],
        )
        .unwrap();
        let x = mgr
            .allocate_queue_for(&solver)
            .unwrap()
            .take::<u32>("x")
            .unwrap();
        let values: Vec<u32> = (0..1000).map(|i| i * ordinal + 1).collect();
        x.copy_from_host(&values).unwrap();
        assert_eq!(x.to_vec().unwrap(), values);
        let stream = GroupStream::of(&mgr, &solver).unwrap();
        let view = stream.view(&x).unwrap();
        assert_eq!(fake.device_of(view.device_address()), Some(ordinal));
    }
    fake.assert_clean();
}
