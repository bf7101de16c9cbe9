//! A job's output as the reader sees it: which shard files of which split to read, and
//! the checks that keep a training run from reading the wrong ones.
//!
//! ```text
//! paths (output dir | manifest.json | glob | shard file, one or many)
//!   ─► per path: the manifest it belongs to (if any) ─► Output::open: _SUCCESS,
//!      manifest/row-format/tokenizer versions, every shard path inside the output
//!   ─► the split's files; a glob or file is refused when it lies in another split's
//!      directory, is not in its output's manifest, or comes from another output
//!      (a second manifest, or another `-of-N`)
//!   ─► (verify) size, blake3 and row count of every file against the manifest
//! ```
//!
//! A file outside any job output (no `manifest.json` beside its split directory) is
//! accepted as it is, unless verification was asked for: it has nothing to check against.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::array_record::ArrayRecordReader;
use crate::error::{Error, Location, Result};
use crate::row::codec::ROW_FORMAT_VERSION;
use crate::row::Split;
use crate::tokenizer::TOKENIZER_VERSION;

/// The manifest versions this reader understands.
pub const MANIFEST_VERSIONS: std::ops::RangeInclusive<u32> = 1..=2;

/// The completion marker: the file a job of any kind writes last, when everything else
/// is in place (the engine's completion record, JSON). The one definition of its name:
/// the engine, `coordinator status` and `verify`, the workers, this reader and the
/// overlap report (through `probeflow._native`) all read it from here.
pub const COMPLETION_MARKER: &str = "_SUCCESS";
/// Completion markers of earlier releases, still recognised: the overlap job's
/// `.SUCCESS` (written before every kind's marker had one name; its record lists no
/// files). A new output never has one.
pub const EARLIER_COMPLETION_MARKERS: [&str; 1] = [".SUCCESS"];
pub const MANIFEST_FILE: &str = "manifest.json";

/// The URL schemes of object stores (read with the `remote` feature).
pub const REMOTE_SCHEMES: [&str; 2] = ["s3://", "gs://"];

/// The object-store scheme `url` starts with, if any.
pub fn remote_scheme(url: &str) -> Option<&'static str> {
    REMOTE_SCHEMES.into_iter().find(|s| url.starts_with(s))
}

/// The output on an object store that `paths` name, if any; an error when it is not
/// named alone (a remote output is read whole, through the shard cache).
pub fn remote_output(paths: &[String]) -> Result<Option<&str>> {
    let Some(remote) = paths.iter().find(|p| remote_scheme(p).is_some()) else {
        return Ok(None);
    };
    if paths.len() > 1 {
        return Err(Error::Input(format!(
            "{remote}: an output on an object store is read whole, on its own; give its \
             root alone (a mixture takes several outputs as sources)"
        )));
    }
    Ok(Some(remote))
}

/// What [`resolve`] gives, as names: the shard files of `split`, or for one output on
/// an object store (feature `remote`) its split's shard URLs, checked as a local
/// output is (nothing downloaded).
pub fn shard_names(paths: &[String], split: &str, verify: bool) -> Result<Vec<String>> {
    if let Some(url) = remote_output(paths)? {
        #[cfg(feature = "remote")]
        return Ok(crate::remote::output::RemoteOutput::open(url)?
            .split(split)?
            .iter()
            .map(|s| s.url.to_string())
            .collect());
        #[cfg(not(feature = "remote"))]
        return Err(no_remote(url));
    }
    Ok(resolve(paths, split, verify)?
        .iter()
        .map(|f| f.display().to_string())
        .collect())
}

/// The error for an object-store URL in a build without the `remote` feature.
#[cfg(not(feature = "remote"))]
pub(crate) fn no_remote(url: &str) -> Error {
    Error::Input(format!(
        "{url}: this build of probeflow-reader reads no object stores (feature `remote`)"
    ))
}

/// One shard as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ManifestShard {
    pub split: String,
    pub partition: u32,
    /// Relative to the output root.
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
    pub blake3: String,
}

/// The parts of `manifest.json` the reader checks.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ManifestFile {
    manifest_version: u32,
    row_format_version: String,
    tokenizer_version: String,
    pub(crate) shards_per_split: u32,
    pub(crate) shards: Vec<ManifestShard>,
    /// The largest row the job wrote, in bytes (absent: a manifest of another writer).
    #[serde(default)]
    pub(crate) max_row_bytes: Option<u64>,
}

