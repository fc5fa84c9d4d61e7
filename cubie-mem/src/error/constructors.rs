//! Constructors and questions of [`MemError`].

use super::MemError;

impl MemError {
    pub(crate) fn invalid_request(label: &str, reason: impl Into<String>) -> Self {
        MemError::InvalidRequest {
            label: label.to_owned(),
            reason: reason.into(),
        }
    }

    /// A backend failure not tied to an array.
    pub(crate) fn backend(backend: &'static str, error: crate::backend::BackendError) -> Self {
        MemError::Backend { backend, error }
    }

    /// Who held the memory and the one change that would make the request
    /// fit, for the manager's out-of-memory errors; else `None`.
    pub fn fit_report(&self) -> Option<&crate::report::FitReport> {
        match self {
            MemError::OutOfMemory { report, .. }
            | MemError::AllUnchunkable { report, .. }
            | MemError::UnchunkableTooLarge { report, .. }
            | MemError::SingleRunTooLarge { report, .. }
            | MemError::BelowGranule { report, .. }
            | MemError::CapLimited { report, .. } => report.as_deref(),
            _ => None,
        }
    }

    /// The error with `report` filled in, when it says a request does not fit.
    pub(crate) fn with_fit_report(mut self, filled: crate::report::FitReport) -> Self {
        match &mut self {
            MemError::OutOfMemory { report, .. }
            | MemError::AllUnchunkable { report, .. }
            | MemError::UnchunkableTooLarge { report, .. }
            | MemError::SingleRunTooLarge { report, .. }
            | MemError::BelowGranule { report, .. }
            | MemError::CapLimited { report, .. } => *report = Some(Box::new(filled)),
            _ => {}
        }
        self
    }

    /// Whether the error says a request does not fit.
    pub(crate) fn is_fit_error(&self) -> bool {
        matches!(
            self,
            MemError::OutOfMemory { .. }
                | MemError::AllUnchunkable { .. }
                | MemError::UnchunkableTooLarge { .. }
                | MemError::SingleRunTooLarge { .. }
                | MemError::BelowGranule { .. }
                | MemError::CapLimited { .. }
        )
    }

    /// True for errors that mean the device, or the host, ran out of memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            MemError::OutOfMemory { .. } | MemError::HostOutOfMemory { .. }
        ) || matches!(self, MemError::Backend { error, .. } if error.is_out_of_memory())
    }
}

// A `Result<_, MemError>` stays small enough to return by value everywhere
// (clippy's `result_large_err` bound): large figures go in boxes.
const _: () = assert!(size_of::<MemError>() < 128);
