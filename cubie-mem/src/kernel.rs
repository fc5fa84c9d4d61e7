//! Host kernels: computation over device arrays, launched through the
//! backend like a GPU kernel, so that the simulated device orders it on a
//! stream, checks it for hazards and times it on its compute engine.
//!
//! On the simulated device the body runs on the host, in place on the
//! arrays' memory, when the launch is queued; a CUDA device reports such a
//! launch unsupported (launch real kernels on the group's stream there).

use std::sync::Arc;
use std::time::Duration;

use crate::array::slot::{Memory, Slot};
use crate::backend::{Access, BackendResult, KernelArg, KernelBody, KernelLaunch};
use crate::{DeviceArray, Element, MemError, MemoryKind, PinnedArray};

mod sealed {
    use std::sync::Arc;

    use crate::array::slot::Slot;

    /// The allocation behind a kernel argument, opaque outside the crate.
    pub struct SlotRef<'a>(pub(crate) &'a Arc<Slot>);

    /// Implemented by the array handles only.
    pub trait Sealed {
        fn slot(&self) -> SlotRef<'_>;
    }
}

/// An array a [`HostKernel`] takes: a [`DeviceArray`], or a [`PinnedArray`]
/// (page-locked host memory a kernel uses in place, as a CUDA kernel reads
/// page-locked memory through its device address).
pub trait KernelArray: sealed::Sealed {
    /// The element type.
    type Element: Element;
    /// The label the array was requested under.
    fn label(&self) -> &str;
    /// The allocated (chunked) shape.
    fn shape(&self) -> &[usize] {
        sealed::Sealed::slot(self).0.shape()
    }
    /// The axis that holds the batch's runs; `None` for an unchunkable array.
    fn chunk_axis(&self) -> Option<usize> {
        sealed::Sealed::slot(self).0.chunk_axis()
    }
}

impl<T: Element> sealed::Sealed for DeviceArray<T> {
    fn slot(&self) -> sealed::SlotRef<'_> {
        sealed::SlotRef(DeviceArray::slot(self))
    }
}

impl<T: Element> KernelArray for DeviceArray<T> {
    type Element = T;
    fn label(&self) -> &str {
        DeviceArray::label(self)
    }
}

impl<T: Element> sealed::Sealed for PinnedArray<T> {
    fn slot(&self) -> sealed::SlotRef<'_> {
        sealed::SlotRef(PinnedArray::slot(self))
    }
}

impl<T: Element> KernelArray for PinnedArray<T> {
    type Element = T;
    fn label(&self) -> &str {
        PinnedArray::label(self)
    }
}

/// A kernel over device arrays whose body runs on the host: what a solver's
/// GPU kernel is on the simulated device.
///
/// It is queued on the thread's current stream (inside a
/// [`ChunkPipeline`](crate::ChunkPipeline)'s computation, the instance's
/// stream), else on the stream of its first array's group.
///
/// ```
/// use std::time::Duration;
/// use cubie_mem::{ArrayRequest, HostKernel, MemoryManager, Registration, SimBackend};
///
/// let mgr = MemoryManager::new(SimBackend::new(1 << 30));
/// let solver = mgr.register(Registration::new().on_invalidate(|| {}))?;
/// mgr.queue_request(&solver, [("x", ArrayRequest::of::<f64>([4])), ("y", ArrayRequest::of::<f64>([4]))])?;
/// let mut response = mgr.allocate_queue_for(&solver)?;
/// let (x, y) = (response.take::<f64>("x")?, response.take::<f64>("y")?);
/// x.copy_from_host(&[1.0, 2.0, 3.0, 4.0])?;
/// HostKernel::new("double", Duration::from_micros(5))
///     .reads(&x)
///     .writes(&y)
///     .launch(|args| {
///         let (x, y) = (args.read(&x)?, args.write(&y)?);
///         y.iter_mut().zip(x).for_each(|(y, x)| *y = 2.0 * x);
///         Ok(())
///     })?;
/// assert_eq!(y.to_vec()?, [2.0, 4.0, 6.0, 8.0]);
/// # Ok::<(), cubie_mem::MemError>(())
/// ```
#[must_use = "a kernel does nothing until launched"]
pub struct HostKernel<'a> {
    name: String,
    duration: Duration,
    args: Vec<(&'a Arc<Slot>, Access)>,
}

impl<'a> HostKernel<'a> {
    /// A kernel called `name` that takes `duration` on the device's compute
    /// engine (the simulated device's modelled time).
    pub fn new(name: impl Into<String>, duration: Duration) -> Self {
        HostKernel {
            name: name.into(),
            duration,
            args: Vec::new(),
        }
    }

    fn arg(mut self, array: &'a impl KernelArray, access: Access) -> Self {
        self.args.push((sealed::Sealed::slot(array).0, access));
        self
    }

