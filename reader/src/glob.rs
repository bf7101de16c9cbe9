//! Globs over file names: one dialect for every path probeflow lists, the reader's
//! shard globs and the jobs' input globs alike (`globset`'s):
//!
//! * `*`: any run of characters but `/`; `?`: one character but `/`;
//! * `[abc]`, `[a-z]`, `[!a-z]`: one character of (or not of) a class;
//! * `{a,b}`: either alternative; `\` escapes the next character.
//!
//! A pattern is matched against a path relative to the directory before its first
//! glob character (`data/part-*.parquet`: `part-*.parquet` against the names in
//! `data/`), so `*` never reaches into subdirectories unless the pattern has a `/`.

use globset::{GlobBuilder, GlobMatcher};

use crate::error::{Error, Result};

/// The characters that make a path a glob.
const GLOB_CHARS: [char; 4] = ['*', '?', '[', '{'];

/// A compiled glob.
#[derive(Debug, Clone)]
pub struct FileGlob {
    matcher: GlobMatcher,
}

impl FileGlob {
    /// Compiles `pattern`; an invalid one (an unclosed `[` or `{`) is an error naming it.
    pub fn new(pattern: &str) -> Result<FileGlob> {
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| Error::Input(format!("{pattern:?} is not a valid glob: {e}")))?;
        Ok(FileGlob {
            matcher: glob.compile_matcher(),
        })
    }

    /// Whether `relative` (a path below the glob's directory, `/`-separated) matches.
    pub fn is_match(&self, relative: &str) -> bool {
        self.matcher.is_match(relative)
    }
}

/// `path` split into the directory before its first glob character and the glob
/// after it (`None`: `path` has no glob character).
pub fn split_glob(path: &str) -> (&str, Option<&str>) {
    match path.find(GLOB_CHARS) {
        Some(i) => {
            let slash = path[..i].rfind('/').map_or(0, |s| s + 1);
            (&path[..slash], Some(&path[slash..]))
        }
        None => (path, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dialect_matches_names_not_subdirectories() {
        let m = |p: &str, t: &str| FileGlob::new(p).unwrap().is_match(t);
        assert!(m("*.parquet", "a.parquet"));
        assert!(m("part-??.parquet", "part-01.parquet"));
        assert!(!m("*.parquet", "a.csv"));
        assert!(!m("*.parquet", "sub/a.parquet"));
        assert!(m("*/*.parquet", "sub/a.parquet"));
        assert!(m("*", "x"));
        assert!(m("t[01].txt", "t1.txt") && !m("t[01].txt", "t2.txt"));
        assert!(m("t[!0].txt", "t1.txt") && !m("t[!0].txt", "t0.txt"));
        assert!(m("*.{jsonl,jsonl.gz}", "a.jsonl.gz") && !m("*.{jsonl,jsonl.gz}", "a.zst"));
        assert!(m("a\\*b", "a*b") && !m("a\\*b", "axb"));
        let err = FileGlob::new("t[01.txt").unwrap_err().to_string();
        assert!(err.contains("not a valid glob"), "{err}");
    }

    #[test]
    fn a_path_splits_at_the_directory_of_its_first_glob_character() {
        assert_eq!(
            split_glob("data/part-*.parquet"),
            ("data/", Some("part-*.parquet"))
        );
        assert_eq!(
            split_glob("s3://b/in/[ab]/*.txt"),
            ("s3://b/in/", Some("[ab]/*.txt"))
        );
        assert_eq!(split_glob("*.txt"), ("", Some("*.txt")));
        assert_eq!(split_glob("data/file.txt"), ("data/file.txt", None));
    }
}
