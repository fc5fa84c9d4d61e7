//! Code generation: the `GpuBuffers` impl of a checked struct, or, when the
//! input has mistakes, the errors with a fallback impl that keeps rustc from
//! reporting secondary errors at every use of the struct.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{DeriveInput, Generics, Ident, Path, Type, parse_quote_spanned};

use crate::ast::{Container, source_text};
use crate::attr::{Dim, Placement};
use crate::check::{self, Layout};
use crate::ctxt::Ctxt;

/// Expands `#[derive(GpuBuffers)]` on `input`.
pub(crate) fn derive(input: &DeriveInput) -> TokenStream {
    let cx = Ctxt::new();
    let container = Container::from_ast(&cx, input);
    let layouts = check::check(&cx, &container);
    let depth = check::pipeline_depth(&cx, container.attrs.pipeline_depth.as_ref());
    match cx.finish() {
        Ok(()) => implementation(&container, &layouts, depth),
        Err(errors) => {
            let mut tokens = errors.to_compile_error();
            tokens.extend(fallback(&container));
            tokens
        }
    }
}

/// The path cubie-mem is reached at: `crate = ..`, else `::cubie_mem`.
fn krate(container: &Container) -> Path {
    container
        .attrs
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::cubie_mem))
}

/// The impl of a struct that passed every check; `depth` is the pipeline
/// depth its requests carry (none given: the requests' default, 1).
fn implementation(container: &Container, layouts: &[Layout], depth: Option<usize>) -> TokenStream {
    let krate = krate(container);
    let ident = container.ident;
    let generics = with_element_bounds(container, &krate, layouts);
    let (impl_generics, type_generics, where_clause) = generics.split_for_impl();
    let Some(dims) = &container.attrs.dims else {
        return fallback(container);
    };
    let group = check::stream_group(container.attrs.stream_group.as_ref());
    let labels: Vec<&str> = layouts.iter().map(|layout| layout.label.as_str()).collect();

    let dim_bindings = dim_bindings(layouts);
    let precision_assertions: Vec<TokenStream> = layouts
        .iter()
        .filter_map(|layout| {
            let precision = layout.precision_assertion?;
            let element = layout.element;
            Some(quote_spanned! {precision.span()=> assert_precision::<#precision, #element>();})
        })
        .collect();
    let precision_helpers = (!precision_assertions.is_empty()).then(|| precision_helpers(&krate));
    let requests = layouts.iter().map(|layout| request(&krate, layout, depth));
    let takes = layouts.iter().map(|layout| {
        let field = layout.field;
        let element = layout.element;
        let label = &layout.label;
        let take = match layout.placement {
            Placement::Device => quote!(take_set),
            Placement::Pinned => quote!(take_pinned_set),
        };
        quote_spanned! {element.span()=> #field: response.#take::<#element>(#label, set)?}
    });

    let Docs {
        implementation: impl_doc,
        dims: dims_doc,
        group: group_doc,
        labels: labels_doc,
        requests: requests_doc,
        from_response: from_response_doc,
    } = Docs::new(container, dims, &group, layouts, depth);
    quote! {
        #[doc = #impl_doc]
        #[automatically_derived]
        #[allow(unused_qualifications)]
        impl #impl_generics #krate::GpuBuffers for #ident #type_generics #where_clause {
            #[doc = #dims_doc]
            type Dims = #dims;
            #[doc = #group_doc]
            const STREAM_GROUP: &'static str = #group;
            #[doc = #labels_doc]
            const LABELS: &'static [&'static str] = &[#(#labels),*];

            #[doc = #requests_doc]
            fn requests(dims: &Self::Dims) -> #krate::RequestSet {
                #precision_helpers
                #(#precision_assertions)*
                #dim_bindings
                #krate::RequestSet::new()
                    #(#requests)*
            }

            #[doc = #from_response_doc]
            fn from_response_set(
                response: &mut #krate::ArrayResponse,
                set: usize,
            ) -> ::core::result::Result<Self, #krate::MemError> {
                ::core::result::Result::Ok(Self { #(#takes,)* })
            }
        }
    }
}

/// The struct's generics with `T: Element` added to the where clause for
/// each distinct element type, spanned on its first mention.
///
/// This is the element check: for a concrete type the bound is checked where
/// the impl is declared, so an unsupported type is reported on the user's
/// token with `Element`'s list of supported types; for a type parameter the
/// bound is assumed, leaving the one error of the field's own type (whose
/// `DeviceArray<T: Element>` bound rustc checks) instead of one per use.
fn with_element_bounds(container: &Container, krate: &Path, layouts: &[Layout]) -> Generics {
    let mut generics = container.generics.clone();
    let mut bounded: Vec<String> = Vec::new();
    for layout in layouts {
        let element = layout.element;
        let text = source_text(element);
        if bounded.contains(&text) {
            continue;
        }
        bounded.push(text);
        let span = element.span();
        let krate = respan(quote!(#krate), span);
        generics
            .make_where_clause()
            .predicates
            .push(parse_quote_spanned! {span=> #element: #krate::Element});
    }
    generics
}

/// `tokens` with every token, nested ones included, at `span`: a bound built
/// from them is reported at `span` as a whole.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut respanned = Group::new(group.delimiter(), respan(group.stream(), span));
                respanned.set_span(span);
                token = TokenTree::Group(respanned);
            }
            token.set_span(span);
            token
        })
        .collect()
}

/// The local variable holding a dims field's value.
fn dim_variable(field: &Ident) -> Ident {
    format_ident!("dim_{}", field, span = Span::call_site())
}

/// Reads each dims field the shapes use into a `usize` local, once, with the
/// read spanned on the field's first mention: a missing field or one of
/// another type is reported there.
fn dim_bindings(layouts: &[Layout]) -> TokenStream {
    let mut seen: Vec<&Ident> = Vec::new();
    for layout in layouts {
        for dim in layout.shape {
            if let Dim::Field(field) = dim {
                if !seen.contains(&field) {
                    seen.push(field);
                }
            }
        }
    }
    if seen.is_empty() {
        return TokenStream::new();
    }
    let bindings = seen.iter().map(|field| {
        let variable = dim_variable(field);
        quote_spanned! {field.span()=> let #variable = DimLength::length((*dims).#field);}
    });
    quote! {
        #[diagnostic::on_unimplemented(
            message = "a shape dimension must be a `usize` field of the dims type, but this one is `{Self}`",
            label = "not a `usize`",
            note = "declare the field as `usize` in the dims type, or write the length as an integer literal"
        )]
        trait DimLength {
            fn length(self) -> usize;
        }
        impl DimLength for usize {
            fn length(self) -> usize {
                self
            }
        }
        #(#bindings)*
    }
}

/// The helpers behind `precision = ..` assertions: the precision must be a
/// `Precision` type, and the same type as the field's element.
fn precision_helpers(krate: &Path) -> TokenStream {
    quote! {
        #[diagnostic::on_unimplemented(
            message = "`precision = {Self}` contradicts the field's element type `{Element}`",
            label = "not the field's element type",
            note = "write `precision = {Element}`, or change the field's element type to `{Self}`"
        )]
        trait ElementIs<Element: ?Sized> {}
        impl<T: ?Sized> ElementIs<T> for T {}
        fn assert_precision<P: #krate::Precision + ElementIs<E>, E: ?Sized>() {}
    }
}

