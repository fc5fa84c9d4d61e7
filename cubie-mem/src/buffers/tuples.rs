//! Tuples of buffer structs as one buffer struct: `(Inputs, Outputs)` is
//! allocated, planned and taken as one, as a struct of
//! `#[buffer(part)]` fields is, for holders that need no struct of their
//! own. The parts share one dims type (a compile error otherwise); their
//! stream groups, run axes and labels must agree, asserted at compile time
//! where the tuple's requests are made.

use super::{GpuBuffers, SingleBufferSet};
use crate::__private::{
    ConstMessage, Labels, axis_name, first_run_axis, same_run_axis, shared_label, str_eq,
};
use crate::{ArrayResponse, MemError, RequestSet};

/// Whether the parts of a tuple agree: one stream group, one run axis,
/// no label twice. Panics (a compile error where it is evaluated) with what
/// disagrees, naming the groups, the label or the axes.
#[allow(
    clippy::panic,
    reason = "evaluated only at compile time, where a panic is the compile error"
)]
const fn check_parts(groups: &[&str], labels: &[&[&str]], axes: &[Option<&str>]) {
    let mut i = 0;
    while i < groups.len() {
        if !str_eq(groups[i], groups[0]) {
            let message = ConstMessage::new()
                .push("the buffer structs of a tuple are in different stream groups (\"")
                .push(groups[0])
                .push("\" and \"")
                .push(groups[i])
                .push(
                    "\"): they are allocated together, in one group; declare the same \
                     #[stream_group(..)] on each",
                );
            panic!("{}", message.as_str());
        }
        let mut j = 0;
        while j < i {
            if let Some(label) = shared_label(labels[j], labels[i]) {
                let message = ConstMessage::new()
                    .push("two buffer structs of a tuple share the label '")
                    .push(label)
                    .push(
                        "': every array allocated together needs its own label; rename one \
                         (`label = \"..\"`)",
                    );
                panic!("{}", message.as_str());
            }
            if !same_run_axis(axes[j], axes[i]) {
                let message = ConstMessage::new()
                    .push("the buffer structs of a tuple are split along different run axes (`")
                    .push(axis_name(axes[j]))
                    .push("` and `")
                    .push(axis_name(axes[i]))
                    .push(
                        "`): a batch has one run count, so split every struct's chunked buffers \
                         along the same dims field",
                    );
                panic!("{}", message.as_str());
            }
            j += 1;
        }
        i += 1;
    }
}

/// The compile-time check of a tuple's parts, forced where its requests
/// are made.
trait PartsAgree {
    const CHECK: ();
}

/// Implements `GpuBuffers` (and `SingleBufferSet`) for a tuple of buffer
/// structs of one dims type.
macro_rules! tuple_buffers {
    ($first:ident $(, $rest:ident)+) => {
        impl<$first: GpuBuffers, $($rest: GpuBuffers<Dims = $first::Dims>),+> PartsAgree
            for ($first, $($rest),+)
        {
            const CHECK: () = check_parts(
                &[$first::STREAM_GROUP, $($rest::STREAM_GROUP),+],
                &[$first::LABELS, $($rest::LABELS),+],
                &[$first::__RUN_AXIS, $($rest::__RUN_AXIS),+],
            );
        }

        /// Buffer structs of one dims type, allocated, planned and taken as
        /// one: the first's dims and stream group, every part's labels in
        /// order.
        impl<$first: GpuBuffers, $($rest: GpuBuffers<Dims = $first::Dims>),+> GpuBuffers
            for ($first, $($rest),+)
        {
            type Dims = $first::Dims;
            const STREAM_GROUP: &'static str = $first::STREAM_GROUP;
            const LABELS: &'static [&'static str] =
                Labels::as_slice(&Labels::concat(&[$first::LABELS, $($rest::LABELS),+]));
            #[doc(hidden)]
            const __RUN_AXIS: Option<&'static str> =
                first_run_axis(&[$first::__RUN_AXIS, $($rest::__RUN_AXIS),+]);

            fn requests(dims: &Self::Dims) -> RequestSet {
                let () = <Self as PartsAgree>::CHECK;
                let mut set = $first::requests(dims);
                $(
                    for (label, request) in $rest::requests(dims) {
                        set.insert(label, request);
                    }
                )+
                set
            }

            fn from_response_set(response: &mut ArrayResponse, set: usize) -> Result<Self, MemError> {
                Ok((
                    $first::from_response_set(response, set)?,
                    $($rest::from_response_set(response, set)?),+
                ))
            }
        }

        impl<$first: SingleBufferSet, $($rest: SingleBufferSet + GpuBuffers<Dims = $first::Dims>),+>
            SingleBufferSet for ($first, $($rest),+)
        {
        }
    };
}

tuple_buffers!(A, B);
tuple_buffers!(A, B, C);
tuple_buffers!(A, B, C, D);
