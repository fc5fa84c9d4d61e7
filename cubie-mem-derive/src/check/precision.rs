//! `precision = ..` against the field's element type.

use syn::Type;

use crate::ctxt::{Ctxt, Reported};
use crate::names::source_text;

/// The floating-point types `precision = ..` accepts.
const PRECISIONS: &[&str] = &["f32", "f64"];

/// Rust's primitive scalar names: a type written as one of these is known to
/// the macro without resolving it.
const PRIMITIVES: &[&str] = &[
    "f16", "f32", "f64", "f128", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32",
    "u64", "u128", "usize", "bool", "char",
];

/// How the macro sees a type written in `precision = ..` or as an element.
#[derive(PartialEq, Eq)]
enum TypeName {
    /// A primitive scalar (`f32`, `i32`, `bool`, ...).
    Primitive(String),
    /// One of the struct's type parameters.
    Parameter(String),
    /// Anything else (an alias, a path, an associated type): only rustc can
    /// tell what it is.
    Unknown,
}

impl TypeName {
    /// How the macro sees `ty`, given the names of the struct's type
    /// parameters.
    fn of(ty: &Type, parameters: &[String]) -> Self {
        let Type::Path(path) = ty else {
            return TypeName::Unknown;
        };
        let Some(ident) = path.path.get_ident().filter(|_| path.qself.is_none()) else {
            return TypeName::Unknown;
        };
        let name = ident.to_string();
        if parameters.contains(&name) {
            TypeName::Parameter(name)
        } else if PRIMITIVES.contains(&name.as_str()) {
            TypeName::Primitive(name)
        } else {
            TypeName::Unknown
        }
    }
}

/// Compares `precision = ..` with the element type where the macro can tell
/// them apart (primitives and the struct's type parameters); returns the
/// precision when the generated code must assert it instead (a type
/// parameter must still be bounded by `Precision`; an alias or path must be a
/// precision and the element type).
pub(super) fn check<'a>(
    cx: &Ctxt,
    precision: &'a Type,
    element: &Type,
    field_type: &Type,
    parameters: &[String],
) -> Result<Option<&'a Type>, Reported> {
    let precision_name = TypeName::of(precision, parameters);
    if let TypeName::Primitive(name) = &precision_name
        && !PRECISIONS.contains(&name.as_str())
    {
        return Err(cx.error_spanned_by(
            precision,
            format!(
                "`precision = {name}`: a precision is `f32` or `f64`, the floating-point types of \
                 `Precision`; leave `precision` out for a buffer of another element type"
            ),
        ));
    }
    let element_name = TypeName::of(element, parameters);
    if precision_name == TypeName::Unknown || element_name == TypeName::Unknown {
        return Ok(Some(precision));
    }
    if precision_name != element_name {
        let written = source_text(precision);
        let field = source_text(field_type);
        let element = source_text(element);
        let why = match (&precision_name, &element_name) {
            (_, TypeName::Parameter(parameter)) => format!(
                " (its element type `{parameter}` is a type parameter, chosen where the struct is used)"
            ),
            (TypeName::Parameter(parameter), _) => format!(
                " (`{parameter}` is a type parameter, chosen where the struct is used, and may differ from `{element}`)"
            ),
            _ => String::new(),
        };
        // An element type that is no precision (`i32`, `f16`) takes none.
        let instead = match &element_name {
            TypeName::Primitive(name) if !PRECISIONS.contains(&name.as_str()) => {
                format!("leave `precision` out (a buffer of `{element}` has none)")
            }
            _ => format!("write `precision = {element}`"),
        };
        return Err(cx.error_spanned_by(
            precision,
            format!(
                "`precision = {written}` contradicts the field type `{field}`{why}: {instead}, \
                 or change the element type to `{written}`"
            ),
        ));
    }
    Ok(matches!(precision_name, TypeName::Parameter(_)).then_some(precision))
}
