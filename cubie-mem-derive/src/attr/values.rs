//! The values of the keys: shapes, axes, memory kinds, crate paths and the
//! pipeline depth, each parsed into a typed value that keeps the tokens it
//! came from (or the error reported for it).

use proc_macro2::Span;
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, Ident, Lit, LitInt, LitStr, Path, Token};

use crate::ctxt::{Ctxt, Reported};
use crate::suggest::did_you_mean;

/// One entry of a shape.
pub(crate) enum Dim {
    /// A field of the dims type.
    Field(Ident),
    /// An integer literal.
    Literal(LitInt, usize),
    /// An entry that is neither (reported); it keeps the indices of the
    /// entries after it right.
    Invalid(Reported),
}

impl Dim {
    /// How the entry reads in the source (`n_runs`, `3`).
    pub(crate) fn describe(&self) -> String {
        match self {
            Dim::Field(ident) => ident.to_string(),
            Dim::Literal(_, value) => value.to_string(),
            Dim::Invalid(_) => "?".to_owned(),
        }
    }
}

/// `shape = [..]`.
pub(crate) struct Shape {
    /// The span of the brackets.
    pub(crate) span: Span,
    /// The entries, in order.
    pub(crate) dims: Vec<Dim>,
}

impl Shape {
    /// `[a, b, 3]`, as written.
    pub(crate) fn describe(&self) -> String {
        let entries: Vec<String> = self.dims.iter().map(Dim::describe).collect();
        format!("[{}]", entries.join(", "))
    }
}

/// `chunk_axis = ..`.
pub(crate) enum AxisSpec {
    /// An axis index.
    Index(LitInt, usize),
    /// The name of a dimension in the shape.
    Name(Ident),
}

impl AxisSpec {
    /// The tokens of the value.
    pub(crate) fn span(&self) -> Span {
        match self {
            AxisSpec::Index(lit, _) => lit.span(),
            AxisSpec::Name(ident) => ident.span(),
        }
    }

    /// The value as written (`n_runs`, `2`).
    pub(crate) fn describe(&self) -> String {
        match self {
            AxisSpec::Index(_, index) => index.to_string(),
            AxisSpec::Name(ident) => ident.to_string(),
        }
    }
}

/// Where a buffer lives, as `memory = ..` or the field type says.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Placement {
    /// `DeviceArray<T>`, `memory = device`.
    Device,
    /// `PinnedArray<T>`, `memory = pinned`.
    Pinned,
}

impl Placement {
    /// Every placement, in the order messages list them.
    const ALL: &'static [Placement] = &[Placement::Device, Placement::Pinned];

    /// The keyword of `memory = ..`.
    pub(crate) fn keyword(self) -> &'static str {
        match self {
            Placement::Device => "device",
            Placement::Pinned => "pinned",
        }
    }

    /// The field type that holds this placement.
    pub(crate) fn array_type(self) -> &'static str {
        match self {
            Placement::Device => "DeviceArray",
            Placement::Pinned => "PinnedArray",
        }
    }
}

/// What a field's host array is for: `input`, `output` or `inout`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Direction {
    /// Copied in before each chunk computes.
    Input,
    /// Copied out after each chunk computes.
    Output,
    /// Both: the kernel reads and writes it.
    Inout,
}

impl Direction {
    /// The flag as written.
    pub(crate) fn keyword(self) -> &'static str {
        match self {
            Direction::Input => "input",
            Direction::Output => "output",
            Direction::Inout => "inout",
        }
    }
}

/// `host_memory = ..`: the kind of a host mirror's array.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum HostMemory {
    /// Page-locked memory.
    Pinned,
    /// Ordinary memory.
    Pageable,
    /// A memory-mapped temporary file.
    Spilled,
}

impl HostMemory {
    /// Every kind, in the order messages list them.
    const ALL: &'static [HostMemory] = &[
        HostMemory::Pinned,
        HostMemory::Pageable,
        HostMemory::Spilled,
    ];

    /// The keyword of `host_memory = ..`.
    pub(crate) fn keyword(self) -> &'static str {
        match self {
            HostMemory::Pinned => "pinned",
            HostMemory::Pageable => "pageable",
            HostMemory::Spilled => "spilled",
        }
    }

    /// The `HostMemoryKind` variant.
    pub(crate) fn variant(self) -> &'static str {
        match self {
            HostMemory::Pinned => "Pinned",
            HostMemory::Pageable => "Pageable",
            HostMemory::Spilled => "Spilled",
        }
    }
}

/// `host_memory = pinned | pageable | spilled`, suggesting the closest one
/// for a typo.
pub(crate) fn host_memory(input: ParseStream) -> syn::Result<(HostMemory, Ident)> {
    let expr: Expr = input.parse()?;
    if let Expr::Path(path) = &expr
        && let Some(ident) = path.path.get_ident()
    {
        let written = ident.to_string();
        if let Some(kind) = HostMemory::ALL.iter().find(|k| written == k.keyword()) {
            return Ok((*kind, ident.clone()));
        }
        let hint = match did_you_mean(
            &written.to_lowercase(),
            HostMemory::ALL,
            HostMemory::keyword,
        ) {
            Some(close) => format!("did you mean `{}`? ", close.keyword()),
            None => String::new(),
        };
        return Err(syn::Error::new(
            ident.span(),
            format!(
                "unknown host memory `{ident}`: {hint}host memory is `pinned`, `pageable` or `spilled`"
            ),
        ));
    }
    Err(syn::Error::new_spanned(
        &expr,
        "expected a host memory kind: write `host_memory = pinned`, `pageable` or `spilled`",
    ))
}

