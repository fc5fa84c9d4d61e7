//! The architecture page (`docs/architecture.md`) against the tree.
//!
//! - Every top-level module of both crates has its paragraph, and no other.
//! - Every path the page names is a file or folder of `cubie-mem/src`.
//! - Every source file of `cubie-mem/src` below the top level is named,
//!   itself or through a folder above it.
//! - The path of a chunk names, for each step, a file and an item that file
//!   defines, reached from a file of an earlier step (or the solver's own
//!   call, marked "your call").

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf()
}

/// The runtime crate's sources.
fn src() -> PathBuf {
    root().join("cubie-mem/src")
}

fn page() -> String {
    std::fs::read_to_string(root().join("docs/architecture.md")).expect("the page exists")
}

/// The top-level modules of the crate whose sources are in `src`: its files
/// (but the crate root) and its folders.
fn modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .expect("the crate's sources")
        .map(|entry| entry.expect("a readable entry").path())
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.to_owned();
            match name.strip_suffix(".rs") {
                Some("lib") => None,
                Some(module) => Some(module.to_owned()),
                None if path.is_dir() => Some(name),
                None => None,
            }
        })
        .collect()
}

/// Whether the file at `rel` (relative to `src`, with `/`) holds only tests.
fn is_test_file(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    rel.split('/').any(|part| part == "tests")
        || name == "tests.rs"
        || name.ends_with("_tests.rs")
        || name == "properties.rs"
        || name == "header_check.rs"
}

/// Every `.rs` file under `dir`, relative to `src`, with `/`.
fn files(src: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("a readable folder") {
        let path = entry.expect("a readable entry").path();
        if path.is_dir() {
            files(src, &path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let rel = path.strip_prefix(src).expect("under src");
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The words in backticks of `text`.
fn quoted(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// Whether `word` reads as a module path: `a/b`, `a/b/c`.
fn is_path(word: &str) -> bool {
    word.contains('/')
        && word.split('/').all(|part| {
            !part.is_empty() && part.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        })
}

/// The section of the page from the heading `start` to the next heading of
/// its level.
fn section<'p>(page: &'p str, start: &str) -> &'p str {
    let from = page.find(start).expect("the section exists");
    let rest = &page[from + start.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    &rest[..end]
}

/// The source of module `path`: `path.rs`, or `path/mod.rs` for a folder.
fn source(path: &str) -> Option<String> {
    let src = src();
    std::fs::read_to_string(src.join(format!("{path}.rs")))
        .or_else(|_| std::fs::read_to_string(src.join(path).join("mod.rs")))
        .ok()
}

/// `text` without its comment lines.
fn code(text: &str) -> String {
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether `text` holds `word` as a whole identifier.
fn mentions(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// Whether `text` defines the item `name`.
fn defines(text: &str, name: &str) -> bool {
    [
        "fn", "struct", "enum", "trait", "type", "const", "static", "mod",
    ]
    .iter()
    .any(|keyword| mentions(text, &format!("{keyword} {name}")))
}

/// One step of the chunk's walk: `N. `path` (`Item`[, your call]): ...`.
struct Step<'p> {
    number: usize,
    path: &'p str,
    item: &'p str,
    yours: bool,
}

fn steps(walk: &str) -> Vec<Step<'_>> {
    walk.lines()
        .filter_map(|line| {
            let (number, rest) = line.split_once(". `")?;
            let number = number.parse().ok()?;
            let (path, rest) = rest.split_once("` (`")?;
            let (item, rest) = rest.split_once('`')?;
            let yours = rest.starts_with(", your call)");
            assert!(
                yours || rest.starts_with("):"),
                "step {number}: `path` (`Item`): or `path` (`Item`, your call):"
            );
            Some(Step {
                number,
                path,
                item,
                yours,
            })
        })
        .collect()
}

#[test]
fn every_module_of_the_runtime_has_exactly_its_paragraph() {
    let page = page();
    let named: BTreeSet<String> = section(&page, "## The runtime")
        .lines()
        .filter_map(|line| line.strip_prefix("#### "))
        .flat_map(|heading| quoted(heading).map(str::to_owned).collect::<Vec<_>>())
        .collect();
    let tree = modules(&src());
    let missing: Vec<_> = tree.difference(&named).collect();
    let stale: Vec<_> = named.difference(&tree).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "modules without a paragraph: {missing:?}; paragraphs of no module: {stale:?}"
    );
}

#[test]
fn every_module_of_the_derive_is_named_on_the_page() {
    let page = page();
    let named: BTreeSet<&str> = quoted(section(&page, "## The derive")).collect();
    let missing: Vec<_> = modules(&root().join("cubie-mem-derive/src"))
        .into_iter()
        .filter(|module| !named.contains(module.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "derive modules the page omits: {missing:?}"
    );
}

#[test]
fn every_path_the_page_names_is_in_the_tree() {
    let page = page();
    let src = src();
    let paths: BTreeSet<&str> = quoted(&page).filter(|word| is_path(word)).collect();
    assert!(paths.len() >= 40, "the page names the files: {paths:?}");
    let absent: Vec<_> = paths
        .into_iter()
        .filter(|path| !src.join(format!("{path}.rs")).is_file() && !src.join(path).is_dir())
        .collect();
    assert!(
        absent.is_empty(),
        "paths on the page not in cubie-mem/src: {absent:?}"
    );
}

#[test]
fn every_file_of_the_runtime_is_named() {
    let page = page();
    let named: BTreeSet<&str> = quoted(&page).filter(|word| is_path(word)).collect();
    let src = src();
    let mut all = Vec::new();
    files(&src, &src, &mut all);
    let unnamed: Vec<_> = all
        .iter()
        .filter(|rel| !is_test_file(rel))
        .filter_map(|rel| {
            let module = rel.strip_suffix(".rs")?;
            let module = module.strip_suffix("/mod").unwrap_or(module);
            let parts: Vec<&str> = module.split('/').collect();
            // Top-level modules have their paragraphs; below, the file or a
            // folder above it (but the top level) is named.
            let covered = parts.len() < 2
                || (2..=parts.len()).any(|depth| named.contains(parts[..depth].join("/").as_str()));
            (!covered).then_some(module)
        })
        .collect();
    assert!(
        unnamed.is_empty(),
        "files of cubie-mem/src the page does not name: {unnamed:?}"
    );
}

#[test]
fn the_walk_of_a_chunk_follows_the_code() {
    let page = page();
    let steps = steps(section(&page, "## The path of a chunk"));
    assert!(steps.len() >= 20, "the walk names the files a chunk passes");
    let mut earlier: Vec<String> = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        let Step {
            number,
            path,
            item,
            yours,
        } = *step;
        assert_eq!(number, index + 1, "steps are numbered 1, 2, 3, ...");
        let text =
            code(&source(path).unwrap_or_else(|| {
                panic!("step {number}: `{path}` is no module of cubie-mem/src")
            }));
        let name = item.rsplit("::").next().unwrap_or(item);
        assert!(
            defines(&text, name),
            "step {number}: `{path}` does not define `{name}`"
        );
        assert!(
            index == 0 || yours || earlier.iter().any(|before| mentions(before, name)),
            "step {number}: no earlier step's file reaches `{name}` of `{path}`"
        );
        earlier.push(text);
    }
    for file in [
        "streaming/binding",
        "streaming/staging_ring",
        "array/queued",
        "resource/device_memory",
    ] {
        assert!(
            steps.iter().any(|step| step.path == file),
            "the walk passes `{file}`"
        );
    }
}
