//! Code generation: the `GpuBuffers` impl of a checked struct, or, when the
//! input has mistakes, the errors with a fallback impl that keeps rustc from
//! reporting secondary errors at every use of the struct.
//!
//! Either impl sits in a `#[doc(hidden)]` `const _: () = { use <crate> as
//! _cubie_mem; .. };` with serde's lint allowances, as serde's do: the
//! generated code reaches cubie-mem through one import, resolved once, and
//! nothing it declares enters the user's namespace. The helpers it calls
//! live in cubie-mem's hidden `__private` module.

mod docs;
mod fallback;
mod host;
mod parts;
#[cfg(test)]
mod tests;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{DeriveInput, Generics, Ident, Lifetime, parse_quote_spanned};

use crate::ast::Container;
use crate::attr::Placement;
use crate::check::{self, Buffer, Checked, Chunking, Length};
use crate::ctxt::Ctxt;
use crate::names::{source_text, unraw};

/// Expands `#[derive(GpuBuffers)]` on `input`.
pub(crate) fn derive(input: &DeriveInput) -> TokenStream {
    let cx = Ctxt::new();
    let container = Container::from_ast(&cx, input);
    let checked = check::check(&cx, &container);
    match cx.finish(checked) {
        Ok(checked) => implementation(&checked),
        Err(errors) => fallback::errors_with_fallback(&container, errors),
    }
}

/// The name the generated code reaches cubie-mem by, bound by the `use` at
/// the top of the `const _` block.
fn import_name(span: Span) -> Ident {
    Ident::new("_cubie_mem", span)
}

/// The lints [`wrap`] allows on the generated items.
fn allowed_lints() -> TokenStream {
    quote! {
        #[allow(
            non_upper_case_globals,
            unused_attributes,
            unused_qualifications,
            clippy::absolute_paths,
            clippy::trait_duplication_in_bounds,
            clippy::type_repetition_in_bounds
        )]
    }
}

/// `const _: () = { use <krate> as _cubie_mem; <items> };`, hidden from the
/// documentation (the impl inside is documented on the struct's page) and
/// allowing the lints serde's block allows, for the same reason: the code is
/// written to resolve in any crate, whatever it imports (hence qualified
/// paths such as `::core::result::Result`), trips them in some, and cannot
/// be changed by the user. So are clippy's lints on the element bounds,
/// which repeat a parameter the struct bounds already (`P: Element` beside
/// `P: Precision`), spanned on the user's tokens.
fn wrap(krate: &syn::Path, items: TokenStream) -> TokenStream {
    let cubie_mem = import_name(Span::call_site());
    let allowed = allowed_lints();
    quote! {
        #[doc(hidden)]
        #allowed
        const _: () = {
            use #krate as #cubie_mem;
            #items
        };
    }
}

