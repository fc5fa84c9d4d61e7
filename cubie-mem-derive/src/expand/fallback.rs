//! The impl emitted beside the errors of a struct with mistakes.

use proc_macro2::{Span, TokenStream};
use quote::quote;

use super::{import_name, wrap};
use crate::ast::Container;

/// The fallback impl: it states what could be parsed and generates nothing
/// that could fail to compile on its own, so that only the real mistakes are
/// reported, neither in the impl nor in the code using the struct.
///
/// Its `Dims` is the dims type when one was given, even under a misspelt
/// key; else `dyn Any`, to which the user's `&dims` of any (sized,
/// `'static`) type coerces, so that a call such as
/// `mgr.allocate_buffers::<S>(&instance, &dims)` reports nothing more.
pub(super) fn fallback(container: &Container) -> TokenStream {
    let cubie_mem = import_name(Span::call_site());
    let ident = container.ident;
    let (impl_generics, type_generics, where_clause) = container.generics.split_for_impl();
    let dims = match &container.attrs.dims {
        Some(dims) => quote!(#dims),
        None => quote!(dyn ::core::any::Any),
    };
    let group = match &container.attrs.stream_group {
        Some(name) => quote!(#name),
        None => quote!(#cubie_mem::Registration::DEFAULT_STREAM_GROUP),
    };
    wrap(
        &container.attrs.krate(),
        quote! {
            #[automatically_derived]
            #[allow(unused_qualifications)]
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
        },
    )
}
