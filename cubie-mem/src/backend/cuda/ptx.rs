//! Loading PTX into a context: the driver's JIT compiles it for the device.
//!
//! A loaded module's code and data are device memory the driver allocates
//! itself, outside the backend's pool. With the release threshold at
//! `u64::MAX` the pool keeps every byte a batch freed, so after a batch
//! that filled the device a load can fail with `CUDA_ERROR_OUT_OF_MEMORY`
//! although the pool holds memory idle: the load then synchronises the
//! context (frees in flight return to the pool), trims the pool to nothing
//! and tries once more, as an allocation does.
//!
//! A PTX the driver refuses is reported with the compiler's log and what to
//! do: PTX newer than the driver (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`, the
//! PTX ISA versions each CUDA version loads), PTX for a newer device or
//! broken (`CUDA_ERROR_INVALID_PTX`), and no code for the device
//! (`CUDA_ERROR_NO_BINARY_FOR_GPU`).

use std::ffi::{CStr, c_int, c_uint, c_void};
use std::ptr;

use super::context::DeviceContext;
use super::driver::{mem_error, with_detail};
use super::sys::{self, CuJitOption, CuModule, CuResult};
use crate::MemError;

/// Bytes of the PTX compiler's error log kept for an error message.
const JIT_LOG_BYTES: usize = 16 * 1024;

/// Loads `image` (the NUL-terminated `ptx`) into `context`, retrying once
/// after giving the pool's idle memory back when the device is out of
/// memory; a failure carries the compiler's log and a hint.
pub(super) fn load(context: &DeviceContext, image: &CStr, ptx: &str) -> Result<CuModule, MemError> {
    const OPERATION: &str = "load PTX module";
    let _guard = context.enter(OPERATION).map_err(mem_error)?;
    let mut attempt = load_once(image);
    if attempt.0 == CuResult::OUT_OF_MEMORY {
        context.reclaim_idle_memory(OPERATION);
        attempt = load_once(image);
    }
    let (result, raw, log) = attempt;
    context.check(result, OPERATION).map_err(|error| {
        let error = match hint(result, ptx, context) {
            Some(hint) => with_detail(error, hint),
            None => error,
        };
        mem_error(if log.is_empty() {
            error
        } else {
            with_detail(error, format_args!("the PTX compiler said: {log}"))
        })
    })?;
    Ok(raw)
}

