//! The generated code of a composed struct: its parts' requests and arrays
//! taken with its own, its labels gathered at compile time, and the
//! compile-time assertions that its parts agree (one stream group, one run
//! axis, labels unique across them), each spanned on the part's field.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Generics, Ident, Lifetime, WherePredicate, parse_quote_spanned};

use super::{binder_lifetime, import_name};
use crate::check::{Checked, CheckedPart, Chunking, Dims, StreamGroup};
use crate::names::unraw;

/// The `Dims` type: the declared one, or the first part's.
pub(super) fn dims_type(checked: &Checked) -> TokenStream {
    match checked.dims {
        Dims::Declared(ty) => quote!(#ty),
        Dims::OfPart(part) => {
            let cubie_mem = import_name(part.span());
            quote_spanned!(part.span()=> <#part as #cubie_mem::GpuBuffers>::Dims)
        }
    }
}

/// The `STREAM_GROUP` value.
pub(super) fn stream_group(checked: &Checked) -> TokenStream {
    let cubie_mem = import_name(Span::call_site());
    match (&checked.stream_group, checked.parts.first()) {
        (StreamGroup::Named(name), _) => quote!(#name),
        (StreamGroup::OfPart, Some(part)) => {
            let ty = part.ty;
            quote_spanned!(ty.span()=> <#ty as #cubie_mem::GpuBuffers>::STREAM_GROUP)
        }
        (StreamGroup::Default | StreamGroup::OfPart, _) => {
            quote!(#cubie_mem::Registration::DEFAULT_STREAM_GROUP)
        }
    }
}

/// The `LABELS` value: the own buffers' labels, then each part's.
pub(super) fn labels(checked: &Checked) -> TokenStream {
    let cubie_mem = import_name(Span::call_site());
    let own = checked.buffers.iter().map(|buffer| &buffer.label);
    if checked.parts.is_empty() {
        return quote!(&[#(#own),*]);
    }
    let parts = checked.parts.iter().map(|part| {
        let ty = part.ty;
        quote!(<#ty as #cubie_mem::GpuBuffers>::LABELS)
    });
    quote! {
        #cubie_mem::__private::Labels::as_slice(&#cubie_mem::__private::Labels::concat(&[
            &[#(#own),*],
            #(#parts),*
        ]))
    }
}

/// The `__RUN_AXIS` value: the own buffers' run axis, else the first
/// part's that has one.
pub(super) fn run_axis(checked: &Checked) -> TokenStream {
    let cubie_mem = import_name(Span::call_site());
    let own = checked
        .buffers
        .iter()
        .find_map(|buffer| match buffer.chunking {
            Chunking::Axis { runs, .. } => Some(runs.describe()),
            Chunking::Whole => None,
        });
    let own = match own {
        Some(axis) => quote!(::core::option::Option::Some(#axis)),
        None => quote!(::core::option::Option::None),
    };
    if checked.parts.is_empty() {
        return own;
    }
    let parts = checked.parts.iter().map(|part| {
        let ty = part.ty;
        quote!(<#ty as #cubie_mem::GpuBuffers>::__RUN_AXIS)
    });
    quote!(#cubie_mem::__private::first_run_axis(&[#own, #(#parts),*]))
}

/// The dims a part must have: the struct's, or for the first part of a
/// struct that takes its dims from it, any.
fn part_dims(checked: &Checked, index: usize) -> Option<TokenStream> {
    match checked.dims {
        Dims::Declared(ty) => Some(quote!(#ty)),
        Dims::OfPart(_) if index == 0 => None,
        Dims::OfPart(first) => {
            let cubie_mem = import_name(Span::call_site());
            Some(quote!(<#first as #cubie_mem::GpuBuffers>::Dims))
        }
    }
}

/// `ty: trait_path`, spanned on the type: plain when the type names a
/// parameter of the struct (checked where the struct is used), else
/// higher-ranked, as the element bounds are, so that rustc does not check
/// it where the impl is declared (the assertion items report it once).
fn bound(part: &CheckedPart, binder: &Lifetime, trait_path: TokenStream) -> WherePredicate {
    let ty = part.ty;
    if part.is_generic {
        parse_quote_spanned! {ty.span()=> #ty: #trait_path}
    } else {
        parse_quote_spanned! {ty.span()=> for<#binder> #ty: #trait_path}
    }
}

/// Adds a `GpuBuffers` bound with the struct's dims on each part's type:
/// the impl takes the parts' requests and arrays.
pub(super) fn with_part_bounds(generics: &mut Generics, checked: &Checked) {
    let binder = binder_lifetime(checked.generics);
    for (index, part) in checked.parts.iter().enumerate() {
        let cubie_mem = import_name(part.ty.span());
        let trait_path = match part_dims(checked, index) {
            Some(dims) => quote!(#cubie_mem::GpuBuffers<Dims = #dims>),
            None => quote!(#cubie_mem::GpuBuffers),
        };
        generics
            .make_where_clause()
            .predicates
            .push(bound(part, &binder, trait_path));
    }
}

/// For each part whose type names no parameter of the struct, an item
/// asserting that it is a buffer struct of the struct's dims, spanned on
/// its type: the one place a part that is not one is reported. Empty when
/// [`checks`] makes these assertions itself, at the declaration.
pub(super) fn assertions(checked: &Checked) -> TokenStream {
    if checked_at_declaration(checked) {
        return TokenStream::new();
    }
    let items = part_assertions(checked).map(|assertion| quote!(const _: () = { #assertion };));
    quote!(#(#items)*)
}

/// The statements asserting that each part whose type names no parameter
/// of the struct is a buffer struct of the struct's dims, spanned on its
/// type.
fn part_assertions<'c>(checked: &'c Checked) -> impl Iterator<Item = TokenStream> + 'c {
    checked
        .parts
        .iter()
        .enumerate()
        .filter(|(_, part)| !part.is_generic)
        .map(|(index, part)| {
            let ty = part.ty;
            let cubie_mem = import_name(ty.span());
            let dims = part_dims(checked, index)
                .unwrap_or_else(|| quote!(<#ty as #cubie_mem::GpuBuffers>::Dims));
            quote_spanned! {ty.span()=>
                #cubie_mem::__private::assert_part::<#ty, #dims>();
            }
        })
}

/// Whether the parts' agreement is asserted where the struct is declared,
/// where `cargo check` and an editor see it: when no part names a
/// parameter of the struct, so that the assertion needs none.
fn checked_at_declaration(checked: &Checked) -> bool {
    checked.parts.iter().all(|part| !part.is_generic)
}

/// Statements appending each part's requests for `dims` to `set` (the
/// call spanned on the part's type, so dims of another type are reported
/// there), then giving every request the struct's pipeline depth.
pub(super) fn requests(checked: &Checked) -> TokenStream {
    let cubie_mem = import_name(Span::call_site());
    let parts = checked.parts.iter().map(|part| {
        let ty = part.ty;
        let cubie_mem = import_name(ty.span());
        let requests = quote_spanned!(ty.span()=> <#ty as #cubie_mem::GpuBuffers>::requests(dims));
        quote! {
            for (label, request) in #requests {
                set.insert(label, request);
            }
        }
    });
    let depth = match (checked.pipeline_depth, checked.parts.is_empty()) {
        (Some(depth), false) => {
            Some(quote!(let set = #cubie_mem::__private::with_pipeline_depth(set, #depth);))
        }
        _ => None,
    };
    quote!(#(#parts)* #depth)
}

/// The field initialisers taking each part's arrays of buffer set `set`.
pub(super) fn takes(checked: &Checked) -> Vec<TokenStream> {
    let cubie_mem = import_name(Span::call_site());
    checked
        .parts
        .iter()
        .map(|part| {
            let (field, ty) = (part.field, part.ty);
            quote!(#field: <#ty as #cubie_mem::GpuBuffers>::from_response_set(response, set)?)
        })
        .collect()
}

/// The assertions that the parts agree: `(items, use)`.
///
/// Where no part names a parameter of the struct, one `const _` item that
/// also asserts each part is a buffer struct of the struct's dims: rustc
/// evaluates it in `cargo check`, and reports a part that is not one once,
/// since every use of the part is spanned on its type. Otherwise an
/// associated constant of a trait local to the generated block, which
/// `use` forces in `requests`: evaluated where code is generated
/// (`cargo build`, `cargo test`).
pub(super) fn checks(checked: &Checked, generics: &Generics) -> (TokenStream, TokenStream) {
    if checked.parts.is_empty() {
        return (TokenStream::new(), TokenStream::new());
    }
    let cubie_mem = import_name(Span::call_site());
    let ident = checked.ident;
    let name = unraw(ident);
    let trait_name = Ident::new("__CubieMemParts", Span::call_site());
    let (impl_generics, type_generics, where_clause) = generics.split_for_impl();
    let own_labels = checked.buffers.iter().map(|buffer| &buffer.label);
    let own = quote!(&[#(#own_labels),*]);
    let mut assertions = Vec::new();
    let parts = &checked.parts;
    let message = quote!(#cubie_mem::__private::ConstMessage::new());
    let group_of =
        |ty: &syn::Type| quote_spanned!(ty.span()=> <#ty as #cubie_mem::GpuBuffers>::STREAM_GROUP);
    let labels_of =
        |ty: &syn::Type| quote_spanned!(ty.span()=> <#ty as #cubie_mem::GpuBuffers>::LABELS);
    let axis_of =
        |ty: &syn::Type| quote_spanned!(ty.span()=> <#ty as #cubie_mem::GpuBuffers>::__RUN_AXIS);
    let at_declaration = checked_at_declaration(checked);
    let own_group = if at_declaration {
        stream_group(checked)
    } else {
        quote!(<#ident #type_generics as #cubie_mem::GpuBuffers>::STREAM_GROUP)
    };
    for (index, part) in parts.iter().enumerate() {
        let (field, ty) = (part.field, part.ty);
        let span = field.span();
        let part_group = group_of(ty);
        let group_start = format!("part `{field}` of `{name}` is in stream group \"");
        let group_middle = format!("\", and `{name}` in \"");
        let group_end = format!(
            "\": the parts of a struct are allocated together, in one group; give every part (and \
             `{name}`, or leave it out there to take the first part's) the same `#[stream_group(..)]`"
        );
        assertions.push(quote_spanned! {span=>
            if !#cubie_mem::__private::str_eq(#part_group, #own_group) {
                ::core::panic!(
                    "{}",
                    #message.push(#group_start).push(#part_group).push(#group_middle)
                        .push(#own_group).push(#group_end).as_str()
                );
            }
        });
        let part_labels = labels_of(ty);
        if !checked.buffers.is_empty() {
            let start = format!("part `{field}` of `{name}` has the label '");
            let end = format!(
                "' of one of `{name}`'s own buffers: every array of a struct needs its own label; \
                 rename one (`label = \"..\"`)"
            );
            assertions.push(quote_spanned! {span=>
                if let ::core::option::Option::Some(label) =
                    #cubie_mem::__private::shared_label(#own, #part_labels)
                {
                    ::core::panic!("{}", #message.push(#start).push(label).push(#end).as_str());
                }
            });
        }
        for earlier in &parts[..index] {
            let (other, other_ty) = (earlier.field, earlier.ty);
            let other_labels = labels_of(other_ty);
            let (other_axis, part_axis) = (axis_of(other_ty), axis_of(ty));
            let label_start =
                format!("parts `{other}` and `{field}` of `{name}` share the label '");
            let label_end = "': every array of a struct needs its own label; rename one in its part's \
                             declaration (`label = \"..\"`)";
            let axis_start = format!(
                "parts `{other}` and `{field}` of `{name}` are split along different run axes (`"
            );
            let axis_end = "`): a batch has one run count, so split every part's chunked buffers along the \
                            same dims field";
            assertions.push(quote_spanned! {span=>
                if let ::core::option::Option::Some(label) =
                    #cubie_mem::__private::shared_label(#other_labels, #part_labels)
                {
                    ::core::panic!(
                        "{}",
                        #message.push(#label_start).push(label).push(#label_end).as_str()
                    );
                }
                if !#cubie_mem::__private::same_run_axis(#other_axis, #part_axis) {
                    ::core::panic!(
                        "{}",
                        #message.push(#axis_start)
                            .push(#cubie_mem::__private::axis_name(#other_axis))
                            .push("` and `")
                            .push(#cubie_mem::__private::axis_name(#part_axis))
                            .push(#axis_end)
                            .as_str()
                    );
                }
            });
        }
    }
    if at_declaration {
        let part_assertions = part_assertions(checked);
        let items = quote! {
            // Evaluated only at compile time, where a panic is the error.
            #[allow(clippy::panic)]
            const _: () = {
                #(#part_assertions)*
                #(#assertions)*
            };
        };
        return (items, TokenStream::new());
    }
    let items = quote! {
        trait #trait_name {
            const CHECK: ();
        }
        #[automatically_derived]
        impl #impl_generics #trait_name for #ident #type_generics #where_clause {
            // Evaluated only at compile time, where a panic is the error.
            #[allow(clippy::panic)]
            const CHECK: () = {
                #(#assertions)*
            };
        }
    };
    let force = quote!(let () = <Self as #trait_name>::CHECK;);
    (items, force)
}

/// The `SingleBufferSet` impl of a composed struct: with depth 1 given,
/// always; with none, where every part is one; with a depth above 1, none.
pub(super) fn single_set(checked: &Checked, generics: &Generics) -> Option<TokenStream> {
    let cubie_mem = import_name(Span::call_site());
    let mut generics = generics.clone();
    match checked.pipeline_depth {
        Some(1) => {}
        Some(_) => return None,
        None => {
            let binder = binder_lifetime(checked.generics);
            for part in &checked.parts {
                let predicate = bound(part, &binder, quote!(#cubie_mem::SingleBufferSet));
                generics.make_where_clause().predicates.push(predicate);
            }
        }
    }
    let ident = checked.ident;
    let (impl_generics, type_generics, where_clause) = generics.split_for_impl();
    Some(quote! {
        #[automatically_derived]
        impl #impl_generics #cubie_mem::SingleBufferSet for #ident #type_generics #where_clause {}
    })
}
