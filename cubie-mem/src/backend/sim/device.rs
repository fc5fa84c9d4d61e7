//! The simulated device's side of the [`Backend`] contract.

use std::ops::Range;

use super::clock::{Engine, Work};
use super::pinned::SimPinnedBlock;
use super::{NAME, SimBackend, SimState};
use crate::Bytes;
use crate::backend::{
    Backend, BackendError, DevicePtr, EngineRates, HostWork, KernelArg, KernelBody, KernelLaunch,
    MemInfo, MemorySpace, PinnedBlock, PoolUsage, Stream, byte_range,
};
use crate::timeline::Activity;

/// Allocations a host kernel works on, out of the device's map while it
/// runs; they go back when it returns, or unwinds.
struct SetAside<'a> {
    sim: &'a SimBackend,
    blocks: Vec<(u64, super::memory::DeviceBlock)>,
}

impl Drop for SetAside<'_> {
    fn drop(&mut self) {
        let mut s = self.sim.state();
        for (address, block) in self.blocks.drain(..) {
            s.running.remove(&address);
            s.allocations.insert(address, block);
        }
    }
}

/// Where a copy from the device goes.
pub(super) enum HostTarget<'a> {
    /// Pageable memory, written at once.
    Pageable(&'a mut [u8]),
    /// The page-locked bytes at these host addresses, written when the host
    /// sees the copy done.
    PageLocked(Range<u64>),
}

impl SimState {
    /// Checks and performs a copy of `src` into device memory at `dst +
    /// offset` on `stream`. Returns when it ends.
    pub(super) fn copy_in(
        &mut self,
        operation: &'static str,
        dst: DevicePtr,
        offset: u64,
        src: &[u8],
        stream: u64,
        pinned: Option<Range<u64>>,
    ) -> Result<u64, BackendError> {
        self.copy_fits(
            operation,
            Engine::HostToDevice,
            stream,
            src.len(),
            pinned.is_none(),
        )?;
        let size = self.block(dst, operation)?.len();
        let range = byte_range(operation, offset, src.len(), size)?;
        let at = self.order.next(stream);
        self.order.check_device(operation, at, dst, &range, true)?;
        if let Some(bytes) = &pinned {
            self.order.check_pinned(operation, at, bytes, false)?;
        }
        self.block(dst, operation)?.write(operation, offset, src)?;
        self.order.wrote_device(at, dst, range, "written by a copy");
        let pageable = pinned.is_none();
        if let Some(bytes) = pinned {
            self.order.used_pinned(at, bytes, None);
        }
        Ok(self.timed_copy(Engine::HostToDevice, stream, src.len() as u64, pageable))
    }

    /// Checks and performs a copy of device memory at `src + offset` on
    /// `stream` into `dst`, as [`SimState::copy_in`] does.
    pub(super) fn copy_out(
        &mut self,
        operation: &'static str,
        dst: HostTarget<'_>,
        src: DevicePtr,
        offset: u64,
        stream: u64,
    ) -> Result<u64, BackendError> {
        let len = match &dst {
            HostTarget::Pageable(bytes) => bytes.len(),
            HostTarget::PageLocked(range) => usize::try_from(range.end - range.start).unwrap_or(0),
        };
        let pageable = matches!(dst, HostTarget::Pageable(_));
        self.copy_fits(operation, Engine::DeviceToHost, stream, len, pageable)?;
        let size = self.block(src, operation)?.len();
        let range = byte_range(operation, offset, len, size)?;
        let at = self.order.next(stream);
        self.order.check_device(operation, at, src, &range, false)?;
        let pageable = match dst {
            HostTarget::Pageable(bytes) => {
                self.block(src, operation)?.read(operation, offset, bytes)?;
                true
            }
            HostTarget::PageLocked(bytes) => {
                self.order.check_pinned(operation, at, &bytes, true)?;
                let mut data = vec![0; len];
                self.block(src, operation)?
                    .read(operation, offset, &mut data)?;
                self.order.used_pinned(at, bytes, Some(data));
                false
            }
        };
        self.order.read_device(at, src, range);
        Ok(self.timed_copy(Engine::DeviceToHost, stream, len as u64, pageable))
    }
}

