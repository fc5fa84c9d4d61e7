//! Parsing of `#[buffers(..)]`, `#[stream_group(..)]` and `#[buffer(..)]`
//! into typed values, each kept with the tokens it came from so that later
//! checks can point at them.
//!
//! Parsing records its errors in the [`Ctxt`] and goes on with the next key,
//! so that one pass reports every mistake of the attributes.

use proc_macro2::{Span, TokenTree};
use syn::meta::ParseNestedMeta;
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, ExprLit, Ident, Lit, LitInt, LitStr, Meta, Path, Token, Type};

use crate::ctxt::Ctxt;
use crate::suggest::did_you_mean;

/// The container attribute naming the dims type, the crate path and the
/// pipeline depth.
pub(crate) const BUFFERS: &str = "buffers";
/// The field attribute describing one buffer.
pub(crate) const BUFFER: &str = "buffer";
/// The container attribute naming the stream group.
pub(crate) const STREAM_GROUP: &str = "stream_group";

const CONTAINER_KEYS: &[&str] = &["dims", "crate", "pipeline_depth"];
const BUFFER_KEYS: &[&str] = &[
    "shape",
    "chunk_axis",
    "unchunkable",
    "precision",
    "memory",
    "label",
];

/// What the struct-level attributes say.
#[derive(Default)]
pub(crate) struct ContainerAttrs {
    /// `dims = Type`.
    pub(crate) dims: Option<Type>,
    /// `crate = path`.
    pub(crate) krate: Option<Path>,
    /// `pipeline_depth = ..`, as written (`check` reads the integer).
    pub(crate) pipeline_depth: Option<Expr>,
    /// `#[stream_group("name")]`.
    pub(crate) stream_group: Option<LitStr>,
    /// Whether some key could not be read (an unknown key, a malformed value,
    /// an attribute that is not a list): a missing `dims` is then not reported.
    pub(crate) incomplete: bool,
}

/// One entry of a shape.
pub(crate) enum Dim {
    /// A field of the dims type.
    Field(Ident),
    /// An integer literal.
    Literal(LitInt, usize),
    /// An entry that is neither (already reported); it keeps the indices of
    /// the entries after it right.
    Invalid(Span),
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
}

/// Where a buffer lives, as `memory = ..` or the field type says.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// `DeviceArray<T>`, `memory = device`.
    Device,
    /// `PinnedArray<T>`, `memory = pinned`.
    Pinned,
}