    /// The kernel reads `array` (a device or a pinned array). The simulated
    /// device refuses the launch while bytes of a device array it reads were
    /// never written ([`KernelArgument::UnwrittenRead`](crate::KernelArgument::UnwrittenRead), its initcheck).
    pub fn reads(self, array: &'a impl KernelArray) -> Self {
        self.arg(array, Access::Read)
    }

    /// The kernel writes `array` (whatever it held before is not read).
    pub fn writes(self, array: &'a impl KernelArray) -> Self {
        self.arg(array, Access::Write)
    }

    /// The kernel reads and writes `array`: as for [`reads`](Self::reads),
    /// the simulated device refuses the launch while bytes of it were never
    /// written ([`KernelArgument::UnwrittenRead`](crate::KernelArgument::UnwrittenRead)); declare a kernel that only
    /// overwrites it with [`writes`](Self::writes).
    pub fn updates(self, array: &'a impl KernelArray) -> Self {
        self.arg(array, Access::ReadWrite)
    }

    fn error(&self, reason: impl Into<String>) -> MemError {
        MemError::Kernel {
            kernel: self.name.clone(),
            reason: reason.into(),
        }
    }

    /// Queues the kernel; `body` gets the arrays' elements through
    /// [`KernelArgs`]. Its error, if any, is returned. The arrays stay
    /// allocated until the kernel is done even if they are released meanwhile.
    /// A duration past any modelled clock (over 2^64 - 1 ns), or one the
    /// device's clock cannot hold, is refused with [`MemError::Kernel`]
    /// and nothing runs.
    pub fn launch(
        self,
        body: impl FnOnce(&mut KernelArgs<'_>) -> Result<(), MemError> + Send,
    ) -> Result<(), MemError> {
        let Some(&(first, _)) = self.args.first() else {
            return Err(self.error("it has no arrays; list what it reads and writes"));
        };
        if u64::try_from(self.duration.as_nanos()).is_err() {
            return Err(self.error(format!(
                "its duration of {:?} is past any modelled clock (at most 2^64 - 1 ns, about 584 \
                 years); give it a shorter duration",
                self.duration
            )));
        }
        if let Some((other, _)) = self
            .args
            .iter()
            .find(|(slot, _)| !std::ptr::addr_eq(slot.backend(), first.backend()))
        {
            return Err(self.error(format!(
                "'{}' and '{}' belong to different devices",
                first.label(),
                other.label()
            )));
        }
        if let Some((twice, _)) = self
            .args
            .iter()
            .enumerate()
            .find(|(i, (slot, _))| self.args[..*i].iter().any(|(s, _)| Arc::ptr_eq(s, slot)))
            .map(|(_, arg)| arg)
        {
            return Err(self.error(format!(
                "'{}' is listed twice; list each array once, with updates(..) when it is both read and written",
                twice.label()
            )));
        }
        let memories = self
            .args
            .iter()
            .map(|(slot, _)| slot.memory())
            .collect::<Result<Vec<_>, _>>()?;
        let mut launch_args = Vec::with_capacity(memories.len());
        // The label of each launch argument, for the initcheck's error.
        let mut arg_labels = Vec::with_capacity(memories.len());
        // The thread's current stream, else that of the first device array.
        let mut stream = first.current_stream();
        let mut pinned = Vec::new();
        for ((slot, access), memory) in self.args.iter().zip(&memories) {
            match memory {
                Memory::Device(device) => {
                    let stream = stream.get_or_insert_with(|| slot.work_stream(device));
                    device.use_on(stream)?;
                    launch_args.push(KernelArg {
                        ptr: device.ptr(),
                        bytes: slot.bytes(),
                        access: *access,
                    });
                    arg_labels.push(slot.label());
                }
                // Held for the launch; the host kernel runs on it in place.
                Memory::Pinned(block) => pinned.push(block.write()),
            }
        }
        let Some(stream) = stream else {
            return Err(self.error(
                "it takes only pinned arrays and no stream is current: launch it inside a \
                 pipeline's computation or under a CurrentStream, or list a device array",
            ));
        };
        // Each pinned argument's own bytes, in launch order.
        let mut pinned_bytes: Vec<&mut [u8]> = pinned
            .iter_mut()
            .zip(
                self.args
                    .iter()
                    .filter(|(slot, _)| matches!(slot.kind(), MemoryKind::Pinned)),
            )
            .map(|(block, (slot, _))| {
                let bytes = block.bytes_mut();
                let own = usize::try_from(slot.bytes())
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                &mut bytes[..own]
            })
            .collect();
        let entries: Vec<(usize, Arc<str>, Access, MemoryKind)> = self
            .args
            .iter()
            .map(|(slot, access)| {
                (
                    Arc::as_ptr(slot) as usize,
                    Arc::clone(slot.label()),
                    *access,
                    slot.kind(),
                )
            })
            .collect();
        let name = self.name.as_str();
        let mut body = Some(body);
        let mut outcome = Ok(());
        let mut run = |bytes: &mut [&mut [u8]]| {
            if let Some(body) = body.take() {
                let (mut device, mut pinned) = (bytes.iter_mut(), pinned_bytes.iter_mut());
                let mut args = KernelArgs {
                    kernel: name,
                    entries: entries
                        .iter()
                        .map(|(slot, label, access, kind)| {
                            let bytes: Option<&mut [u8]> = match kind {
                                MemoryKind::Device => device.next().map(std::mem::take),
                                MemoryKind::Pinned => pinned.next().map(|bytes| &mut **bytes),
                            };
                            Entry {
                                slot: *slot,
                                label: Arc::clone(label),
                                access: *access,
                                bytes,
                            }
                        })
                        .collect(),
                };
                outcome = body(&mut args);
            }
        };
        let backend = first.backend();
        let launched = backend.launch(
            KernelLaunch {
                name,
                args: &launch_args,
                body: KernelBody::Host {
                    duration: self.duration,
                    run: &mut run,
                },
            },
            stream.stream(),
        );
        match launched {
            // The device's clock cannot hold it: the launch is refused.
            Err(error @ crate::backend::BackendError::ClockOverflow { .. }) => {
                return Err(MemError::Kernel {
                    kernel: self.name.clone(),
                    reason: format!("refused, nothing ran: {error}"),
                });
            }
            // The initcheck: the array read is named by its label.
            Err(crate::backend::BackendError::UnwrittenRead {
                ptr,
                read,
                first_unwritten,
                unwritten,
                ..
            }) => {
                let label = launch_args
                    .iter()
                    .zip(&arg_labels)
                    .find_map(|(arg, label)| (arg.ptr == ptr).then_some(label))
                    .map_or_else(|| ptr.to_string(), |label| label.to_string());
                return Err(MemError::KernelArgument(
                    crate::KernelArgument::UnwrittenRead {
                        kernel: self.name.clone(),
                        label,
                        read,
                        first_unwritten,
                        unwritten,
                    },
                ));
            }
            launched => launched.for_array(backend, first.label())?,
        }
        outcome
    }
}

impl std::fmt::Debug for HostKernel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostKernel")
            .field("name", &self.name)
            .field("duration", &self.duration)
            .field(
                "args",
                &self
                    .args
                    .iter()
                    .map(|(slot, access)| (&**slot.label(), access))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// One array of a running host kernel.
struct Entry<'k> {
    slot: usize,
    label: Arc<str>,
    access: Access,
    bytes: Option<&'k mut [u8]>,
}

/// The arrays of a running [`HostKernel`]: each can be borrowed once, as
/// its declared access allows. Memory never written reads as the device's
/// poison (NaN for floats), as fresh GPU memory would, where the simulated
/// device lets a kernel read it: past a short chunk's runs, or with its
/// initcheck off.
pub struct KernelArgs<'k> {
    kernel: &'k str,
    entries: Vec<Entry<'k>>,
}

