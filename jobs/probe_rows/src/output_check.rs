//! probe_rows's own check of a finished output for `coordinator verify`, beside the
//! completion record's sizes and digests: the manifest's versions, its shard paths
//! inside the output and each listed in the record, and each shard's row count.
//!
//! ```text
//! manifest.json ─► versions checked, shard path → rows ─► (engine: every path in the record)
//! each shard, read whole by the engine once its bytes match the record ─► ArrayRecord rows = the manifest's
//! ```

use std::collections::BTreeMap;

use probeflow_engine::completion::{verification_failed, OutputCheck};
use probeflow_engine::error::Result;
use probeflow_engine::store::StoreUrl;
use probeflow_reader::array_record::ArrayRecordReader;
use probeflow_reader::output::{check_rows, check_versions, stays_inside};

use crate::manifest::{read_manifest, Manifest};
use crate::NAME;

/// A probe_rows output's check, from its manifest.
pub struct ShardCheck {
    /// Shard path → rows, as the manifest lists them.
    rows: BTreeMap<String, u64>,
    /// Rows counted in the shards read.
    rows_read: u64,
}

impl ShardCheck {
    /// The check of the output at `output`, its manifest read and checked.
    pub async fn load(output: &StoreUrl) -> Result<ShardCheck> {
        let bad = |what: String| verification_failed(output, NAME, what);
        let manifest: Manifest = read_manifest(output)
            .await?
            .ok_or_else(|| bad("no manifest.json".into()))?;
        check_versions(
            manifest.manifest_version,
            &manifest.row_format_version,
            &manifest.tokenizer_version,
        )
        .map_err(bad)?;
        let mut rows = BTreeMap::new();
        for s in &manifest.shards {
            if !stays_inside(&s.path) {
                return Err(bad(format!(
                    "the manifest names {:?}, a path outside the output",
                    s.path
                )));
            }
            rows.insert(s.path.clone(), s.rows);
        }
        Ok(ShardCheck { rows, rows_read: 0 })
    }
}

impl OutputCheck for ShardCheck {
    fn indexed(&self) -> Vec<(String, &'static str)> {
        self.rows
            .keys()
            .map(|p| (p.clone(), "the manifest"))
            .collect()
    }

    fn wants(&self, path: &str) -> bool {
        self.rows.contains_key(path)
    }

    fn check(
        &mut self,
        name: &str,
        path: &str,
        bytes: bytes::Bytes,
    ) -> std::result::Result<(), String> {
        let Some(&rows) = self.rows.get(path) else {
            return Ok(());
        };
        let got = ArrayRecordReader::from_bytes(name.to_string(), bytes.to_vec())
            .map_err(|e| e.to_string())?
            .len();
        check_rows(name, got, rows).map_err(|e| e.to_string())?;
        self.rows_read += got;
        Ok(())
    }

    fn summary(&self) -> String {
        format!(
            "{} shards, {} rows match the manifest",
            self.rows.len(),
            self.rows_read
        )
    }
}
