//! What the engine needs of an object store's conditional writes, checked once when a
//! coordinator takes an output's lock, before it writes anything of the job's.
//!
//! The output lock ([`crate::coordinator`]'s `output_lock`) and the journal's epoch
//! claims rest on two features of S3's API (GCS has both as generation preconditions):
//!
//! * **create-only writes** (`PUT` with `If-None-Match: *`): of two writers that create
//!   one object, exactly one succeeds;
//! * **compare-and-swap writes** (`PUT` with `If-Match: <ETag>`): a replace succeeds only
//!   while the object is still the revision its writer read.
//!
//! A store that ignores either header (an old or partial S3 implementation, or a proxy
//! that drops it) would let two coordinators both own one output and interleave their
//! writes: silently wrong output. So a coordinator probes the store first, on an object
//! of its own under `_job/probe/`:
//!
//! ```text
//! create P ─► create P again: refused? ─► replace P at its revision: done? ─► replace P at
//!    │              │ no: IfNoneMatch            │ quoted ETag refused, bare one done:    the old
//!    │              ▼                            │ EtagForm::Bare (Ceph RGW 16 compares   revision:
//!    │     EngineError::UnsupportedStore         │ If-Match on PUT to its bare ETag)      refused?
//!    │     (exit 2, naming the feature)          │ neither: IfMatch ─► UnsupportedStore   │ no: IfMatch
//!    └─ a step fails on the store's side (a reset, a lost answer): a fresh probe on another
//!       object, up to PROBES; then the store error                         ─► delete P
//! ```
//!
//! A store is refused only when two probes in a row find the same feature missing: a
//! finishing coordinator removes `_job/probe/` ([`remove_abandoned`]: the objects of
//! probes whose coordinator was killed mid-probe), which can cut one probe short.
//!
//! The verdict comes back as the [`StoreUrl`] to write the lock through: its
//! [`EtagForm`] says how its revisions name ETags in `If-Match`. Local outputs need no
//! probe: their compare-and-swap is the engine's own (a file lock).

use crate::error::{EngineError, Result};
use crate::store::{EtagForm, StoreUrl};

/// Where the probe objects live, under the output.
pub const PROBE_DIR: &str = "_job/probe";

/// Probes tried before a store error is given up on.
const PROBES: usize = 5;

/// A feature of conditional writes the engine relies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// `If-None-Match: *` on PUT.
    IfNoneMatch,
    /// `If-Match: <ETag>` on PUT.
    IfMatch,
}

impl Feature {
    fn describe(self) -> &'static str {
        match self {
            Feature::IfNoneMatch => {
                "conditional writes: create-only PUT (If-None-Match: *), which makes the output \
                 lock exclusive; a second create of one object was not refused"
            }
            Feature::IfMatch => {
                "conditional writes: compare-and-swap PUT (If-Match: <ETag>), which renews and \
                 takes over the output lock"
            }
        }
    }
}