impl<'k> KernelArgs<'k> {
    /// The kernel's name, for the errors of its `ndarray` views.
    #[cfg(feature = "ndarray")]
    pub(crate) fn kernel_name(&self) -> &'k str {
        self.kernel
    }

    fn take<A: KernelArray>(
        &mut self,
        array: &A,
        wanted: &str,
        allowed: fn(Access) -> bool,
    ) -> Result<&'k mut [A::Element], MemError> {
        let identity = Arc::as_ptr(sealed::Sealed::slot(array).0) as usize;
        let kernel = self.kernel;
        let error = |reason: String| MemError::Kernel {
            kernel: kernel.to_owned(),
            reason,
        };
        let entry = self
            .entries
            .iter_mut()
            .find(|entry| entry.slot == identity)
            .ok_or_else(|| error(format!("'{}' was not listed in the launch", array.label())))?;
        if !allowed(entry.access) {
            return Err(error(format!(
                "'{}' was listed as {:?}, so it cannot be borrowed to {wanted}",
                entry.label, entry.access
            )));
        }
        let bytes = entry.bytes.take().ok_or_else(|| {
            error(format!(
                "'{}' is already borrowed in this kernel",
                entry.label
            ))
        })?;
        bytemuck::try_cast_slice_mut(bytes).map_err(|cast| {
            error(format!(
                "'{}' cannot be viewed as {}: {cast}",
                entry.label,
                crate::dtype::dtype_of::<A::Element>()
            ))
        })
    }

    /// The elements of `array`, listed with `reads` or `updates`.
    pub fn read<A: KernelArray>(&mut self, array: &A) -> Result<&'k [A::Element], MemError> {
        self.take(array, "read", Access::reads)
            .map(|elements| &*elements)
    }

    /// The elements of `array`, writable, listed with `writes` or `updates`.
    pub fn write<A: KernelArray>(&mut self, array: &A) -> Result<&'k mut [A::Element], MemError> {
        self.take(array, "write", Access::writes)
    }
}

impl std::fmt::Debug for KernelArgs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelArgs")
            .field("kernel", &self.kernel)
            .field(
                "arrays",
                &self.entries.iter().map(|e| &*e.label).collect::<Vec<_>>(),
            )
            .finish()
    }
}
