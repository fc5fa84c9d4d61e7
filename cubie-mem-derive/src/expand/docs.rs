//! The rustdoc of the generated impl and its items: what the struct declares
//! (its buffers, their shapes and chunking) and how to register a holder.

use crate::check::{Buffer, Checked, Chunking, Dims, StreamGroup};
use crate::names::{source_text, unraw};

/// The rustdoc of the generated items.
pub(super) struct Docs {
    /// The impl.
    pub(super) implementation: String,
    /// `type Dims`.
    pub(super) dims: String,
    /// `const STREAM_GROUP`.
    pub(super) group: String,
    /// `const LABELS`.
    pub(super) labels: String,
    /// `fn requests`.
    pub(super) requests: String,
    /// `fn from_response_set`.
    pub(super) from_response: String,
    /// `fn registration`.
    pub(super) registration: String,
}

/// What a holder must add to the preset, and why: said on the impl and on
/// `registration()`.
const ON_INVALIDATE: &str = "The preset has no invalidate hook: add `.on_invalidate(..)` before allocating. \
     Under memory pressure the manager may evict these buffers (their handles then return errors), and it \
     refuses to queue requests for an instance without a hook (`MemError::NoInvalidateHook`); what to do on \
     eviction (mark the results stale, allocate again before the next batch) is the holder's choice.";

impl Docs {
    /// The documentation of `checked`'s impl.
    pub(super) fn new(checked: &Checked) -> Self {
        let dims = match checked.dims {
            Dims::Declared(ty) => source_text(ty),
            Dims::OfPart(ty) => format!("{}::Dims", source_text(ty)),
        };
        let name = unraw(checked.ident);
        let group = match &checked.stream_group {
            StreamGroup::Default => {
                "the default stream group (`Registration::DEFAULT_STREAM_GROUP`)".to_owned()
            }
            StreamGroup::Named(name) => format!("stream group \"{name}\""),
            StreamGroup::OfPart => "its first part's stream group".to_owned(),
        };
        let mut buffers: Vec<String> = checked.buffers.iter().map(describe).collect();
        buffers.extend(checked.parts.iter().map(|part| {
            format!(
                "- `{}`: the buffers of `{}`, a part",
                part.field,
                source_text(part.ty)
            )
        }));
        let depth = checked.pipeline_depth.map_or_else(String::new, |depth| {
            format!(" Every request has pipeline depth {depth}: a buffer set per chunk in flight.")
        });
        Docs {
            implementation: format!(
                "Derived from `#[derive(GpuBuffers)]`: {} buffer(s) in {group}, shaped by `{dims}`.\n\n\
                 Register holders with `GpuBuffers::registration()` and allocate with \
                 `MemoryManager::allocate_buffers`. {ON_INVALIDATE}\n\n{}",
                checked.buffers.len(),
                buffers.join("\n")
            ),
            dims: format!(
                "The shapes of `{}` refer to the fields of `{dims}`.",
                checked.ident
            ),
            group: format!("Instances holding these buffers belong to {group}."),
            labels: format!(
                "The arrays' labels in the manager: {}{}.",
                checked
                    .buffers
                    .iter()
                    .map(|buffer| format!("`\"{}\"`", buffer.label))
                    .collect::<Vec<_>>()
                    .join(", "),
                if checked.parts.is_empty() {
                    ""
                } else {
                    ", then each part's"
                }
            ),
            requests: format!(
                "One request per buffer, with the lengths read from `dims`; chunked buffers carry the \
                 length of their chunk axis as the batch's run count.{depth}\n\n{}",
                buffers.join("\n")
            ),
            from_response: "Takes every buffer of buffer set `set` out of an allocation response by its label \
                            (an unchunkable buffer is shared by every set); a missing label, a set out of range, \
                            or an array of another type or memory kind is an error."
                .to_owned(),
            registration: format!(
                "`Registration::new()` named \"{name}\" (shown in statistics, reports and errors) in {group}, \
                 so that a holder cannot land in another group. Chain the rest: `.owner(..)`, \
                 `.proportion(..)`, another `.name(..)`.\n\n{ON_INVALIDATE}"
            ),
        }
    }
}

/// One line of documentation for a buffer: `` - `state`: device `f64`, shape `[n, 3]`, split along axis 0 (`n`) ``.
fn describe(buffer: &Buffer) -> String {
    let shape: Vec<String> = buffer
        .shape
        .iter()
        .map(|length| length.describe())
        .collect();
    let chunking = match buffer.chunking {
        Chunking::Axis { index, runs } => {
            format!("split along axis {index} (`{}`)", runs.describe())
        }
        Chunking::Whole => "unchunkable".to_owned(),
    };
    format!(
        "- `{}`: {} `{}`, shape `[{}]`, {chunking}",
        buffer.label,
        buffer.placement.keyword(),
        source_text(buffer.element),
        shape.join(", ")
    )
}
