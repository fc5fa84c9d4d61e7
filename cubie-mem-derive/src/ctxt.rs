//! The error context: every mistake found in the input is recorded with its
//! span, so that all of them are reported at once.

use std::cell::RefCell;
use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;

/// Collects the errors of one derive input.
#[derive(Default)]
pub(crate) struct Ctxt {
    errors: RefCell<Vec<syn::Error>>,
}

/// Proof that a mistake was recorded in the [`Ctxt`]: only its methods make
/// one. A piece of the model that could not be built carries it, so that a
/// missing piece always comes with the error that explains it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reported(());

impl Ctxt {
    /// An empty context.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Records an error at `span`.
    pub(crate) fn error(&self, span: Span, message: impl Display) -> Reported {
        self.syn_error(syn::Error::new(span, message))
    }

    /// Records an error spanning `tokens`.
    pub(crate) fn error_spanned_by(
        &self,
        tokens: impl ToTokens,
        message: impl Display,
    ) -> Reported {
        self.syn_error(syn::Error::new_spanned(tokens, message))
    }

    /// Records an error syn produced.
    pub(crate) fn syn_error(&self, error: syn::Error) -> Reported {
        self.errors.borrow_mut().push(error);
        Reported(())
    }

    /// The checked `model` when nothing was recorded, else every error
    /// combined into one.
    ///
    /// A model that could not be built carries a [`Reported`], so an error
    /// was recorded; the message at the call site stands in should that ever
    /// not hold, so that no input makes the derive succeed without its model.
    pub(crate) fn finish<T>(self, model: Result<T, Reported>) -> Result<T, syn::Error> {
        let combined = self
            .errors
            .into_inner()
            .into_iter()
            .reduce(|mut combined, error| {
                combined.combine(error);
                combined
            });
        match (model, combined) {
            (Ok(model), None) => Ok(model),
            (_, Some(errors)) => Err(errors),
            (Err(Reported(())), None) => Err(syn::Error::new(
                Span::call_site(),
                "#[derive(GpuBuffers)] could not check this struct and found no mistake to report; \
                 please report this as a bug of cubie-mem-derive",
            )),
        }
    }
}