/// `.with(label, ArrayRequest::of::<T>(shape).memory(..)...)` for one buffer.
fn request(krate: &Path, layout: &Layout, depth: Option<usize>) -> TokenStream {
    let label = &layout.label;
    let element = layout.element;
    let shape = layout.shape.iter().map(dim_value);
    let of = quote_spanned! {element.span()=> #krate::ArrayRequest::of::<#element>};
    let memory = match layout.placement {
        Placement::Device => quote!(#krate::MemoryKind::Device),
        Placement::Pinned => quote!(#krate::MemoryKind::Pinned),
    };
    let chunking = match layout
        .chunk_axis
        .and_then(|axis| Some((axis, layout.shape.get(axis)?)))
    {
        Some((axis, dim)) => {
            let runs = dim_value(dim);
            quote!(.chunk_axis(#axis).total_runs(#runs))
        }
        None => quote!(.unchunkable()),
    };
    let depth = depth.map(|depth| quote!(.pipeline_depth(#depth)));
    quote! {
        .with(
            #label,
            #of([#(#shape),*])
                .memory(#memory)
                #chunking
                #depth,
        )
    }
}

/// A shape entry as a `usize` expression.
fn dim_value(dim: &Dim) -> TokenStream {
    match dim {
        Dim::Field(field) => {
            let variable = dim_variable(field);
            quote!(#variable)
        }
        Dim::Literal(lit, value) => quote_spanned!(lit.span()=> #value),
        Dim::Invalid(span) => quote_spanned!(*span=> 0usize),
    }
}

/// The impl emitted beside the errors of a struct with mistakes: it states
/// what could be parsed and generates nothing that could fail to compile on
/// its own, so that only the real mistakes are reported.
fn fallback(container: &Container) -> TokenStream {
    let krate = krate(container);
    let ident = container.ident;
    let (impl_generics, type_generics, where_clause) = container.generics.split_for_impl();
    let dims = match &container.attrs.dims {
        Some(dims) => quote!(#dims),
        None => quote!(()),
    };
    let group = check::stream_group(container.attrs.stream_group.as_ref());
    quote! {
        #[automatically_derived]
        #[allow(unused_qualifications)]
        impl #impl_generics #krate::GpuBuffers for #ident #type_generics #where_clause {
            type Dims = #dims;
            const STREAM_GROUP: &'static str = #group;
            const LABELS: &'static [&'static str] = &[];

            fn requests(_: &Self::Dims) -> #krate::RequestSet {
                #krate::RequestSet::new()
            }

            fn from_response_set(
                _: &mut #krate::ArrayResponse,
                _: usize,
            ) -> ::core::result::Result<Self, #krate::MemError> {
                ::core::result::Result::Err(#krate::MemError::InvalidRequest {
                    label: ::std::string::String::new(),
                    reason: ::std::string::String::from("the GpuBuffers declaration has compile errors"),
                })
            }
        }
    }
}

/// The rustdoc of the generated items.
struct Docs {
    implementation: String,
    dims: String,
    group: String,
    labels: String,
    requests: String,
    from_response: String,
}

impl Docs {
    fn new(
        container: &Container,
        dims: &Type,
        group: &str,
        layouts: &[Layout],
        depth: Option<usize>,
    ) -> Self {
        let dims = source_text(dims);
        let buffers: Vec<String> = layouts.iter().map(describe).collect();
        let depth = depth.map_or_else(String::new, |depth| {
            format!(" Every request has pipeline depth {depth}: a buffer set per chunk in flight.")
        });
        Docs {
            implementation: format!(
                "Derived from `#[derive(GpuBuffers)]`: {} buffer(s) in stream group \"{group}\", shaped by `{dims}`.\n\n\
                 Register holders with `GpuBuffers::registration()` and allocate with `MemoryManager::allocate_buffers`.\n\n{}",
                layouts.len(),
                buffers.join("\n")
            ),
            dims: format!("The shapes of `{}` refer to the fields of `{dims}`.", container.ident),
            group: format!(
                "`\"{group}\"`: instances holding these buffers belong to this stream group."
            ),
            labels: format!(
                "The arrays' labels in the manager: {}.",
                layouts
                    .iter()
                    .map(|layout| format!("`\"{}\"`", layout.label))
                    .collect::<Vec<_>>()
                    .join(", ")
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
        }
    }
}

/// One line of documentation for a buffer: `- `state`: device f64 [n, 3], split along axis 1 (`n`)`.
fn describe(layout: &Layout) -> String {
    let shape: Vec<String> = layout.shape.iter().map(Dim::describe).collect();
    let chunking = match layout
        .chunk_axis
        .and_then(|axis| Some((axis, layout.shape.get(axis)?)))
    {
        Some((axis, dim)) => format!("split along axis {axis} (`{}`)", dim.describe()),
        None => "unchunkable".to_owned(),
    };
    format!(
        "- `{}`: {} `{}`, shape `[{}]`, {chunking}",
        layout.label,
        layout.placement.keyword(),
        source_text(layout.element),
        shape.join(", ")
    )
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use quote::ToTokens;

    use super::*;

    fn expand(input: TokenStream) -> syn::File {
        let input: DeriveInput = syn::parse2(input).unwrap_or_else(|e| panic!("input: {e}"));
        syn::parse2(derive(&input)).unwrap_or_else(|e| panic!("expansion: {e}"))
    }

    fn design_example() -> TokenStream {
        quote! {
            #[stream_group("integrators")]
            #[buffers(dims = RunDims)]
            pub struct Outputs<P: Precision> {
                #[buffer(shape = [n_saves, n_states, n_runs], chunk_axis = n_runs)]
                state: DeviceArray<P>,
                #[buffer(shape = [n_runs], memory = pinned)]
                status: PinnedArray<i32>,
                #[buffer(shape = [n_states], unchunkable)]
                initial: DeviceArray<P>,
            }
        }
    }

    #[test]
    fn expands_to_the_trait_impl_alone() {
        let file = expand(design_example());
        let [syn::Item::Impl(implementation)] = file.items.as_slice() else {
            panic!("expected one impl, got {}", file.items.len());
        };
        let trait_path = implementation
            .trait_
            .as_ref()
            .map(|(_, path, _)| source_text(path));
        assert_eq!(trait_path.as_deref(), Some("::cubie_mem::GpuBuffers"));
        let where_clause = implementation
            .generics
            .where_clause
            .as_ref()
            .map(source_text);
        assert_eq!(
            where_clause.as_deref(),
            Some("where P: ::cubie_mem::Element, i32: ::cubie_mem::Element")
        );
        let documented = implementation
            .items
            .iter()
            .filter(|item| {
                let attrs = match item {
                    syn::ImplItem::Const(item) => &item.attrs,
                    syn::ImplItem::Fn(item) => &item.attrs,
                    syn::ImplItem::Type(item) => &item.attrs,
                    _ => return false,
                };
                attrs.iter().any(|attr| attr.path().is_ident("doc"))
            })
            .count();
        assert_eq!(documented, implementation.items.len());
        assert!(
            implementation
                .attrs
                .iter()
                .any(|attr| attr.path().is_ident("doc"))
        );
    }

    #[test]
    fn requests_read_each_dimension_once() {
        let text = expand(design_example()).items[0]
            .to_token_stream()
            .to_string();
        assert_eq!(text.matches(". n_runs").count(), 1, "{text}");
        assert!(
            text.contains("chunk_axis (2usize) . total_runs (dim_n_runs)"),
            "{text}"
        );
        assert!(
            text.contains("chunk_axis (0usize) . total_runs (dim_n_runs)"),
            "{text}"
        );
        assert!(text.contains("unchunkable ()"), "{text}");
        assert!(
            text.contains("take_pinned_set :: < i32 > (\"status\" , set)"),
            "{text}"
        );
        assert!(!text.contains("pipeline_depth"), "{text}");
    }

    #[test]
    fn pipeline_depth_reaches_every_request() {
        let text = expand(quote! {
            #[buffers(dims = D, pipeline_depth = 3)]
            struct B {
                #[buffer(shape = [n], chunk_axis = 0)]
                a: DeviceArray<f32>,
                #[buffer(shape = [2], unchunkable)]
                b: DeviceArray<f32>,
            }
        })
        .to_token_stream()
        .to_string();
        assert_eq!(
            text.matches(". pipeline_depth (3usize)").count(),
            2,
            "{text}"
        );
    }

    #[test]
    fn a_zero_or_non_integer_depth_is_an_error() {
        for depth in [quote!(0), quote!(two), quote!(2u8), quote!(1.5)] {
            let file = expand(quote! {
                #[buffers(dims = D, pipeline_depth = #depth)]
                struct B {
                    #[buffer(shape = [n], chunk_axis = 0)]
                    a: DeviceArray<f32>,
                }
            });
            let text = file.to_token_stream().to_string();
            assert!(text.contains("compile_error"), "{depth}: {text}");
            assert!(text.contains("pipeline depth"), "{depth}: {text}");
        }
    }

    #[test]
    fn crate_option_replaces_the_path() {
        let file = expand(quote! {
            #[buffers(dims = D, crate = my_kit::cubie_mem)]
            struct B {
                #[buffer(shape = [n], chunk_axis = 0)]
                a: DeviceArray<f32>,
            }
        });
        let text = file.to_token_stream().to_string();
        assert!(
            text.contains("impl my_kit :: cubie_mem :: GpuBuffers for B"),
            "{text}"
        );
        assert!(
            !text
                .replace("my_kit :: cubie_mem", "")
                .contains("cubie_mem"),
            "{text}"
        );
    }

    #[test]
    fn errors_come_with_a_fallback_impl() {
        let file = expand(quote! {
            #[buffers(dims = D)]
            struct B {
                #[buffer(shpe = [n], chunk_axis = 0)]
                a: DeviceArray<f32>,
                #[buffer(shape = [0], unchunkable)]
                b: Vec<f32>,
            }
        });
        let errors = file
            .items
            .iter()
            .filter(|item| {
                matches!(item, syn::Item::Macro(m)
                    if m.mac.path.segments.last().is_some_and(|s| s.ident == "compile_error"))
            })
            .count();
        let impls = file
            .items
            .iter()
            .filter(|item| matches!(item, syn::Item::Impl(_)))
            .count();
        // The unknown key, the zero dimension, the non-buffer field.
        assert_eq!((errors, impls), (3, 1));
    }
}
