//! What the CUDA backend's errors carry, for the tests of the cuda and
//! fake_driver binaries, which include this module: the reason of a
//! refusal, the driver's code and message of a failure.
#![allow(dead_code, clippy::panic)]

/// The reason the CUDA backend gave for refusing `operation`
/// (`MemError::Backend` with `BackendError::Unsupported`); panics on any
/// other error.
pub fn refusal<'e>(error: &'e cubie_mem::MemError, operation: &str) -> &'e str {
    match error {
        cubie_mem::MemError::Backend {
            backend: "cuda",
            error:
                cubie_mem::backend::BackendError::Unsupported {
                    operation: op,
                    reason,
                },
        } if *op == operation => reason,
        other => panic!("expected the cuda backend to refuse {operation:?}, got {other:?}"),
    }
}

/// The driver's code and message for the failure of `operation`
/// (`MemError::Backend` with `BackendError::Driver`); panics on any other
/// error.
pub fn driver_failure<'e>(error: &'e cubie_mem::MemError, operation: &str) -> (u32, &'e str) {
    match error {
        cubie_mem::MemError::Backend {
            backend: "cuda",
            error:
                cubie_mem::backend::BackendError::Driver {
                    operation: op,
                    code,
                    message,
                },
        } if *op == operation => (*code, message),
        other => panic!("expected {operation:?} to fail in the driver, got {other:?}"),
    }
}
