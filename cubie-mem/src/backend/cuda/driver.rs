//! Driver results as the backend reports them: [`BackendError`]s naming the
//! operation and the driver's real code (while the device is being opened,
//! [`MemError::NoDevice`]s with advice), and the context's [`Health`], which
//! remembers a failure that left the context unusable.

use std::sync::OnceLock;

use super::sys::CuResult;
use crate::MemError;
use crate::backend::BackendError;

/// The backend's name in messages.
pub(super) const NAME: &str = "cuda";

/// What a code means for the user, for the codes that explain a setup
/// problem or a lost device.
fn hint(code: u32) -> Option<&'static str> {
    Some(match code {
        2 => "the device is out of memory",
        3 | 4 => "the CUDA driver is not initialised",
        34 => {
            "the loaded libcuda is a stub library, not the NVIDIA driver; install the driver or put its libcuda.so.1 first on the library path"
        }
        35 => {
            "the installed NVIDIA driver is older than this CUDA version needs; update the driver"
        }
        36 => "the call needs a newer NVIDIA driver; update the driver",
        46 => {
            "the device is unavailable (exclusive-process mode with another process on it, or the device is being reset); check nvidia-smi"
        }
        100 => {
            "no CUDA-capable device is detected; check that the NVIDIA driver is loaded and CUDA_VISIBLE_DEVICES"
        }
        101 => "the device ordinal is invalid",
        201 => "the context is invalid",
        226 => {
            "an uncorrectable error was contained on the device; the context is unusable and the process must restart"
        }
        700 | 719 => {
            "a kernel faulted (illegal address or launch failure); run it under compute-sanitizer to find the access"
        }
        709 => "the context was destroyed",
        802 => "the system is not ready (is the fabric manager running?)",
        803 => {
            "the driver library does not match the loaded kernel module; reload the driver or reboot"
        }
        804 => "forward compatibility is not supported on this device",
        999 => "the driver reported an unknown error",
        _ => return None,
    })
}

/// `NAME (code N): what it means`, for any code.
pub(super) fn describe(result: CuResult) -> String {
    let code = result.0;
    match hint(code) {
        Some(hint) => format!("{result} (code {code}): {hint}"),
        None => format!("{result} (code {code})"),
    }
}

/// A failed driver call after the device was opened: the operation, the
/// driver's result code and its name.
pub(super) fn failure(operation: &'static str, result: CuResult) -> BackendError {
    BackendError::Driver {
        operation,
        code: result.0,
        message: match hint(result.0) {
            Some(hint) => format!("{result}: {hint}"),
            None => result.to_string(),
        },
    }
}

/// `error` with `detail` after its driver message (a compiler log, the name
/// looked for); other errors, a lost context among them, are left as they are.
pub(super) fn with_detail(error: BackendError, detail: impl std::fmt::Display) -> BackendError {
    match error {
        BackendError::Driver {
            operation,
            code,
            message,
        } => BackendError::Driver {
            operation,
            code,
            message: format!("{message}; {detail}"),
        },
        other => other,
    }
}

/// A backend failure as the public API of the CUDA backend reports it.
pub(super) fn mem_error(error: BackendError) -> MemError {
    MemError::backend(NAME, error)
}

/// A failure while opening the device: it cannot be used at all.
pub(super) fn unusable(step: impl std::fmt::Display, result: CuResult) -> MemError {
    MemError::NoDevice {
        cause: format!("{step} failed: {}", describe(result)),
    }
}

/// Whether the device context can still be used: the first failure that
/// leaves it unusable ([`CuResult::is_sticky`]) is remembered, and every
/// later call is refused with it instead of reaching the driver.
#[derive(Debug, Default)]
pub(super) struct Health {
    lost: OnceLock<(CuResult, &'static str)>,
}

impl Health {
    /// `Ok` for success; otherwise the failure of `operation`, remembered
    /// when it leaves the context unusable.
    pub(super) fn check(
        &self,
        result: CuResult,
        operation: &'static str,
    ) -> Result<(), BackendError> {
        if result == CuResult::SUCCESS {
            return Ok(());
        }
        if result.is_sticky() {
            let first = *self.lost.get_or_init(|| (result, operation));
            tracing::error!(
                operation,
                code = result.0,
                "the CUDA context is unusable: every later call on this device will fail"
            );
            return Err(lost(operation, first));
        }
        Err(failure(operation, result))
    }

    /// `Ok` while the context is usable; the remembered failure otherwise.
    pub(super) fn usable(&self, operation: &'static str) -> Result<(), BackendError> {
        match self.lost.get() {
            Some(&first) => Err(lost(operation, first)),
            None => Ok(()),
        }
    }
}

fn lost(operation: &'static str, (result, during): (CuResult, &'static str)) -> BackendError {
    BackendError::ContextLost {
        operation,
        during,
        code: result.0,
        message: result.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_named_with_their_number_and_advice() {
        assert_eq!(
            describe(CuResult(100)),
            "CUDA_ERROR_NO_DEVICE (code 100): no CUDA-capable device is detected; \
             check that the NVIDIA driver is loaded and CUDA_VISIBLE_DEVICES"
        );
        let error = unusable("initialising the CUDA driver (cuInit)", CuResult(34));
        assert!(
            error
                .to_string()
                .contains("CUDA_ERROR_STUB_LIBRARY (code 34): the loaded libcuda is a stub"),
            "{error}"
        );
        assert_eq!(
            describe(CuResult(4321)),
            "unknown CUDA error (code 4321)",
            "a code newer than this build still prints"
        );
        assert_eq!(describe(CuResult(1)), "CUDA_ERROR_INVALID_VALUE (code 1)");
    }

    #[test]
    fn failures_carry_the_operation_and_the_code() {
        let error = failure("free", CuResult(1));
        assert_eq!(
            error,
            BackendError::Driver {
                operation: "free",
                code: 1,
                message: "CUDA_ERROR_INVALID_VALUE".to_owned(),
            }
        );
        assert_eq!(
            MemError::backend(NAME, error).to_string(),
            "cuda backend: free failed: CUDA_ERROR_INVALID_VALUE (code 1)"
        );
        assert!(
            failure("allocate", CuResult(912))
                .to_string()
                .contains("(code 912)")
        );
    }

    #[test]
    fn a_sticky_failure_refuses_every_later_call() {
        let health = Health::default();
        assert!(health.check(CuResult::SUCCESS, "copy").is_ok());
        assert!(matches!(
            health.check(CuResult(1), "copy"),
            Err(BackendError::Driver { code: 1, .. })
        ));
        assert!(
            health.usable("copy").is_ok(),
            "an ordinary failure is not sticky"
        );

        let error = health.check(CuResult(700), "synchronize").unwrap_err();
        assert!(
            matches!(error, BackendError::ContextLost { code: 700, .. }),
            "{error}"
        );
        let later = health.usable("allocate").unwrap_err();
        assert_eq!(
            later.to_string(),
            "allocate failed: the device context is unusable since synchronize failed with \
             CUDA_ERROR_ILLEGAL_ADDRESS (code 700); every later call fails the same way: restart the process"
        );
        // The first sticky failure stays the one reported.
        health.check(CuResult(226), "free").unwrap_err();
        assert!(
            health
                .usable("x")
                .unwrap_err()
                .to_string()
                .contains("since synchronize")
        );
    }
}
