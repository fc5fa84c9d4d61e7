//! The host mirror (`#[buffers(host = Name)]`): which buffers have a host
//! array, in which direction and memory, checked against the struct.

use proc_macro2::Span;
use quote::quote;
use syn::{GenericParam, Generics, Ident};

use super::{Chunking, Parameters};
use crate::ast::Field;
use crate::attr::{Direction, HostMemory};
use crate::ctxt::{Ctxt, Reported};

/// The host mirror a struct names.
pub(crate) struct HostMirror<'a> {
    /// Its name.
    pub(crate) ident: &'a Ident,
    /// The struct's parameters no directed field's element type names: a
    /// marker field holds them, so that the mirror keeps every parameter.
    pub(crate) unused: Vec<&'a GenericParam>,
}

/// The host side of a buffer: what its mirror's array is for, and where it
/// lives.
#[derive(Clone, Copy)]
pub(crate) struct HostSide {
    /// In, out or both.
    pub(crate) direction: Direction,
    /// `host_memory = ..`: the array's kind, overriding the mirror's.
    pub(crate) memory: Option<HostMemory>,
}

/// Checks the host keys of every field: one direction at most, none on an
/// unchunkable buffer, `host_memory` only with one, and none without a
/// mirror (reported once, at the first). `chunkings` are the fields'
/// chunking, where their layout could be checked.
pub(super) fn sides(
    cx: &Ctxt,
    container: &Ident,
    host: Option<&Ident>,
    fields: &[Field],
    chunkings: &[Option<Chunking>],
) -> Vec<Result<Option<HostSide>, Reported>> {
    let mut no_mirror: Option<Reported> = None;
    fields
        .iter()
        .zip(chunkings)
        .map(|(field, chunking)| {
            let side = side(cx, field, *chunking)?;
            match (side, host) {
                (Some(_), None) => {
                    let (direction, span) = field.attrs.directions[0];
                    Err(*no_mirror.get_or_insert_with(|| {
                        cx.error(
                            span,
                            format!(
                                "`{}` gives field `{}` a host array, but no host mirror holds it; \
                                 name the host mirror: `#[buffers(host = {container}Host)]`",
                                direction.keyword(),
                                field.ident
                            ),
                        )
                    }))
                }
                (side, _) => Ok(side),
            }
        })
        .collect()
}

/// The host side of one field, reporting its mistakes.
fn side(
    cx: &Ctxt,
    field: &Field,
    chunking: Option<Chunking>,
) -> Result<Option<HostSide>, Reported> {
    let attrs = &field.attrs;
    let mut error = None;
    let mut report = |span: Span, message: String| {
        error = error.or(Some(cx.error(span, message)));
    };
    let first = attrs.directions.first().copied();
    for &(direction, span) in attrs.directions.iter().skip(1) {
        let message = match first {
            Some((first, _)) if first == direction => {
                format!("`{}` is given twice; keep one", direction.keyword())
            }
            Some((first, _)) => format!(
                "field `{}` is both `{}` and `{}`: a host array has one direction; \
                 write `inout` alone for an array the kernel both reads and writes",
                field.ident,
                first.keyword(),
                direction.keyword()
            ),
            None => continue,
        };
        report(span, message);
    }
    if let (Some((direction, span)), Some(Chunking::Whole)) = (first, chunking) {
        report(
            span,
            format!(
                "`{}` binds field `{}` chunk by chunk along the run axis, but it is `unchunkable`: \
                 copy it once with `copy_from_host`, or give it a `chunk_axis`",
                direction.keyword(),
                field.ident
            ),
        );
    }
    if let (None, Some((memory, ident))) = (first, &attrs.host_memory) {
        report(
            ident.span(),
            format!(
                "`host_memory = {}` chooses the memory of field `{}`'s host array, but it has none: \
                 add `input`, `output` or `inout`, or remove `host_memory`",
                memory.keyword(),
                field.ident
            ),
        );
    }
    match error {
        Some(reported) => Err(reported),
        None => Ok(first.map(|(direction, _)| HostSide {
            direction,
            memory: attrs.host_memory.as_ref().map(|(memory, _)| *memory),
        })),
    }
}

/// The host mirror `host` names, reporting one without a directed field.
/// `directed` are the element types of the fields with a direction.
pub(super) fn mirror<'a>(
    cx: &Ctxt,
    host: Option<&'a Ident>,
    fields: &[Field],
    generics: &'a Generics,
    parameters: &Parameters,
) -> Result<Option<HostMirror<'a>>, Reported> {
    let Some(ident) = host else {
        return Ok(None);
    };
    let directed: Vec<_> = fields
        .iter()
        .filter(|field| !field.attrs.directions.is_empty())
        .filter_map(|field| field.array.as_ref().ok())
        .map(|array| array.element)
        .collect();
    if fields.iter().all(|field| field.attrs.directions.is_empty()) {
        return Err(cx.error(
            ident.span(),
            format!(
                "the host mirror `{ident}` has no field: mark each buffer it holds `input`, `output` \
                 or `inout` (`#[buffer(.., output)]`), or remove `host = {ident}`"
            ),
        ));
    }
    let unused = generics
        .params
        .iter()
        .zip(&parameters.all)
        .filter(|(_, name)| {
            !directed
                .iter()
                .any(|element| Parameters::names(quote!(#element), name))
        })
        .map(|(parameter, _)| parameter)
        .collect();
    Ok(Some(HostMirror { ident, unused }))
}
