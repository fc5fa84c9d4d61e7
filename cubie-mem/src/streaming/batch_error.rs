//! What a chunk pipeline that stopped leaves behind; see
//! [what a failed batch leaves behind](crate::guide::host_memory#what-a-failed-batch-leaves-behind).

use std::fmt;
use std::ops::Range;

use crate::MemError;

/// A chunk pipeline run that stopped: why, the chunk it stopped at, and the
/// chunks whose results are in the host arrays. A device set's run
/// ([`DeviceSetPipeline`](super::DeviceSetPipeline)) also names the device
/// that failed and the runs each device saved.
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
    device: Option<usize>,
    saved_runs: Vec<Range<usize>>,
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
            device: None,
            saved_runs: Vec::new(),
        }))
    }

    /// The same failure, of `device` in a device set whose devices saved
    /// `saved_runs`.
    pub(crate) fn on_device(mut self, device: usize, saved_runs: Vec<Range<usize>>) -> Self {
        self.0.device = Some(device);
        self.0.saved_runs = saved_runs;
        self
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

    /// The device that failed, in a device set's run; `None` for one
    /// device's pipeline.
    pub fn device(&self) -> Option<usize> {
        self.0.device
    }

    /// The runs whose results are in the host arrays, by device, in a device
    /// set's run: every chunk each device computed before the batch stopped.
    /// Empty for one device's pipeline, whose runs are
    /// [`completed_runs`](Self::completed_runs).
    pub fn saved_runs(&self) -> &[Range<usize>] {
        &self.0.saved_runs
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
            .field("device", &self.0.device)
            .field("saved_runs", &self.0.saved_runs)
            .finish()
    }
}

impl<E: fmt::Display> fmt::Display for BatchError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stopped = &self.0;
        if let Some(device) = stopped.device {
            write!(f, "device {device} failed: ")?;
        }
        match stopped.chunk {
            Some(chunk) => write!(f, "chunk {chunk} of the batch failed: {}; ", stopped.error)?,
            None => write!(f, "the chunk pipeline failed: {}; ", stopped.error)?,
        }
        if stopped.completed.is_empty() {
            write!(f, "no chunk's results are in the host arrays")?;
        } else {
            write!(
                f,
                "the results of chunks {:?} (runs {:?}) are in the host arrays",
                stopped.completed, stopped.completed_runs
            )?;
        }
        if stopped.device.is_some() {
            write!(f, "; the runs saved by device are {:?}", stopped.saved_runs)?;
        }
        Ok(())
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
            device,
            saved_runs,
        } = *failure.0;
        let error = match chunk {
            None => error,
            Some(chunk) => MemError::BatchFailed {
                chunk,
                completed,
                completed_runs,
                source: Box::new(error),
            },
        };
        match device {
            None => error,
            Some(device) => MemError::DeviceFailed {
                device,
                source: Box::new(error),
                saved: saved_runs,
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
