//! The derive input as a model: the struct, its attributes, each buffer
//! field with its buffer type and `#[buffer(..)]` attributes, and each part
//! (a field holding a buffer struct of its own, `#[buffer(part)]`).

use syn::{
    Data, DeriveInput, Fields, GenericArgument, Generics, Ident, PathArguments, Type, Visibility,
};

use crate::attr::{self, BufferAttrs, ContainerAttrs, Placement};
use crate::ctxt::{Ctxt, Reported};

/// The struct being derived.
pub(crate) struct Container<'a> {
    /// The struct's name.
    pub(crate) ident: &'a Ident,
    /// Its visibility.
    pub(crate) vis: &'a Visibility,
    /// Its generics, passed through to the impl.
    pub(crate) generics: &'a Generics,
    /// The struct-level attributes.
    pub(crate) attrs: ContainerAttrs,
    /// The buffer fields, or the error reported when the input is not a
    /// struct with named fields, or has none.
    pub(crate) fields: Result<Vec<Field<'a>>, Reported>,
    /// The parts: fields holding buffer structs of their own, in
    /// declaration order.
    pub(crate) parts: Vec<Part<'a>>,
}

/// A field holding a buffer struct of its own (`#[buffer(part)]`): its
/// buffers are allocated, planned and taken with the struct's.
pub(crate) struct Part<'a> {
    /// The field's name.
    pub(crate) ident: &'a Ident,
    /// The part's type, which implements `GpuBuffers`.
    pub(crate) ty: &'a Type,
    /// The field's `#[buffer(..)]` attributes.
    pub(crate) attrs: BufferAttrs,
}

/// A named field: a buffer or a part.
enum Member<'a> {
    Buffer(Field<'a>),
    Part(Part<'a>),
}

/// One field of the struct.
pub(crate) struct Field<'a> {
    /// The field's name.
    pub(crate) ident: &'a Ident,
    /// The field's type as written.
    pub(crate) ty: &'a Type,
    /// The buffer the type declares, or the error reported when it is not a
    /// buffer type.
    pub(crate) array: Result<ArrayType<'a>, Reported>,
    /// The field's `#[buffer(..)]` attributes.
    pub(crate) attrs: BufferAttrs,
}

/// A `DeviceArray<T>` or `PinnedArray<T>` field type.
pub(crate) struct ArrayType<'a> {
    /// Device or pinned, from the type's name.
    pub(crate) placement: Placement,
    /// The element type `T`.
    pub(crate) element: &'a Type,
}

impl<'a> Container<'a> {
    /// Builds the model, recording in `cx` what is not a struct with named
    /// buffer fields.
    pub(crate) fn from_ast(cx: &Ctxt, input: &'a DeriveInput) -> Self {
        let attrs = attr::container(cx, &input.attrs);
        let no_buffers = || {
            cx.error_spanned_by(
                &input.ident,
                format!(
                    "`{}` declares no buffers: add fields of type `DeviceArray<T>` or `PinnedArray<T>`, \
                     each with `#[buffer(shape = [..], ..)]`",
                    input.ident
                ),
            )
        };
        let mut parts = Vec::new();
        let fields = match &input.data {
            Data::Struct(data) => match &data.fields {
                Fields::Named(named) if named.named.is_empty() => Err(no_buffers()),
                Fields::Named(named) => Ok(named
                    .named
                    .iter()
                    .filter_map(|field| match Member::from_ast(cx, field)? {
                        Member::Buffer(field) => Some(field),
                        Member::Part(part) => {
                            parts.push(part);
                            None
                        }
                    })
                    .collect()),
                Fields::Unnamed(unnamed) => Err(cx.error_spanned_by(
                    unnamed,
                    "GpuBuffers needs named fields: name each buffer field (its name is the buffer's default label), \
                     e.g. `struct Outputs { state: DeviceArray<f64> }`",
                )),
                Fields::Unit => Err(no_buffers()),
            },
            Data::Enum(data) => Err(cx.error_spanned_by(
                data.enum_token,
                "GpuBuffers derives on a struct with named fields: an enum holds one variant at a time, \
                 but a buffer struct holds all its buffers; write a struct",
            )),
            Data::Union(data) => Err(cx.error_spanned_by(
                data.union_token,
                "GpuBuffers derives on a struct with named fields, not on a union; write a struct",
            )),
        };
        Container {
            ident: &input.ident,
            vis: &input.vis,
            generics: &input.generics,
            attrs,
            fields,
            parts,
        }
    }
}

impl<'a> Member<'a> {
    /// Models a named field: a part when its attributes say `part`, else a
    /// buffer, recording in `cx` a type that is not a buffer and the
    /// mistakes of its `#[buffer(..)]` attributes; `None` for a field
    /// without a name, which a struct with named fields does not have.
    fn from_ast(cx: &Ctxt, field: &'a syn::Field) -> Option<Self> {
        let ident = field.ident.as_ref()?;
        let attrs = attr::buffer(cx, &field.attrs);
        if attrs.part.is_some() {
            return Some(Member::Part(Part {
                ident,
                ty: &field.ty,
                attrs,
            }));
        }
        let array = array_type(&field.ty).ok_or_else(|| {
            cx.error_spanned_by(
                &field.ty,
                format!(
                    "field `{ident}` is not a buffer: declare it as `DeviceArray<T>` (device memory) \
                     or `PinnedArray<T>` (pinned host memory), or mark a field holding a buffer \
                     struct of its own `#[buffer(part)]`"
                ),
            )
        });
        Some(Member::Buffer(Field {
            ident,
            ty: &field.ty,
            array,
            attrs,
        }))
    }
}

/// The buffer a field type declares: `DeviceArray<T>` or `PinnedArray<T>`
/// under any path, with exactly one type argument.
fn array_type(ty: &Type) -> Option<ArrayType<'_>> {
    match ty {
        Type::Group(group) => array_type(&group.elem),
        Type::Paren(paren) => array_type(&paren.elem),
        Type::Path(path) if path.qself.is_none() => {
            let last = path.path.segments.last()?;
            let placement = if last.ident == "DeviceArray" {
                Placement::Device
            } else if last.ident == "PinnedArray" {
                Placement::Pinned
            } else {
                return None;
            };
            let PathArguments::AngleBracketed(arguments) = &last.arguments else {
                return None;
            };
            let mut types = arguments.args.iter();
            match (types.next(), types.next()) {
                (Some(GenericArgument::Type(element)), None) => {
                    Some(ArrayType { placement, element })
                }
                _ => None,
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_buffer_types() {
        let device: Type = syn::parse_quote!(DeviceArray<P>);
        let pinned: Type = syn::parse_quote!(::cubie_mem::PinnedArray<i32>);
        let other: Type = syn::parse_quote!(Vec<f32>);
        let bare: Type = syn::parse_quote!(DeviceArray);
        assert!(array_type(&device).is_some_and(|a| a.placement == Placement::Device));
        assert!(array_type(&pinned).is_some_and(|a| a.placement == Placement::Pinned));
        assert!(array_type(&other).is_none());
        assert!(array_type(&bare).is_none());
    }
}
