//! The bindings compared with the real `cuda.h`, mechanically.
//!
//! `CUBIE_CUDA_HEADERS` names one or more `cuda.h` files (separated by `:`),
//! of different CUDA versions; `ci/cuda-headers/check.sh` fetches those of
//! 12.9, 13.0 and the newest 13.x from NVIDIA's wheels and runs this test.
//! For each header a C compiler (`CC`, default `cc`) checks:
//!
//! - every binding's symbol is declared with exactly the prototype declared
//!   here (`__builtin_types_compatible_p` on the function pointer types,
//!   each Rust type alias standing for the C type it is named after);
//! - every constant has the value declared here;
//! - every struct has the size, alignment and field offsets of its Rust twin.
//!
//! and, against the newest header: each binding's first symbol is the one
//! `cuda.h` maps the API name to; the result codes agree both ways (every
//! code the header defines is named here with the header's name, and every
//! code named here is in the header); the sticky codes are exactly those the
//! header documents as leaving the process inconsistent or the context
//! unusable; and `ci/cuda-driver/symbols.txt` (what the stub and fake
//! drivers define) holds every exported function the header declares and
//! every symbol bound here.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::load::Binding;
use super::optional::OPTIONAL_BINDINGS;
use super::result::{KNOWN_CODES, STICKY_CODES};
use super::{BINDINGS, CONSTANTS, CuMemLocation, CuMemPoolProps, CuMemcpy2D};

/// Every binding, the optional ones (functions newer than some drivers) included.
fn bindings() -> impl Iterator<Item = &'static Binding> {
    BINDINGS.iter().chain(OPTIONAL_BINDINGS)
}

/// The environment variable naming the headers.
const HEADERS_ENV: &str = "CUBIE_CUDA_HEADERS";

/// A Rust struct's layout with its C twin's name and field names.
struct Layout {
    c_name: &'static str,
    size: usize,
    align: usize,
    fields: &'static [(&'static str, usize)],
}

fn layouts() -> [Layout; 3] {
    [
        Layout {
            c_name: "CUmemLocation",
            size: size_of::<CuMemLocation>(),
            align: align_of::<CuMemLocation>(),
            fields: &[
                ("type", offset_of!(CuMemLocation, kind)),
                ("id", offset_of!(CuMemLocation, id)),
            ],
        },
        Layout {
            c_name: "CUmemPoolProps",
            size: size_of::<CuMemPoolProps>(),
            align: align_of::<CuMemPoolProps>(),
            fields: &[
                ("allocType", offset_of!(CuMemPoolProps, alloc_type)),
                ("handleTypes", offset_of!(CuMemPoolProps, handle_types)),
                ("location", offset_of!(CuMemPoolProps, location)),
                (
                    "win32SecurityAttributes",
                    offset_of!(CuMemPoolProps, win32_security_attributes),
                ),
                ("maxSize", offset_of!(CuMemPoolProps, max_size)),
                ("usage", offset_of!(CuMemPoolProps, usage)),
            ],
        },
        Layout {
            c_name: "CUDA_MEMCPY2D",
            size: size_of::<CuMemcpy2D>(),
            align: align_of::<CuMemcpy2D>(),
            fields: &[
                ("srcXInBytes", offset_of!(CuMemcpy2D, src_x_in_bytes)),
                ("srcY", offset_of!(CuMemcpy2D, src_y)),
                ("srcMemoryType", offset_of!(CuMemcpy2D, src_memory_type)),
                ("srcHost", offset_of!(CuMemcpy2D, src_host)),
                ("srcDevice", offset_of!(CuMemcpy2D, src_device)),
                ("srcArray", offset_of!(CuMemcpy2D, src_array)),
                ("srcPitch", offset_of!(CuMemcpy2D, src_pitch)),
                ("dstXInBytes", offset_of!(CuMemcpy2D, dst_x_in_bytes)),
                ("dstY", offset_of!(CuMemcpy2D, dst_y)),
                ("dstMemoryType", offset_of!(CuMemcpy2D, dst_memory_type)),
                ("dstHost", offset_of!(CuMemcpy2D, dst_host)),
                ("dstDevice", offset_of!(CuMemcpy2D, dst_device)),
                ("dstArray", offset_of!(CuMemcpy2D, dst_array)),
                ("dstPitch", offset_of!(CuMemcpy2D, dst_pitch)),
                ("WidthInBytes", offset_of!(CuMemcpy2D, width_in_bytes)),
                ("Height", offset_of!(CuMemcpy2D, height)),
            ],
        },
    ]
}

