//! Parsing of `#[buffers(..)]`, `#[stream_group(..)]` and `#[buffer(..)]`
//! into typed values, each kept with the tokens it came from so that later
//! checks can point at them.
//!
//! Parsing records its errors in the [`Ctxt`] and goes on with the next key,
//! so that one pass reports every mistake of the attributes. A misspelt key
//! close to one key alone is reported and then read as that key
//! ([`keys::Lookup::Misspelt`]): one typo is one error, and neither the
//! checks nor the code using the struct report its consequences.

mod keys;
mod values;

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::quote;
use syn::meta::ParseNestedMeta;
use syn::parse::{ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{Attribute, Expr, Ident, LitStr, Meta, Path, Token, Type};

use crate::ctxt::{Ctxt, Reported};
use crate::names::unraw;
pub(crate) use keys::BufferKey;
pub(crate) use keys::Key;
use keys::{ContainerKey, Lookup, lookup};
pub(crate) use values::{AxisSpec, Dim, Direction, HostMemory, Placement, Shape};

/// The container attribute naming the dims type, the crate path and the
/// pipeline depth.
pub(crate) const BUFFERS: &str = "buffers";
/// The field attribute describing one buffer.
pub(crate) const BUFFER: &str = "buffer";
/// The container attribute naming the stream group.
pub(crate) const STREAM_GROUP: &str = "stream_group";

/// What the struct-level attributes say.
#[derive(Default)]
pub(crate) struct ContainerAttrs {
    /// `dims = Type`.
    pub(crate) dims: Option<Type>,
    /// `crate = path`.
    pub(crate) krate: Option<Path>,
    /// `pipeline_depth = ..`: the depth, at least 1, or the error reported
    /// for a value that is not one.
    pub(crate) pipeline_depth: Option<Result<usize, Reported>>,
    /// `#[stream_group("name")]`.
    pub(crate) stream_group: Option<LitStr>,
    /// `host = Name`: the host mirror to generate.
    pub(crate) host: Option<Ident>,
    /// Why a key may be absent although meant: the error of a key that could
    /// not be read (an unknown key, a malformed value, an attribute that is
    /// not a list). A missing `dims` is then not reported again.
    pub(crate) incomplete: Option<Reported>,
}

impl ContainerAttrs {
    /// The path cubie-mem is reached at: `crate = ..`, else `::cubie_mem`.
    pub(crate) fn krate(&self) -> Path {
        self.krate
            .clone()
            .unwrap_or_else(|| syn::parse_quote!(::cubie_mem))
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
    /// The `part` flag: the field is a buffer struct of its own.
    pub(crate) part: Option<Span>,
    /// The direction flags (`input`, `output`, `inout`) as given, in order:
    /// one at most, which the checks report.
    pub(crate) directions: Vec<(Direction, Span)>,
    /// `host_memory = ..`.
    pub(crate) host_memory: Option<(HostMemory, Ident)>,
    /// Every key given, with its span, in order: a part reports the keys a
    /// buffer struct of its own cannot take.
    pub(crate) keys: Vec<(BufferKey, Span)>,
    /// Keys whose value was malformed, with the error reported.
    malformed: Vec<(BufferKey, Reported)>,
    /// The error of a key that could not be read at all (an unknown key, or
    /// an attribute that is not a list), when there was one.
    incomplete: Option<Reported>,
}

impl BufferAttrs {
    /// Why `key` may have been meant although it is absent: the error of its
    /// malformed value or of an unreadable key. Checks for a missing key then
    /// stay silent rather than report a consequence of that mistake.
    pub(crate) fn may_have(&self, key: BufferKey) -> Option<Reported> {
        self.incomplete.or_else(|| {
            self.malformed
                .iter()
                .find(|(malformed, _)| *malformed == key)
                .map(|(_, reported)| *reported)
        })
    }
}

/// Parses the struct-level attributes.
pub(crate) fn container(cx: &Ctxt, attrs: &[Attribute]) -> ContainerAttrs {
    let mut parsed = ContainerAttrs::default();
    for attr in attrs {
        if attr.path().is_ident(BUFFERS) {
            let stopped = parse_list(cx, attr, "#[buffers(dims = RunDims)]", |meta| {
                container_key(cx, &mut parsed, meta)
            });
            parsed.incomplete = parsed.incomplete.or(stopped);
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
            let stopped = parse_list(
                cx,
                attr,
                "#[buffer(shape = [..], chunk_axis = ..)]",
                |meta| buffer_key(cx, &mut parsed, meta),
            );
            parsed.incomplete = parsed.incomplete.or(stopped);
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
/// stops that attribute only. Returns the error that stopped it before its
/// end, if one did.
fn parse_list(
    cx: &Ctxt,
    attr: &Attribute,
    example: &str,
    each: impl FnMut(ParseNestedMeta) -> syn::Result<()>,
) -> Option<Reported> {
    if !matches!(attr.meta, Meta::List(_)) {
        return Some(cx.error_spanned_by(
            attr,
            format!("write the keys in parentheses, e.g. `{example}`"),
        ));
    }
    attr.parse_nested_meta(each)
        .err()
        .map(|error| cx.syn_error(error))
}

/// One key of `#[buffers(..)]` and its value.
fn container_key(cx: &Ctxt, parsed: &mut ContainerAttrs, meta: ParseNestedMeta) -> syn::Result<()> {
    if meta.path.is_ident(STREAM_GROUP) {
        return misplaced_stream_group(cx, &meta, "#[buffers(..)]", "but an attribute of its own");
    }
    let key = match lookup::<ContainerKey>(cx, &meta) {
        Lookup::Known(key) | Lookup::Misspelt(key) => key,
        Lookup::Unknown(reported) => {
            parsed.incomplete = parsed.incomplete.or(Some(reported));
            return skip(meta.input);
        }
    };
    let value = meta.value()?;
    match key {
        ContainerKey::Dims => match value.parse::<Type>() {
            Ok(ty) => set_once(cx, &meta, key.name(), &mut parsed.dims, ty),
            Err(error) => {
                let error = syn::Error::new(
                    error.span(),
                    "expected the dims type after `dims =`, e.g. `dims = RunDims`",
                );
                parsed.incomplete = parsed.incomplete.or(Some(cx.syn_error(error)));
                skip(value)?;
            }
        },
        ContainerKey::PipelineDepth => match value.parse::<Expr>() {
            Ok(expr) => {
                let depth = values::pipeline_depth(cx, &expr);
                set_once(cx, &meta, key.name(), &mut parsed.pipeline_depth, depth)
            }
            Err(error) => report_and_skip(cx, value, error).map(drop)?,
        },
        ContainerKey::Host => match value.parse::<Ident>() {
            Ok(name) => set_once(cx, &meta, key.name(), &mut parsed.host, name),
            Err(error) => {
                let error = syn::Error::new(
                    error.span(),
                    "expected the host mirror's name after `host =`, e.g. `host = OutputsHost`",
                );
                report_and_skip(cx, value, error).map(drop)?;
            }
        },
        ContainerKey::Crate => match values::crate_path(value) {
            Ok(path) => set_once(cx, &meta, key.name(), &mut parsed.krate, path),
            Err(error) => report_and_skip(cx, value, error).map(drop)?,
        },
    }
    Ok(())
}

/// `#[stream_group("name")]`.
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

/// `stream_group` written as a key of `attribute` (`#[buffers(stream_group
/// = "x")]`), which is `what` instead: reported over the key and its value
/// with the attribute to write, `#[stream_group("x")]`, the user's name in
/// it. The name is not read as the struct's group: the impl is not generated
/// while there are errors, and nothing else depends on it.
fn misplaced_stream_group(
    cx: &Ctxt,
    meta: &ParseNestedMeta,
    attribute: &str,
    what: &str,
) -> syn::Result<()> {
    let mut value = TokenStream::new();
    while !meta.input.is_empty() && !meta.input.peek(Token![,]) {
        value.extend([meta.input.parse::<TokenTree>()?]);
    }
    let name = match written_group_name(value.clone()) {
        Some(name) if !name.value().is_empty() => name.token().to_string(),
        _ => "\"integrators\"".to_owned(),
    };
    let path = &meta.path;
    cx.error_spanned_by(
        quote!(#path #value),
        format!(
            "`{STREAM_GROUP}` is not a key of `{attribute}` {what}: write `#[{STREAM_GROUP}({name})]` on the struct"
        ),
    );
    Ok(())
}

/// The group name written after a misplaced `stream_group` key: `= "x"`,
/// `("x")`, or a bare word, `= x`, read as `"x"`.
fn written_group_name(value: TokenStream) -> Option<LitStr> {
    fn name(input: ParseStream) -> syn::Result<LitStr> {
        if input.peek(LitStr) {
            return input.parse();
        }
        let ident: Ident = input.parse()?;
        Ok(LitStr::new(&unraw(&ident), ident.span()))
    }
    let written = |input: ParseStream| {
        if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            return name(input);
        }
        let content;
        syn::parenthesized!(content in input);
        let lit = name(&content)?;
        if content.is_empty() {
            Ok(lit)
        } else {
            Err(content.error("expected one name"))
        }
    };
    written.parse2(value).ok()
}

/// One key of `#[buffer(..)]` and its value.
fn buffer_key(cx: &Ctxt, parsed: &mut BufferAttrs, meta: ParseNestedMeta) -> syn::Result<()> {
    if meta.path.is_ident(STREAM_GROUP) {
        return misplaced_stream_group(
            cx,
            &meta,
            "#[buffer(..)]",
            "but an attribute of the struct, whose buffers share one group",
        );
    }
    let key = match lookup::<BufferKey>(cx, &meta) {
        Lookup::Known(key) | Lookup::Misspelt(key) => key,
        Lookup::Unknown(reported) => {
            parsed.incomplete = parsed.incomplete.or(Some(reported));
            return skip(meta.input);
        }
    };
    parsed.keys.push((key, meta.path.span()));
    let malformed = match key {
        BufferKey::Unchunkable => return flag(cx, key, &mut parsed.unchunkable, &meta),
        BufferKey::Part => return flag(cx, key, &mut parsed.part, &meta),
        BufferKey::Input => return direction(cx, key, Direction::Input, parsed, &meta),
        BufferKey::Output => return direction(cx, key, Direction::Output, parsed, &meta),
        BufferKey::Inout => return direction(cx, key, Direction::Inout, parsed, &meta),
        BufferKey::HostMemory => {
            valued(cx, &meta, key, &mut parsed.host_memory, values::host_memory)
        }
        BufferKey::Shape => valued(cx, &meta, key, &mut parsed.shape, |value| {
            with_example(key, values::shape(cx, value))
        }),
        BufferKey::ChunkAxis => valued(cx, &meta, key, &mut parsed.chunk_axis, values::axis),
        BufferKey::Precision => valued(cx, &meta, key, &mut parsed.precision, |value| {
            with_example(key, value.parse::<Type>())
        }),
        BufferKey::Memory => valued(cx, &meta, key, &mut parsed.memory, values::memory),
        BufferKey::Label => valued(cx, &meta, key, &mut parsed.label, |value| {
            with_example(key, value.parse::<LitStr>())
        }),
    }?;
    if let Some(reported) = malformed {
        parsed.malformed.push((key, reported));
    }
    Ok(())
}

/// A flag (`unchunkable`, `part`), which takes no value.
fn flag(
    cx: &Ctxt,
    key: BufferKey,
    slot: &mut Option<Span>,
    meta: &ParseNestedMeta,
) -> syn::Result<()> {
    if meta.input.peek(Token![=]) || !(meta.input.is_empty() || meta.input.peek(Token![,])) {
        let error = meta.error(format!(
            "`{}` takes no value: {}",
            key.name(),
            key.example()
        ));
        report_and_skip(cx, meta.input, error)?;
    }
    set_once(cx, meta, key.name(), slot, meta.path.span());
    Ok(())
}

/// A direction flag (`input`, `output`, `inout`), which takes no value;
/// kept with the others given, which the checks compare.
fn direction(
    cx: &Ctxt,
    key: BufferKey,
    direction: Direction,
    parsed: &mut BufferAttrs,
    meta: &ParseNestedMeta,
) -> syn::Result<()> {
    let mut slot = None;
    flag(cx, key, &mut slot, meta)?;
    parsed.directions.extend(slot.map(|span| (direction, span)));
    Ok(())
}

/// `key = value`, parsed by `parse` into `slot`; returns the error reported
/// for a missing or malformed value.
fn valued<T>(
    cx: &Ctxt,
    meta: &ParseNestedMeta,
    key: BufferKey,
    slot: &mut Option<T>,
    parse: impl FnOnce(ParseStream) -> syn::Result<T>,
) -> syn::Result<Option<Reported>> {
    let Ok(value) = meta.value() else {
        let error = meta.error(format!("`{}` takes a value: {}", key.name(), key.example()));
        return report_and_skip(cx, meta.input, error).map(Some);
    };
    match parse(value) {
        Ok(parsed) => {
            set_once(cx, meta, key.name(), slot, parsed);
            Ok(None)
        }
        Err(error) => report_and_skip(cx, value, error).map(Some),
    }
}

/// Adds to a parse error what a well-formed value of `key` looks like.
fn with_example<T>(key: BufferKey, result: syn::Result<T>) -> syn::Result<T> {
    result.map_err(|error| syn::Error::new(error.span(), format!("{error}: {}", key.example())))
}

/// Stores `value` unless the key was given before, which is an error.
fn set_once<T>(cx: &Ctxt, meta: &ParseNestedMeta, key: &str, slot: &mut Option<T>, value: T) {
    if slot.is_some() {
        cx.error_spanned_by(&meta.path, format!("`{key}` is given twice; keep one"));
    } else {
        *slot = Some(value);
    }
}

/// Records `error` and skips the rest of the current key, up to the next
/// comma; returns the proof that it was recorded.
fn report_and_skip(cx: &Ctxt, input: ParseStream, error: syn::Error) -> syn::Result<Reported> {
    let reported = cx.syn_error(error);
    skip(input)?;
    Ok(reported)
}

/// Skips the rest of the current key, up to the next comma.
fn skip(input: ParseStream) -> syn::Result<()> {
    while !input.is_empty() && !input.peek(Token![,]) {
        input.parse::<TokenTree>()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use quote::quote;
    use syn::{Attribute, parse_quote};

    use super::{container, written_group_name};
    use crate::ctxt::Ctxt;

    #[test]
    fn reads_the_group_name_written_after_a_stream_group_key() {
        let name = |tokens| written_group_name(tokens).map(|lit| lit.token().to_string());
        assert_eq!(
            name(quote!(= "integrators")).as_deref(),
            Some("\"integrators\"")
        );
        assert_eq!(name(quote!(("loaders"))).as_deref(), Some("\"loaders\""));
        assert_eq!(name(quote!(= io)).as_deref(), Some("\"io\""));
        assert_eq!(name(quote!(= r#type)).as_deref(), Some("\"type\""));
        assert_eq!(name(quote!()), None);
        assert_eq!(name(quote!(= 3)), None);
        assert_eq!(name(quote!(("a", "b"))), None);
    }

    #[test]
    fn a_stream_group_key_suggests_the_attribute() {
        let message = |attr: Attribute| {
            let cx = Ctxt::new();
            let parsed = container(&cx, &[attr]);
            assert!(parsed.stream_group.is_none());
            assert!(parsed.incomplete.is_none(), "the dims are not hidden");
            match cx.finish(Ok(())) {
                Ok(()) => String::new(),
                Err(error) => error.to_string(),
            }
        };
        assert!(
            message(parse_quote!(#[buffers(stream_group = r"x y")]))
                .ends_with("write `#[stream_group(r\"x y\")]` on the struct")
        );
        for attr in [
            parse_quote!(#[buffers(stream_group)]),
            parse_quote!(#[buffers(stream_group = "")]),
            parse_quote!(#[buffers(stream_group = 1 + 2)]),
        ] {
            let message = message(attr);
            assert!(
                message.ends_with("write `#[stream_group(\"integrators\")]` on the struct"),
                "{message}"
            );
        }
    }
}
