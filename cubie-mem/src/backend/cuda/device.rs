//! The [`Backend`] contract on the CUDA driver: the calls the manager makes.

use std::any::Any;
use std::sync::Arc;

use super::driver::NAME;
use super::pinned::Contents;
use super::sys::{self, CuResult};
use super::{CudaBackend, CudaStream, host_kernel_unsupported};
use crate::backend::{
    Backend, BackendError, DevicePtr, KernelBody, KernelLaunch, MemInfo, PinnedBlock, PoolUsage,
    Stream,
};
use crate::timeline::Activity;

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Driver free memory plus what the pool holds idle, and the total.
    fn mem_info(&self) -> Result<MemInfo, BackendError> {
        // One entry for the three queries below.
        let _guard = self.context().enter("query free memory")?;
        let (free, total) = self.context().raw_mem_info()?;
        let idle = self.context().pool_usage()?.idle();
        Ok(MemInfo {
            free: free.saturating_add(idle).min(total),
            total,
        })
    }

    /// The pool's reserved and used bytes (`CU_MEMPOOL_ATTR_*_MEM_CURRENT`);
    /// CUDA does not tell the largest free block.
    fn pool_usage(&self) -> Option<PoolUsage> {
        self.context().pool_usage().ok()
    }

    fn create_stream(&self) -> Result<Arc<dyn Stream>, BackendError> {
        Ok(Arc::new(CudaStream::create(self)?))
    }

    /// `cuMemAllocFromPoolAsync` from the backend's pool on `stream`. When
    /// the pool cannot grow, the whole context is synchronised (memory freed
    /// on any stream, destroyed ones included, then returns to the pool) and
    /// the pool's idle memory is given back to the driver
    /// (`cuMemPoolTrimTo(pool, 0)`, for allocations the idle blocks cannot
    /// serve), then the allocation is tried once more before reporting out
    /// of memory.
    fn alloc_device(&self, bytes: u64, stream: &dyn Stream) -> Result<DevicePtr, BackendError> {
        const OPERATION: &str = "allocate";
        let stream = self.own_stream(stream, OPERATION)?;
        let Ok(size) = usize::try_from(bytes.max(1)) else {
            return Err(self.out_of_memory(bytes));
        };
        let context = self.context();
        // One entry for the allocation and its retry.
        let _guard = context.enter(OPERATION)?;
        let mut result = self.try_alloc(size, stream)?;
        if result.is_err_and(|code| code == CuResult::OUT_OF_MEMORY) {
            context.reclaim_idle_memory(OPERATION);
            result = self.try_alloc(size, stream)?;
        }
        match result {
            Ok(address) => {
                self.recorder().mark(stream, Activity::Alloc, bytes);
                self.allocations().insert(address, bytes);
                Ok(DevicePtr(address))
            }
            Err(CuResult::OUT_OF_MEMORY) => Err(self.out_of_memory(bytes)),
            Err(code) => context
                .check(code, OPERATION)
                .and(Err(self.out_of_memory(bytes))),
        }
    }

    /// `cuMemFreeAsync` on `stream`: the memory returns to the pool once the
    /// work queued on `stream` before it completed. The driver does not need
    /// `bytes`; it is checked against the size allocated, and a mismatch
    /// frees nothing.
    fn free_device(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &dyn Stream,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "free";
        let stream = self.own_stream(stream, OPERATION)?;
        {
            let mut allocations = self.allocations();
            match allocations.get(&ptr.0) {
                None => {
                    return Err(BackendError::UnknownAllocation {
                        operation: OPERATION,
                        ptr,
                    });
                }
                Some(&size) if size != bytes => {
                    return Err(BackendError::OutOfBounds {
                        operation: OPERATION,
                        offset: 0,
                        end: bytes,
                        size,
                    });
                }
                Some(_) => allocations.remove(&ptr.0),
            };
        }
        let context = self.context();
        let freed = context.enter(OPERATION).and_then(|_guard| {
            // SAFETY: the address is a live allocation of this backend,
            // removed from the map so that it is freed once; the stream is
            // live. Ordering other streams' work before it is the caller's.
            let result = unsafe { sys::cuMemFreeAsync(ptr.0, stream.raw_stream()) };
            context.check(result, OPERATION)
        });
        match freed {
            Ok(()) => self.recorder().mark(stream, Activity::Free, bytes),
            Err(_) => {
                self.allocations().insert(ptr.0, bytes);
            }
        }
        freed
    }

    fn alloc_pinned(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, BackendError> {
        self.pinned().allocate(bytes, Contents::Zeroed)
    }

    fn alloc_pinned_for_overwrite(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, BackendError> {
        self.pinned().allocate(bytes, Contents::Overwritten)
    }

    fn is_page_locked(&self, ptr: *const u8, len: usize) -> bool {
        self.shared
            .pinned
            .check_page_locked("", ptr.addr(), len)
            .is_ok()
    }

    /// Host kernels run only on the simulated device: always
    /// [`BackendError::Unsupported`], with nothing queued or checked. Launch
    /// CUDA kernels with a [`LaunchBuilder`](crate::cuda::LaunchBuilder) on
    /// the group's [`GroupStream`](crate::cuda::GroupStream).
    fn launch(&self, launch: KernelLaunch<'_>, _stream: &dyn Stream) -> Result<(), BackendError> {
        match launch.body {
            KernelBody::Host { .. } => Err(host_kernel_unsupported(launch.name)),
        }
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }

    fn accept_page_locked(&self, peer: &dyn Backend) -> bool {
        match peer
            .as_any()
            .and_then(|any| any.downcast_ref::<CudaBackend>())
        {
            Some(peer) => {
                self.pinned().accept(&peer.shared.pinned);
                true
            }
            None => false,
        }
    }
}
