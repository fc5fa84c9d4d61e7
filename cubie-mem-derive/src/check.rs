//! Checks of the model, field by field and across fields, resolving each
//! buffer into the layout the expansion generates from.
//!
//! What the macro cannot see (the dims type's fields, whether an element type
//! or a type parameter is supported) is left to assertions in the generated
//! code; see `expand`.

use std::collections::BTreeMap;

use proc_macro2::Span;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Type};

use crate::ast::{Container, Field, source_text};
use crate::attr::{AxisSpec, Dim, Placement};
use crate::ctxt::Ctxt;

/// A buffer checked and resolved: everything the expansion needs.
pub(crate) struct Layout<'a> {
    /// The field's name.
    pub(crate) field: &'a Ident,
    /// Device or pinned.
    pub(crate) placement: Placement,
    /// The element type as written in the field type.
    pub(crate) element: &'a Type,
    /// The shape's entries.
    pub(crate) shape: &'a [Dim],
    /// The axis the batch is split along; `None` for an unchunkable buffer.
    pub(crate) chunk_axis: Option<usize>,
    /// A `precision = ..` the macro could not compare with the element type:
    /// the generated code asserts that they are the same type.
    pub(crate) precision_assertion: Option<&'a Type>,
    /// The buffer's label.
    pub(crate) label: String,
}

/// The floating-point types `precision = ..` accepts.
const PRECISIONS: &[&str] = &["f32", "f64"];

/// Rust's primitive scalar names: a type written as one of these is known to
/// the macro without resolving it.
const PRIMITIVES: &[&str] = &[
    "f16", "f32", "f64", "f128", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32",
    "u64", "u128", "usize", "bool", "char",
];

/// How a buffer declared its chunking, before the struct's run axis is known.
enum Chunking {
    /// Split along this axis.
    Axis(usize, Span),
    /// Allocated whole.
    Unchunkable,
    /// Neither `chunk_axis` nor `unchunkable`: the run axis decides.
    Unspecified,
    /// A mistake already reported.
    Invalid,
}

/// The run axis of the struct: the dimension the first chunked buffer is
/// split along. Every chunked buffer must be split along the same dimension,
/// because the manager takes the batch's run count from it.
struct RunAxis<'a> {
    dim: &'a Dim,
    field: &'a Ident,
}

/// Checks every field and cross-field rule, recording mistakes in `cx`; the
/// layouts of the fields that passed come back in declaration order.
pub(crate) fn check<'a>(cx: &Ctxt, container: &'a Container<'a>) -> Vec<Layout<'a>> {
    if container.attrs.dims.is_none() && !container.attrs.incomplete && !container.fields.is_empty()
    {
        cx.error_spanned_by(
            container.ident,
            "missing the dims type: add `#[buffers(dims = RunDims)]` to the struct, naming the struct \
             whose `usize` fields the shapes refer to",
        );
    }
    let declared: Vec<Chunking> = container.fields.iter().map(|f| chunking(cx, f)).collect();

    let mut run_axis: Option<RunAxis> = None;
    for (field, chunking) in container.fields.iter().zip(&declared) {
        if let (Chunking::Axis(axis, span), Some(shape)) = (chunking, &field.attrs.shape) {
            let Some(dim) = shape.dims.get(*axis) else {
                continue;
            };
            check_run_axis(cx, &mut run_axis, field, dim, *span);
        }
    }

    let parameters: Vec<String> = container
        .generics
        .type_params()
        .map(|parameter| parameter.ident.to_string())
        .collect();
    let mut labels: BTreeMap<String, &Ident> = BTreeMap::new();
    let mut layouts = Vec::new();
    for (field, chunking) in container.fields.iter().zip(declared) {
        let chunk_axis = match chunking {
            Chunking::Axis(axis, _) => Some(Some(axis)),
            Chunking::Unchunkable => Some(None),
            Chunking::Unspecified => infer_axis(cx, field, run_axis.as_ref()).map(Some),
            Chunking::Invalid => None,
        };
        let label = label(cx, field, &mut labels);
        let Some(array) = &field.array else {
            continue;
        };
        if let Some((placement, ident)) = &field.attrs.memory {
            check_memory(cx, field, array.placement, *placement, ident);
        }
        let precision_assertion = field.attrs.precision.as_ref().and_then(|precision| {
            check_precision(cx, precision, array.element, field.ty, &parameters)
        });
        let (Some(chunk_axis), Some(label), Some(shape)) = (chunk_axis, label, &field.attrs.shape)
        else {
            continue;
        };
        layouts.push(Layout {
            field: field.ident,
            placement: array.placement,
            element: array.element,
            shape: &shape.dims,
            chunk_axis,
            precision_assertion,
            label,
        });
    }
    layouts
}

