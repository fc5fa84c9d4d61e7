//! The host mirror `#[buffers(host = Name)]` names: its declaration beside
//! the struct (a host array per field with a direction), its constructor
//! and its `HostBuffers` impl, which binds every array in one call.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::{GenericParam, Generics, Ident};

use super::{allowed_lints, import_name, with_element_bounds};
use crate::attr::Direction;
use crate::check::{Buffer, Checked, Chunking, HostMirror, HostSide};
use crate::names::source_text;

/// The directed buffers, with their host side.
fn directed<'c, 'a>(checked: &'c Checked<'a>) -> impl Iterator<Item = (&'c Buffer<'a>, HostSide)> {
    checked
        .buffers
        .iter()
        .filter_map(|buffer| Some((buffer, buffer.host?)))
}

/// The marker field holding the parameters no host array names.
fn marker_field() -> Ident {
    Ident::new("__params", Span::call_site())
}

/// `struct Name<..> { field: HostArray<T>, .. }`, with the struct's
/// visibility and generics, and the element bounds its arrays need.
pub(super) fn declaration(checked: &Checked, host: &HostMirror) -> TokenStream {
    let krate = &checked.krate;
    let generics = with_element_bounds(
        checked,
        directed(checked).map(|(buffer, _)| buffer),
        &|_| quote!(#krate),
    );
    let where_clause = &generics.where_clause;
    let (vis, name, ident) = (checked.vis, host.ident, checked.ident);
    let fields = directed(checked).map(|(buffer, side)| {
        let (field, element) = (buffer.field, buffer.element);
        let doc = field_doc(buffer, side);
        quote! {
            #[doc = #doc]
            #vis #field: #krate::HostArray<#element>
        }
    });
    let marker = marker(&host.unused).map(|ty| {
        let field = marker_field();
        quote! {
            #[doc = "The struct's parameters that no host array names."]
            #vis #field: ::core::marker::PhantomData<#ty>,
        }
    });
    let doc = format!(
        "The host side of `{ident}`, derived from `#[buffers(host = {name})]`: a host array of the whole \
         batch for each buffer the kernel reads (`input`), writes (`output`) or both (`inout`), named as \
         its field.\n\nMake it with `{name}::new`. Bind it into a chunk pipeline in one call, \
         `pipeline.bind(&mut host, |set| set)` (`ChunkPipeline::bind`; for a part of a composed \
         struct, `|set| &set.part`), again for a resumed run."
    );
    let allowed = allowed_lints();
    quote! {
        #[doc = #doc]
        #[derive(Debug)]
        #allowed
        #vis struct #name #generics #where_clause {
            #(#fields,)*
            #marker
        }
    }
}

