//! The errors of a struct with mistakes, and the impls emitted beside them.

use proc_macro2::{Span, TokenStream};
use quote::quote;

use syn::{GenericParam, Ident, parse_quote};

use super::{allowed_lints, binder_lifetime, import_name, wrap};
use crate::ast::Container;
use crate::check::names_parameter;

/// The compile errors of `errors`, with the fallback impls (`GpuBuffers`,
/// and `SingleBufferSet` where the real impls would have it): they state
/// what could be parsed and generate nothing that could fail to compile on
/// their own, so that only the real mistakes are reported, neither in the
/// impls nor in the code using the struct.
///
/// Its `Dims` is the dims type when one was given, even under a misspelt
/// key. Else it is `[(); compile_error!(..)]` with the last error as the
/// length: rustc reports that error there, after the others as they were
/// written, and the type it leaves (an array, sized) refers to an error, so
/// that rustc accepts any dims the code using the struct passes for it:
/// `mgr.allocate_buffers::<S>(&instance, &dims)` reports nothing more. A
/// struct without a dims type always has an error to report (its absence,
/// or the mistake that hid it), so the last one exists.
pub(super) fn errors_with_fallback(container: &Container, errors: syn::Error) -> TokenStream {
    let cubie_mem = import_name(Span::call_site());
    let mut errors: Vec<syn::Error> = errors.into_iter().collect();
    let dims = match (&container.attrs.dims, errors.pop()) {
        (Some(dims), last) => {
            errors.extend(last);
            quote!(#dims)
        }
        (None, Some(last)) => {
            let last = last.to_compile_error();
            quote!([(); #last])
        }
        // A `syn::Error` holds one error at least, so this is not reached;
        // were it, the uses would report their mismatches, nothing worse.
        (None, None) => quote!(()),
    };
    let ident = container.ident;
    let (impl_generics, type_generics, where_clause) = container.generics.split_for_impl();
    let group = match &container.attrs.stream_group {
        Some(name) => quote!(#name),
        None => quote!(#cubie_mem::Registration::DEFAULT_STREAM_GROUP),
    };
    let single_set = single_set(container.attrs.pipeline_depth).then(|| {
        quote! {
            #[automatically_derived]
            impl #impl_generics #cubie_mem::SingleBufferSet for #ident #type_generics #where_clause {}
        }
    });
    let errors = errors.iter().map(syn::Error::to_compile_error);
    let (mirror, mirror_impls) = container
        .attrs
        .host
        .as_ref()
        .map(|name| host_mirror(container, name))
        .unzip();
    let fallback = wrap(
        &container.attrs.krate(),
        quote! {
            #[automatically_derived]
            impl #impl_generics #cubie_mem::GpuBuffers for #ident #type_generics #where_clause {
                type Dims = #dims;
                const STREAM_GROUP: &'static str = #group;
                const LABELS: &'static [&'static str] = &[];

                fn requests(_: &Self::Dims) -> #cubie_mem::RequestSet {
                    #cubie_mem::RequestSet::new()
                }

                fn from_response_set(
                    _: &mut #cubie_mem::ArrayResponse,
                    _: usize,
                ) -> ::core::result::Result<Self, #cubie_mem::MemError> {
                    ::core::result::Result::Err(#cubie_mem::MemError::InvalidRequest {
                        label: ::std::string::String::new(),
                        reason: ::std::string::String::from(
                            "the GpuBuffers declaration has compile errors",
                        ),
                    })
                }
            }

            #single_set
            #mirror_impls
        },
    );
    quote!(#(#errors)* #mirror #fallback)
}

/// The host mirror `name` of a struct with mistakes, so that code using it
/// reports nothing more: its marked buffers' arrays and a marker of every
/// parameter; a `new` that returns an error, and a binding that binds
/// nothing. The declaration, then the impls for the `const _` block.
fn host_mirror(container: &Container, name: &Ident) -> (TokenStream, TokenStream) {
    let cubie_mem = import_name(Span::call_site());
    let (krate, vis, ident) = (container.attrs.krate(), container.vis, container.ident);
    let mut generics = container.generics.clone();
    let binder = binder_lifetime(container.generics);
    let fields: Vec<_> = container
        .fields
        .iter()
        .flatten()
        .filter(|field| !field.attrs.directions.is_empty())
        .filter_map(|field| Some((field.ident, field.array.as_ref().ok()?.element)))
        .collect();
    for (_, element) in &fields {
        let bound = if names_parameter(container.generics, quote!(#element)) {
            parse_quote!(#element: #krate::Element)
        } else {
            parse_quote!(for<#binder> #element: #krate::Element)
        };
        generics.make_where_clause().predicates.push(bound);
    }
    let held = container
        .generics
        .params
        .iter()
        .map(|parameter| match parameter {
            GenericParam::Type(parameter) => {
                let ident = &parameter.ident;
                quote!(#ident)
            }
            GenericParam::Lifetime(parameter) => {
                let lifetime = &parameter.lifetime;
                quote!(&#lifetime ())
            }
            GenericParam::Const(parameter) => {
                let ident = &parameter.ident;
                quote!([(); #ident])
            }
        });
    let declared = fields
        .iter()
        .map(|(field, element)| quote!(#vis #field: #krate::HostArray<#element>));
    let where_clause = &generics.where_clause;
    let allowed = allowed_lints();
    let declaration = quote! {
        #allowed
        #vis struct #name #generics #where_clause {
            #(#declared,)*
            #vis __params: ::core::marker::PhantomData<fn() -> (#(#held,)*)>,
        }
    };
    let (impl_generics, type_generics, where_clause) = generics.split_for_impl();
    let buffers = quote!(#ident #type_generics);
    let signature = super::host::bind_host_signature(&cubie_mem, &buffers, &quote!(_));
    let impls = quote! {
        impl #impl_generics #name #type_generics #where_clause {
            #vis fn new(
                _: &#cubie_mem::MemoryManager,
                _: &<#buffers as #cubie_mem::GpuBuffers>::Dims,
                _: impl ::core::convert::Into<::core::option::Option<#cubie_mem::HostMemoryKind>>,
                _: &#cubie_mem::Instance,
            ) -> ::core::result::Result<Self, #cubie_mem::MemError> {
                ::core::result::Result::Err(#cubie_mem::MemError::InvalidRequest {
                    label: ::std::string::String::new(),
                    reason: ::std::string::String::from(
                        "the GpuBuffers declaration has compile errors",
                    ),
                })
            }
        }

        #[automatically_derived]
        impl #impl_generics #cubie_mem::HostBuffers<#buffers> for #name #type_generics #where_clause {
            #signature {
                pipeline
            }
        }
    };
    (declaration, impls)
}

/// Whether the fallback implements `SingleBufferSet`, as the real impl does
/// for a struct without a pipeline depth above 1, so that the code
/// dereferencing its allocation (`outputs.state`) reports nothing more: all
/// but a depth above 1, including one that could not be read (reported).
fn single_set(depth: Option<Result<usize, crate::ctxt::Reported>>) -> bool {
    !matches!(depth, Some(Ok(depth)) if depth > 1)
}
