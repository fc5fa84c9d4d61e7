//! The ui suite of `#[derive(GpuBuffers)]`: every feature of the grammar
//! compiles (and runs) in `ui/pass`, every mistake fails with the error
//! checked in beside it in `ui/fail`.
//!
//! The `.stderr` files hold rustc's whole output, whose wording (notes,
//! help lines) changes between releases. On the toolchain they were written
//! with, [`PINNED_RUSTC`], trybuild compares them exactly. On any other, each
//! failing case is compiled on its own and must still fail with every
//! headline of its `.stderr`: our own messages word for word at their spans,
//! and rustc's by their error codes. See the crate's README.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The rustc release the `.stderr` files of `ui/fail` were written with.
const PINNED_RUSTC: &str = "1.95.0";

/// Names a rustc version to assume instead of asking rustc: any other than
/// [`PINNED_RUSTC`] runs the headline checks on the toolchain at hand.
const RUSTC_VERSION_OVERRIDE: &str = "CUBIE_MEM_UI_RUSTC_VERSION";

/// Error codes whose headline is rustc's own wording (not one of our
/// `#[diagnostic::on_unimplemented]` messages): off the pinned toolchain
/// only their code is checked.
const RUSTC_WORDED_CODES: &[&str] = &["E0609"];

#[test]
fn derive_gpu_buffers_ui() {
    let version = rustc_version();
    let cases = trybuild::TestCases::new();
    cases.pass("ui/pass/*.rs");
    if version == PINNED_RUSTC {
        cases.compile_fail("ui/fail/*.rs");
        return;
    }
    // Runs the passing cases now, before the failing ones below.
    drop(cases);
    eprintln!(
        "rustc {version} is not {PINNED_RUSTC}, which ui/fail/*.stderr were written with: \
         checking that each case fails with the headlines of its .stderr"
    );
    check_failures_by_headline();
}

/// The version of the rustc that cargo builds with (`RUSTC`, or `rustc` on
/// the path), or the one [`RUSTC_VERSION_OVERRIDE`] names.
fn rustc_version() -> String {
    if let Ok(version) = std::env::var(RUSTC_VERSION_OVERRIDE) {
        return version;
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = Command::new(&rustc)
        .arg("--version")
        .output()
        .expect("rustc --version runs");
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .nth(1)
        .expect("rustc --version names a version")
        .to_owned()
}

/// One error of rustc's output: its headline (`error: ..` or
/// `error[E0277]: ..`) and where it points (`file.rs:line:column`, the
/// directories left out).
#[derive(PartialEq)]
struct Diagnostic {
    headline: String,
    location: Option<String>,
}

impl Diagnostic {
    /// The error code of a coded headline (`E0277`).
    fn code(&self) -> Option<&str> {
        let rest = self.headline.strip_prefix("error[")?;
        rest.split(']').next()
    }

    /// Whether `found` is this expected diagnostic, as far as it does not
    /// depend on the toolchain: our messages word for word at their spans,
    /// rustc's own by code.
    fn is_found_as(&self, found: &Diagnostic) -> bool {
        match self.code() {
            None => self == found,
            Some(code) if RUSTC_WORDED_CODES.contains(&code) => found.code() == Some(code),
            Some(_) => self.headline == found.headline,
        }
    }
}

/// The errors of rustc's human-readable `output`, in order.
fn diagnostics(output: &str) -> Vec<Diagnostic> {
    let mut lines = output.lines().peekable();
    let mut found = Vec::new();
    while let Some(line) = lines.next() {
        let is_headline = line.starts_with("error:") || line.starts_with("error[");
        if !is_headline || line.starts_with("error: could not compile") {
            continue;
        }
        let location = lines
            .peek()
            .and_then(|next| next.trim_start().strip_prefix("--> "))
            .map(|path| path.rsplit(['/', '\\']).next().unwrap_or(path).to_owned());
        found.push(Diagnostic {
            headline: line.to_owned(),
            location,
        });
    }
    found
}

/// The cases of `ui/fail` whose errors show only where code is generated
/// (`cargo build`), not in `cargo check`: a tuple of buffer structs is
/// formed where it is used, so its parts' agreement is asserted there.
const BUILD_ONLY_CASES: &[&str] = &["tuple_parts_share_a_label"];

/// Compiles each case of `ui/fail` on its own, in a package beside the
/// suite's, and checks that it fails with every headline of its `.stderr`:
/// under `cargo check`, as an editor would show it, except the
/// [`BUILD_ONLY_CASES`], which are built.
fn check_failures_by_headline() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cases: Vec<PathBuf> = fs::read_dir(crate_dir.join("ui/fail"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no cases in ui/fail");
    let package = write_package(crate_dir, &cases);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut problems = Vec::new();
    for case in &cases {
        let name = case_name(case);
        let command = if BUILD_ONLY_CASES.contains(&name.as_str()) {
            "build"
        } else {
            "check"
        };
        let output = Command::new(&cargo)
            .args([command, "--quiet", "--bin", &name, "--manifest-path"])
            .arg(package.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", package.join("target"))
            .env("CARGO_TERM_COLOR", "never")
            .output()
            .expect("cargo runs");
        if output.status.success() {
            problems.push(format!("{name}: compiled, but must fail"));
            continue;
        }
        let mut found = diagnostics(&String::from_utf8_lossy(&output.stderr));
        let expected = fs::read_to_string(case.with_extension("stderr"))
            .unwrap_or_else(|error| panic!("{name}.stderr: {error}"));
        for diagnostic in diagnostics(&expected) {
            match found.iter().position(|f| diagnostic.is_found_as(f)) {
                Some(at) => {
                    found.remove(at);
                }
                None => problems.push(format!(
                    "{name}: missing `{}` at {:?}",
                    diagnostic.headline, diagnostic.location
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The bin name of a case: its file name without `.rs`.
fn case_name(case: &Path) -> String {
    case.file_stem().unwrap().to_string_lossy().into_owned()
}

/// Writes a package with one bin per case, depending on what trybuild gives
/// the cases (cubie-mem, and bytemuck for element types of their own), with
/// the workspace's lock file; returns its directory.
fn write_package(crate_dir: &Path, cases: &[PathBuf]) -> PathBuf {
    let package = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-fail-headlines");
    fs::create_dir_all(&package).unwrap();
    let workspace = crate_dir.parent().unwrap();
    let mut manifest = format!(
        "[package]\nname = \"ui-fail-headlines\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n[workspace]\n\n[dependencies]\ncubie-mem = {{ path = {:?} }}\n\
         bytemuck = {{ version = \"1\", features = [\"derive\"] }}\n",
        workspace.join("cubie-mem")
    );
    for case in cases {
        manifest += &format!(
            "\n[[bin]]\nname = {:?}\npath = {:?}\n",
            case_name(case),
            case
        );
    }
    fs::write(package.join("Cargo.toml"), manifest).unwrap();
    fs::copy(workspace.join("Cargo.lock"), package.join("Cargo.lock")).unwrap();
    package
}
