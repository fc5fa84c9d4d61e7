//! What a chunk pipeline that stopped leaves behind; see
//! [what a failed batch leaves behind](crate::guide::host_memory#what-a-failed-batch-leaves-behind).

use std::fmt;
use std::ops::Range;

use crate::MemError;

/// A chunk pipeline run that stopped: why, the chunk it stopped at, and the
/// chunks whose results are in the host arrays.
///
/// `?` turns one whose failure is a [`MemError`] into
/// [`MemError::BatchFailed`] (or into the failure itself when it was no
/// chunk's); [`into_error`](Self::into_error) keeps only the failure, for
/// an error type of one's own. Boxed, so that a run's `Result` stays one
/// pointer wide. `E` is [`MemError`] unless the computation has an error
/// type of its own ([`run_with_error`](super::ChunkPipeline::run_with_error)).
#[derive(Clone, PartialEq)]
pub struct BatchError<E = MemError>(Box<Stopped<E>>);

/// The figures of a [`BatchError`].
#[derive(Debug, Clone, PartialEq)]
struct Stopped<E> {
    error: E,
    chunk: Option<usize>,
    completed: Range<usize>,
    completed_runs: Range<usize>,
}

impl<E> BatchError<E> {
    /// A failure at `chunk` (`None`: no chunk's), with the chunks and runs
    /// whose results are in place.
    pub(crate) fn new(
        error: E,
        chunk: Option<usize>,
        completed: Range<usize>,
        completed_runs: Range<usize>,
    ) -> Self {
        BatchError(Box::new(Stopped {
            error,
            chunk,
            completed,
            completed_runs,
        }))
    }

    /// The failure: the computation's own error, or the manager's (a copy,
    /// a binding) converted with `From<MemError>`.
    pub fn error(&self) -> &E {
        &self.0.error
    }

    /// The chunk the run stopped at: the one whose computation (or copy)
    /// failed. `None` when the failure was no chunk's: a binding refused
    /// before anything moved, or the wait for the copies at the end.
    pub fn chunk(&self) -> Option<usize> {
        self.0.chunk
    }

    /// The chunks whose results are in the host arrays: every chunk
    /// computed before the failure (`0..chunk`), fewer when a download
    /// failed too, none when the copies could not be waited for.
    pub fn completed(&self) -> Range<usize> {
        self.0.completed.clone()
    }

    /// The runs of the [`completed`](Self::completed) chunks.
    pub fn completed_runs(&self) -> Range<usize> {
        self.0.completed_runs.clone()
    }

    /// The failure alone.
    pub fn into_error(self) -> E {
        self.0.error
    }
}

impl<E: fmt::Debug> fmt::Debug for BatchError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchError")
            .field("error", &self.0.error)
            .field("chunk", &self.0.chunk)
            .field("completed", &self.0.completed)
            .field("completed_runs", &self.0.completed_runs)
            .finish()
    }
}

impl<E: fmt::Display> fmt::Display for BatchError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stopped = &self.0;
        match stopped.chunk {
            Some(chunk) => write!(f, "chunk {chunk} of the batch failed: {}; ", stopped.error)?,
            None => write!(f, "the chunk pipeline failed: {}; ", stopped.error)?,
        }
        if stopped.completed.is_empty() {
            write!(f, "no chunk's results are in the host arrays")
        } else {
            write!(
                f,
                "the results of chunks {:?} (runs {:?}) are in the host arrays",
                stopped.completed, stopped.completed_runs
            )
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for BatchError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0.error)
    }
}

impl From<BatchError<MemError>> for MemError {
    fn from(failure: BatchError<MemError>) -> Self {
        let Stopped {
            error,
            chunk,
            completed,
            completed_runs,
        } = *failure.0;
        match chunk {
            None => error,
            Some(chunk) => MemError::BatchFailed {
                chunk,
                completed,
                completed_runs,
                source: Box::new(error),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_the_chunk_and_what_is_in_place() {
        let failure = BatchError::new(MemError::NoBufferSets, Some(3), 0..3, 0..300);
        assert_eq!(
            size_of::<Result<(), BatchError<MemError>>>(),
            size_of::<usize>()
        );
        assert!(
            failure
                .to_string()
                .ends_with("the results of chunks 0..3 (runs 0..300) are in the host arrays"),
            "{failure}"
        );
        let error = MemError::from(failure);
        assert!(matches!(
            error,
            MemError::BatchFailed {
                chunk: 3,
                ref completed,
                ..
            } if *completed == (0..3)
        ));
        assert!(
            error
                .to_string()
                .starts_with("chunk 3 of the batch failed: ")
        );
        let early = BatchError::new(MemError::NoBufferSets, None, 0..0, 0..0);
        assert_eq!(MemError::from(early), MemError::NoBufferSets);
    }
}