/// The field's shape and chunking as declared, reporting what is missing or
/// out of place.
fn chunking(cx: &Ctxt, field: &Field) -> Chunking {
    let attrs = &field.attrs;
    let Some(attr) = &attrs.attr else {
        if field.array.is_some() {
            cx.error_spanned_by(
                field.ident,
                format!(
                    "buffer `{}` has no `#[buffer(..)]` attribute: describe its shape, e.g. \
                     `#[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]`",
                    field.ident
                ),
            );
        }
        return Chunking::Invalid;
    };
    let shape = match &attrs.shape {
        Some(shape) if shape.dims.is_empty() => {
            cx.error(
                shape.span,
                "the shape is empty: list the buffer's dimensions, e.g. `shape = [n_states, n_runs]`; \
                 a single value is `shape = [1]`",
            );
            None
        }
        Some(shape) => Some(shape),
        None => {
            if !attrs.may_have("shape") {
                cx.error_spanned_by(
                    attr,
                    format!(
                        "buffer `{}` has no `shape`: add `shape = [..]` listing its dimensions \
                         (fields of the dims type or integer literals)",
                        field.ident
                    ),
                );
            }
            None
        }
    };
    match (&attrs.chunk_axis, attrs.unchunkable) {
        (Some(axis), Some(unchunkable)) => {
            cx.error(
                unchunkable,
                format!(
                    "`chunk_axis` and `unchunkable` contradict each other: keep `chunk_axis = {}` to split the \
                     buffer across chunks, or `unchunkable` to allocate it whole in every chunk",
                    axis_text(axis)
                ),
            );
            Chunking::Invalid
        }
        (Some(axis), None) => match shape {
            Some(shape) => match resolve_axis(cx, axis, &shape.dims, &shape.describe()) {
                Some(index) => Chunking::Axis(index, axis.span()),
                None => Chunking::Invalid,
            },
            None => Chunking::Invalid,
        },
        (None, Some(_)) => Chunking::Unchunkable,
        (None, None)
            if attrs.may_have("chunk_axis") || attrs.may_have("unchunkable") || shape.is_none() =>
        {
            Chunking::Invalid
        }
        (None, None) => Chunking::Unspecified,
    }
}

/// `chunk_axis = ..` as written.
fn axis_text(axis: &AxisSpec) -> String {
    match axis {
        AxisSpec::Index(_, index) => index.to_string(),
        AxisSpec::Name(ident) => ident.to_string(),
    }
}

/// The index `chunk_axis` names in `dims`.
fn resolve_axis(cx: &Ctxt, axis: &AxisSpec, dims: &[Dim], shape: &str) -> Option<usize> {
    match axis {
        AxisSpec::Index(lit, index) => {
            if *index < dims.len() {
                return Some(*index);
            }
            let valid = match dims.len() {
                1 => "0".to_owned(),
                n => format!("0 to {}", n - 1),
            };
            cx.error(
                lit.span(),
                format!(
                    "chunk_axis {index} is out of range for the shape {shape} of {} dimension(s): \
                     give an index from {valid}, or the name of a dimension",
                    dims.len()
                ),
            );
            None
        }
        AxisSpec::Name(name) => {
            let positions: Vec<usize> = dims
                .iter()
                .enumerate()
                .filter(|(_, dim)| matches!(dim, Dim::Field(field) if field == name))
                .map(|(index, _)| index)
                .collect();
            match positions.as_slice() {
                [index] => Some(*index),
                [] => {
                    let names = named_dims(dims);
                    let instead = if names.is_empty() {
                        "give the axis index instead".to_owned()
                    } else {
                        format!("name one of {names}, or give the axis index")
                    };
                    cx.error(
                        name.span(),
                        format!(
                            "chunk_axis `{name}` is not in this buffer's shape {shape}: {instead}"
                        ),
                    );
                    None
                }
                [first, ..] => {
                    cx.error(
                        name.span(),
                        format!(
                            "chunk_axis `{name}` appears {} times in the shape {shape}: give the axis \
                             index instead, e.g. `chunk_axis = {first}`",
                            positions.len()
                        ),
                    );
                    None
                }
            }
        }
    }
}

