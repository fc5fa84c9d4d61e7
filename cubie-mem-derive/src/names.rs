//! How the derive names what the user wrote: an identifier without its raw
//! prefix (a field's default label, a struct's registration name), and
//! tokens printed as a person writes them (in messages and docs). Shared by
//! `ast`, `attr`, `check` and `expand`, so that none of them imports
//! another for it.

use proc_macro2::{Delimiter, Ident, Spacing, TokenStream, TokenTree};
use quote::ToTokens;

/// An identifier without a raw prefix, as a name (`r#type` is `type`): the
/// default label of a field, the registration name of a struct.
pub(crate) fn unraw(ident: &Ident) -> String {
    let name = ident.to_string();
    match name.strip_prefix("r#") {
        Some(stripped) => stripped.to_owned(),
        None => name,
    }
}

/// Tokens as a person writes them: `DeviceArray<f64>`, `crate::RunDims`,
/// `P: Precision`.
pub(crate) fn source_text(tokens: &impl ToTokens) -> String {
    let mut text = String::new();
    write_tokens(tokens.to_token_stream(), &mut text);
    text.trim_end().to_owned()
}

/// Appends `stream` to `text`, spaced as a person writes it.
fn write_tokens(stream: TokenStream, text: &mut String) {
    // Whether the last token was a word, which a following word is spaced from.
    let mut after_word = false;
    let mut after_joint_colon = false;
    for token in stream {
        let joint_colon = matches!(&token, TokenTree::Punct(p) if p.as_char() == ':' && p.spacing() == Spacing::Joint);
        match &token {
            TokenTree::Ident(_) | TokenTree::Literal(_) => {
                if after_word {
                    text.push(' ');
                }
                text.push_str(&token.to_string());
                after_word = true;
            }
            TokenTree::Punct(punct) => {
                match punct.as_char() {
                    ',' | ';' => {
                        text.push(punct.as_char());
                        text.push(' ');
                    }
                    ':' if punct.spacing() == Spacing::Alone && !after_joint_colon => {
                        text.push_str(": ")
                    }
                    '+' | '=' => text.push_str(&format!(" {} ", punct.as_char())),
                    c => text.push(c),
                }
                after_word = false;
            }
            TokenTree::Group(group) => {
                let (open, close) = match group.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::Brace => ("{ ", " }"),
                    Delimiter::None => ("", ""),
                };
                text.push_str(open);
                write_tokens(group.stream(), text);
                let trimmed = text.trim_end().len();
                text.truncate(trimmed);
                text.push_str(close);
                after_word = true;
            }
        }
        after_joint_colon = joint_colon;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::Type;

    #[test]
    fn source_text_reads_like_source() {
        let ty: Type = syn::parse_quote!(cubie_mem::DeviceArray<Vec<f64>>);
        assert_eq!(source_text(&ty), "cubie_mem::DeviceArray<Vec<f64>>");
        let ty: Type = syn::parse_quote!(Pair<&'static str, [u8; 4]>);
        assert_eq!(source_text(&ty), "Pair<&'static str, [u8; 4]>");
        let clause: syn::WhereClause = syn::parse_quote!(where P: ::cubie_mem::Element, T: A + B);
        assert_eq!(
            source_text(&clause),
            "where P: ::cubie_mem::Element, T: A + B"
        );
    }
}
