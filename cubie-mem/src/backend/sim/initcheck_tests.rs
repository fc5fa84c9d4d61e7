//! The initcheck: a kernel that declares it reads device bytes nothing
//! wrote is refused, naming the allocation, the first never-written range
//! and how many bytes were never written; nothing runs or is charged.

use super::*;
use crate::backend::{Access, Backend, KernelArg, KernelBody, KernelLaunch, Stream};

/// Launches the kernel "table lookup" of 1 µs over `args`; `ran` says
/// whether its body ran.
fn launch(
    sim: &SimBackend,
    stream: &dyn Stream,
    args: &[KernelArg],
    ran: &mut bool,
) -> Result<(), BackendError> {
    let mut body = |_: &mut [&mut [u8]]| *ran = true;
    sim.launch(
        KernelLaunch {
            name: "table lookup",
            args,
            body: KernelBody::Host {
                duration: Duration::from_micros(1),
                run: &mut body,
            },
        },
        stream,
    )
}

fn arg(ptr: DevicePtr, bytes: u64, access: Access) -> KernelArg {
    KernelArg { ptr, bytes, access }
}

#[test]
fn a_read_of_never_written_bytes_is_refused_with_the_first_range_and_the_count() {
    let sim = SimBackend::new(1 << 20);
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(64, &*stream).unwrap();
    stream.copy_to_device(ptr, 0, &[1; 16]).unwrap();
    stream.copy_to_device(ptr, 32, &[1; 8]).unwrap();
    let before = (sim.now(), sim.timeline().spans().len());
    let mut ran = false;
    let error = launch(&sim, &*stream, &[arg(ptr, 64, Access::Read)], &mut ran).unwrap_err();
    assert_eq!(
        error,
        BackendError::UnwrittenRead {
            kernel: "table lookup".to_owned(),
            ptr,
            read: Bytes(64),
            first_unwritten: 16..32,
            unwritten: Bytes(40),
        },
        "16..32 and 40..64 never written"
    );
    let message = error.to_string();
    for figure in [
        "'table lookup'",
        "16..32",
        "40 B",
        "64 B",
        "with_initcheck(false)",
    ] {
        assert!(message.contains(figure), "{figure} missing: {message}");
    }
    assert!(!ran, "the body did not run");
    stream.synchronize().unwrap();
    assert_eq!(
        (sim.now(), sim.timeline().spans().len()),
        before,
        "nothing was timed"
    );
    // Only the bytes the kernel reads count: the first 16 were written.
    launch(&sim, &*stream, &[arg(ptr, 16, Access::Read)], &mut ran).unwrap();
    assert!(ran);
}

#[test]
fn an_update_reads_and_a_write_does_not() {
    let sim = SimBackend::new(1 << 20);
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(32, &*stream).unwrap();
    let mut ran = false;
    let error = launch(&sim, &*stream, &[arg(ptr, 32, Access::ReadWrite)], &mut ran);
    assert!(
        matches!(error, Err(BackendError::UnwrittenRead { ref first_unwritten, .. }) if *first_unwritten == (0..32)),
        "{error:?}"
    );
    assert!(!ran);
    // A kernel that only writes may start from nothing; what it wrote then reads.
    launch(&sim, &*stream, &[arg(ptr, 32, Access::Write)], &mut ran).unwrap();
    launch(&sim, &*stream, &[arg(ptr, 32, Access::ReadWrite)], &mut ran).unwrap();
    launch(&sim, &*stream, &[arg(ptr, 32, Access::Read)], &mut ran).unwrap();
}

#[test]
fn the_refused_launch_leaves_no_hazard_behind() {
    let sim = SimBackend::new(1 << 20);
    let (a, b) = (sim.create_stream().unwrap(), sim.create_stream().unwrap());
    let ptr = sim.alloc_device(64, &*a).unwrap();
    let allocated = a.record().unwrap();
    b.wait(&*allocated).unwrap();
    let mut ran = false;
    let refused = launch(&sim, &*b, &[arg(ptr, 64, Access::Read)], &mut ran);
    assert!(matches!(refused, Err(BackendError::UnwrittenRead { .. })));
    // Had the launch been recorded as a read on b, this unordered write on
    // a would be a hazard.
    a.copy_to_device(ptr, 0, &[2; 64]).unwrap();
}

#[test]
fn memory_back_from_the_pool_counts_as_never_written() {
    let sim = SimBackend::new(1 << 20);
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(16, &*stream).unwrap();
    stream.copy_to_device(ptr, 0, &[3; 16]).unwrap();
    sim.free_device(ptr, 16, &*stream).unwrap();
    let again = sim.alloc_device(16, &*stream).unwrap();
    assert_eq!(again, ptr, "the pool's block");
    let mut ran = false;
    let error = launch(&sim, &*stream, &[arg(again, 16, Access::Read)], &mut ran);
    assert!(
        matches!(
            error,
            Err(BackendError::UnwrittenRead {
                unwritten: Bytes(16),
                ..
            })
        ),
        "{error:?}"
    );
}

#[test]
fn with_the_initcheck_off_a_kernel_reads_poison() {
    let sim = SimBackend::new(1 << 20).with_initcheck(false);
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(8, &*stream).unwrap();
    let mut seen = Vec::new();
    let mut body = |bytes: &mut [&mut [u8]]| seen = bytes[0].to_vec();
    sim.launch(
        KernelLaunch {
            name: "reads poison on purpose",
            args: &[arg(ptr, 8, Access::Read)],
            body: KernelBody::Host {
                duration: Duration::from_micros(1),
                run: &mut body,
            },
        },
        &*stream,
    )
    .unwrap();
    assert_eq!(seen, [SimBackend::POISON; 8]);
}