/// The C type a Rust type of the bindings stands for.
fn c_type(rust: &str) -> String {
    let rust = rust.trim();
    if let Some(pointee) = rust.strip_prefix("*mut ") {
        return format!("{} *", c_type(pointee));
    }
    if let Some(pointee) = rust.strip_prefix("*const ") {
        return format!("const {} *", c_type(pointee));
    }
    match rust {
        "c_void" => "void",
        "c_char" => "char",
        "c_int" => "int",
        "c_uint" => "unsigned int",
        "usize" => "size_t",
        "f32" => "float",
        "CuResult" => "CUresult",
        "CuDevice" => "CUdevice",
        "CuDevicePtr" => "CUdeviceptr",
        "CuContext" => "CUcontext",
        "CuStream" => "CUstream",
        "CuEvent" => "CUevent",
        "CuModule" => "CUmodule",
        "CuFunction" => "CUfunction",
        "CuMemoryPool" => "CUmemoryPool",
        "CuDeviceAttribute" => "CUdevice_attribute",
        "CuMemPoolAttribute" => "CUmemPool_attribute",
        "CuJitOption" => "CUjit_option",
        "CuFunctionAttribute" => "CUfunction_attribute",
        "CuMemPoolProps" => "CUmemPoolProps",
        "CuMemcpy2D" => "CUDA_MEMCPY2D",
        "CuMemoryType" => "CUmemorytype",
        other => panic!("no C type is known for the Rust type `{other}`: add it to c_type"),
    }
    .to_owned()
}

/// The C translation unit whose static assertions check one header.
fn assertions(header: &Path) -> String {
    let mut c = format!("#include <stddef.h>\n#include \"{}\"\n", header.display());
    for binding in bindings() {
        let params: Vec<String> = binding.params.iter().map(|(_, ty)| c_type(ty)).collect();
        let params = if params.is_empty() {
            "void".to_owned()
        } else {
            params.join(", ")
        };
        let symbol = binding.symbols[0];
        writeln!(
            c,
            "_Static_assert(__builtin_types_compatible_p(__typeof__(&{symbol}), CUresult (*)({params})), \
             \"prototype of {symbol} ({}): CUresult ({params})\");",
            binding.api
        )
        .unwrap();
    }
    for (name, value) in CONSTANTS {
        writeln!(
            c,
            "_Static_assert({name} == {value}, \"constant {name} == {value}\");"
        )
        .unwrap();
    }
    for layout in layouts() {
        let name = layout.c_name;
        writeln!(
            c,
            "_Static_assert(sizeof({name}) == {0}, \"size of {name} is {0}\");",
            layout.size
        )
        .unwrap();
        writeln!(
            c,
            "_Static_assert(_Alignof({name}) == {0}, \"alignment of {name} is {0}\");",
            layout.align
        )
        .unwrap();
        for (field, offset) in layout.fields {
            writeln!(
                c,
                "_Static_assert(offsetof({name}, {field}) == {offset}, \"offset of {name}.{field} is {offset}\");"
            )
            .unwrap();
        }
    }
    c
}

fn compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_owned())
}

/// Runs the C compiler on `source` with `args`; its standard output, or the
/// failure with its diagnostics.
fn compile(dir: &Path, name: &str, source: &str, args: &[&str]) -> Result<String, String> {
    let file = dir.join(name);
    std::fs::write(&file, source).unwrap();
    let output = Command::new(compiler())
        .args(args)
        .arg(&file)
        .output()
        .unwrap_or_else(|error| panic!("running the C compiler `{}`: {error}", compiler()));
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// `CUDA_VERSION` as the header defines it.
fn cuda_version(text: &str) -> u32 {
    text.lines()
        .find_map(|line| line.trim().strip_prefix("#define CUDA_VERSION "))
        .and_then(|value| value.trim().parse().ok())
        .expect("the header defines CUDA_VERSION")
}

/// The API name of each binding mapped through the header's macros.
fn mapped_symbols(dir: &Path, header: &Path) -> BTreeMap<String, String> {
    let mut source = format!("#include \"{}\"\n", header.display());
    for binding in bindings() {
        writeln!(source, "cubie_map_{0} {0}", binding.api).unwrap();
    }
    let output = compile(dir, "map.c", &source, &["-E", "-P", "-x", "c"])
        .unwrap_or_else(|errors| panic!("preprocessing {}: {errors}", header.display()));
    output
        .lines()
        .filter_map(|line| line.trim().strip_prefix("cubie_map_"))
        .filter_map(|line| {
            let (api, symbol) = line.split_once(' ')?;
            Some((api.to_owned(), symbol.trim().to_owned()))
        })
        .collect()
}

/// The `CUresult` codes the header defines, with the comment above each.
fn header_codes(text: &str) -> Vec<(u32, String, String)> {
    let start = text
        .find("typedef enum cudaError_enum")
        .expect("the CUresult enum");
    let end = start
        + text[start..]
            .find("} CUresult;")
            .expect("the CUresult enum's end");
    let mut codes = Vec::new();
    let mut comment = String::new();
    for line in text[start..end].lines() {
        let line = line.trim();
        if let Some((name, value)) = line.split_once('=') {
            let name = name.trim();
            if name.starts_with("CUDA_") {
                let value = value.trim().trim_end_matches(',').trim();
                codes.push((value.parse().unwrap(), name.to_owned(), comment.clone()));
                comment.clear();
                continue;
            }
        }
        comment.push(' ');
        comment.push_str(line.trim_start_matches(['/', '*']).trim());
    }
    codes
}

/// Whether the header documents a code as leaving the process or context unusable.
fn documented_sticky(comment: &str) -> bool {
    let comment = comment.split_whitespace().collect::<Vec<_>>().join(" ");
    [
        "inconsistent state",
        "must be terminated and relaunched",
        "cannot be used anymore",
    ]
    .iter()
    .any(|phrase| comment.contains(phrase))
}

/// Every function the header declares, legacy versions included.
fn declared_functions(dir: &Path, header: &Path) -> BTreeSet<String> {
    let source = format!("#include \"{}\"\n", header.display());
    let output = compile(
        dir,
        "declared.c",
        &source,
        &["-E", "-P", "-x", "c", "-D__CUDA_API_VERSION_INTERNAL"],
    )
    .unwrap_or_else(|errors| panic!("preprocessing {}: {errors}", header.display()));
    let tokens: Vec<&str> = output
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '('))
        .filter(|token| !token.is_empty())
        .collect();
    tokens
        .windows(2)
        .filter(|pair| pair[0] == "CUresult" && pair[1].starts_with("cu"))
        .filter_map(|pair| pair[1].split_once('(').map(|(name, _)| name.to_owned()))
        .collect()
}