/// `crate = path` or `crate = "path"`.
pub(crate) fn crate_path(input: ParseStream) -> syn::Result<Path> {
    let expected =
        "expected the path cubie_mem is reachable at, e.g. `crate = my_crate::cubie_mem`";
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        lit.parse::<Path>()
            .map_err(|_| syn::Error::new(lit.span(), expected))
    } else {
        Path::parse_mod_style(input).map_err(|error| syn::Error::new(error.span(), expected))
    }
}

/// `[a, b, 3]`: each entry a dims field or a positive integer literal; a bad
/// entry is reported and kept as [`Dim::Invalid`].
pub(crate) fn shape(cx: &Ctxt, input: ParseStream) -> syn::Result<Shape> {
    if !input.peek(syn::token::Bracket) {
        return Err(input.error("expected the shape in brackets"));
    }
    let content;
    let brackets = syn::bracketed!(content in input);
    let entries = Punctuated::<Expr, Token![,]>::parse_terminated(&content)?;
    Ok(Shape {
        span: brackets.span.join(),
        dims: entries.into_iter().map(|entry| dim(cx, entry)).collect(),
    })
}

/// One shape entry: a dims field or a positive integer literal.
fn dim(cx: &Ctxt, entry: Expr) -> Dim {
    match &entry {
        Expr::Path(path) if path.qself.is_none() && path.attrs.is_empty() => {
            if let Some(ident) = path.path.get_ident() {
                return Dim::Field(ident.clone());
            }
        }
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => {
            return match usize_literal(lit) {
                Ok(0) => Dim::Invalid(cx.error(
                    lit.span(),
                    "a dimension of 0 makes an empty buffer: give a length of at least 1, \
                     or a field of the dims type for a length known at run time",
                )),
                Ok(value) => Dim::Literal(lit.clone(), value),
                Err(error) => Dim::Invalid(cx.syn_error(error)),
            };
        }
        _ => {}
    }
    Dim::Invalid(cx.error_spanned_by(
        &entry,
        "a shape entry is a field of the dims type (`n_runs`) or an integer literal (`3`); \
         compute other lengths into a field of the dims type",
    ))
}

/// An unsuffixed or `usize` integer literal.
fn usize_literal(lit: &LitInt) -> syn::Result<usize> {
    if !matches!(lit.suffix(), "" | "usize") {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "lengths and axes are `usize`: write `{}` without the `{}` suffix",
                lit.base10_digits(),
                lit.suffix()
            ),
        ));
    }
    lit.base10_parse::<usize>()
}

/// `chunk_axis = n_runs` or `chunk_axis = 2`.
pub(crate) fn axis(input: ParseStream) -> syn::Result<AxisSpec> {
    let expr: Expr = input.parse()?;
    match &expr {
        Expr::Path(path) if path.qself.is_none() => {
            if let Some(ident) = path.path.get_ident() {
                return Ok(AxisSpec::Name(ident.clone()));
            }
        }
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => {
            return usize_literal(lit).map(|value| AxisSpec::Index(lit.clone(), value));
        }
        _ => {}
    }
    Err(syn::Error::new_spanned(
        &expr,
        "expected an axis: write `chunk_axis = n_runs` (a dimension of the shape) or `chunk_axis = 1` (an axis index)",
    ))
}

/// `memory = device` or `memory = pinned`, suggesting the closer one for a
/// typo.
pub(crate) fn memory(input: ParseStream) -> syn::Result<(Placement, Ident)> {
    let expr: Expr = input.parse()?;
    if let Expr::Path(path) = &expr
        && let Some(ident) = path.path.get_ident()
    {
        let written = ident.to_string();
        if let Some(placement) = Placement::ALL.iter().find(|p| written == p.keyword()) {
            return Ok((*placement, ident.clone()));
        }
        let hint = match did_you_mean(&written.to_lowercase(), Placement::ALL, Placement::keyword) {
            Some(close) => format!("did you mean `{}`? ", close.keyword()),
            None => String::new(),
        };
        return Err(syn::Error::new(
            ident.span(),
            format!("unknown memory `{ident}`: {hint}memory is `device` or `pinned`"),
        ));
    }
    Err(syn::Error::new_spanned(
        &expr,
        "expected a memory kind: write `memory = device` or `memory = pinned`",
    ))
}

/// The pipeline depth `pipeline_depth = ..` gives: an integer literal of at
/// least 1 (unsuffixed or `usize`). Anything else is reported at the value.
pub(crate) fn pipeline_depth(cx: &Ctxt, value: &Expr) -> Result<usize, Reported> {
    let Expr::Lit(ExprLit {
        lit: Lit::Int(lit), ..
    }) = value
    else {
        return Err(cx.error_spanned_by(
            value,
            "expected the pipeline depth as an integer literal, the number of chunks in flight: \
             write `pipeline_depth = 2` (or 3 when a buffer is both uploaded and downloaded)",
        ));
    };
    if !matches!(lit.suffix(), "" | "usize") {
        return Err(cx.error(
            lit.span(),
            format!(
                "the pipeline depth is a `usize`: write `{}` without the `{}` suffix",
                lit.base10_digits(),
                lit.suffix()
            ),
        ));
    }
    match lit.base10_parse::<usize>() {
        Ok(0) => Err(cx.error(
            lit.span(),
            "a pipeline depth of 0 leaves no buffer set to compute in: give at least 1 \
             (depth 1 runs the chunks one after another, 2 overlaps copies with compute), \
             or leave `pipeline_depth` out for depth 1",
        )),
        Ok(depth) => Ok(depth),
        Err(error) => Err(cx.error(
            lit.span(),
            format!("the pipeline depth does not fit a `usize`: {error}"),
        )),
    }
}