/// Checks that `output`'s store honours conditional writes; returns `output` set up to
/// write through them ([`EtagForm`]), or [`EngineError::UnsupportedStore`] naming the
/// missing feature.
pub async fn check(output: &StoreUrl) -> Result<StoreUrl> {
    if !output.is_object_store() {
        return Ok(output.clone());
    }
    let mut last = None;
    let mut missing = None;
    for _ in 0..PROBES {
        let path = output.child(&format!("{PROBE_DIR}/{}.json", probe_name()));
        let verdict = probe(output, &path).await;
        if let Err(e) = output.delete(&path).await {
            tracing::warn!(output = %output.url, error = %e, "could not remove the conditional-write probe object");
        }
        match verdict {
            Ok(Ok(form)) => {
                if form == EtagForm::Bare {
                    tracing::info!(output = %output.url, "this store matches If-Match on PUT against bare ETags (without quotes): the output lock sends them so");
                }
                return Ok(output.clone().with_etag_form(form));
            }
            Ok(Err(feature)) if missing == Some(feature) => {
                return Err(EngineError::UnsupportedStore {
                    store: output.url.clone(),
                    what: feature.describe().to_string(),
                })
            }
            Ok(Err(feature)) => {
                tracing::debug!(output = %output.url, ?feature, "a conditional-write probe found a feature missing; probing again to be sure");
                missing = Some(feature);
            }
            Err(e) => {
                tracing::debug!(output = %output.url, error = %e, "a conditional-write probe failed on the store's side; probing again");
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| EngineError::Runtime("conditional-write probe".into())))
}

/// Removes the probe objects left under `output` (by coordinators killed mid-probe):
/// called by the coordinator that finishes the job, with its work files.
pub async fn remove_abandoned(output: &StoreUrl) -> Result<()> {
    if output.is_object_store() {
        output.delete_prefix(PROBE_DIR).await?;
    }
    Ok(())
}

/// One probe on `path`: the store's verdict (the ETag form it wants, or the feature it
/// lacks), or the store error that cut the probe short.
async fn probe(
    output: &StoreUrl,
    path: &object_store::path::Path,
) -> Result<Result<EtagForm, Feature>> {
    let Some(first) = output.put_if_absent(path, b"probe 1".to_vec()).await? else {
        // Another writer created our fresh object: not a verdict; probe again.
        return Err(EngineError::Runtime(format!(
            "{}: the probe object existed already",
            output.display(path)
        )));
    };
    if output
        .put_if_absent(path, b"probe 2".to_vec())
        .await?
        .is_some()
    {
        return Ok(Err(Feature::IfNoneMatch));
    }
    // The object is still "probe 1" (its create was the only write): a replace at its
    // revision must succeed, in the ETag form the store wants.
    let mut form = EtagForm::Quoted;
    let mut replaced = output.replace_if(path, &first, b"probe 3".to_vec()).await?;
    if replaced.is_none() {
        let bare = first.with_etag_form(EtagForm::Bare);
        if bare != first {
            replaced = output.replace_if(path, &bare, b"probe 3".to_vec()).await?;
            form = EtagForm::Bare;
        }
    }
    if replaced.is_none() {
        return Ok(Err(Feature::IfMatch));
    }
    // And a replace at the first revision, now stale, must be refused.
    let stale = first.with_etag_form(form);
    if output
        .replace_if(path, &stale, b"probe 4".to_vec())
        .await?
        .is_some()
    {
        return Ok(Err(Feature::IfMatch));
    }
    Ok(Ok(form))
}

/// A name no other probe uses: this process, the time, a counter.
fn probe_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::failing::{Conditions, TestStore};
    use std::sync::Arc;

    fn store(conditions: Conditions) -> (Arc<TestStore>, StoreUrl) {
        let store = Arc::new(TestStore::with_conditions(conditions));
        let url = store.url("s3://bed/out", "out");
        (store, url)
    }

    async fn left_under_probe(url: &StoreUrl) -> usize {
        url.list(PROBE_DIR).await.unwrap().len()
    }

    #[tokio::test]
    async fn a_store_that_honours_conditional_writes_passes_with_quoted_etags() {
        let (_s, url) = store(Conditions::Honoured);
        let checked = check(&url).await.unwrap();
        assert_eq!(checked.etag_form(), EtagForm::Quoted);
        assert_eq!(left_under_probe(&url).await, 0);
    }

    #[tokio::test]
    async fn a_store_that_matches_bare_etags_only_is_written_with_bare_etags() {
        let (_s, url) = store(Conditions::BareEtagsOnly);
        let checked = check(&url).await.unwrap();
        assert_eq!(checked.etag_form(), EtagForm::Bare);
        // Its revisions now replace as they should.
        let path = checked.child("_job/lock.json");
        let rev = checked
            .put_if_absent(&path, b"a".to_vec())
            .await
            .unwrap()
            .unwrap();
        let next = checked
            .replace_if(&path, &rev, b"b".to_vec())
            .await
            .unwrap();
        assert!(next.is_some(), "a replace at the current revision is done");
        assert!(checked
            .replace_if(&path, &rev, b"c".to_vec())
            .await
            .unwrap()
            .is_none());
        assert_eq!(left_under_probe(&url).await, 0);
    }

    #[tokio::test]
    async fn a_store_that_ignores_if_none_match_is_refused_naming_it() {
        let (_s, url) = store(Conditions::Ignored);
        let err = check(&url).await.unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let msg = err.to_string();
        assert!(
            msg.contains("If-None-Match") && msg.contains("s3://bed/out"),
            "{msg}"
        );
        assert_eq!(left_under_probe(&url).await, 0);
    }

    #[tokio::test]
    async fn a_store_that_ignores_if_match_is_refused_naming_it() {
        let (_s, url) = store(Conditions::IfMatchIgnored);
        let msg = check(&url).await.unwrap_err().to_string();
        assert!(
            msg.contains("If-Match") && !msg.contains("If-None-Match"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn a_probe_object_left_by_a_killed_coordinator_is_removed_at_the_end() {
        let (_s, url) = store(Conditions::Honoured);
        url.put(
            &url.child(&format!("{PROBE_DIR}/1-2-3.json")),
            b"probe 1".to_vec(),
        )
        .await
        .unwrap();
        remove_abandoned(&url).await.unwrap();
        assert_eq!(left_under_probe(&url).await, 0);
    }

    #[tokio::test]
    async fn a_local_output_needs_no_probe() {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::parse(dir.path().to_str().unwrap()).unwrap();
        assert_eq!(check(&url).await.unwrap().etag_form(), EtagForm::Quoted);
        assert!(!dir.path().join("_job").exists());
    }
}