/// The dims fields of a shape, as `` `a`, `b` ``.
fn named_dims(dims: &[Dim]) -> String {
    dims.iter()
        .filter_map(|dim| match dim {
            Dim::Field(field) => Some(format!("`{field}`")),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Records the struct's run axis, or reports a chunked buffer split along
/// another dimension.
fn check_run_axis<'a>(
    cx: &Ctxt,
    run_axis: &mut Option<RunAxis<'a>>,
    field: &'a Field<'a>,
    dim: &'a Dim,
    span: Span,
) {
    if matches!(dim, Dim::Invalid(_)) {
        return;
    }
    let Some(first) = run_axis else {
        *run_axis = Some(RunAxis {
            dim,
            field: field.ident,
        });
        return;
    };
    let same = match (first.dim, dim) {
        (Dim::Field(a), Dim::Field(b)) => a == b,
        (Dim::Literal(_, a), Dim::Literal(_, b)) => a == b,
        _ => false,
    };
    if !same {
        cx.error(
            span,
            format!(
                "the buffers of one struct are split along one run axis, whose length is the batch's run count: \
                 `{}` is split along `{}`, this buffer along `{}`; split it along `{}` or mark it `unchunkable`",
                first.field,
                first.dim.describe(),
                dim.describe(),
                first.dim.describe(),
            ),
        );
    }
}

/// The chunk axis of a buffer declaring neither `chunk_axis` nor
/// `unchunkable`: the struct's run axis, when it is a dimension that appears
/// once in the buffer's shape. Anything else is reported.
fn infer_axis(cx: &Ctxt, field: &Field, run_axis: Option<&RunAxis>) -> Option<usize> {
    let dims = field
        .attrs
        .shape
        .as_ref()
        .map(|shape| shape.dims.as_slice())?;
    let run_dim = run_axis.and_then(|run| match run.dim {
        Dim::Field(name) => Some(name),
        _ => None,
    });
    if let Some(name) = run_dim {
        let mut positions = dims
            .iter()
            .enumerate()
            .filter(|(_, dim)| matches!(dim, Dim::Field(field) if field == name))
            .map(|(index, _)| index);
        if let (Some(index), None) = (positions.next(), positions.next()) {
            return Some(index);
        }
    }
    let reason = match run_dim {
        Some(name) => {
            let count = dims
                .iter()
                .filter(|dim| matches!(dim, Dim::Field(field) if field == name))
                .count();
            if count == 0 {
                format!("the struct's run axis `{name}` is not in its shape")
            } else {
                format!("the struct's run axis `{name}` appears {count} times in its shape")
            }
        }
        None => "no other buffer names a run axis to split it along".to_owned(),
    };
    let Some(attr) = &field.attrs.attr else {
        return None;
    };
    cx.error_spanned_by(
        attr,
        format!(
            "buffer `{}` has neither `chunk_axis` nor `unchunkable` ({reason}): add `chunk_axis = <dimension>` \
             to split it across chunks, or `unchunkable` to allocate it whole in every chunk",
            field.ident
        ),
    );
    None
}

/// The buffer's label (the field name unless `label = ".."`), reporting an
/// empty label or one already used.
fn label<'a>(
    cx: &Ctxt,
    field: &'a Field,
    seen: &mut BTreeMap<String, &'a Ident>,
) -> Option<String> {
    let (value, span) = match &field.attrs.label {
        Some(lit) => (lit.value(), lit.span()),
        None => (unraw(field.ident), field.ident.span()),
    };
    if value.is_empty() {
        cx.error(
            span,
            "the label is empty: give a name, e.g. `label = \"state\"`, or leave `label` out to use the field name",
        );
        return None;
    }
    if let Some(first) = seen.get(&value) {
        let how = if field.attrs.label.is_some() {
            "give this buffer another label"
        } else {
            "give one of them a distinct `label = \"..\"`"
        };
        cx.error(
            span,
            format!(
                "label \"{value}\" is already used by field `{first}`: labels name the arrays in the manager, \
                 so they must differ; {how}"
            ),
        );
        return None;
    }
    seen.insert(value.clone(), field.ident);
    Some(value)
}

/// The field name without a raw prefix (`r#type` labels as `type`).
fn unraw(ident: &Ident) -> String {
    let name = ident.to_string();
    match name.strip_prefix("r#") {
        Some(stripped) => stripped.to_owned(),
        None => name,
    }
}

fn check_memory(cx: &Ctxt, field: &Field, actual: Placement, declared: Placement, ident: &Ident) {
    if actual == declared {
        return;
    }
    cx.error(
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
    );
}

/// How the macro sees a type written in `precision = ..` or as an element.
#[derive(PartialEq, Eq)]
enum TypeName {
    /// A primitive scalar (`f32`, `i32`, `bool`, ...).
    Primitive(String),
    /// One of the struct's type parameters.
    Parameter(String),
    /// Anything else (an alias, a path, an associated type): only rustc can
    /// tell what it is.
    Unknown,
}

impl TypeName {
    fn of(ty: &Type, parameters: &[String]) -> Self {
        let Type::Path(path) = ty else {
            return TypeName::Unknown;
        };
        let Some(ident) = path.path.get_ident().filter(|_| path.qself.is_none()) else {
            return TypeName::Unknown;
        };
        let name = ident.to_string();
        if parameters.contains(&name) {
            TypeName::Parameter(name)
        } else if PRIMITIVES.contains(&name.as_str()) {
            TypeName::Primitive(name)
        } else {
            TypeName::Unknown
        }
    }
}

/// Compares `precision = ..` with the element type where the macro can tell
/// them apart (primitives and the struct's type parameters); returns the
/// precision when the generated code must assert it instead (a type
/// parameter must still be bounded by `Precision`; an alias or path must be a
/// precision and the element type).
fn check_precision<'a>(
    cx: &Ctxt,
    precision: &'a Type,
    element: &Type,
    field_type: &Type,
    parameters: &[String],
) -> Option<&'a Type> {
    let precision_name = TypeName::of(precision, parameters);
    if let TypeName::Primitive(name) = &precision_name {
        if !PRECISIONS.contains(&name.as_str()) {
            cx.error_spanned_by(
                precision,
                format!(
                    "`precision = {name}`: a precision is a floating-point type, `f32` or `f64`; \
                     leave `precision` out for a buffer of integers"
                ),
            );
            return None;
        }
    }
    let element_name = TypeName::of(element, parameters);
    if precision_name == TypeName::Unknown || element_name == TypeName::Unknown {
        return Some(precision);
    }
    if precision_name != element_name {
        let written = source_text(precision);
        let field = source_text(field_type);
        let element = source_text(element);
        let why = match (&precision_name, &element_name) {
            (_, TypeName::Parameter(parameter)) => format!(
                " (its element type `{parameter}` is a type parameter, chosen where the struct is used)"
            ),
            (TypeName::Parameter(parameter), _) => format!(
                " (`{parameter}` is a type parameter, chosen where the struct is used, and may differ from `{element}`)"
            ),
            _ => String::new(),
        };
        cx.error_spanned_by(
            precision,
            format!(
                "`precision = {written}` contradicts the field type `{field}`{why}: write `precision = {element}`, \
                 or change the element type to `{written}`"
            ),
        );
        return None;
    }
    matches!(precision_name, TypeName::Parameter(_)).then_some(precision)
}

