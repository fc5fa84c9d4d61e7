//! Tests of the expansion's shape, read back with syn.

#![allow(clippy::panic)]

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::DeriveInput;

use super::derive;
use crate::names::source_text;

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

/// The items of the `const _: () = { .. };` block a derive expands to,
/// after checking that the block is all there is.
fn block_items(file: &syn::File) -> Vec<syn::Stmt> {
    let [syn::Item::Const(item)] = file.items.as_slice() else {
        panic!("expected one const item, got {}", file.items.len());
    };
    assert!(matches!(item.ident.to_string().as_str(), "_"));
    let syn::Expr::Block(block) = &*item.expr else {
        panic!("expected a block, got {}", item.expr.to_token_stream());
    };
    block.block.stmts.clone()
}

/// The impl of `GpuBuffers` among `items`.
fn the_impl(items: &[syn::Stmt]) -> syn::ItemImpl {
    let impls: Vec<&syn::ItemImpl> = items
        .iter()
        .filter_map(|stmt| match stmt {
            syn::Stmt::Item(syn::Item::Impl(implementation)) => Some(implementation),
            _ => None,
        })
        .filter(|implementation| {
            implementation.trait_.as_ref().is_some_and(|(_, path, _)| {
                path.segments
                    .last()
                    .is_some_and(|segment| segment.ident == "GpuBuffers")
            })
        })
        .collect();
    let [implementation] = impls.as_slice() else {
        panic!("expected one impl, got {}", impls.len());
    };
    (*implementation).clone()
}

