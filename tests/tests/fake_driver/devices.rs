//! A batch across the fake driver's two devices: the set holds every
//! visible device, splits the runs between them, and each device's share
//! lives and computes on that device, into one host array.

use cubie_mem::{
    DeviceArray, DeviceSet, GpuBuffers, HostMemoryKind, ManagerConfig, Registration, Throughput,
};

use super::*;

pub struct Dims {
    pub n_runs: usize,
}

/// The state and the rates of the Euler kernel, two buffer sets.
#[derive(GpuBuffers)]
#[buffers(dims = Dims, pipeline_depth = 2)]
pub struct Decay {
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    y: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    k: DeviceArray<f64>,
}

const DT: f64 = 0.01;

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_batch_splits_across_both_devices_and_each_share_stays_on_its_device() {
    let fake = Fake::open();
    let set = DeviceSet::cuda(ManagerConfig::default().granule(0)).unwrap();
    assert_eq!(set.len(), 2, "the fake lists two devices");
    let runs = 50_001;
    let buffers = set
        .allocate::<Decay>(
            runs,
            &Throughput::Equal,
            |_| Decay::registration().on_invalidate(|| {}),
            |n_runs| Dims { n_runs },
        )
        .unwrap();
    assert_eq!(buffers.split().ranges(), [0..25_001, 25_001..50_001]);
    for share in buffers.portions() {
        for set_buffers in share.buffers().sets() {
            for array in [&set_buffers.y, &set_buffers.k] {
                let ptr = array.with_device_ptr(|p| p.0).unwrap();
                assert_eq!(fake.device_of(ptr), Some(share.device() as u32));
            }
        }
    }
    let (kernels, streams) = set_kernels(&set, &buffers);
    let (y0, rates) = euler_inputs(runs);
    let first = &set.managers()[0];
    let holder = first.register(Registration::new()).unwrap();
    let mut y = first
        .create_host_array([runs], HostMemoryKind::Pageable, Some(&y0), &holder)
        .unwrap();
    let k = first
        .create_host_array([runs], HostMemoryKind::Pageable, Some(&rates), &holder)
        .unwrap();
    buffers
        .pipeline()
        .inout(&mut y, |set| &set.y)
        .input(&k, |set| &set.k)
        .run(|device, _, set| kernels[device].step(&streams[device], &set.y, &set.k, DT))
        .unwrap();
    fake.assert_clean();
    assert_one_euler_step(y.as_slice(), &y0, &rates, DT);
    drop(buffers);
}