/// The pipeline depth `pipeline_depth = ..` gives: an integer literal of at
/// least 1 (unsuffixed or `usize`). Anything else is reported at the value
/// and gives `None`, as does a missing key (the requests then keep depth 1).
pub(crate) fn pipeline_depth(cx: &Ctxt, value: Option<&Expr>) -> Option<usize> {
    let value = value?;
    let Expr::Lit(ExprLit {
        lit: Lit::Int(lit), ..
    }) = value
    else {
        cx.error_spanned_by(
            value,
            "expected the pipeline depth as an integer literal, the number of chunks in flight: \
             write `pipeline_depth = 2` (or 3 when a buffer is both uploaded and downloaded)",
        );
        return None;
    };
    if !matches!(lit.suffix(), "" | "usize") {
        cx.error(
            lit.span(),
            format!(
                "the pipeline depth is a `usize`: write `{}` without the `{}` suffix",
                lit.base10_digits(),
                lit.suffix()
            ),
        );
        return None;
    }
    match lit.base10_parse::<usize>() {
        Ok(0) => {
            cx.error(
                lit.span(),
                "a pipeline depth of 0 leaves no buffer set to compute in: give at least 1 \
                 (depth 1 runs the chunks one after another, 2 overlaps copies with compute), \
                 or leave `pipeline_depth` out for depth 1",
            );
            None
        }
        Ok(depth) => Some(depth),
        Err(error) => {
            cx.error(
                lit.span(),
                format!("the pipeline depth does not fit a `usize`: {error}"),
            );
            None
        }
    }
}

/// The stream group's name, "default" when the attribute is absent.
pub(crate) fn stream_group(lit: Option<&LitStr>) -> String {
    lit.map_or_else(|| "default".to_owned(), LitStr::value)
}
