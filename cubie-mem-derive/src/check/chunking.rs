//! Shapes and chunking: each buffer's shape and chunk axis as declared, the
//! struct's run axis across buffers, and the layout of each buffer once the
//! run axis is known.

use proc_macro2::Span;
use syn::{Attribute, Ident};

use super::{Chunking, Length};
use crate::ast::Field;
use crate::attr::{AxisSpec, BufferKey, Dim, Shape};
use crate::ctxt::{Ctxt, Reported};

/// A buffer's shape and chunking as declared, before the struct's run axis
/// is known.
pub(super) struct Declared<'a> {
    /// The field's `#[buffer(..)]` attribute, where a missing key is reported.
    attr: &'a Attribute,
    /// The shape, with at least one entry.
    shape: &'a Shape,
    /// The chunking the attribute gives.
    chunking: Declaration<'a>,
}

/// How a buffer declared its chunking.
enum Declaration<'a> {
    /// `chunk_axis = ..`, resolved to the axis and its entry, with the span
    /// of the value.
    Axis(usize, &'a Dim, Span),
    /// `unchunkable`.
    Whole,
    /// Neither `chunk_axis` nor `unchunkable`: the run axis decides.
    Unspecified,
}

/// The run axis of the struct: the dimension most chunked buffers are split
/// along. Every chunked buffer must be split along the same dimension,
/// because the manager takes the batch's run count from it.
pub(super) struct RunAxis<'a> {
    dim: &'a Dim,
}

/// The field's shape and chunking as declared, reporting what is missing,
/// empty, out of range or contradictory.
pub(super) fn declared<'a>(cx: &Ctxt, field: &'a Field) -> Result<Declared<'a>, Reported> {
    let attrs = &field.attrs;
    let Some(attr) = &attrs.attr else {
        return Err(match &field.array {
            Ok(_) => cx.error_spanned_by(
                field.ident,
                format!(
                    "buffer `{}` has no `#[buffer(..)]` attribute: describe its shape, e.g. \
                     `#[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]`",
                    field.ident
                ),
            ),
            Err(reported) => *reported,
        });
    };
    let shape = match &attrs.shape {
        Some(shape) if shape.dims.is_empty() => Err(cx.error(
            shape.span,
            "the shape is empty: list the buffer's dimensions, e.g. `shape = [n_states, n_runs]`; \
             a single value is `shape = [1]`",
        )),
        Some(shape) => Ok(shape),
        None => Err(attrs.may_have(BufferKey::Shape).unwrap_or_else(|| {
            cx.error_spanned_by(
                attr,
                format!(
                    "buffer `{}` has no `shape`: add `shape = [..]` listing its dimensions \
                     (fields of the dims type or integer literals)",
                    field.ident
                ),
            )
        })),
    };
    let chunking = match (&attrs.chunk_axis, attrs.unchunkable) {
        (Some(axis), Some(unchunkable)) => Err(cx.error(
            unchunkable,
            format!(
                "`chunk_axis` and `unchunkable` contradict each other: keep `chunk_axis = {}` to split the \
                 buffer across chunks, or `unchunkable` to allocate it whole in every chunk",
                axis.describe()
            ),
        )),
        (Some(axis), None) => {
            let shape = shape?;
            resolve_axis(cx, axis, &shape.dims, &shape.describe())
                .map(|(index, dim)| Declaration::Axis(index, dim, axis.span()))
        }
        (None, Some(_)) => Ok(Declaration::Whole),
        (None, None) => match attrs
            .may_have(BufferKey::ChunkAxis)
            .or_else(|| attrs.may_have(BufferKey::Unchunkable))
        {
            Some(reported) => Err(reported),
            None => Ok(Declaration::Unspecified),
        },
    };
    Ok(Declared {
        attr,
        shape: shape?,
        chunking: chunking?,
    })
}

