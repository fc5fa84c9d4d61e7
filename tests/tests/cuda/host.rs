//! Host arrays and chunked streaming on the CUDA backend: the round trips of
//! the integration tests' `host` module on a real device, under every wait
//! policy of the host (`HostWait`). Without a usable device the test checks
//! that the backend says so (and fails when `CUBIE_REQUIRE_GPU=1`).

use cubie_mem::ChunkPlan;
use cubie_mem::cuda::{CudaConfig, HostWait};

use super::*;

fn round_trip<T: Element>(mgr: &MemoryManager, kind: HostMemoryKind) -> Result<(), MemError> {
    let solver = mgr.register(Registration::new().on_invalidate(|| {}))?;
    // 7, 5 and 6 runs in chunks of 3, 2 and 4: every last chunk is shorter.
    let shape = [7, 5, 6];
    for (axis, chunk_length) in [3, 2, 4].into_iter().enumerate() {
        let mut chunk_shape = shape.to_vec();
        chunk_shape[axis] = chunk_length;
        mgr.queue_request(
            &solver,
            [
                (
                    "in",
                    ArrayRequest::of::<T>(chunk_shape.clone()).unchunkable(),
                ),
                ("out", ArrayRequest::of::<T>(chunk_shape).unchunkable()),
            ],
        )?;
        let mut response = mgr.allocate_queue_for(&solver)?;
        let device_in = response.take::<T>("in")?;
        let device_out = response.take::<T>("out")?;
        let mut data = vec![T::zeroed(); shape.iter().product()];
        for (i, b) in bytemuck::cast_slice_mut::<T, u8>(&mut data)
            .iter_mut()
            .enumerate()
        {
            *b = (i as u8).wrapping_mul(29).wrapping_add(axis as u8);
        }
        let host_in = mgr.create_host_array(shape, kind, Some(&data), &solver)?;
        let mut host_out = mgr.create_host_array::<T>(shape, kind, None, &solver)?;
        let plan = ChunkPlan::new(
            shape[axis],
            shape[axis].div_ceil(chunk_length),
            chunk_length,
        )
        .unwrap();
        mgr.chunk_streamer(&solver, &plan)
            .unwrap()
            .with_staging_bytes(13 * size_of::<T>())
            .pipeline()
            .input(&host_in, device_in.along(axis))
            .output(&mut host_out, device_out.along(axis))
            .run(|_, _| device_out.copy_from_host(&device_in.to_vec()?))?;
        assert_eq!(
            bytemuck::cast_slice::<T, u8>(host_out.as_slice()),
            bytemuck::cast_slice::<T, u8>(&data),
            "{} axis {axis} {kind}",
            T::DTYPE
        );
    }
    Ok(())
}

#[test]
fn chunked_round_trips_on_the_cuda_device() {
    on_device(|cuda| {
        let mgr = manager(&cuda);
        for kind in [
            HostMemoryKind::Pinned,
            HostMemoryKind::Pageable,
            HostMemoryKind::Spilled,
        ] {
            round_trip::<f32>(&mgr, kind)?;
            round_trip::<f64>(&mgr, kind)?;
            round_trip::<i32>(&mgr, kind)?;
            round_trip::<u8>(&mgr, kind)?;
            round_trip::<u32>(&mgr, kind)?;
            round_trip::<i64>(&mgr, kind)?;
            round_trip::<u64>(&mgr, kind)?;
        }
        Ok(())
    });
}

#[test]
fn every_host_wait_policy_streams_a_batch() {
    let _one_at_a_time = DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    if let Err(error) = CudaBackend::new(0) {
        check_no_device(&error);
        return;
    }
    for host_wait in [
        HostWait::Block,
        HostWait::Yield,
        HostWait::Spin,
        HostWait::Driver,
    ] {
        let config = CudaConfig {
            host_wait,
            ..CudaConfig::default()
        };
        let cuda = CudaBackend::with_config(0, config).unwrap();
        let mgr = manager(&cuda);
        round_trip::<f64>(&mgr, HostMemoryKind::Pinned).unwrap();
        round_trip::<u8>(&mgr, HostMemoryKind::Pageable).unwrap();
        cuda.synchronize_device().unwrap();
    }
}
