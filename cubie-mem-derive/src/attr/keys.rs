//! The keys of `#[buffers(..)]` and `#[buffer(..)]`, each declared once as an
//! enum variant with its spelling.
//!
//! Parsing matches on the enum without a wildcard arm, so a key added here
//! and not handled there is a compile error of this crate, never a key that
//! silently falls into another key's branch or the unknown-key path.

use syn::meta::ParseNestedMeta;

use crate::ctxt::{Ctxt, Reported};
use crate::suggest::did_you_mean;

/// The keys of one attribute.
pub(crate) trait Key: Copy + 'static {
    /// Every key, in the order the error messages list them.
    const ALL: &'static [Self];
    /// How the attribute is written, for messages (`#[buffer(..)]`).
    const ATTRIBUTE: &'static str;
    /// The key as written in the attribute.
    fn name(self) -> &'static str;
}

/// Declares the keys of an attribute: the enum, and its [`Key`] impl listing
/// every variant with its spelling.
macro_rules! keys {
    (
        $(#[$meta:meta])*
        $name:ident in $attribute:literal {
            $($(#[$variant_meta:meta])* $variant:ident = $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        pub(crate) enum $name {
            $($(#[$variant_meta])* $variant,)+
        }

        impl Key for $name {
            const ALL: &'static [Self] = &[$(Self::$variant),+];
            const ATTRIBUTE: &'static str = $attribute;
            fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }
        }
    };
}

keys! {
    /// A key of `#[buffers(..)]` on the struct.
    ContainerKey in "#[buffers(..)]" {
        /// `dims = Type`: the struct whose fields the shapes refer to.
        Dims = "dims",
        /// `crate = path`: where cubie-mem is reachable.
        Crate = "crate",
        /// `pipeline_depth = N`: the depth of every request.
        PipelineDepth = "pipeline_depth",
        /// `host = Name`: the host mirror to generate.
        Host = "host",
    }
}

keys! {
    /// A key of `#[buffer(..)]` on a field.
    BufferKey in "#[buffer(..)]" {
        /// `shape = [..]`.
        Shape = "shape",
        /// `chunk_axis = <index or dimension>`.
        ChunkAxis = "chunk_axis",
        /// `unchunkable`, a flag.
        Unchunkable = "unchunkable",
        /// `precision = Type`.
        Precision = "precision",
        /// `memory = device | pinned`.
        Memory = "memory",
        /// `label = ".."`.
        Label = "label",
        /// `part`, a flag: the field is a buffer struct of its own.
        Part = "part",
        /// `input`, a flag: the host mirror copies the field in.
        Input = "input",
        /// `output`, a flag: the host mirror copies the field out.
        Output = "output",
        /// `inout`, a flag: the host mirror copies the field in and out.
        Inout = "inout",
        /// `host_memory = pinned | pageable | spilled`.
        HostMemory = "host_memory",
    }
}

impl BufferKey {
    /// What a well-formed use of the key looks like.
    pub(crate) fn example(self) -> &'static str {
        match self {
            BufferKey::Shape => {
                "write `shape = [n_states, n_runs]` with fields of the dims type or integer literals"
            }
            BufferKey::ChunkAxis => {
                "write `chunk_axis = n_runs` (a dimension of the shape) or `chunk_axis = 1` (an axis index)"
            }
            BufferKey::Unchunkable => "write `unchunkable` alone",
            BufferKey::Precision => {
                "write `precision = f32`, `precision = f64` or `precision = P` (a type parameter)"
            }
            BufferKey::Memory => "write `memory = device` or `memory = pinned`",
            BufferKey::Label => "write `label = \"state\"`",
            BufferKey::Part => "write `part` alone, on a field whose type derives `GpuBuffers`",
            BufferKey::Input | BufferKey::Output | BufferKey::Inout => {
                "write `input`, `output` or `inout` alone: what the field's host array is for"
            }
            BufferKey::HostMemory => {
                "write `host_memory = pinned`, `host_memory = pageable` or `host_memory = spilled`"
            }
        }
    }
}

/// The key `meta` names.
pub(crate) enum Lookup<K> {
    /// Spelt right.
    Known(K),
    /// Misspelt, and close to this key alone: reported, and read as this key
    /// so that the rest of the struct is checked as the user meant it (and
    /// the fallback impl has what it needs).
    Misspelt(K),
    /// No key: reported.
    Unknown(Reported),
}

/// Looks up the key `meta` names, reporting an unknown one with the list of
/// keys and, for a typo, the closest key.
pub(crate) fn lookup<K: Key>(cx: &Ctxt, meta: &ParseNestedMeta) -> Lookup<K> {
    if let Some(key) = K::ALL.iter().find(|key| meta.path.is_ident(key.name())) {
        return Lookup::Known(*key);
    }
    let name = meta
        .path
        .segments
        .iter()
        .map(|segment| segment.ident.to_string())
        .collect::<Vec<_>>()
        .join("::");
    let keys = K::ALL
        .iter()
        .map(|key| format!("`{}`", key.name()))
        .collect::<Vec<_>>()
        .join(", ");
    let close = did_you_mean(&name, K::ALL, K::name);
    let hint = match close {
        Some(key) => format!("did you mean `{}`? The", key.name()),
        None => "the".to_owned(),
    };
    let reported = cx.syn_error(meta.error(format!(
        "unknown key `{name}` in `{}`; {hint} keys are {keys}",
        K::ATTRIBUTE
    )));
    match close {
        Some(key) => Lookup::Misspelt(key),
        None => Lookup::Unknown(reported),
    }
}