/// A finished job output: its root, and its manifest's shards (paths checked).
#[derive(Debug, Clone)]
pub struct Output {
    pub root: PathBuf,
    pub shards_per_split: u32,
    pub shards: Vec<ManifestShard>,
    /// The manifest's `max_row_bytes`: no row of this output is larger.
    pub max_row_bytes: Option<u64>,
}

fn output_err(path: &Path, what: impl Into<String>) -> Error {
    Error::Output {
        path: path.display().to_string(),
        what: what.into(),
    }
}

/// Whether a manifest path stays inside the output: relative, no `..`, no root.
pub fn stays_inside(rel: &str) -> bool {
    let p = Path::new(rel);
    !rel.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

impl Output {
    /// Opens the output at `root` (the directory holding `manifest.json`): refuses an
    /// unfinished output (no `_SUCCESS`), unknown versions and paths that leave it.
    pub fn open(root: &Path) -> Result<Output> {
        let manifest = root.join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&manifest).map_err(|e| Error::io(&manifest, e))?;
        if !root.join(COMPLETION_MARKER).exists() {
            return Err(unfinished(&root.display().to_string()));
        }
        let parsed = parse_manifest(&manifest.display().to_string(), &text)?;
        Ok(Output {
            root: root.to_path_buf(),
            shards_per_split: parsed.shards_per_split,
            shards: parsed.shards,
            max_row_bytes: parsed.max_row_bytes,
        })
    }

    /// The manifest entry of a file of this output (`<root>/<split dir>/<name>`).
    fn entry(&self, file: &Path) -> Option<&ManifestShard> {
        let name = file.file_name()?.to_str()?;
        let dir = file.parent()?.file_name()?.to_str()?;
        let rel = format!("{dir}/{name}");
        self.shards.iter().find(|s| s.path == rel)
    }

    /// Checks every shard of the output (all splits): size, blake3 and row count.
    pub fn verify_all(&self) -> Result<()> {
        for s in &self.shards {
            verify_shard(&self.root.join(&s.path), s)?;
        }
        Ok(())
    }
}

/// The error for an output without `_SUCCESS`.
pub(crate) fn unfinished(root: &str) -> Error {
    Error::Output {
        path: root.to_string(),
        what: format!(
            "no {COMPLETION_MARKER}: the job writing this output has not finished (or it \
             failed); its files may be partial. Run the job to completion (`coordinator \
             status` tells where it is)"
        ),
    }
}

/// A manifest's text, parsed and checked: versions, and shard paths inside the output.
pub(crate) fn parse_manifest(manifest: &str, text: &str) -> Result<ManifestFile> {
    let err = |what: String| Error::Output {
        path: manifest.to_string(),
        what,
    };
    let parsed: ManifestFile =
        serde_json::from_str(text).map_err(|e| err(format!("not a probeflow manifest: {e}")))?;
    check_versions(
        parsed.manifest_version,
        &parsed.row_format_version,
        &parsed.tokenizer_version,
    )
    .map_err(err)?;
    if let Some(bad) = parsed.shards.iter().find(|s| !stays_inside(&s.path)) {
        return Err(err(format!(
            "shard path {:?} leaves the output directory; refusing it",
            bad.path
        )));
    }
    Ok(parsed)
}

/// The manifest entries of `split` in an output's `shards`; an error naming the splits
/// it has when there are none.
pub(crate) fn split_entries<'a>(
    root: &str,
    shards: &'a [ManifestShard],
    split: &str,
) -> Result<Vec<&'a ManifestShard>> {
    let entries: Vec<&ManifestShard> = shards.iter().filter(|s| s.split == split).collect();
    if entries.is_empty() {
        let has: BTreeSet<&str> = shards.iter().map(|s| s.split.as_str()).collect();
        let hint = if split == Split::Val.as_str() {
            " (a job writes val shards when its [split] val_fraction is above 0)"
        } else {
            ""
        };
        return Err(Error::Output {
            path: root.to_string(),
            what: format!("no shards for split {split:?}: it has {has:?}{hint}"),
        });
    }
    Ok(entries)
}

/// The splits a manifest lists shards of.
pub(crate) fn manifest_splits(root: &str, shards: &[ManifestShard]) -> Result<BTreeSet<Split>> {
    shards
        .iter()
        .map(|s| {
            s.split.parse::<Split>().map_err(|_| Error::Output {
                path: root.to_string(),
                what: format!("the manifest lists a shard of unknown split {:?}", s.split),
            })
        })
        .collect()
}

