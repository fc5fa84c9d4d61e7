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

    /// Who held the device's memory and the one change that would have
    /// made the request fit, for an error that says a request does not fit
    /// (`OutOfMemory`, `AllUnchunkable`, `UnchunkableTooLarge`,
    /// `SingleRunTooLarge`, `BelowGranule`, `CapLimited`) made by the
    /// manager; `None` for other errors and the planner's own.
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

    /// The error with `report` filled in, when it is one that says a
    /// request does not fit; others unchanged.
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

    /// Whether the error says a request does not fit (the errors
    /// [`fit_report`](Self::fit_report) is for).
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
