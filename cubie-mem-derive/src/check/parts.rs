//! Parts: fields holding buffer structs of their own (`#[buffer(part)]`),
//! whose buffers are requested, planned and taken with the struct's.
//!
//! The macro sees a part's type, not its declaration: what the parts must
//! agree on (one stream group, one run axis, labels unique across them) is
//! asserted by the generated code at compile time, on each part's field.

use quote::quote;
use syn::{Ident, Type};

use super::Parameters;

use crate::ast::Part;
use crate::attr::{BufferKey, Key};
use crate::ctxt::{Ctxt, Reported};

/// A part that passed its checks.
pub(crate) struct CheckedPart<'a> {
    /// The field's name.
    pub(crate) field: &'a Ident,
    /// The part's type.
    pub(crate) ty: &'a Type,
    /// Whether the type names a generic parameter of the struct: its
    /// `GpuBuffers` bound is then checked where the struct is used, not
    /// where the impl is declared.
    pub(crate) is_generic: bool,
}

/// Checks every part, reporting the keys a part cannot take: its buffers'
/// layout, labels and memory are its own declaration's.
pub(super) fn check<'a>(
    cx: &Ctxt,
    parts: &'a [Part<'a>],
    parameters: &Parameters,
) -> Result<Vec<CheckedPart<'a>>, Reported> {
    let mut first_error = None;
    let checked = parts
        .iter()
        .map(|part| {
            for &(key, span) in &part.attrs.keys {
                let Some(why) = refused(key, part.ident) else {
                    continue;
                };
                let reported = cx.error(
                    span,
                    format!(
                        "`{}` describes a buffer, but `{}` is a part (`#[buffer(part)]`): {why}",
                        key.name(),
                        part.ident
                    ),
                );
                first_error = first_error.or(Some(reported));
            }
            let ty = part.ty;
            CheckedPart {
                field: part.ident,
                ty,
                is_generic: parameters.named_in(quote!(#ty)),
            }
        })
        .collect();
    match first_error {
        Some(reported) => Err(reported),
        None => Ok(checked),
    }
}

/// Why the part `part` cannot take `key`; `None` for `part` itself.
fn refused(key: BufferKey, part: &Ident) -> Option<String> {
    let why = match key {
        BufferKey::Part => None,
        BufferKey::Shape | BufferKey::ChunkAxis | BufferKey::Unchunkable => Some(
            "its buffers' shapes and chunking are declared in its own `#[derive(GpuBuffers)]` struct; \
             remove the key here",
        ),
        BufferKey::Precision | BufferKey::Memory => Some(
            "its buffers' element types and memory are declared in its own struct; remove the key here",
        ),
        BufferKey::Input | BufferKey::Output | BufferKey::Inout | BufferKey::HostMemory => {
            return Some(format!(
                "a part has no host array: mark its buffers in its own struct, give that struct \
                 a host mirror (`#[buffers(host = ..)]`) and bind it with `|set| &set.{part}`; \
                 remove the key here"
            ));
        }
        BufferKey::Label => Some(
            "its buffers keep the labels its own struct gives them (unique across the parts); \
             rename them there",
        ),
    };
    why.map(str::to_owned)
}