impl SimState {
    /// The initcheck: refuses a launch whose kernel reads bytes never
    /// written. `updates` (`Access::ReadWrite`) counts as a read, as it
    /// declares: a kernel that overwrites an array without reading it
    /// declares `Access::Write`.
    fn check_written(&mut self, kernel: &str, args: &[KernelArg]) -> Result<(), BackendError> {
        for arg in args.iter().filter(|arg| arg.access.reads()) {
            let block = self.block(arg.ptr, "launch")?;
            if let Some((first_unwritten, unwritten)) = block.unwritten(arg.bytes) {
                return Err(BackendError::UnwrittenRead {
                    kernel: kernel.to_owned(),
                    ptr: arg.ptr,
                    read: Bytes(arg.bytes),
                    first_unwritten,
                    unwritten: Bytes(unwritten),
                });
            }
        }
        Ok(())
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn mem_info(&self) -> Result<MemInfo, BackendError> {
        let s = self.call()?;
        Ok(MemInfo {
            free: s.free(),
            total: s.total,
        })
    }

    /// The pool: live allocations and the freed blocks it keeps.
    fn pool_usage(&self) -> Option<PoolUsage> {
        let s = self.state();
        let used = s.device_bytes;
        Some(PoolUsage {
            reserved: used.saturating_add(s.pool.bytes()),
            used,
            largest_free_block: Some(s.free()),
        })
    }

    fn create_stream(&self) -> Result<std::sync::Arc<dyn Stream>, BackendError> {
        self.new_stream()
    }

    fn alloc_device(&self, bytes: u64, stream: &dyn Stream) -> Result<DevicePtr, BackendError> {
        let stream = self.stream_id(stream, "allocate")?;
        let mut s = self.call()?;
        s.count_allocation(MemorySpace::Device, bytes)?;
        if bytes > s.free() {
            return Err(s.out_of_memory(MemorySpace::Device, bytes));
        }
        let (address, block) = s.device_block(bytes)?;
        s.allocations.insert(address, block);
        s.device_bytes = s.device_bytes.saturating_add(bytes);
        let ptr = DevicePtr(address);
        let at = s.order.next(stream);
        s.order.allocated(at, ptr, bytes);
        s.clock.instant(Work {
            activity: Activity::Alloc,
            name: format!("alloc {}", Bytes(bytes)),
            stream,
            bytes,
        });
        Ok(ptr)
    }

    fn free_device(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &dyn Stream,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "free";
        let stream = self.stream_id(stream, OPERATION)?;
        let mut s = self.call()?;
        let size = s.block(ptr, OPERATION)?.len();
        if bytes != size {
            return Err(BackendError::OutOfBounds {
                operation: OPERATION,
                offset: 0,
                end: bytes,
                size,
            });
        }
        let at = s.order.next(stream);
        s.order
            .check_device(OPERATION, at, ptr, &(0..size.max(1)), true)?;
        let Some(block) = s.allocations.remove(&ptr.0) else {
            return Err(s.missing(ptr, OPERATION));
        };
        s.order.forget_device(ptr);
        s.device_bytes = s.device_bytes.saturating_sub(size);
        s.pool.put(ptr.0, block);
        s.clock.instant(Work {
            activity: Activity::Free,
            name: format!("free {}", Bytes(size)),
            stream,
            bytes: size,
        });
        Ok(())
    }

    fn alloc_pinned(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, BackendError> {
        let mut s = self.call()?;
        // A size the host cannot provide is out of memory, whatever it
        // would take to page-lock.
        let block = s.host_block(MemorySpace::PageLocked, bytes)?;
        let page_locking = s.clock.page_lock_time(bytes)?;
        s.count_allocation(MemorySpace::PageLocked, bytes)?;
        // The host page-locks the block before the call returns.
        s.clock
            .page_lock(format!("page-lock {}", Bytes(bytes)), bytes, page_locking);
        let device = std::sync::Arc::clone(&self.inner);
        Ok(Box::new(SimPinnedBlock::register(block, &mut s, device)))
    }

    fn is_page_locked(&self, ptr: *const u8, len: usize) -> bool {
        self.state().check_page_locked("", ptr.addr(), len).is_ok()
    }

    /// Times the host's work on its own engine; the host's clock advances.
    fn host_work(&self, work: HostWork, bytes: u64, lanes: usize) {
        let lanes = lanes.max(1);
        let rows = match work {
            HostWork::Gather { rows } | HostWork::Scatter { rows } => format!(" in {rows} row(s)"),
            HostWork::FirstTouch => String::new(),
        };
        let threads = if lanes > 1 {
            format!(" on {lanes} threads")
        } else {
            String::new()
        };
        let name = format!("{} {}{rows}{threads}", work.name(), Bytes(bytes));
        let mut s = self.state();
        let timed = s.clock.host_work(name, work, bytes, lanes);
        // The contract's calls cannot fail: the device's next call does.
        if let Err(error) = timed {
            tracing::error!(%error, "host work past the simulated clock");
            s.deferred.get_or_insert(error);
        }
    }

    /// Counts the never-written bytes among the first `bytes` at `ptr` as
    /// written: they stay poison, and the initcheck passes them.
    fn mark_padding(&self, ptr: DevicePtr, bytes: u64) {
        if let Some(block) = self.state().allocations.get_mut(&ptr.0) {
            block.bytes_mut(bytes);
        }
    }

    fn engine_rates(&self) -> Option<EngineRates> {
        Some(self.state().clock.rates())
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn accept_page_locked(&self, peer: &dyn Backend) -> bool {
        let Some(peer) = peer
            .as_any()
            .and_then(|any| any.downcast_ref::<SimBackend>())
        else {
            return false;
        };
        // One state locked at a time: the peer's for its ranges (and to
        // know this device copies its blocks), then ours.
        let ranges = {
            let mut peer = peer.state();
            let copier = std::sync::Arc::downgrade(&self.inner);
            peer.copiers.retain(|known| known.strong_count() > 0);
            if !peer.copiers.iter().any(|known| known.ptr_eq(&copier)) {
                peer.copiers.push(copier);
            }
            peer.pinned_blocks.share()
        };
        self.state().pinned_blocks.accept(ranges);
        true
    }

    fn launch(&self, launch: KernelLaunch<'_>, stream: &dyn Stream) -> Result<(), BackendError> {
        const OPERATION: &str = "launch";
        let KernelBody::Host { duration, run } = launch.body;
        let stream = self.stream_id(stream, OPERATION)?;
        let mut s = self.call()?;
        for (index, arg) in launch.args.iter().enumerate() {
            let size = s.block(arg.ptr, OPERATION)?.len();
            byte_range(
                OPERATION,
                0,
                usize::try_from(arg.bytes).unwrap_or(usize::MAX),
                size,
            )?;
            if launch.args[..index].iter().any(|a| a.ptr == arg.ptr) {
                return Err(BackendError::Unsupported {
                    operation: OPERATION,
                    reason: format!(
                        "kernel '{}' lists the allocation at {} twice; list it once with Access::ReadWrite",
                        launch.name, arg.ptr
                    ),
                });
            }
        }
        if s.initcheck {
            s.check_written(launch.name, launch.args)?;
        }
        // The launch declares the kernel's time at 100% compute speed.
        let duration = s.clock.kernel_duration(duration);
        s.clock.fits(OPERATION, Engine::Compute, stream, duration)?;
        let at = s.order.next(stream);
        for arg in launch.args {
            s.order
                .check_device(OPERATION, at, arg.ptr, &(0..arg.bytes), arg.access.writes())?;
        }
        for arg in launch.args {
            if arg.access.writes() {
                s.order
                    .wrote_device(at, arg.ptr, 0..arg.bytes, "written by a kernel");
            } else {
                s.order.read_device(at, arg.ptr, 0..arg.bytes);
            }
        }
        // Checked by `fits` above.
        let duration_ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let call = s.clock.calls().launch_ns;
        s.clock.call("launch", call);
        let touched = launch
            .args
            .iter()
            .fold(0u64, |sum, arg| sum.saturating_add(arg.bytes));
        s.clock.run(
            Engine::Compute,
            duration_ns,
            Work {
                activity: Activity::Kernel,
                name: launch.name.to_owned(),
                stream,
                bytes: touched,
            },
        );
        // The body runs without the lock (it may take a while, and other
        // threads keep using the device); its allocations are set aside
        // meanwhile, so nothing else can touch or free them.
        let mut blocks = Vec::with_capacity(launch.args.len());
        for arg in launch.args {
            if let Some(block) = s.allocations.remove(&arg.ptr.0) {
                s.running.insert(arg.ptr.0, launch.name.to_owned());
                blocks.push((arg.ptr.0, block));
            }
        }
        drop(s);
        let mut aside = SetAside { sim: self, blocks };
        let mut bytes: Vec<&mut [u8]> = aside
            .blocks
            .iter_mut()
            .zip(launch.args)
            .map(|((_, block), arg)| block.bytes_mut(arg.bytes))
            .collect();
        run(&mut bytes);
        Ok(())
    }
}