fn symbols_file() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/cuda-driver/symbols.txt");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()))
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[test]
#[ignore = "needs cuda.h files named by CUBIE_CUDA_HEADERS and a C compiler (ci/cuda-headers/check.sh)"]
fn the_bindings_agree_with_cuda_h() {
    let headers: Vec<PathBuf> = std::env::var(HEADERS_ENV)
        .unwrap_or_else(|_| panic!("{HEADERS_ENV} names no cuda.h"))
        .split(':')
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
        .collect();
    assert!(!headers.is_empty(), "{HEADERS_ENV} names no cuda.h");
    let dir = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    let mut newest: Option<(u32, PathBuf, String)> = None;
    for header in &headers {
        let text = std::fs::read_to_string(header)
            .unwrap_or_else(|error| panic!("reading {}: {error}", header.display()));
        let version = cuda_version(&text);
        if let Err(errors) = compile(
            dir.path(),
            "check.c",
            &assertions(header),
            &["-fsyntax-only", "-std=c11"],
        ) {
            problems.push(format!("CUDA {version} ({}):\n{errors}", header.display()));
        }
        for (code, name, _) in header_codes(&text) {
            match KNOWN_CODES.iter().find(|&&(known, _)| known == code) {
                Some(&(_, known)) if known == name => {}
                Some(&(_, known)) => problems.push(format!(
                    "CUDA {version} names code {code} {name}, the bindings {known}"
                )),
                None => problems.push(format!(
                    "CUDA {version}'s code {code} ({name}) has no name here"
                )),
            }
        }
        if newest.as_ref().is_none_or(|(v, _, _)| version > *v) {
            newest = Some((version, header.clone(), text));
        }
    }
    let (version, header, text) = newest.unwrap();

    let mapped = mapped_symbols(dir.path(), &header);
    for binding in bindings() {
        match mapped.get(binding.api) {
            Some(symbol) if symbol == binding.symbols[0] => {}
            other => problems.push(format!(
                "CUDA {version} maps {} to {other:?}; the bindings resolve {}",
                binding.api, binding.symbols[0]
            )),
        }
    }
    let codes = header_codes(&text);
    for &(code, name) in KNOWN_CODES {
        if !codes.iter().any(|(c, _, _)| *c == code) {
            problems.push(format!("code {code} ({name}) is not in CUDA {version}"));
        }
    }
    let sticky: BTreeSet<u32> = codes
        .iter()
        .filter(|(_, _, comment)| documented_sticky(comment))
        .map(|(code, _, _)| *code)
        .collect();
    let ours: BTreeSet<u32> = STICKY_CODES.iter().copied().collect();
    if sticky != ours {
        problems.push(format!(
            "CUDA {version} documents these codes as leaving the context unusable: {sticky:?}; the \
             bindings treat these as sticky: {ours:?}"
        ));
    }
    let listed = symbols_file();
    let missing: Vec<String> = declared_functions(dir.path(), &header)
        .into_iter()
        .chain(bindings().flat_map(|b| b.symbols.iter().map(|s| (*s).to_owned())))
        .filter(|symbol| !listed.contains(symbol))
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "ci/cuda-driver/symbols.txt lacks functions CUDA {version} declares or the bindings \
             resolve: {missing:?}"
        ));
    }
    assert!(
        problems.is_empty(),
        "the bindings disagree with cuda.h:\n{}",
        problems.join("\n")
    );
    println!(
        "{} bindings, {} constants, {} structs and {} result codes agree with {} header(s), newest CUDA {version}",
        bindings().count(),
        CONSTANTS.len(),
        layouts().len(),
        KNOWN_CODES.len(),
        headers.len()
    );
}
