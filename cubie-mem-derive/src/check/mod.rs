//! Checks of the model, field by field and across fields, resolving the
//! struct into [`Checked`]: the complete description the expansion
//! generates from, built only when every piece of it is known.
//!
//! A piece that cannot be built carries the [`Reported`] proof of its error,
//! so that the expansion never meets a missing piece: it receives a whole
//! [`Checked`] or emits the errors with the fallback impl.
//!
//! What the macro cannot see (the dims type's fields, whether an element type
//! or a type parameter is supported) is left to assertions in the generated
//! code; see `expand`.

mod chunking;
mod host;
mod parts;
mod precision;

use std::collections::BTreeMap;

use proc_macro2::{TokenStream, TokenTree};
use quote::quote;
use syn::{GenericParam, Generics, Ident, LitInt, Path, Type, Visibility};

use crate::ast::{Container, Field};
use crate::attr::{Dim, Placement};
use crate::ctxt::{Ctxt, Reported};
use crate::names::{source_text, unraw};
pub(crate) use host::{HostMirror, HostSide};
pub(crate) use parts::CheckedPart;

/// A struct that passed every check: everything its impl is generated from.
pub(crate) struct Checked<'a> {
    /// The struct's name.
    pub(crate) ident: &'a Ident,
    /// Its visibility, which the host mirror takes.
    pub(crate) vis: &'a Visibility,
    /// Its generics, passed through to the impl.
    pub(crate) generics: &'a Generics,
    /// The path cubie-mem is reached at.
    pub(crate) krate: Path,
    /// The dims type the shapes refer to.
    pub(crate) dims: Dims<'a>,
    /// The stream group of the struct's holders.
    pub(crate) stream_group: StreamGroup,
    /// The pipeline depth every request carries; `None` when the struct
    /// gives none, and the requests keep their default (1).
    pub(crate) pipeline_depth: Option<usize>,
    /// The buffers, in declaration order.
    pub(crate) buffers: Vec<Buffer<'a>>,
    /// The parts, in declaration order.
    pub(crate) parts: Vec<CheckedPart<'a>>,
    /// The host mirror `#[buffers(host = Name)]` names.
    pub(crate) host: Option<HostMirror<'a>>,
}

/// The dims type of a struct.
pub(crate) enum Dims<'a> {
    /// `#[buffers(dims = Type)]`.
    Declared(&'a Type),
    /// Not declared, by a struct of parts alone: its first part's.
    OfPart(&'a Type),
}

/// The stream group a struct names.
pub(crate) enum StreamGroup {
    /// No `#[stream_group(..)]` and no part: cubie-mem's default group.
    Default,
    /// `#[stream_group("name")]`, a non-empty name.
    Named(String),
    /// No `#[stream_group(..)]`: the first part's group.
    OfPart,
}

/// A buffer checked and resolved.
pub(crate) struct Buffer<'a> {
    /// The field's name.
    pub(crate) field: &'a Ident,
    /// Device or pinned.
    pub(crate) placement: Placement,
    /// The element type as written in the field type.
    pub(crate) element: &'a Type,
    /// Whether the element type names a generic parameter of the struct
    /// (`P`, `Complex<P>`): its `Element` bound is then checked where the
    /// struct is used, not where the impl is declared.
    pub(crate) element_is_generic: bool,
    /// The shape's lengths, at least one.
    pub(crate) shape: Vec<Length<'a>>,
    /// How the batch is split across the buffer.
    pub(crate) chunking: Chunking<'a>,
    /// A `precision = ..` the macro could not compare with the element type,
    /// which the generated code asserts instead.
    pub(crate) precision: Option<PrecisionAssertion<'a>>,
    /// The buffer's label, unique in the struct and not empty.
    pub(crate) label: String,
    /// Its host mirror's array, for a field with a direction.
    pub(crate) host: Option<HostSide>,
}