/// Checks a manifest's versions against this release's: the reason if they differ.
pub fn check_versions(
    manifest_version: u32,
    row_format_version: &str,
    tokenizer_version: &str,
) -> std::result::Result<(), String> {
    if !MANIFEST_VERSIONS.contains(&manifest_version) {
        return Err(format!(
            "manifest version {manifest_version} is not one this reader knows \
             ({MANIFEST_VERSIONS:?}): use the probeflow release that wrote it"
        ));
    }
    if row_format_version != ROW_FORMAT_VERSION {
        return Err(format!(
            "rows in format {row_format_version:?}, this reader reads format {ROW_FORMAT_VERSION:?}"
        ));
    }
    if tokenizer_version != TOKENIZER_VERSION {
        return Err(format!(
            "rows made for tokenizer {tokenizer_version:?}, this reader's tokenizer is \
             {TOKENIZER_VERSION:?}"
        ));
    }
    Ok(())
}

fn corrupt(file: &str, what: String) -> Error {
    Error::Corrupt {
        file: file.to_string(),
        location: Location::File,
        what,
    }
}

/// Compares a shard's size and blake3 (hex) with what its manifest entry says.
pub fn check_contents(
    file: &str,
    size: u64,
    blake3: &str,
    entry_bytes: u64,
    entry_blake3: &str,
) -> Result<()> {
    if size != entry_bytes {
        return Err(corrupt(
            file,
            format!("{size} bytes, the manifest says {entry_bytes}"),
        ));
    }
    if blake3 != entry_blake3 {
        return Err(corrupt(
            file,
            format!("blake3 {blake3} does not match the manifest's {entry_blake3}"),
        ));
    }
    Ok(())
}

/// Compares a shard's row count with what its manifest entry says.
pub fn check_rows(file: &str, rows: u64, entry_rows: u64) -> Result<()> {
    if rows != entry_rows {
        return Err(corrupt(
            file,
            format!("{rows} rows, the manifest says {entry_rows}"),
        ));
    }
    Ok(())
}

/// A file's size and blake3 (lower-case hex), read in 1 MiB pieces.
pub(crate) fn hash_file(path: &Path) -> Result<(u64, String)> {
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((size, hasher.finalize().to_hex().to_string()))
}

/// Checks one shard file against its manifest entry: size, blake3, row count.
pub fn verify_shard(file: &Path, entry: &ManifestShard) -> Result<()> {
    let name = file.display().to_string();
    let (size, hash) = hash_file(file)?;
    check_contents(&name, size, &hash, entry.bytes, &entry.blake3)?;
    check_rows(&name, ArrayRecordReader::open(file)?.len(), entry.rows)
}

/// `shard-PPPPP-of-NNNNN.array_record` → `(P, N)`.
pub fn parse_shard_name(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix("shard-")?.strip_suffix(".array_record")?;
    let (p, n) = rest.split_once("-of-")?;
    Some((p.parse().ok()?, n.parse().ok()?))
}

/// The files a glob (in the file name, [`crate::glob`]'s dialect) or a single path
/// names, sorted.
fn expand(path: &str) -> Result<Vec<PathBuf>> {
    let p = Path::new(path);
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    // A file that exists is itself, whatever its name holds (`[`, `?`, `{` too).
    let glob = if p.is_file() {
        None
    } else {
        crate::glob::split_glob(name).1
    };
    if let Some(pattern) = glob {
        let glob = crate::glob::FileGlob::new(pattern)?;
        let dir = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_str().is_some_and(|n| glob.is_match(n)))
            .map(|e| e.path())
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(Error::Input(format!("{path}: no files match")));
        }
        return Ok(files);
    }
    if !p.exists() {
        return Err(Error::io(
            p,
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ));
    }
    Ok(vec![p.to_path_buf()])
}

/// The output root a shard file belongs to: the parent of its split directory, when
/// that holds a manifest.
fn output_root_of(file: &Path) -> Option<PathBuf> {
    let root = file.parent()?.parent()?;
    let root = if root.as_os_str().is_empty() {
        Path::new(".")
    } else {
        root
    };
    root.join(MANIFEST_FILE)
        .exists()
        .then(|| root.to_path_buf())
}

/// The output a path names as a whole: a directory, or its `manifest.json`.
fn named_output(path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    if p.is_dir() {
        Some(p.to_path_buf())
    } else if p.file_name().is_some_and(|n| n == MANIFEST_FILE) {
        Some(
            p.parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf(),
        )
    } else {
        None
    }
}