/// The marker type holding `unused` parameters, if any.
fn marker(unused: &[&GenericParam]) -> Option<TokenStream> {
    if unused.is_empty() {
        return None;
    }
    let held = unused.iter().map(|parameter| match parameter {
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
    Some(quote!(fn() -> (#(#held,)*)))
}

/// One line of documentation for a field of the mirror.
fn field_doc(buffer: &Buffer, side: HostSide) -> String {
    let what = match side.direction {
        Direction::Input => "copied in before each chunk computes",
        Direction::Output => "copied out after each chunk computes",
        Direction::Inout => "copied in before each chunk computes and out after",
    };
    let shape: Vec<String> = buffer
        .shape
        .iter()
        .map(|length| length.describe())
        .collect();
    let runs = match buffer.chunking {
        Chunking::Axis { index, .. } => format!(", the batch's runs on axis {index}"),
        Chunking::Whole => String::new(),
    };
    let memory = side.memory.map_or_else(String::new, |memory| {
        format!(", in {} host memory", memory.keyword())
    });
    format!(
        "`{}`: {what}. Element `{}`, shape `[{}]`{runs}{memory}.",
        side.direction.keyword(),
        source_text(buffer.element),
        shape.join(", ")
    )
}

/// The mirror's constructor and `HostBuffers` impl, inside the `const _`
/// block; `generics` are the `GpuBuffers` impl's.
/// The signature of `HostBuffers::bind_host` for the buffer struct
/// `buffers`, its selector bound to `select` (`_` when unused).
pub(super) fn bind_host_signature(
    cubie_mem: &Ident,
    buffers: &TokenStream,
    select: &TokenStream,
) -> TokenStream {
    quote! {
        fn bind_host<'__host, __Sets: '__host, __Pipeline: #cubie_mem::__private::HostBinder<'__host, __Sets>>(
            &'__host mut self,
            pipeline: __Pipeline,
            #select: impl ::core::ops::Fn(&'__host __Sets) -> &'__host #buffers
                + ::core::marker::Copy
                + ::core::marker::Sync
                + '__host,
        ) -> __Pipeline
        where
            #buffers: '__host,
    }
}

pub(super) fn implementation(
    checked: &Checked,
    host: &HostMirror,
    generics: &Generics,
) -> TokenStream {
    let cubie_mem = import_name(Span::call_site());
    let (impl_generics, type_generics, where_clause) = generics.split_for_impl();
    let (vis, name, ident) = (checked.vis, host.ident, checked.ident);
    let buffers = quote!(#ident #type_generics);
    let signature = bind_host_signature(&cubie_mem, &buffers, &quote!(select));
    let marker = (!host.unused.is_empty()).then(marker_field);
    let made = directed(checked).map(|(buffer, side)| {
        let (field, element, label) = (buffer.field, buffer.element, &buffer.label);
        let memory = match side.memory {
            Some(memory) => {
                let variant = format_ident!("{}", memory.variant());
                quote!(::core::option::Option::Some(#cubie_mem::HostMemoryKind::#variant))
            }
            None => quote!(::core::option::Option::None),
        };
        quote! {
            #field: #cubie_mem::__private::host_array::<#element>(
                mgr, &requests, #label, #memory, kind, holder,
            )?
        }
    });
    let made_marker = marker
        .iter()
        .map(|field| quote!(#field: ::core::marker::PhantomData));
    let fields: Vec<&Ident> = directed(checked).map(|(buffer, _)| buffer.field).collect();
    let rest = marker.as_ref().map(|_| quote!(..));
    let bound = directed(checked).fold(quote!(pipeline), |pipeline, (buffer, side)| {
        let field = buffer.field;
        let method = match side.direction {
            Direction::Input => quote!(bind_input),
            Direction::Output => quote!(bind_output),
            Direction::Inout => quote!(bind_inout),
        };
        quote! {
            #cubie_mem::__private::HostBinder::#method(#pipeline, #field, move |set| &select(set).#field)
        }
    });
    let new_doc = format!(
        "A zero-filled host array per field, of the shape `{ident}`'s request for it has for `dims` \
         (the whole batch), in the field's `host_memory`, else `kind`, else the memory the manager \
         chooses for its size.\n\n# Errors\n\nA host array the manager cannot make (its host memory \
         limits, a spill file that cannot be made)."
    );
    quote! {
        impl #impl_generics #name #type_generics #where_clause {
            #[doc = #new_doc]
            #vis fn new(
                mgr: &#cubie_mem::MemoryManager,
                dims: &<#buffers as #cubie_mem::GpuBuffers>::Dims,
                kind: impl ::core::convert::Into<::core::option::Option<#cubie_mem::HostMemoryKind>>,
                holder: &#cubie_mem::Instance,
            ) -> ::core::result::Result<Self, #cubie_mem::MemError> {
                let kind = ::core::convert::Into::into(kind);
                let requests = <#buffers as #cubie_mem::GpuBuffers>::requests(dims);
                ::core::result::Result::Ok(Self { #(#made,)* #(#made_marker,)* })
            }
        }

        #[automatically_derived]
        impl #impl_generics #cubie_mem::HostBuffers<#buffers> for #name #type_generics #where_clause {
            #signature {
                let Self { #(#fields,)* #rest } = self;
                #bound
            }
        }
    }
}
