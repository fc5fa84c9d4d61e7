//! What a kernel launch tells the backend: the arrays it reads and writes,
//! so that the launch is ordered and checked like a copy, and the body to run.

use std::time::Duration;

use super::DevicePtr;

/// How a kernel uses one of its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only reads it.
    Read,
    /// Only writes it.
    Write,
    /// Reads and writes it.
    ReadWrite,
}

impl Access {
    /// Whether the kernel reads the argument.
    pub fn reads(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }

    /// Whether the kernel writes the argument.
    pub fn writes(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
}

/// One argument of a kernel: a whole device allocation of `bytes` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelArg {
    /// The allocation's address.
    pub ptr: DevicePtr,
    /// Bytes of it the kernel may touch, from the start.
    pub bytes: u64,
    /// How the kernel uses it.
    pub access: Access,
}

/// The body of a host kernel: called with the bytes of every argument.
pub type HostKernelFn<'a> = dyn FnMut(&mut [&mut [u8]]) + Send + 'a;

/// What a launch runs.
#[non_exhaustive]
pub enum KernelBody<'a> {
    /// Work the host does over the arguments' bytes, standing in for a GPU
    /// kernel. Device backends report it unsupported.
    Host {
        /// The modelled time the kernel takes on the device.
        duration: Duration,
        /// The work.
        run: &'a mut HostKernelFn<'a>,
    },
}

/// A kernel launch as the backend sees it.
pub struct KernelLaunch<'a> {
    /// A name for the timeline and messages.
    pub name: &'a str,
    /// The allocations it touches, each once.
    pub args: &'a [KernelArg],
    /// What runs.
    pub body: KernelBody<'a>,
}

impl std::fmt::Debug for KernelLaunch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body = match &self.body {
            KernelBody::Host { duration, .. } => format!("host kernel of {duration:?}"),
        };
        f.debug_struct("KernelLaunch")
            .field("name", &self.name)
            .field("args", &self.args)
            .field("body", &body)
            .finish()
    }
}