/// A length of a shape.
#[derive(Clone, Copy)]
pub(crate) enum Length<'a> {
    /// A field of the dims type, read when the requests are made.
    Field(&'a Ident),
    /// An integer literal, at least 1, with its value.
    Literal(&'a LitInt, usize),
}

impl<'a> Length<'a> {
    /// The length a shape entry gives, or the error reported for it.
    fn of(dim: &'a Dim) -> Result<Self, Reported> {
        match dim {
            Dim::Field(ident) => Ok(Length::Field(ident)),
            Dim::Literal(lit, value) => Ok(Length::Literal(lit, *value)),
            Dim::Invalid(reported) => Err(*reported),
        }
    }

    /// How the length reads in the source (`n_runs`, `3`).
    pub(crate) fn describe(self) -> String {
        match self {
            Length::Field(ident) => ident.to_string(),
            Length::Literal(_, value) => value.to_string(),
        }
    }
}

/// How the batch is split across a buffer.
#[derive(Clone, Copy)]
pub(crate) enum Chunking<'a> {
    /// Split along axis `index`, whose length `runs` is the batch's run count.
    Axis {
        /// The axis.
        index: usize,
        /// Its length.
        runs: Length<'a>,
    },
    /// Allocated whole in every chunk (`unchunkable`).
    Whole,
}

/// A `precision = ..` the generated code asserts: it must be a `Precision`
/// type and the field's element type.
pub(crate) struct PrecisionAssertion<'a> {
    /// The precision as written.
    pub(crate) precision: &'a Type,
    /// Whether the precision or the element type names a generic parameter
    /// of the struct: the assertion is then made inside the impl, where the
    /// parameters are in scope, rather than as a `const _` item.
    pub(crate) uses_parameters: bool,
}

/// Checks every field and cross-field rule, recording mistakes in `cx`, and
/// resolves the struct when every piece of it could be checked.
pub(crate) fn check<'a>(cx: &Ctxt, container: &'a Container<'a>) -> Result<Checked<'a>, Reported> {
    let attrs = &container.attrs;
    let fields = container.fields.as_deref().map_err(|reported| *reported);
    let first_part = container.parts.first().map(|part| part.ty);
    let dims = match (&attrs.dims, attrs.incomplete, fields, first_part) {
        (Some(dims), ..) => Ok(Dims::Declared(dims)),
        (None, Some(reported), _, _) | (None, None, Err(reported), _) => Err(reported),
        (None, None, Ok([]), Some(part)) => Ok(Dims::OfPart(part)),
        (None, None, Ok(_), _) => Err(cx.error_spanned_by(
            container.ident,
            "missing the dims type: add `#[buffers(dims = RunDims)]` to the struct, naming the struct \
             whose `usize` fields the shapes refer to (a struct of parts alone takes its first part's)",
        )),
    };

    // Without fields (reported), the checks below have nothing to check.
    let checked_fields = fields.unwrap_or_default();
    let declared: Vec<_> = checked_fields
        .iter()
        .map(|field| chunking::declared(cx, field))
        .collect();
    let run_axis = chunking::run_axis(cx, checked_fields, &declared);

    let parameters = Parameters::of(container.generics);
    let parts = parts::check(cx, &container.parts, &parameters);
    let mut labels: BTreeMap<String, &Ident> = BTreeMap::new();
    let layouts: Vec<_> = checked_fields
        .iter()
        .zip(declared)
        .map(|(field, declared)| chunking::layout(cx, field, declared, run_axis.as_ref()))
        .collect();
    let chunkings: Vec<_> = layouts
        .iter()
        .map(|layout| layout.as_ref().ok().map(|(_, chunking)| *chunking))
        .collect();
    let host = attrs.host.as_ref();
    let sides = host::sides(cx, container.ident, host, checked_fields, &chunkings);
    let mirror = host::mirror(cx, host, checked_fields, container.generics, &parameters);
    let buffers: Vec<_> = checked_fields
        .iter()
        .zip(layouts)
        .zip(sides)
        .map(|((field, layout), side)| {
            let label = label(cx, field, &mut labels);
            buffer(cx, field, layout, label, &parameters).and_then(|buffer| {
                Ok(Buffer {
                    host: side?,
                    ..buffer
                })
            })
        })
        .collect();
    let pipeline_depth = attrs.pipeline_depth.transpose();
    let buffers = fields.and_then(|_| buffers.into_iter().collect());
    Ok(Checked {
        ident: container.ident,
        vis: container.vis,
        generics: container.generics,
        krate: attrs.krate(),
        dims: dims?,
        stream_group: match (&attrs.stream_group, first_part) {
            (Some(name), _) => StreamGroup::Named(name.value()),
            (None, Some(_)) => StreamGroup::OfPart,
            (None, None) => StreamGroup::Default,
        },
        pipeline_depth: pipeline_depth?,
        buffers: buffers?,
        parts: parts?,
        host: mirror?,
    })
}

/// Whether `tokens` name a parameter of `generics`.
pub(crate) fn names_parameter(generics: &Generics, tokens: TokenStream) -> bool {
    Parameters::of(generics).named_in(tokens)
}

