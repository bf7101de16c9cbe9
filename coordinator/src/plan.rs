//! Planning: list the input, read every Parquet footer, and cut the input into map
//! tasks of roughly equal rows (whole row groups, never across files). Reduce tasks are
//! one per partition and are made once every map task has reported its segments.

use futures::{StreamExt, TryStreamExt};
use probeflow_worker::protocol::{MapOutput, MapTask, ReduceTask};
use probeflow_worker::store;

use crate::error::{JobError, Result};
use crate::journal::InputFile;

/// Lists the input and plans the map tasks.
pub async fn plan_maps(url: &str, rows_per_task: u64) -> Result<(Vec<InputFile>, Vec<MapTask>)> {
    let (base, files) = store::list_matching(url).await?;
    if files.is_empty() {
        return Err(JobError::Runtime(format!("no input files match {url}")));
    }
    // Footers are read concurrently; the plan's order is the sorted file order.
    let footers: Vec<(InputFile, Vec<u64>)> =
        futures::stream::iter(files.into_iter().map(|meta| {
            let url = base.display(&meta.location);
            async move {
                let groups = probeflow_worker::map::row_groups(&url, meta.size).await?;
                let file = InputFile {
                    url,
                    size: meta.size,
                    etag: meta.e_tag,
                    last_modified: meta.last_modified.to_rfc3339(),
                    rows: groups.iter().sum(),
                };
                Ok::<_, JobError>((file, groups))
            }
        }))
        .buffered(8)
        .try_collect()
        .await?;
    let mut inputs = Vec::new();
    let mut maps = Vec::new();
    for (file, groups) in footers {
        let (url, size, etag) = (file.url.clone(), file.size, file.etag.clone());
        inputs.push(file);
        let mut start = 0;
        let mut rows = 0u64;
        for (i, &g) in groups.iter().enumerate() {
            rows += g;
            let last = i + 1 == groups.len();
            if rows >= rows_per_task || last {
                if rows > 0 {
                    maps.push(MapTask {
                        index: maps.len(),
                        file: url.clone(),
                        file_size: size,
                        file_etag: etag.clone(),
                        row_groups: start..i + 1,
                        rows,
                    });
                }
                start = i + 1;
                rows = 0;
            }
        }
    }
    Ok((inputs, maps))
}

/// How the input differs from the planned file list: one line per changed, added or
/// vanished file (empty when it is the same). A file is the same when its size and
/// ETag (local: inode, mtime and size) are.
pub async fn input_changes(url: &str, planned: &[InputFile]) -> Result<Vec<String>> {
    let (base, files) = store::list_matching(url).await?;
    let now: std::collections::BTreeMap<String, (u64, Option<String>)> = files
        .into_iter()
        .map(|m| (base.display(&m.location), (m.size, m.e_tag)))
        .collect();
    let mut changes = Vec::new();
    for f in planned {
        match now.get(&f.url) {
            None => changes.push(format!("vanished: {}", f.url)),
            Some((size, etag)) if *size != f.size || *etag != f.etag => changes.push(format!(
                "changed: {} ({} → {size} bytes, etag {:?} → {etag:?})",
                f.url, f.size, f.etag
            )),
            Some(_) => {}
        }
    }
    let known: std::collections::BTreeSet<&str> = planned.iter().map(|f| f.url.as_str()).collect();
    for url in now.keys().filter(|u| !known.contains(u.as_str())) {
        changes.push(format!("added: {url}"));
    }
    Ok(changes)
}

/// One reduce task per partition, from all map outputs (in map order).
pub fn plan_reduces(shards: u32, maps: &[(usize, &MapOutput)]) -> Vec<ReduceTask> {
    (0..shards)
        .map(|p| ReduceTask {
            partition: p,
            inputs: maps
                .iter()
                .filter_map(|(_, m)| m.segments.get(&p).map(|s| (m.shuffle_file.clone(), *s)))
                .collect(),
        })
        .collect()
}
