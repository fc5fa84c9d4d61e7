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