/// The splits `paths` hold: for an output directory or manifest, the splits its
/// manifest lists shards of (the output checked as [`Output::open`] does); for a glob
/// or file, the split directories its files lie in. Lets a caller pick a split that
/// exists (evaluation: `val` when there is one) instead of guessing from errors.
pub fn splits_of(paths: &[String]) -> Result<BTreeSet<Split>> {
    let mut splits = BTreeSet::new();
    for path in paths {
        if remote_scheme(path).is_some() {
            #[cfg(feature = "remote")]
            splits.extend(crate::remote::output::RemoteOutput::open(path)?.splits()?);
            #[cfg(not(feature = "remote"))]
            return Err(no_remote(path));
            #[cfg(feature = "remote")]
            continue;
        }
        match named_output(path) {
            Some(root) => {
                let out = Output::open(&root)?;
                splits.extend(manifest_splits(&root.display().to_string(), &out.shards)?);
            }
            None => {
                for file in expand(path)? {
                    let dir = file
                        .parent()
                        .and_then(|d| d.file_name())
                        .and_then(|n| n.to_str());
                    if let Some(split) = dir.and_then(|d| d.parse::<Split>().ok()) {
                        splits.insert(split);
                    }
                }
            }
        }
    }
    Ok(splits)
}

/// Resolves `paths` to the shard files of `split` (in global row order), with every
/// check above; `verify` also checks every file's size, blake3 and rows against the
/// manifest.
pub fn resolve(paths: &[String], split: &str, verify: bool) -> Result<Vec<PathBuf>> {
    Ok(resolve_shards(paths, split, verify)?
        .into_iter()
        .map(|s| s.path)
        .collect())
}

