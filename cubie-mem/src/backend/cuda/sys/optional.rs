//! Driver functions newer than the oldest driver the backend supports
//! (CUDA 11.2): resolved on their first call, and `None` where the driver
//! lacks them, so that an older driver still loads.
//!
//! Each is checked against `cuda.h` like the required ones
//! ([`OPTIONAL_BINDINGS`] beside [`BINDINGS`](super::BINDINGS)).

use std::sync::OnceLock;

use super::load;
use super::{CuFunction, CuResult};

/// Declares optional driver functions: `fn name(params) = "symbol";`. Each
/// wrapper returns the driver's result, or `None` when the loaded driver
/// does not export the symbol (or no driver is loaded).
macro_rules! optional_api {
    ($(
        $(#[$doc:meta])*
        fn $api:ident($($param:ident: $ty:ty),* $(,)?) = $symbol:literal;
    )*) => {
        $(
            $(#[$doc])*
            ///
            /// `None` when the driver lacks the function.
            ///
            /// # Safety
            ///
            /// The driver function's own contract (`cuda.h`).
            #[allow(non_snake_case)]
            pub(in crate::backend::cuda) unsafe fn $api($($param: $ty),*) -> Option<CuResult> {
                type Function = unsafe extern "C" fn($($ty),*) -> CuResult;
                static RESOLVED: OnceLock<Option<Function>> = OnceLock::new();
                load::loaded()?;
                let function = (*RESOLVED.get_or_init(|| load::optional::<Function>(&[$symbol])))?;
                // SAFETY: the pointer was resolved from the loaded driver
                // under a symbol whose prototype is this one (checked against
                // cuda.h in CI); the caller keeps the call's contract.
                Some(unsafe { function($($param),*) })
            }
        )*

        /// Every optional function declared, for the header check.
        #[cfg(test)]
        pub(in crate::backend::cuda) const OPTIONAL_BINDINGS: &[load::Binding] = &[$(load::Binding {
            api: stringify!($api),
            symbols: &[$symbol],
            params: &[$((stringify!($param), stringify!($ty))),*],
        }),*];
    };
}

optional_api! {
    /// The offset and size of a kernel's parameter `index` in its parameter
    /// layout; `CUDA_ERROR_INVALID_VALUE` past the last one (CUDA 12.4).
    fn cuFuncGetParamInfo(function: CuFunction, index: usize, offset: *mut usize, size: *mut usize)
        = "cuFuncGetParamInfo";
}