/// The names of the struct's generic parameters.
struct Parameters {
    /// The type parameters, which `precision = ..` may name.
    types: Vec<String>,
    /// Every parameter (types, lifetimes and constants): an item outside the
    /// impl cannot name them.
    all: Vec<String>,
}

impl Parameters {
    /// The parameters of `generics`.
    fn of(generics: &Generics) -> Self {
        let types = generics
            .type_params()
            .map(|parameter| parameter.ident.to_string())
            .collect();
        let all = generics
            .params
            .iter()
            .map(|parameter| match parameter {
                GenericParam::Type(parameter) => parameter.ident.to_string(),
                GenericParam::Lifetime(parameter) => parameter.lifetime.ident.to_string(),
                GenericParam::Const(parameter) => parameter.ident.to_string(),
            })
            .collect();
        Parameters { types, all }
    }

    /// Whether `tokens` name one of the parameters.
    fn named_in(&self, tokens: TokenStream) -> bool {
        self.all
            .iter()
            .any(|name| Self::names(tokens.clone(), name))
    }

    /// Whether `tokens` name the parameter `name`.
    fn names(tokens: TokenStream, name: &str) -> bool {
        tokens.into_iter().any(|token| match token {
            TokenTree::Ident(ident) => ident == name,
            TokenTree::Group(group) => Self::names(group.stream(), name),
            _ => false,
        })
    }
}

/// The buffer of one field, from its layout and label, checking what its
/// type says against `memory = ..` and `precision = ..`.
fn buffer<'a>(
    cx: &Ctxt,
    field: &'a Field<'a>,
    layout: Result<(Vec<Length<'a>>, Chunking<'a>), Reported>,
    label: Result<String, Reported>,
    parameters: &Parameters,
) -> Result<Buffer<'a>, Reported> {
    let array = field.array.as_ref().map_err(|reported| *reported)?;
    let element = array.element;
    let memory = match &field.attrs.memory {
        Some((declared, ident)) => check_memory(cx, field, array.placement, *declared, ident),
        None => Ok(()),
    };
    let precision = field
        .attrs
        .precision
        .as_ref()
        .map(|written| {
            precision::check(cx, written, element, field.ty, &parameters.types).map(|asserted| {
                asserted.map(|precision| PrecisionAssertion {
                    precision,
                    uses_parameters: parameters.named_in(quote!(#precision #element)),
                })
            })
        })
        .transpose()?
        .flatten();
    memory?;
    let (shape, chunking) = layout?;
    Ok(Buffer {
        field: field.ident,
        placement: array.placement,
        element,
        element_is_generic: parameters.named_in(quote!(#element)),
        shape,
        chunking,
        precision,
        label: label?,
        host: None,
    })
}

/// The buffer's label (the field name unless `label = ".."`), reporting an
/// empty label or one already used.
fn label<'a>(
    cx: &Ctxt,
    field: &'a Field,
    seen: &mut BTreeMap<String, &'a Ident>,
) -> Result<String, Reported> {
    let (value, span) = match &field.attrs.label {
        Some(lit) => (lit.value(), lit.span()),
        None => (unraw(field.ident), field.ident.span()),
    };
    if value.is_empty() {
        return Err(cx.error(
            span,
            "the label is empty: give a name, e.g. `label = \"state\"`, or leave `label` out to use the field name",
        ));
    }
    if let Some(first) = seen.get(&value) {
        let how = if field.attrs.label.is_some() {
            "give this buffer another label"
        } else {
            "give one of them a distinct `label = \"..\"`"
        };
        return Err(cx.error(
            span,
            format!(
                "label \"{value}\" is already used by field `{first}`: labels name the arrays in the manager, \
                 so they must differ; {how}"
            ),
        ));
    }
    seen.insert(value.clone(), field.ident);
    Ok(value)
}

/// Reports a `memory = ..` that contradicts the field type.
fn check_memory(
    cx: &Ctxt,
    field: &Field,
    actual: Placement,
    declared: Placement,
    ident: &Ident,
) -> Result<(), Reported> {
    if actual == declared {
        return Ok(());
    }
    Err(cx.error(
        ident.span(),
        format!(
            "`memory = {}` contradicts the field type `{}`: declare the field as `{}<..>` for {} memory, \
             or write `memory = {}`",
            declared.keyword(),
            source_text(field.ty),
            declared.array_type(),
            declared.keyword(),
            actual.keyword(),
        ),
    ))
}