impl Placement {
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

/// What the `#[buffer(..)]` attributes of one field say.
#[derive(Default)]
pub(crate) struct BufferAttrs {
    /// The first `#[buffer(..)]` attribute, when there is one.
    pub(crate) attr: Option<Attribute>,
    /// `shape = [..]`.
    pub(crate) shape: Option<Shape>,
    /// `chunk_axis = ..`.
    pub(crate) chunk_axis: Option<AxisSpec>,
    /// The `unchunkable` flag.
    pub(crate) unchunkable: Option<Span>,
    /// `precision = Type`.
    pub(crate) precision: Option<Type>,
    /// `memory = device | pinned`.
    pub(crate) memory: Option<(Placement, Ident)>,
    /// `label = ".."`.
    pub(crate) label: Option<LitStr>,
    /// Keys whose value was malformed (already reported).
    pub(crate) malformed: Vec<&'static str>,
    /// Whether some key could not be read at all (an unknown key, perhaps a
    /// misspelt one, or an attribute that is not a list).
    pub(crate) incomplete: bool,
}

impl BufferAttrs {
    /// Whether `key` may have been meant although it is absent (a malformed
    /// value or an unreadable key was reported): checks for a missing key
    /// then stay silent rather than report a consequence of that mistake.
    pub(crate) fn may_have(&self, key: &str) -> bool {
        self.incomplete || self.malformed.contains(&key)
    }
}

/// Parses the struct-level attributes.
pub(crate) fn container(cx: &Ctxt, attrs: &[Attribute]) -> ContainerAttrs {
    let mut parsed = ContainerAttrs::default();
    for attr in attrs {
        if attr.path().is_ident(BUFFERS) {
            let complete = parse_list(cx, attr, "#[buffers(dims = RunDims)]", |meta| {
                container_key(cx, &mut parsed, meta)
            });
            parsed.incomplete |= !complete;
        } else if attr.path().is_ident(STREAM_GROUP) {
            stream_group(cx, &mut parsed, attr);
        } else if attr.path().is_ident(BUFFER) {
            cx.error_spanned_by(
                attr.path(),
                "`#[buffer(..)]` describes one field: put it on a buffer field, \
                 and name the dims type on the struct with `#[buffers(dims = ..)]`",
            );
        }
    }
    parsed
}

/// Parses the `#[buffer(..)]` attributes of one field, and rejects the
/// struct-level attributes placed on it.
pub(crate) fn buffer(cx: &Ctxt, attrs: &[Attribute]) -> BufferAttrs {
    let mut parsed = BufferAttrs::default();
    for attr in attrs {
        if attr.path().is_ident(BUFFER) {
            if parsed.attr.is_none() {
                parsed.attr = Some(attr.clone());
            }
            let complete = parse_list(
                cx,
                attr,
                "#[buffer(shape = [..], chunk_axis = ..)]",
                |meta| buffer_key(cx, &mut parsed, meta),
            );
            parsed.incomplete |= !complete;
        } else if attr.path().is_ident(BUFFERS) {
            cx.error_spanned_by(
                attr.path(),
                "`#[buffers(..)]` belongs on the struct; describe a field with `#[buffer(..)]`",
            );
        } else if attr.path().is_ident(STREAM_GROUP) {
            cx.error_spanned_by(
                attr.path(),
                "`#[stream_group(..)]` belongs on the struct: all its buffers share one stream group",
            );
        }
    }
    parsed
}

/// Runs `each` on every `key = value` of a list attribute; a syntax error
/// stops that attribute only. Returns whether the attribute was read to its
/// end.
fn parse_list(
    cx: &Ctxt,
    attr: &Attribute,
    example: &str,
    each: impl FnMut(ParseNestedMeta) -> syn::Result<()>,
) -> bool {
    if !matches!(attr.meta, Meta::List(_)) {
        cx.error_spanned_by(
            attr,
            format!("write the keys in parentheses, e.g. `{example}`"),
        );
        return false;
    }
    match attr.parse_nested_meta(each) {
        Ok(()) => true,
        Err(error) => {
            cx.syn_error(error);
            false
        }
    }
}

fn container_key(cx: &Ctxt, parsed: &mut ContainerAttrs, meta: ParseNestedMeta) -> syn::Result<()> {
    if meta.path.is_ident("dims") {
        let value = meta.value()?;
        match value.parse::<Type>() {
            Ok(ty) => set_once(cx, &meta, "dims", &mut parsed.dims, ty),
            Err(error) => {
                parsed.incomplete = true;
                report_and_skip(
                    cx,
                    value,
                    syn::Error::new(
                        error.span(),
                        "expected the dims type after `dims =`, e.g. `dims = RunDims`",
                    ),
                )?;
            }
        }
    } else if meta.path.is_ident("pipeline_depth") {
        let value = meta.value()?;
        match value.parse::<Expr>() {
            Ok(expr) => set_once(
                cx,
                &meta,
                "pipeline_depth",
                &mut parsed.pipeline_depth,
                expr,
            ),
            Err(error) => report_and_skip(cx, value, error)?,
        }
    } else if meta.path.is_ident("crate") {
        let value = meta.value()?;
        match crate_path(value) {
            Ok(path) => set_once(cx, &meta, "crate", &mut parsed.krate, path),
            Err(error) => report_and_skip(cx, value, error)?,
        }
    } else {
        parsed.incomplete = true;
        unknown_key(cx, &meta, "#[buffers(..)]", CONTAINER_KEYS)?;
    }
    Ok(())
}

/// `crate = path` or `crate = "path"`.
fn crate_path(input: ParseStream) -> syn::Result<Path> {
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

fn stream_group(cx: &Ctxt, parsed: &mut ContainerAttrs, attr: &Attribute) {
    let example = "`#[stream_group(\"integrators\")]`";
    let lit = match &attr.meta {
        Meta::List(list) => match syn::parse2::<LitStr>(list.tokens.clone()) {
            Ok(lit) => lit,
            Err(_) if list.tokens.is_empty() => {
                cx.error_spanned_by(attr, format!("the stream group has no name: {example}"));
                return;
            }
            Err(_) => {
                cx.error_spanned_by(
                    &list.tokens,
                    format!("expected the group's name as a string: {example}"),
                );
                return;
            }
        },
        Meta::Path(_) | Meta::NameValue(_) => {
            cx.error_spanned_by(
                attr,
                format!("write the group's name in parentheses: {example}"),
            );
            return;
        }
    };
    if let Some(first) = &parsed.stream_group {
        cx.error_spanned_by(
            attr,
            format!(
                "`#[stream_group]` is given twice (first as \"{}\"): a struct's buffers share one group, keep one attribute",
                first.value()
            ),
        );
        return;
    }
    if lit.value().is_empty() {
        cx.error(
            lit.span(),
            "the stream group name is empty: name the group, e.g. `#[stream_group(\"integrators\")]`, \
             or leave the attribute out for the group \"default\"",
        );
    }
    parsed.stream_group = Some(lit);
}

fn buffer_key(cx: &Ctxt, parsed: &mut BufferAttrs, meta: ParseNestedMeta) -> syn::Result<()> {
    let Some(key) = BUFFER_KEYS.iter().find(|key| meta.path.is_ident(key)) else {
        parsed.incomplete = true;
        return unknown_key(cx, &meta, "#[buffer(..)]", BUFFER_KEYS);
    };
    if *key == "unchunkable" {
        if meta.input.peek(Token![=]) || !(meta.input.is_empty() || meta.input.peek(Token![,])) {
            report_and_skip(
                cx,
                meta.input,
                meta.error("`unchunkable` takes no value: write `unchunkable` alone"),
            )?;
        }
        set_once(cx, &meta, key, &mut parsed.unchunkable, meta.path.span());
        return Ok(());
    }
    let value = match meta.value() {
        Ok(value) => value,
        Err(_) => {
            parsed.malformed.push(key);
            return report_and_skip(
                cx,
                meta.input,
                meta.error(format!("`{key}` takes a value: {}", key_example(key))),
            );
        }
    };
    let parsed_value = match *key {
        "shape" => with_example(key, shape(cx, value))
            .map(|v| set_once(cx, &meta, key, &mut parsed.shape, v)),
        "chunk_axis" => axis(value).map(|v| set_once(cx, &meta, key, &mut parsed.chunk_axis, v)),
        "precision" => with_example(key, value.parse::<Type>())
            .map(|v| set_once(cx, &meta, key, &mut parsed.precision, v)),
        "memory" => memory(value).map(|v| set_once(cx, &meta, key, &mut parsed.memory, v)),
        _ => with_example(key, value.parse::<LitStr>())
            .map(|v| set_once(cx, &meta, key, &mut parsed.label, v)),
    };
    if let Err(error) = parsed_value {
        parsed.malformed.push(key);
        report_and_skip(cx, value, error)?;
    }
    Ok(())
}

/// Adds to a parse error what a well-formed value of `key` looks like.
fn with_example<T>(key: &str, result: syn::Result<T>) -> syn::Result<T> {
    result.map_err(|error| syn::Error::new(error.span(), format!("{error}: {}", key_example(key))))
}

/// What a well-formed value of `key` looks like.
fn key_example(key: &str) -> &'static str {
    match key {
        "shape" => {
            "write `shape = [n_states, n_runs]` with fields of the dims type or integer literals"
        }
        "chunk_axis" => {
            "write `chunk_axis = n_runs` (a dimension of the shape) or `chunk_axis = 1` (an axis index)"
        }
        "precision" => {
            "write `precision = f32`, `precision = f64` or `precision = P` (a type parameter)"
        }
        "memory" => "write `memory = device` or `memory = pinned`",
        _ => "write `label = \"state\"`",
    }
}

/// Stores `value` unless the key was given before, which is an error.
fn set_once<T>(cx: &Ctxt, meta: &ParseNestedMeta, key: &str, slot: &mut Option<T>, value: T) {
    if slot.is_some() {
        cx.error_spanned_by(&meta.path, format!("`{key}` is given twice; keep one"));
    } else {
        *slot = Some(value);
    }
}

/// Reports an unknown key, suggesting the closest known one, and skips its value.
fn unknown_key(cx: &Ctxt, meta: &ParseNestedMeta, attr: &str, known: &[&str]) -> syn::Result<()> {
    let name = meta
        .path
        .segments
        .iter()
        .map(|segment| segment.ident.to_string())
        .collect::<Vec<_>>()
        .join("::");
    let keys = known
        .iter()
        .map(|key| format!("`{key}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let hint = match did_you_mean(&name, known) {
        Some(close) => format!("did you mean `{close}`? The"),
        None => "the".to_owned(),
    };
    let error = meta.error(format!(
        "unknown key `{name}` in `{attr}`; {hint} keys are {keys}"
    ));
    report_and_skip(cx, meta.input, error)
}

/// Records `error` and skips the rest of the current key, up to the next comma.
fn report_and_skip(cx: &Ctxt, input: ParseStream, error: syn::Error) -> syn::Result<()> {
    cx.syn_error(error);
    while !input.is_empty() && !input.peek(Token![,]) {
        input.parse::<TokenTree>()?;
    }
    Ok(())
}

fn shape(cx: &Ctxt, input: ParseStream) -> syn::Result<Shape> {
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
                Ok(0) => {
                    cx.error(
                        lit.span(),
                        "a dimension of 0 makes an empty buffer: give a length of at least 1, \
                         or a field of the dims type for a length known at run time",
                    );
                    Dim::Literal(lit.clone(), 0)
                }
                Ok(value) => Dim::Literal(lit.clone(), value),
                Err(error) => {
                    cx.syn_error(error);
                    Dim::Invalid(lit.span())
                }
            };
        }
        _ => {}
    }
    cx.error_spanned_by(
        &entry,
        "a shape entry is a field of the dims type (`n_runs`) or an integer literal (`3`); \
         compute other lengths into a field of the dims type",
    );
    Dim::Invalid(entry.span())
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

fn axis(input: ParseStream) -> syn::Result<AxisSpec> {
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

fn memory(input: ParseStream) -> syn::Result<(Placement, Ident)> {
    let expr: Expr = input.parse()?;
    if let Expr::Path(path) = &expr {
        if let Some(ident) = path.path.get_ident() {
            if ident == "device" {
                return Ok((Placement::Device, ident.clone()));
            }
            if ident == "pinned" {
                return Ok((Placement::Pinned, ident.clone()));
            }
            let hint = match did_you_mean(&ident.to_string().to_lowercase(), &["device", "pinned"])
            {
                Some(close) => format!("did you mean `{close}`? "),
                None => String::new(),
            };
            return Err(syn::Error::new(
                ident.span(),
                format!("unknown memory `{ident}`: {hint}memory is `device` or `pinned`"),
            ));
        }
    }
    Err(syn::Error::new_spanned(
        &expr,
        "expected a memory kind: write `memory = device` or `memory = pinned`",
    ))
}
