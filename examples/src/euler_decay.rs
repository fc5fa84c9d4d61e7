//! A user's own CUDA kernel on the manager's memory: `euler_decay`, one
//! explicit Euler step of `y' = -k y`, loaded from PTX and launched on a
//! stream group's [`GroupStream`] over views of the arrays.

use cubie_mem::cuda::{CudaBackend, DeviceView, GroupStream, LaunchDims, PtxModule};
use cubie_mem::{DeviceArray, MemError};

/// PTX of `euler_decay(y, k, dt, n)`: `y[i] = y[i] + dt * (-(k[i] * y[i]))`
/// for `i < n`, rounded like the same expression on the host (no fused
/// multiply-add).
///
/// Written by hand so that building needs no CUDA toolkit; the driver
/// compiles it for the device when the module loads.
pub const EULER_DECAY_PTX: &str = include_str!("euler_decay.ptx");

/// Threads per block.
const BLOCK_THREADS: u32 = 256;

/// The `euler_decay` kernel, loaded into a CUDA backend's context.
#[derive(Debug)]
pub struct EulerDecay {
    module: PtxModule,
}

impl EulerDecay {
    /// Loads the kernel into `cuda`'s context.
    pub fn load(cuda: &CudaBackend) -> Result<Self, MemError> {
        let module = PtxModule::from_ptx(cuda, EULER_DECAY_PTX)?;
        module.function("euler_decay")?;
        Ok(EulerDecay { module })
    }

    /// Queues one step `y += dt * (-k * y)` over every element on `stream`,
    /// after the work queued there before it (and after the arrays' last
    /// use on any other stream). `y` and `k` must have the same length and
    /// live on `stream`'s backend; they may be the same array.
    pub fn step(
        &self,
        stream: &GroupStream,
        y: &DeviceArray<f64>,
        k: &DeviceArray<f64>,
        dt: f64,
    ) -> Result<(), MemError> {
        if k.len() != y.len() {
            return Err(MemError::LengthMismatch {
                label: k.label().to_owned(),
                expected: y.len(),
                found: k.len(),
            });
        }
        self.step_views(stream, &stream.view(y)?, &stream.view(k)?, dt)
    }

    /// [`step`](Self::step) over views the caller took from `stream`: of
    /// device arrays ([`GroupStream::view`]) or of pinned arrays, which the
    /// kernel reads and writes in place ([`GroupStream::view_pinned`]).
    pub fn step_views(
        &self,
        stream: &GroupStream,
        y: &DeviceView<'_, f64>,
        k: &DeviceView<'_, f64>,
        dt: f64,
    ) -> Result<(), MemError> {
        if k.len() != y.len() {
            return Err(MemError::Kernel {
                kernel: "euler_decay".into(),
                reason: format!(
                    "k has {} elements and y {}; they must match",
                    k.len(),
                    y.len()
                ),
            });
        }
        let Ok(n) = u32::try_from(y.len()) else {
            return Err(MemError::Kernel {
                kernel: "euler_decay".into(),
                reason: format!("{} elements exceed the kernel's 32-bit index", y.len()),
            });
        };
        if n == 0 {
            return Ok(());
        }
        let function = self.module.function("euler_decay")?;
        // SAFETY: the arguments are (f64 view, f64 view, f64, u32), the
        // kernel's parameters (.u64 addresses, .f64, .u32); both views hold
        // `n` elements and the kernel touches only indices below `n`.
        unsafe {
            stream
                .launch_builder(&function)
                .arg(y)
                .arg(k)
                .arg(&dt)
                .arg(&n)
                .launch(LaunchDims::for_elements(n, BLOCK_THREADS))
        }
    }
}