#[test]
fn expands_to_one_anonymous_const_holding_the_import_and_the_impl() {
    let items = block_items(&expand(design_example()));
    let syn::Stmt::Item(syn::Item::Use(import)) = &items[0] else {
        panic!("expected the import first");
    };
    assert!(import.leading_colon.is_some());
    assert_eq!(source_text(&import.tree), "cubie_mem as _cubie_mem");
    let implementation = the_impl(&items);
    let trait_path = implementation
        .trait_
        .as_ref()
        .map(|(_, path, _)| source_text(path));
    assert_eq!(trait_path.as_deref(), Some("_cubie_mem::GpuBuffers"));
    let where_clause = implementation
        .generics
        .where_clause
        .as_ref()
        .map(source_text);
    assert_eq!(
        where_clause.as_deref(),
        Some("where P: _cubie_mem::Element, for<'element>i32: _cubie_mem::Element")
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
fn requests_read_each_dimension_once_through_the_private_helper() {
    let text = expand(design_example()).to_token_stream().to_string();
    assert_eq!(text.matches(". n_runs").count(), 1, "{text}");
    assert!(
        text.contains("let dim_n_runs = _cubie_mem :: __private :: DimLength :: length"),
        "{text}"
    );
    assert!(!text.contains("trait "), "no helper is declared: {text}");
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
fn the_stream_group_is_the_named_one_or_the_crate_default() {
    let named = expand(design_example()).to_token_stream().to_string();
    assert!(
        named.contains("const STREAM_GROUP : & 'static str = \"integrators\""),
        "{named}"
    );
    let default = expand(quote! {
        #[buffers(dims = D)]
        struct B {
            #[buffer(shape = [n], chunk_axis = 0)]
            a: DeviceArray<f32>,
        }
    })
    .to_token_stream()
    .to_string();
    assert!(
        default.contains("const STREAM_GROUP : & 'static str = _cubie_mem :: Registration :: DEFAULT_STREAM_GROUP"),
        "{default}"
    );
}

#[test]
fn registration_presets_the_name_and_the_group() {
    let text = expand(design_example()).to_token_stream().to_string();
    assert!(
        text.contains(
            "Registration :: new () . name (\"Outputs\") . stream_group (< Self as _cubie_mem :: GpuBuffers > :: STREAM_GROUP)"
        ),
        "{text}"
    );
}

#[test]
fn precision_assertions_are_const_items_unless_they_name_a_parameter() {
    let items = block_items(&expand(quote! {
        #[buffers(dims = D)]
        struct B<P: Precision> {
            #[buffer(shape = [n], chunk_axis = 0, precision = Real)]
            a: DeviceArray<f32>,
            #[buffer(shape = [n], chunk_axis = 0, precision = P)]
            b: DeviceArray<P>,
        }
    }));
    let consts: Vec<String> = items
        .iter()
        .filter_map(|stmt| match stmt {
            syn::Stmt::Item(syn::Item::Const(item)) => Some(source_text(&item.expr)),
            _ => None,
        })
        .collect();
    assert_eq!(
        consts,
        ["_cubie_mem::__private::assert_precision::<Real, f32>()"]
    );
    let requests = the_impl(&items).to_token_stream().to_string();
    assert!(
        requests.contains("_cubie_mem :: __private :: assert_precision :: < P , P > ()"),
        "{requests}"
    );
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
fn crate_option_replaces_the_path_in_the_one_import() {
    let file = expand(quote! {
        #[buffers(dims = D, crate = my_kit::cubie_mem)]
        struct B {
            #[buffer(shape = [n], chunk_axis = 0)]
            a: DeviceArray<f32>,
        }
    });
    let text = file.to_token_stream().to_string();
    assert!(
        text.contains("use my_kit :: cubie_mem as _cubie_mem ;"),
        "{text}"
    );
    assert!(
        !text.replace("_cubie_mem", "").contains("cubie_mem ::"),
        "{text}"
    );
}

/// The compile errors and the fallback impl of an expansion with mistakes.
fn errors_and_fallback(input: TokenStream) -> (usize, String) {
    let file = expand(input);
    let errors = file
        .items
        .iter()
        .filter(|item| {
            matches!(item, syn::Item::Macro(m)
                if m.mac.path.segments.last().is_some_and(|s| s.ident == "compile_error"))
        })
        .count();
    let items: Vec<&syn::Item> = file
        .items
        .iter()
        .filter(|item| !matches!(item, syn::Item::Macro(_)))
        .collect();
    let [syn::Item::Const(block)] = items.as_slice() else {
        panic!("expected the fallback's const block, got {}", items.len());
    };
    (errors, block.to_token_stream().to_string())
}

#[test]
fn errors_come_with_a_fallback_impl() {
    let (errors, fallback) = errors_and_fallback(quote! {
        #[buffers(dims = D)]
        struct B {
            #[buffer(shpe = [n], chunk_axis = 0)]
            a: DeviceArray<f32>,
            #[buffer(shape = [0], unchunkable)]
            b: Vec<f32>,
        }
    });
    // The unknown key, the zero dimension, the non-buffer field.
    assert_eq!(errors, 3);
    assert!(fallback.contains("type Dims = D ;"), "{fallback}");
}

#[test]
fn a_misspelt_dims_key_still_gives_the_fallback_its_type() {
    let (errors, fallback) = errors_and_fallback(quote! {
        #[buffers(dim = RunDims)]
        struct B {
            #[buffer(shape = [n], chunk_axis = 0)]
            a: DeviceArray<f32>,
        }
    });
    assert_eq!(errors, 1);
    assert!(fallback.contains("type Dims = RunDims ;"), "{fallback}");
}

#[test]
fn without_a_dims_type_the_fallback_dims_carry_the_last_error() {
    for attrs in [quote!(), quote!(#[buffers(dimensions = RunDims)])] {
        let (errors, fallback) = errors_and_fallback(quote! {
            #attrs
            struct B {
                #[buffer(shape = [n], chunk_axis = 0)]
                a: DeviceArray<f32>,
            }
        });
        assert_eq!(errors, 0, "{attrs}");
        assert!(
            fallback.contains("type Dims = [() ; :: core :: compile_error !"),
            "{fallback}"
        );
    }
    let (errors, fallback) = errors_and_fallback(quote! {
        struct B {
            #[buffer(shape = [0], chunk_axis = 0)]
            a: DeviceArray<f32>,
            #[buffer(shpe = [n], chunk_axis = 0)]
            b: DeviceArray<f32>,
        }
    });
    // The zero dimension and the unknown key before it; the missing dims
    // type, found last, in the fallback's `Dims`.
    assert_eq!(errors, 2);
    assert!(
        fallback.contains("compile_error ! { \"missing the dims type"),
        "{fallback}"
    );
}

#[test]
fn the_block_is_hidden_and_allows_what_serde_allows() {
    let with_errors = quote! {
        struct B {
            #[buffer(shape = [n], chunk_axis = 0)]
            a: DeviceArray<f32>,
        }
    };
    for file in [expand(design_example()), expand(with_errors)] {
        let block = file
            .items
            .iter()
            .find_map(|item| match item {
                syn::Item::Const(block) => Some(block),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no const block"));
        let attrs: Vec<String> = block.attrs.iter().map(source_text).collect();
        assert_eq!(
            attrs,
            [
                "#[doc(hidden)]",
                "#[allow(non_upper_case_globals, unused_attributes, unused_qualifications, clippy::absolute_paths, \
                 clippy::trait_duplication_in_bounds, clippy::type_repetition_in_bounds)]"
            ]
        );
    }
}

#[test]
fn element_bounds_without_parameters_are_higher_ranked() {
    let implementation = the_impl(&block_items(&expand(quote! {
        #[buffers(dims = D)]
        struct B<'element, const N: usize, T: Element> {
            #[buffer(shape = [n], chunk_axis = 0)]
            a: DeviceArray<State>,
            #[buffer(shape = [n], chunk_axis = 0)]
            b: DeviceArray<[f32; N]>,
            #[buffer(shape = [n], chunk_axis = 0)]
            c: PinnedArray<Complex<T>>,
            #[buffer(shape = [n], chunk_axis = 0)]
            d: PinnedArray<State>,
        }
    })));
    let where_clause = implementation
        .generics
        .where_clause
        .as_ref()
        .map(|clause| clause.to_token_stream().to_string());
    assert_eq!(
        where_clause.as_deref(),
        Some(
            "where for < 'element_ > State : _cubie_mem :: Element , \
             [f32 ; N] : _cubie_mem :: Element , Complex < T > : _cubie_mem :: Element"
        )
    );
}

#[test]
fn a_misspelt_chunk_axis_still_names_the_run_axis() {
    let (errors, _) = errors_and_fallback(quote! {
        #[buffers(dims = D)]
        struct B {
            #[buffer(shape = [s, n], chunk_axs = n)]
            a: DeviceArray<f32>,
            #[buffer(shape = [n])]
            b: DeviceArray<f32>,
        }
    });
    // The typo alone: `b` is split along `n`, the run axis `a` meant.
    assert_eq!(errors, 1);
}

#[test]
fn the_fallback_is_a_single_buffer_set_unless_the_depth_says_otherwise() {
    for (depth, single) in [
        (quote!(), true),
        (quote!(pipeline_depth = 1,), true),
        (quote!(pipeline_depth = 0,), true),
        (quote!(pipeline_depth = two,), true),
        (quote!(pipeline_depth = 3,), false),
    ] {
        let (_, fallback) = errors_and_fallback(quote! {
            #[buffers(dims = D, #depth)]
            struct B {
                #[buffer(shpe = [n], chunk_axis = 0)]
                a: DeviceArray<f32>,
            }
        });
        assert_eq!(
            fallback.contains("_cubie_mem :: SingleBufferSet for B"),
            single,
            "{depth}: {fallback}"
        );
    }
}
