//! The architecture page (`docs/architecture.md`) against the tree: every
//! module of both crates has its paragraph, every paragraph names a module
//! that exists, and every path the page walks a chunk through is a file or
//! folder of the crate.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf()
}

fn page() -> String {
    std::fs::read_to_string(root().join("docs/architecture.md")).expect("the page exists")
}

/// The modules of the crate whose sources are in `src`: its files (but the
/// crate root) and its folders.
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

/// The words in backticks of `text`.
fn quoted(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// The section of the page from the heading `start` to the next heading of
/// its level.
fn section<'p>(page: &'p str, start: &str) -> &'p str {
    let from = page.find(start).expect("the section exists");
    let rest = &page[from + start.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn every_module_of_the_runtime_has_exactly_its_paragraph() {
    let page = page();
    let named: BTreeSet<String> = section(&page, "## The runtime")
        .lines()
        .filter_map(|line| line.strip_prefix("#### "))
        .flat_map(|heading| quoted(heading).map(str::to_owned).collect::<Vec<_>>())
        .collect();
    let tree = modules(&root().join("cubie-mem/src"));
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
fn every_path_of_the_chunk_is_in_the_tree() {
    let page = page();
    let src = root().join("cubie-mem/src");
    let paths: Vec<&str> = quoted(section(&page, "## The path of a chunk"))
        .filter(|word| word.contains('/'))
        .collect();
    assert!(
        paths.len() >= 8,
        "the walk names the files it passes: {paths:?}"
    );
    let absent: Vec<_> = paths
        .into_iter()
        .filter(|path| !src.join(format!("{path}.rs")).is_file() && !src.join(path).is_dir())
        .collect();
    assert!(
        absent.is_empty(),
        "paths of the walk not in cubie-mem/src: {absent:?}"
    );
}
