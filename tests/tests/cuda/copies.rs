//! Asynchronous copies between page-locked blocks and the device, ordered
//! by events.

use super::*;

fn pattern(round: u8, i: usize) -> u8 {
    (i as u8)
        .wrapping_mul(31)
        .wrapping_add(round.wrapping_mul(7))
        ^ (i >> 8) as u8
}

/// Asynchronous copies of `len` bytes between page-locked blocks and device
/// memory: an upload on one stream, an event that a second stream waits for,
/// a download on that stream, and one wait for an event for both copies;
/// then a partial upload and download at an offset on one stream, again
/// waited for once. No stream is synchronised between the copies.
fn async_round_trip(backend: &dyn Backend, len: usize) -> TestResult {
    let (a, b) = (backend.create_stream()?, backend.create_stream()?);
    let mut source = backend.alloc_pinned(len as u64)?;
    let mut target = backend.alloc_pinned(len as u64)?;
    let result = async_copies(backend, len, (&*a, &*b), &mut *source, &mut *target);
    // Whatever happened, no copy may still use the blocks when they drop.
    let drained = a.synchronize().and(b.synchronize());
    drop((source, target));
    result?;
    Ok(drained?)
}

/// The copies of [`async_round_trip`] on the streams `(a, b)`.
fn async_copies(
    backend: &dyn Backend,
    len: usize,
    (a, b): (&dyn Stream, &dyn Stream),
    source: &mut dyn PinnedBlock,
    target: &mut dyn PinnedBlock,
) -> TestResult {
    assert!(len > 4096);
    let device = backend.alloc_device(len as u64, a)?;
    source
        .bytes_mut()
        .iter_mut()
        .enumerate()
        .for_each(|(i, byte)| *byte = pattern(1, i));

    // SAFETY: both ranges are whole page-locked blocks of this backend; they
    // are not touched until `downloaded` has been waited for (the download is
    // ordered after the upload by `uploaded`), and the caller synchronises
    // the streams before dropping them.
    unsafe { a.copy_to_device_async(device, 0, source.bytes().as_ptr(), len)? };
    let uploaded = a.record()?;
    b.wait(&*uploaded)?;
    // SAFETY: as above.
    unsafe { b.copy_from_device_async(target.bytes_mut().as_mut_ptr(), len, device, 0)? };
    let downloaded = b.record()?;
    downloaded.synchronize()?;
    assert!(uploaded.is_complete()?);
    assert!(downloaded.is_complete()?);
    let mismatch = (0..len).find(|&i| target.bytes()[i] != pattern(1, i));
    assert_eq!(mismatch, None, "first differing byte of the round trip");

    // A window at an odd offset, up and the whole allocation down, on one stream.
    let (offset, window) = (4099usize, len - 4099 - 17);
    source.bytes_mut()[..window]
        .iter_mut()
        .enumerate()
        .for_each(|(i, byte)| *byte = pattern(2, i));
    target.bytes_mut().fill(0);
    // SAFETY: the ranges lie in the blocks, which are left alone until
    // `done` has been waited for.
    unsafe {
        b.copy_to_device_async(device, offset as u64, source.bytes().as_ptr(), window)?;
        b.copy_from_device_async(target.bytes_mut().as_mut_ptr(), len, device, 0)?;
    }
    b.record()?.synchronize()?;
    let expected: Vec<u8> = (0..len)
        .map(|i| match i.checked_sub(offset) {
            Some(j) if j < window => pattern(2, j),
            _ => pattern(1, i),
        })
        .collect();
    assert!(target.bytes() == expected.as_slice(), "the window landed");

    // Out of bounds and unknown allocations are refused before anything is
    // queued.
    // SAFETY: the calls fail their checks, so nothing reads or writes the blocks.
    unsafe {
        assert!(matches!(
            b.copy_to_device_async(device, 1, source.bytes().as_ptr(), len),
            Err(BackendError::OutOfBounds { .. })
        ));
        assert!(matches!(
            b.copy_from_device_async(target.bytes_mut().as_mut_ptr(), len, device, 1),
            Err(BackendError::OutOfBounds { .. })
        ));
        let unknown = DevicePtr(device.0 + len as u64 + 4096);
        assert!(matches!(
            b.copy_to_device_async(unknown, 0, source.bytes().as_ptr(), 8),
            Err(BackendError::UnknownAllocation { ptr, .. }) if ptr == unknown
        ));
    }

    backend.free_device(device, len as u64, b)?;
    Ok(())
}

#[test]
fn async_copies_round_trip_on_the_simulated_device() {
    // The same steps the device runs below, checked on every machine.
    async_round_trip(&SimBackend::new(1 << 30), (4 << 20) + 13).unwrap();
}

/// With a device: the asynchronous copies round-trip through page-locked
/// blocks. Without one (the stub driver): the backend cannot be created and
/// says why, as the synchronous path does.
#[test]
fn async_copies_round_trip_through_page_locked_blocks() {
    on_device(|cuda| {
        async_round_trip(&cuda, (64 << 20) + 13)?;
        async_round_trip(&cuda, (4 << 20) + 13)
    });
}

/// Asynchronous copies take only the backend's own page-locked blocks:
/// pageable memory, or a range running past a block's end, is refused before
/// anything is queued.
#[test]
fn asynchronous_copies_refuse_memory_that_is_not_page_locked() {
    on_device(|cuda| {
        let stream = cuda.create_stream()?;
        let device = cuda.alloc_device(8192, &*stream)?;
        let pageable = [0u8; 64];
        let block = cuda.alloc_pinned(4096)?;
        // SAFETY: every call is refused before the driver sees it.
        unsafe {
            let error = stream
                .copy_to_device_async(device, 0, pageable.as_ptr(), 64)
                .unwrap_err();
            assert!(
                matches!(error, BackendError::NotPageLocked { len: 64, .. }),
                "{error}"
            );
            let past_the_end = block.bytes().as_ptr().wrapping_add(4000);
            let error = stream
                .copy_to_device_async(device, 0, past_the_end, 8192)
                .unwrap_err();
            assert!(
                matches!(error, BackendError::NotPageLocked { .. }),
                "{error}"
            );
        }
        cuda.free_device(device, 8192, &*stream)?;
        stream.synchronize()?;
        Ok(())
    });
}