/// The axis `chunk_axis` names in `dims`, with its entry.
fn resolve_axis<'a>(
    cx: &Ctxt,
    axis: &AxisSpec,
    dims: &'a [Dim],
    shape: &str,
) -> Result<(usize, &'a Dim), Reported> {
    match axis {
        AxisSpec::Index(lit, index) => match dims.get(*index) {
            Some(dim) => Ok((*index, dim)),
            None => {
                let valid = match dims.len() {
                    1 => "0".to_owned(),
                    n => format!("0 to {}", n - 1),
                };
                Err(cx.error(
                    lit.span(),
                    format!(
                        "chunk_axis {index} is out of range for the shape {shape} of {} dimension(s): \
                         give an index from {valid}, or the name of a dimension",
                        dims.len()
                    ),
                ))
            }
        },
        AxisSpec::Name(name) => {
            let positions = positions(dims, name);
            match positions.as_slice() {
                [(index, dim)] => Ok((*index, *dim)),
                [] => {
                    let names = named_dims(dims);
                    let instead = if names.is_empty() {
                        "give the axis index instead".to_owned()
                    } else {
                        format!("name one of {names}, or give the axis index")
                    };
                    Err(cx.error(
                        name.span(),
                        format!(
                            "chunk_axis `{name}` is not in this buffer's shape {shape}: {instead}"
                        ),
                    ))
                }
                [(first, _), ..] => Err(cx.error(
                    name.span(),
                    format!(
                        "chunk_axis `{name}` appears {} times in the shape {shape}: give the axis \
                         index instead, e.g. `chunk_axis = {first}`",
                        positions.len()
                    ),
                )),
            }
        }
    }
}

/// The entries of `dims` that are the dims field `name`, with their axes.
fn positions<'a>(dims: &'a [Dim], name: &Ident) -> Vec<(usize, &'a Dim)> {
    dims.iter()
        .enumerate()
        .filter(|(_, dim)| matches!(dim, Dim::Field(field) if field == name))
        .collect()
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

/// The struct's run axis: the dimension most chunked buffers are split
/// along (on a tie, the one named like runs), each buffer split along
/// another one reported. Where no dimension wins, every disagreeing buffer
/// is reported with the candidates, and none is prescribed.
pub(super) fn run_axis<'a>(
    cx: &Ctxt,
    fields: &'a [Field<'a>],
    declared: &[Result<Declared<'a>, Reported>],
) -> Option<RunAxis<'a>> {
    // The chunked buffers, grouped by the dimension they are split along,
    // in the order each dimension first appears.
    let mut groups: Vec<Vec<(&'a Ident, &'a Dim, Span)>> = Vec::new();
    for (field, declared) in fields.iter().zip(declared) {
        let Ok(Declared {
            chunking: Declaration::Axis(_, dim, span),
            ..
        }) = declared
        else {
            continue;
        };
        if matches!(dim, Dim::Invalid(_)) {
            continue;
        }
        match groups.iter_mut().find(|group| same_dim(group[0].1, dim)) {
            Some(group) => group.push((field.ident, dim, *span)),
            None => groups.push(vec![(field.ident, dim, *span)]),
        }
    }
    let most = groups.iter().map(Vec::len).max()?;
    let largest: Vec<usize> = (0..groups.len())
        .filter(|&g| groups[g].len() == most)
        .collect();
    let named_like_runs: Vec<usize> = largest
        .iter()
        .copied()
        .filter(|&g| names_runs(groups[g][0].1))
        .collect();
    let winner = match (largest.as_slice(), named_like_runs.as_slice()) {
        ([only], _) | (_, [only]) => Some(*only),
        _ => None,
    };
    match winner {
        Some(w) => {
            let (_, dim, _) = groups[w][0];
            let along = buffer_list(&groups[w]);
            for (g, group) in groups.iter().enumerate() {
                if g == w {
                    continue;
                }
                for &(_, other, span) in group {
                    cx.error(
                        span,
                        format!(
                            "the buffers of one struct are split along one run axis, whose length is \
                             the batch's run count: {along} split along `{}`, this buffer along \
                             `{}`; split it along `{}` or mark it `unchunkable`",
                            dim.describe(),
                            other.describe(),
                            dim.describe(),
                        ),
                    );
                }
            }
        }
        None if groups.len() > 1 => {
            let candidates: Vec<String> = groups
                .iter()
                .map(|group| {
                    format!(
                        "{} split along `{}`",
                        buffer_list(group),
                        group[0].1.describe()
                    )
                })
                .collect();
            for &(_, other, span) in groups.iter().flatten() {
                cx.error(
                    span,
                    format!(
                        "the buffers of one struct are split along one run axis, whose length is the \
                         batch's run count, but they disagree: {}; split every chunked buffer along \
                         the dimension that counts the runs (this one is split along `{}`), and mark \
                         the others `unchunkable`",
                        candidates.join("; "),
                        other.describe(),
                    ),
                );
            }
        }
        None => {}
    }
    let (_, dim, _) = groups[winner.unwrap_or(0)][0];
    Some(RunAxis { dim })
}

