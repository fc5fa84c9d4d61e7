//! The driver library, loaded once per process at run time, and the
//! declarations of the functions the backend resolves from it.
//!
//! [`driver_api!`] turns each declaration into a field of the resolved
//! table, a wrapper function of the same name that calls through it, and an
//! entry of [`BINDINGS`](super::BINDINGS) (the API name, the exported symbol
//! with its fallbacks, the parameters), which the header check compares
//! with `cuda.h`. Each function is resolved at the symbol `cuda.h` maps its
//! name to (`cuMemGetInfo` is `cuMemGetInfo_v2`); a fallback serves drivers
//! older than that version. The library stays loaded for the life of the
//! process, so a resolved pointer never dangles.

use std::sync::OnceLock;

use libloading::Library;

use super::Api;

/// The driver library's file names, tried in order.
#[cfg(windows)]
const LIBRARY_NAMES: &[&str] = &["nvcuda.dll"];
/// The driver library's file names, tried in order (`libcuda.so` where only
/// the development link is installed).
#[cfg(not(windows))]
const LIBRARY_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];

/// One function of the driver as declared here, for the header check.
#[cfg(test)]
#[derive(Debug)]
pub(in crate::backend::cuda) struct Binding {
    /// The name `cuda.h` documents (`cuMemGetInfo`), also the wrapper's.
    pub(in crate::backend::cuda) api: &'static str,
    /// The exported symbols tried, the one `cuda.h` maps to first.
    pub(in crate::backend::cuda) symbols: &'static [&'static str],
    /// The parameters: name and Rust type, as written.
    pub(in crate::backend::cuda) params: &'static [(&'static str, &'static str)],
}

/// Declares driver functions: `fn name(params) = "symbol" | "fallback";`.
/// Every function returns a `CUresult`.
macro_rules! driver_api {
    ($(
        $(#[$doc:meta])*
        fn $api:ident($($param:ident: $ty:ty),* $(,)?) = $symbol:literal $(| $fallback:literal)*;
    )*) => {
        /// The driver's functions, resolved from the loaded library.
        #[allow(non_snake_case)]
        pub(super) struct Api {
            $($api: unsafe extern "C" fn($($ty),*) -> CuResult,)*
        }

        /// Calls of each function since the process started (those
        /// refused before the library loaded included).
        #[allow(non_snake_case)]
        struct Calls {
            $($api: std::sync::atomic::AtomicU64,)*
        }

        static CALLS: Calls = Calls {
            $($api: std::sync::atomic::AtomicU64::new(0),)*
        };

        /// Every function declared, by its `cuda.h` name, with the calls
        /// this process made of it so far.
        pub(in crate::backend::cuda) fn call_counts() -> Vec<(&'static str, u64)> {
            vec![$((
                stringify!($api),
                CALLS.$api.load(std::sync::atomic::Ordering::Relaxed),
            )),*]
        }

        impl Api {
            /// Resolves every function, or names the first one missing.
            fn resolve(library: &libloading::Library) -> Result<Api, &'static str> {
                Ok(Api {
                    $($api: load::resolve(library, &[$symbol $(, $fallback)*])?,)*
                })
            }
        }

        $(
            $(#[$doc])*
            ///
            /// # Safety
            ///
            /// The driver function's own contract (`cuda.h`). Before the
            /// library is loaded it returns `CUDA_ERROR_NOT_INITIALIZED`.
            #[allow(non_snake_case, clippy::too_many_arguments)]
            pub(super) unsafe fn $api($($param: $ty),*) -> CuResult {
                CALLS.$api.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                match load::loaded() {
                    // SAFETY: the pointer was resolved from the driver under
                    // a symbol whose prototype is this one (checked against
                    // cuda.h in CI); the caller keeps the call's contract.
                    Some(api) => unsafe { (api.$api)($($param),*) },
                    None => CuResult::NOT_INITIALIZED,
                }
            }
        )*

        /// Every function declared, for the header check.
        #[cfg(test)]
        pub(super) const BINDINGS: &[load::Binding] = &[$(load::Binding {
            api: stringify!($api),
            symbols: &[$symbol $(, $fallback)*],
            params: &[$((stringify!($param), stringify!($ty))),*],
        }),*];
    };
}
pub(super) use driver_api;

/// The loaded library and its resolved functions.
struct Loaded {
    api: Api,
    /// Kept for the life of the process: the functions point into it (and
    /// optional ones are resolved from it on first use).
    library: Library,
}

/// The outcome of the one attempt to load the driver.
static DRIVER: OnceLock<Result<Loaded, String>> = OnceLock::new();

/// Loads the driver library and resolves every function, once per process;
/// later calls return the first outcome. The error says what is missing and
/// what to do.
pub(in crate::backend::cuda) fn load() -> Result<(), String> {
    match DRIVER.get_or_init(open) {
        Ok(_) => Ok(()),
        Err(cause) => Err(cause.clone()),
    }
}

/// The resolved functions, once [`load`] succeeded.
pub(super) fn loaded() -> Option<&'static Api> {
    match DRIVER.get() {
        Some(Ok(loaded)) => Some(&loaded.api),
        _ => None,
    }
}

fn open() -> Result<Loaded, String> {
    let mut failures = Vec::with_capacity(LIBRARY_NAMES.len());
    for &name in LIBRARY_NAMES {
        // SAFETY: loading the NVIDIA driver runs its initialisers, which
        // are meant to run in any process that uses CUDA.
        match unsafe { Library::new(name) } {
            Ok(library) => {
                let api = Api::resolve(&library).map_err(|symbol| {
                    format!(
                        "the CUDA driver library {name} lacks {symbol}: the driver is older than \
                         the cuda backend needs (CUDA 11.2, for memory pools); update the NVIDIA driver"
                    )
                })?;
                return Ok(Loaded { api, library });
            }
            Err(error) => failures.push(error.to_string()),
        }
    }
    Err(format!(
        "the CUDA driver library could not be loaded ({}); install the NVIDIA driver, or add the \
         directory that holds {} to {}",
        failures.join("; "),
        LIBRARY_NAMES.first().copied().unwrap_or_default(),
        if cfg!(windows) {
            "PATH"
        } else {
            "LD_LIBRARY_PATH"
        },
    ))
}

/// The first of `symbols` the library exports, as the function type `F`.
pub(super) fn resolve<F: Copy>(
    library: &Library,
    symbols: &[&'static str],
) -> Result<F, &'static str> {
    for symbol in symbols {
        // SAFETY: `F` is the prototype cuda.h declares for the symbol (the
        // header check compares them), and the library outlives the pointer.
        if let Ok(function) = unsafe { library.get::<F>(symbol.as_bytes()) } {
            return Ok(*function);
        }
    }
    Err(symbols.first().copied().unwrap_or_default())
}

/// The first of `symbols` the loaded library exports, as the function type
/// `F`; `None` before [`load`] succeeded or when the driver lacks them all
/// (a function newer than the driver).
pub(super) fn optional<F: Copy>(symbols: &[&'static str]) -> Option<F> {
    match DRIVER.get() {
        Some(Ok(loaded)) => resolve(&loaded.library, symbols).ok(),
        _ => None,
    }
}