/// One `cuModuleLoadDataEx`: its result, the module, and the compiler's
/// error log. The context must be current.
fn load_once(image: &CStr) -> (CuResult, CuModule, String) {
    let mut log = vec![0u8; JIT_LOG_BYTES];
    let mut options: [CuJitOption; 2] = [
        sys::JIT_ERROR_LOG_BUFFER,
        sys::JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values: [*mut c_void; 2] = [
        log.as_mut_ptr().cast::<c_void>(),
        // The size option is an unsigned int passed in the pointer's bits.
        JIT_LOG_BYTES as *mut c_void,
    ];
    let mut raw: CuModule = ptr::null_mut();
    // SAFETY: the image is NUL-terminated text; the option arrays hold two
    // entries each, the log buffer is live and as long as its stated size;
    // the caller made the context current.
    let result = unsafe {
        sys::cuModuleLoadDataEx(
            &mut raw,
            image.as_ptr().cast::<c_void>(),
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    let log = String::from_utf8_lossy(log.split(|&b| b == 0).next().unwrap_or(&[]))
        .trim()
        .to_owned();
    (result, raw, log)
}

/// What to do about a load that failed with `result`.
fn hint(result: CuResult, ptx: &str, context: &DeviceContext) -> Option<String> {
    let driver = context.driver_version();
    let cuda = format!("CUDA {}.{}", driver / 1000, driver % 1000 / 10);
    let device = compute_capability(context);
    Some(match result.0 {
        2 => "the device has no memory left for the module's code and data, even after the \
              memory pool gave its idle memory back; release arrays first, or lower \
              CudaConfig::release_threshold"
            .to_owned(),
        222 => {
            let declared = directive(ptx, ".version").unwrap_or("?");
            let loads = match max_ptx_isa(driver) {
                Some((major, minor)) => format!("loads PTX ISA {major}.{minor} at most"),
                None => "loads an older PTX ISA".to_owned(),
            };
            format!(
                "the PTX declares .version {declared}, which needs a newer driver: this one \
                 ({cuda}) {loads}; generate the PTX with the toolkit of {cuda} or older (or ask \
                 NVRTC/LLVM for that PTX ISA), or update the NVIDIA driver (PTX ISA 8.x needs \
                 CUDA 12.x: 8.0 = 12.0 ... 8.5 = 12.5/12.6, 8.7 = 12.8, 8.8 = 12.9; 9.0 = 13.0, \
                 9.1 = 13.1)"
            )
        }
        218 => {
            let target = directive(ptx, ".target").unwrap_or("?");
            match device {
                Some((major, minor)) => format!(
                    "the PTX (.target {target}) did not compile for this device (compute \
                     capability {major}.{minor}); the log says where; generate it for \
                     compute_{major}{minor} or lower (nvcc -ptx -arch=compute_{major}{minor}), \
                     as a .target above the device's compute capability is refused"
                ),
                None => format!(
                    "the PTX (.target {target}) did not compile for this device; the log says \
                     where; generate it for the device's compute capability or lower"
                ),
            }
        }
        209 => {
            let arch = device.map_or("XY".to_owned(), |(major, minor)| format!("{major}{minor}"));
            format!(
                "the module holds no code this device (compute_{arch}) runs; build it with \
                 -arch=compute_{arch} (PTX the driver compiles) or -gencode \
                 arch=compute_{arch},code=sm_{arch} (CUDA 13's nvcc compiles for sm_75 and newer \
                 only; CUDA 12's from sm_50)"
            )
        }
        _ => return None,
    })
}

/// The device's compute capability (major, minor), when the driver tells it.
fn compute_capability(context: &DeviceContext) -> Option<(u32, u32)> {
    let get = |attribute| {
        let mut value: c_int = 0;
        // SAFETY: the out-pointer is a live c_int; the device came from the
        // driver.
        let result = unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, context.device()) };
        (result == CuResult::SUCCESS)
            .then(|| u32::try_from(value).ok())
            .flatten()
    };
    Some((
        get(sys::DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        get(sys::DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    ))
}

/// The first word after the directive `name` (`.version`, `.target`) at
/// the start of a line, outside `//` comments.
fn directive<'p>(ptx: &'p str, name: &str) -> Option<&'p str> {
    ptx.lines().find_map(|line| {
        let code = line.split("//").next().unwrap_or_default().trim();
        let rest = code.strip_prefix(name)?;
        rest.starts_with(char::is_whitespace)
            .then(|| {
                rest.split(|c: char| c.is_whitespace() || c == ',')
                    .find(|w| !w.is_empty())
            })
            .flatten()
    })
}

/// The newest PTX ISA version (major, minor) a driver of CUDA `version`
/// (`cuDriverGetVersion`) loads, from the PTX ISA release history; `None`
/// for a version it does not list.
fn max_ptx_isa(version: u32) -> Option<(u32, u32)> {
    match (version / 1000, version % 1000 / 10) {
        (11, minor @ 0..=8) => Some((7, minor)),
        (12, minor @ 0..=5) => Some((8, minor)),
        (12, 6) => Some((8, 5)),
        (12, minor @ 7..=9) => Some((8, minor - 1)),
        (13, minor @ 0..=1) => Some((9, minor)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cuda_version_loads_the_ptx_isa_of_its_release() {
        let table = [
            (11_020, (7, 2)),
            (12_000, (8, 0)),
            (12_040, (8, 4)),
            (12_050, (8, 5)),
            (12_060, (8, 5)),
            (12_080, (8, 7)),
            (12_090, (8, 8)),
            (13_000, (9, 0)),
            (13_010, (9, 1)),
        ];
        for (cuda, ptx) in table {
            assert_eq!(max_ptx_isa(cuda), Some(ptx), "CUDA {cuda}");
        }
        assert_eq!(
            max_ptx_isa(13_050),
            None,
            "a version the history does not list"
        );
    }

    #[test]
    fn directives_are_read_outside_comments() {
        let ptx = "// .version 1.0\n.version 9.9\n.target sm_90a, texmode_independent\n";
        assert_eq!(directive(ptx, ".version"), Some("9.9"));
        assert_eq!(directive(ptx, ".target"), Some("sm_90a"));
        assert_eq!(directive(".versions 2\n", ".version"), None);
    }
}