/// The impl of a struct that passed every check.
fn implementation(checked: &Checked) -> TokenStream {
    let cubie_mem = import_name(Span::call_site());
    let ident = checked.ident;
    let mut generics = with_element_bounds(checked, &checked.buffers, &|span| {
        let cubie_mem = import_name(span);
        quote!(#cubie_mem)
    });
    parts::with_part_bounds(&mut generics, checked);
    let (impl_generics, type_generics, where_clause) = generics.split_for_impl();
    let dims = parts::dims_type(checked);
    let group = parts::stream_group(checked);
    let name = unraw(ident);
    let labels = parts::labels(checked);
    let run_axis = parts::run_axis(checked);
    let (part_checks, force_part_checks) = parts::checks(checked, &generics);
    let part_requests = parts::requests(checked);
    let part_takes = parts::takes(checked);
    let part_assertions = parts::assertions(checked);

    let (generic_assertions, item_assertions): (Vec<_>, Vec<_>) = checked
        .buffers
        .iter()
        .filter_map(|buffer| Some((buffer.precision.as_ref()?, buffer.element)))
        .partition(|(assertion, _)| assertion.uses_parameters);
    let item_assertions = item_assertions.into_iter().map(|(assertion, element)| {
        let precision = assertion.precision;
        let cubie_mem = import_name(precision.span());
        quote_spanned! {precision.span()=>
            const _: () = #cubie_mem::__private::assert_precision::<#precision, #element>();
        }
    });
    let generic_assertions = generic_assertions.into_iter().map(|(assertion, element)| {
        let precision = assertion.precision;
        let cubie_mem = import_name(precision.span());
        quote_spanned! {precision.span()=>
            #cubie_mem::__private::assert_precision::<#precision, #element>();
        }
    });
    let dim_bindings = dim_bindings(&checked.buffers);
    let depth = checked
        .pipeline_depth
        .map(|depth| quote!(.pipeline_depth(#depth)));
    let requests = checked
        .buffers
        .iter()
        .map(|buffer| request(buffer, depth.as_ref()));
    let takes = checked.buffers.iter().map(|buffer| {
        let field = buffer.field;
        let element = buffer.element;
        let label = &buffer.label;
        let take = match buffer.placement {
            Placement::Device => quote!(take_set),
            Placement::Pinned => quote!(take_pinned_set),
        };
        // The macro's own span, not the element's: the impl's bounds make
        // the call compile, and lints of the user's code skip the macro's
        // (`clippy::question_mark_used` would flag the `?` at the field).
        quote! {#field: response.#take::<#element>(#label, set)?}
    });

    // Requests of depth 1 always give one buffer set: `Allocated` may
    // dereference to it.
    let single_set = parts::single_set(checked, &generics);
    let docs = docs::Docs::new(checked);
    let (impl_doc, dims_doc, group_doc, labels_doc) =
        (&docs.implementation, &docs.dims, &docs.group, &docs.labels);
    let (requests_doc, from_response_doc, registration_doc) =
        (&docs.requests, &docs.from_response, &docs.registration);
    let (mirror, mirror_impls) = match &checked.host {
        Some(host) => (
            host::declaration(checked, host),
            host::implementation(checked, host, &generics),
        ),
        None => (TokenStream::new(), TokenStream::new()),
    };
    let implementation = wrap(
        &checked.krate,
        quote! {
            #(#item_assertions)*
            #part_assertions
            #part_checks

            #[doc = #impl_doc]
            #[automatically_derived]
            impl #impl_generics #cubie_mem::GpuBuffers for #ident #type_generics #where_clause {
                #[doc = #dims_doc]
                type Dims = #dims;
                #[doc = #group_doc]
                const STREAM_GROUP: &'static str = #group;
                #[doc = #labels_doc]
                const LABELS: &'static [&'static str] = #labels;
                #[doc(hidden)]
                const __RUN_AXIS: ::core::option::Option<&'static str> = #run_axis;

                #[doc = #requests_doc]
                fn requests(dims: &Self::Dims) -> #cubie_mem::RequestSet {
                    #force_part_checks
                    #(#generic_assertions)*
                    #dim_bindings
                    #[allow(unused_mut)]
                    let mut set = #cubie_mem::RequestSet::new()
                        #(#requests)*;
                    #part_requests
                    #cubie_mem::__private::in_stream_group(set, #group)
                }

                #[doc = #from_response_doc]
                fn from_response_set(
                    response: &mut #cubie_mem::ArrayResponse,
                    set: usize,
                ) -> ::core::result::Result<Self, #cubie_mem::MemError> {
                    ::core::result::Result::Ok(Self { #(#takes,)* #(#part_takes,)* })
                }

                #[doc = #registration_doc]
                fn registration() -> #cubie_mem::Registration {
                    #cubie_mem::Registration::new()
                        .name(#name)
                        .stream_group(<Self as #cubie_mem::GpuBuffers>::STREAM_GROUP)
                }
            }

            #single_set
            #mirror_impls
        },
    );
    quote!(#mirror #implementation)
}

/// The struct's generics with an `Element` bound in the where clause for
/// each distinct element type, spanned on its first mention.
///
/// The bounds let the impl make requests and take arrays of each element
/// type; they are not the element check. That is the field's own type:
/// `DeviceArray<T>` requires `T: Element`, which rustc checks on the struct
/// and reports on the user's field with `Element`'s message, once.
///
/// So the bound of an element type that names no parameter of the struct
/// (`f64`, a user's `State`) is higher-ranked, `for<'element> f64: Element`,
/// as thiserror's are: rustc checks a bound without parameters where the
/// impl is declared (rust-lang/rust#48214, "trivial bounds"), which for an
/// unsupported type would report the field's error a second time, but not a
/// higher-ranked one, while the impl can still rely on it. The bound of an
/// element type naming a parameter (`P`) is plain: rustc checks it where the
/// struct is used, with the parameter chosen.
fn with_element_bounds<'b>(
    checked: &Checked,
    buffers: impl IntoIterator<Item = &'b Buffer<'b>>,
    cubie_mem: &dyn Fn(Span) -> TokenStream,
) -> Generics {
    let mut generics = checked.generics.clone();
    let binder = binder_lifetime(checked.generics);
    let mut bounded: Vec<String> = Vec::new();
    for buffer in buffers {
        let element = buffer.element;
        let text = source_text(element);
        if bounded.contains(&text) {
            continue;
        }
        bounded.push(text);
        let span = element.span();
        let cubie_mem = cubie_mem(span);
        let bound = if buffer.element_is_generic {
            parse_quote_spanned! {span=> #element: #cubie_mem::Element}
        } else {
            parse_quote_spanned! {span=> for<#binder> #element: #cubie_mem::Element}
        };
        generics.make_where_clause().predicates.push(bound);
    }
    generics
}

/// The lifetime the higher-ranked element bounds bind: `'element`, or with
/// as many `_` appended as make it differ from the struct's lifetimes, which
/// it would otherwise shadow (an error).
fn binder_lifetime(generics: &Generics) -> Lifetime {
    let mut name = String::from("element");
    while generics
        .lifetimes()
        .any(|parameter| parameter.lifetime.ident == name)
    {
        name.push('_');
    }
    Lifetime::new(&format!("'{name}"), Span::call_site())
}

/// The local variable holding a dims field's value.
fn dim_variable(field: &Ident) -> Ident {
    format_ident!("dim_{}", field, span = Span::call_site())
}

/// Reads each dims field the shapes use into a `usize` local, once, with the
/// read spanned on the field's first mention: a missing field or one of
/// another type is reported there.
fn dim_bindings(buffers: &[Buffer]) -> TokenStream {
    let mut seen: Vec<&Ident> = Vec::new();
    for buffer in buffers {
        for length in &buffer.shape {
            if let Length::Field(field) = length
                && !seen.contains(field)
            {
                seen.push(field);
            }
        }
    }
    let bindings = seen.iter().map(|field| {
        let variable = dim_variable(field);
        let cubie_mem = import_name(field.span());
        quote_spanned! {field.span()=>
            let #variable = #cubie_mem::__private::DimLength::length((*dims).#field);
        }
    });
    quote!(#(#bindings)*)
}

/// `.with(label, ArrayRequest::of::<T>(shape).memory(..)...)` for one buffer.
fn request(buffer: &Buffer, depth: Option<&TokenStream>) -> TokenStream {
    let cubie_mem = import_name(Span::call_site());
    let label = &buffer.label;
    let element = buffer.element;
    let shape = buffer.shape.iter().map(|length| length_value(*length));
    let of = {
        let cubie_mem = import_name(element.span());
        quote_spanned! {element.span()=> #cubie_mem::ArrayRequest::of::<#element>}
    };
    let memory = match buffer.placement {
        Placement::Device => quote!(#cubie_mem::MemoryKind::Device),
        Placement::Pinned => quote!(#cubie_mem::MemoryKind::Pinned),
    };
    let chunking = match buffer.chunking {
        Chunking::Axis { index, runs } => {
            let runs = length_value(runs);
            quote!(.chunk_axis(#index).total_runs(#runs))
        }
        Chunking::Whole => quote!(.unchunkable()),
    };
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

/// A length as a `usize` expression.
fn length_value(length: Length) -> TokenStream {
    match length {
        Length::Field(field) => {
            let variable = dim_variable(field);
            quote!(#variable)
        }
        Length::Literal(lit, value) => quote_spanned!(lit.span()=> #value),
    }
}
