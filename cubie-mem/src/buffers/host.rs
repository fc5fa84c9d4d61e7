//! Host mirrors: the host arrays of a buffer struct, one per field a batch
//! copies in or out, made and bound in one call each. `#[derive(GpuBuffers)]`
//! generates one with `#[buffers(host = Name)]`; see the guide's
//! [derive page](crate::guide::derive).

use crate::streaming::{ChunkPipeline, ChunkTarget, DeviceSetPipeline};
use crate::{Element, HostArray};

/// The host side of a buffer struct `B`: a host array of the whole batch for
/// each field the kernel reads (`input`), writes (`output`) or both
/// (`inout`), named as `B`'s field.
///
/// Binding every array by hand is one line per array, written again for a
/// resumed run; a mirror binds them all in one call,
/// [`ChunkPipeline::bind`] (or [`DeviceSetPipeline::bind`]), each along its
/// device array's own chunk axis. `#[derive(GpuBuffers)]` implements it for
/// the struct `#[buffers(host = Name)]` names.
pub trait HostBuffers<B> {
    /// Adds one binding per field to `pipeline`, in the field's direction,
    /// to the field of the `B` that `select` picks in every buffer set.
    /// Called through [`ChunkPipeline::bind`] and [`DeviceSetPipeline::bind`].
    fn bind_host<'p, S: 'p, P: HostBinder<'p, S>>(
        &'p mut self,
        pipeline: P,
        select: impl Fn(&'p S) -> &'p B + Copy + Sync + 'p,
    ) -> P
    where
        B: 'p;
}

/// A pipeline a host mirror binds into: [`ChunkPipeline`] and
/// [`DeviceSetPipeline`], whose sets are `S`. The derive's generated code
/// calls it; not an API.
#[doc(hidden)]
pub trait HostBinder<'p, S: 'p>: Sized {
    /// Copies `host` into the array `select` picks before each chunk.
    fn bind_input<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p HostArray<T>,
        select: impl Fn(&'p S) -> A + Sync + 'p,
    ) -> Self;
    /// Copies the array `select` picks into `host` after each chunk.
    fn bind_output<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p mut HostArray<T>,
        select: impl Fn(&'p S) -> A + Sync + 'p,
    ) -> Self;
    /// Both.
    fn bind_inout<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p mut HostArray<T>,
        select: impl Fn(&'p S) -> A + Sync + 'p,
    ) -> Self;
}

impl<'p, S: 'p> HostBinder<'p, S> for ChunkPipeline<'p, S> {
    fn bind_input<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p HostArray<T>,
        select: impl Fn(&'p S) -> A + Sync + 'p,
    ) -> Self {
        self.input_with(host, select)
    }

    fn bind_output<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p mut HostArray<T>,
        select: impl Fn(&'p S) -> A + Sync + 'p,
    ) -> Self {
        self.output_with(host, select)
    }

    fn bind_inout<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p mut HostArray<T>,
        select: impl Fn(&'p S) -> A + Sync + 'p,
    ) -> Self {
        self.inout_with(host, select)
    }
}

impl<'p, S: Sync + 'p> HostBinder<'p, S> for DeviceSetPipeline<'p, S> {
    fn bind_input<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p HostArray<T>,
        select: impl Fn(&'p S) -> A + Sync + 'p,
    ) -> Self {
        self.input(host, select)
    }

    fn bind_output<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p mut HostArray<T>,
        select: impl Fn(&'p S) -> A + Sync + 'p,
    ) -> Self {
        self.output(host, select)
    }

    fn bind_inout<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p mut HostArray<T>,
        select: impl Fn(&'p S) -> A + Sync + 'p,
    ) -> Self {
        self.inout(host, select)
    }
}