/// Whether two shape entries name the same dimension.
fn same_dim(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Field(a), Dim::Field(b)) => a == b,
        (Dim::Literal(_, a), Dim::Literal(_, b)) => a == b,
        _ => false,
    }
}

/// Whether a shape entry is a dims field named like a run count (`n_runs`,
/// `runs`, `num_runs`).
fn names_runs(dim: &Dim) -> bool {
    matches!(dim, Dim::Field(name) if name.to_string().to_ascii_lowercase().contains("run"))
}

/// "`a` is" or "`a` and `b` are": the buffers of one group, as a message's
/// subject.
fn buffer_list(group: &[(&Ident, &Dim, Span)]) -> String {
    let names: Vec<String> = group
        .iter()
        .map(|(field, _, _)| format!("`{field}`"))
        .collect();
    match names.as_slice() {
        [one] => format!("{one} is"),
        [rest @ .., last] => format!("{} and {last} are", rest.join(", ")),
        [] => String::new(),
    }
}

/// The buffer's shape and chunking, inferring the chunk axis of a buffer
/// that declared neither `chunk_axis` nor `unchunkable` from the run axis.
pub(super) fn layout<'a>(
    cx: &Ctxt,
    field: &Field,
    declared: Result<Declared<'a>, Reported>,
    run_axis: Option<&RunAxis>,
) -> Result<(Vec<Length<'a>>, Chunking<'a>), Reported> {
    let declared = declared?;
    let split = match declared.chunking {
        Declaration::Axis(index, dim, _) => Some((index, dim)),
        Declaration::Whole => None,
        Declaration::Unspecified => Some(infer_axis(cx, field, &declared, run_axis)?),
    };
    let shape = declared
        .shape
        .dims
        .iter()
        .map(Length::of)
        .collect::<Result<Vec<_>, _>>()?;
    let chunking = match split {
        Some((index, dim)) => Chunking::Axis {
            index,
            runs: Length::of(dim)?,
        },
        None => Chunking::Whole,
    };
    Ok((shape, chunking))
}

/// The chunk axis of a buffer declaring neither `chunk_axis` nor
/// `unchunkable`: the struct's run axis, when it is a dimension that appears
/// once in the buffer's shape. Anything else is reported.
fn infer_axis<'a>(
    cx: &Ctxt,
    field: &Field,
    declared: &Declared<'a>,
    run_axis: Option<&RunAxis>,
) -> Result<(usize, &'a Dim), Reported> {
    let dims = &declared.shape.dims;
    let run_dim = run_axis.and_then(|run| match run.dim {
        Dim::Field(name) => Some(name),
        _ => None,
    });
    let reason = match run_dim {
        Some(name) => match positions(dims, name).as_slice() {
            [found] => return Ok(*found),
            [] => format!("the struct's run axis `{name}` is not in its shape"),
            found => format!(
                "the struct's run axis `{name}` appears {} times in its shape",
                found.len()
            ),
        },
        None => "no other buffer names a run axis to split it along".to_owned(),
    };
    Err(cx.error_spanned_by(
        declared.attr,
        format!(
            "buffer `{}` has neither `chunk_axis` nor `unchunkable` ({reason}): add `chunk_axis = <dimension>` \
             to split it across chunks, or `unchunkable` to allocate it whole in every chunk",
            field.ident
        ),
    ))
}