/// [`resolve`], each file with its manifest blake3 where it has one.
pub fn resolve_shards(paths: &[String], split: &str, verify: bool) -> Result<Vec<ResolvedShard>> {
    if paths.is_empty() {
        return Err(Error::Input("no paths given".into()));
    }
    if let Some(remote) = paths.iter().find(|p| remote_scheme(p).is_some()) {
        return Err(Error::Input(format!(
            "{remote}: shards on an object store are read through the shard cache \
             (probeflow.Dataset), not as files"
        )));
    }
    split.parse::<Split>()?;
    let mut outputs: BTreeMap<PathBuf, Output> = BTreeMap::new();
    // (file, its manifest entry's output root, if any)
    let mut files: Vec<(PathBuf, Option<PathBuf>)> = Vec::new();
    for path in paths {
        if let Some(root) = named_output(path) {
            if !outputs.contains_key(&root) {
                outputs.insert(root.clone(), Output::open(&root)?);
            }
            let out = &outputs[&root];
            let entries = split_entries(&root.display().to_string(), &out.shards, split)?;
            files.extend(
                entries
                    .iter()
                    .map(|s| (root.join(&s.path), Some(root.clone()))),
            );
            continue;
        }
        for file in expand(path)? {
            let dir = file
                .parent()
                .and_then(|d| d.file_name())
                .and_then(|n| n.to_str())
                .unwrap_or("");
            if dir.parse::<Split>().is_ok() && dir != split {
                return Err(output_err(
                    &file,
                    format!("a {dir:?} shard, asked for split {split:?}: refusing to mix splits"),
                ));
            }
            let root = output_root_of(&file);
            if let Some(root) = &root {
                if !outputs.contains_key(root) {
                    outputs.insert(root.clone(), Output::open(root)?);
                }
                let out = &outputs[root];
                match out.entry(&file) {
                    Some(e) if e.split == split => {}
                    Some(e) => {
                        return Err(output_err(
                            &file,
                            format!(
                                "the manifest lists it in split {:?}, asked for {split:?}",
                                e.split
                            ),
                        ))
                    }
                    None => {
                        return Err(output_err(
                            &file,
                            format!(
                                "not a shard of the output {} (not in its manifest)",
                                root.display()
                            ),
                        ))
                    }
                }
            }
            files.push((file, root));
        }
    }

    // One output, one shard count.
    let roots: BTreeSet<&PathBuf> = files.iter().filter_map(|(_, r)| r.as_ref()).collect();
    if roots.len() > 1 {
        let names: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        return Err(Error::Output {
            path: names[0].clone(),
            what: format!(
                "shards of {} different outputs ({}): refusing to mix them",
                names.len(),
                names.join(", ")
            ),
        });
    }
    let counts: BTreeSet<u32> = files
        .iter()
        .filter_map(|(f, _)| {
            let name = f.file_name()?.to_str()?;
            parse_shard_name(name).map(|(_, n)| n)
        })
        .collect();
    if counts.len() > 1 {
        return Err(Error::Output {
            path: paths.join(", "),
            what: format!(
                "shards of outputs with different shard counts ({}): refusing to mix them",
                counts
                    .iter()
                    .map(|n| format!("-of-{n:05}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    let mut seen = BTreeSet::new();
    for (f, _) in &files {
        let key = std::fs::canonicalize(f).unwrap_or_else(|_| f.clone());
        if !seen.insert(key) {
            return Err(output_err(f, "named twice: its rows would be read twice"));
        }
    }

    if verify {
        for (f, root) in &files {
            let entry = root
                .as_ref()
                .and_then(|r| outputs[r].entry(f))
                .ok_or_else(|| {
                    output_err(
                        f,
                        "verify needs the output's manifest.json (beside the split directory)",
                    )
                })?;
            verify_shard(f, entry)?;
        }
    }
    Ok(files
        .into_iter()
        .map(|(f, root)| {
            let output = root.as_ref().map(|r| &outputs[r]);
            let blake3 = output.and_then(|o| o.entry(&f)).map(|e| e.blake3.clone());
            let max_row_bytes = output.and_then(|o| o.max_row_bytes);
            ResolvedShard {
                path: f,
                blake3,
                max_row_bytes,
            }
        })
        .collect())
}

/// A shard file [`resolve_shards`] found, with its blake3 when its output's manifest
/// records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedShard {
    pub path: PathBuf,
    pub blake3: Option<String>,
    /// Its output's `max_row_bytes`, when the manifest says it: a chunk that claims
    /// more per row is corrupt ([`crate::array_record::ArrayRecordReader::set_max_record_bytes`]).
    pub max_row_bytes: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_whose_name_looks_like_a_glob_is_itself() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("shard[1].array_record");
        std::fs::write(&file, b"").unwrap();
        let path = file.display().to_string();
        assert_eq!(expand(&path).unwrap(), vec![file]);
        // Not a file: a glob (matching nothing here).
        let glob = dir
            .path()
            .join("shard[2].array_record")
            .display()
            .to_string();
        assert!(expand(&glob).is_err());
    }

    #[test]
    fn manifest_paths_must_stay_inside_the_output() {
        assert!(stays_inside("train/shard-00000-of-00004.array_record"));
        for bad in ["", "../x", "train/../../x", "/etc/passwd", "./train/x"] {
            assert!(!stays_inside(bad), "{bad}");
        }
    }

    #[test]
    fn shard_names_give_partition_and_count() {
        assert_eq!(
            parse_shard_name("shard-00003-of-00064.array_record"),
            Some((3, 64))
        );
        assert_eq!(parse_shard_name("shard-3-of-x.array_record"), None);
        assert_eq!(parse_shard_name("part-00003.parquet"), None);
    }

    #[test]
    fn a_resolved_shard_carries_its_manifests_row_limit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("train")).unwrap();
        let shard = "train/shard-00000-of-00001.array_record";
        std::fs::write(dir.path().join(shard), b"").unwrap();
        let manifest = |limit: &str| {
            format!(
                r#"{{"manifest_version": 2, "row_format_version": "{ROW_FORMAT_VERSION}",
                "tokenizer_version": "{TOKENIZER_VERSION}", "shards_per_split": 1{limit},
                "shards": [{{"split": "train", "partition": 0, "path": "{shard}", "rows": 0,
                "bytes": 0, "blake3": "{}"}}]}}"#,
                "0".repeat(64)
            )
        };
        std::fs::write(dir.path().join(COMPLETION_MARKER), "").unwrap();
        let root = dir.path().display().to_string();
        for (limit, want) in [(", \"max_row_bytes\": 65536", Some(65536)), ("", None)] {
            std::fs::write(dir.path().join(MANIFEST_FILE), manifest(limit)).unwrap();
            let resolved = resolve_shards(std::slice::from_ref(&root), "train", false).unwrap();
            assert_eq!(resolved.len(), 1);
            assert_eq!(resolved[0].max_row_bytes, want, "{limit:?}");
        }
    }

    #[test]
    fn an_output_without_success_is_refused_before_its_manifest_is_trusted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MANIFEST_FILE), "{}").unwrap();
        let err = Output::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("no _SUCCESS"), "{err}");
        std::fs::write(dir.path().join(COMPLETION_MARKER), "").unwrap();
        let err = Output::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not a probeflow manifest"), "{err}");
    }
}
