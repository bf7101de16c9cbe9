//! Planning: list the input, read every Parquet footer, and cut the input into map
//! tasks of roughly equal rows (never across files): consecutive row groups up to
//! `rows_per_task`, and a row group larger than that in row ranges of at most
//! `rows_per_task` each, so a map's memory follows the settings, not the input's row
//! groups. Reduce tasks are one per partition and are made once every map task has
//! reported.

use super::manifest::InputFile;
use super::map::attempt_of_shuffle_file;
use super::protocol::{InputFormat, MapAttempts, MapOutput, MapTask, ReduceTask};
use futures::{StreamExt, TryStreamExt};
use probeflow_engine::inputs::ListedFile;

use probeflow_engine::error::{EngineError, Result};

/// Plans the map tasks of the listed input files (their footers read concurrently;
/// the plan's order is the listed order).
pub async fn plan_maps(
    listed: &[ListedFile],
    format: InputFormat,
    rows_per_task: u64,
) -> Result<(Vec<InputFile>, Vec<MapTask>)> {
    if format == InputFormat::RipeAtlas {
        return Ok(plan_atlas_maps(listed));
    }
    let footers: Vec<(InputFile, Vec<u64>)> =
        futures::stream::iter(listed.iter().cloned().map(|f| async move {
            let groups = super::map::row_groups(&f.file.url, f.file.size).await?;
            let file = InputFile {
                url: f.file.url,
                size: f.file.size,
                etag: f.file.etag,
                last_modified: f.last_modified,
                rows: groups.iter().sum(),
            };
            Ok::<_, EngineError>((file, groups))
        }))
        .buffered(8)
        .try_collect()
        .await?;
    let mut inputs = Vec::new();
    let mut maps = Vec::new();
    for (file, groups) in footers {
        let (url, size, etag) = (file.url.clone(), file.size, file.etag.clone());
        inputs.push(file);
        for cut in cut_row_groups(&groups, rows_per_task) {
            maps.push(MapTask {
                index: maps.len(),
                file: url.clone(),
                file_size: size,
                file_etag: etag.clone(),
                row_groups: cut.row_groups,
                skip_rows: cut.skip_rows,
                rows: cut.rows,
                format: InputFormat::Parquet,
            });
        }
    }
    Ok((inputs, maps))
}

/// One map task per Atlas results file, read whole (a file's rows are known once it
/// is read: its planned rows are 0, and the manifest gives the rows read).
fn plan_atlas_maps(listed: &[ListedFile]) -> (Vec<InputFile>, Vec<MapTask>) {
    listed
        .iter()
        .enumerate()
        .map(|(index, f)| {
            let input = InputFile {
                url: f.file.url.clone(),
                size: f.file.size,
                etag: f.file.etag.clone(),
                last_modified: f.last_modified.clone(),
                rows: 0,
            };
            let task = MapTask {
                index,
                file: f.file.url.clone(),
                file_size: f.file.size,
                file_etag: f.file.etag.clone(),
                row_groups: 0..0,
                skip_rows: 0,
                rows: 0,
                format: InputFormat::RipeAtlas,
            };
            (input, task)
        })
        .unzip()
}

/// One map task's share of a file: rows `skip_rows .. skip_rows + rows` of the row
/// groups `row_groups`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub row_groups: std::ops::Range<usize>,
    pub skip_rows: u64,
    pub rows: u64,
}

/// Cuts a file of row groups (their row counts) into map tasks: small consecutive
/// groups are gathered until they reach `rows_per_task` (so a task holds less than
/// twice that); a group of more rows is split into ranges of at most `rows_per_task`.
/// Empty groups belong to no task.
pub fn cut_row_groups(groups: &[u64], rows_per_task: u64) -> Vec<Cut> {
    let per_task = rows_per_task.max(1);
    let mut cuts = Vec::new();
    let mut start = 0;
    let mut rows = 0u64;
    for (i, &g) in groups.iter().enumerate() {
        if g > per_task {
            if rows > 0 {
                cuts.push(Cut {
                    row_groups: start..i,
                    skip_rows: 0,
                    rows,
                });
            }
            let mut skip = 0;
            while skip < g {
                let n = per_task.min(g - skip);
                cuts.push(Cut {
                    row_groups: i..i + 1,
                    skip_rows: skip,
                    rows: n,
                });
                skip += n;
            }
            start = i + 1;
            rows = 0;
            continue;
        }
        rows += g;
        if rows >= per_task || i + 1 == groups.len() {
            if rows > 0 {
                cuts.push(Cut {
                    row_groups: start..i + 1,
                    skip_rows: 0,
                    rows,
                });
            }
            start = i + 1;
            rows = 0;
        }
    }
    cuts
}

/// One reduce task per partition, from all map outputs (every map, in map order):
/// each names the accepted attempt of every map, run-length encoded.
pub fn plan_reduces(shards: u32, maps: &[(usize, &MapOutput)]) -> Result<Vec<ReduceTask>> {
    let attempts = maps
        .iter()
        .enumerate()
        .map(|(k, (i, m))| {
            if k != *i {
                return Err(EngineError::Internal(format!("no result for map task {k}")));
            }
            attempt_of_shuffle_file(*i, &m.shuffle_file).ok_or_else(|| {
                let earlier = if m.shuffle_file.ends_with(".arrow") {
                    " (an Arrow IPC shuffle file of an earlier probeflow release, which this \
                     one does not read: run the job into a new output, or remove this one's \
                     _job directory to start it again)"
                } else {
                    ""
                };
                EngineError::Conflict(format!(
                    "map task {i}: {:?} is not a shuffle file name{earlier}",
                    m.shuffle_file
                ))
            })
        })
        .collect::<Result<Vec<u32>>>()?;
    let runs = MapAttempts::from_attempts(attempts);
    Ok((0..shards)
        .map(|p| ReduceTask {
            partition: p,
            maps: runs.clone(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(row_groups: std::ops::Range<usize>, skip_rows: u64, rows: u64) -> Cut {
        Cut {
            row_groups,
            skip_rows,
            rows,
        }
    }

    #[test]
    fn reduce_tasks_name_every_maps_attempt_in_runs() {
        let out = |i: usize, a: u32| MapOutput {
            shuffle_file: super::super::map::shuffle_path(i, a),
            input_rows: 1,
            kept_rows: 1,
            rejected: Default::default(),
            rejects_file: None,
            rejects_written: None,
            atlas: None,
        };
        let outs: Vec<MapOutput> = [1, 1, 2, 1, 1]
            .iter()
            .enumerate()
            .map(|(i, &a)| out(i, a))
            .collect();
        let maps: Vec<(usize, &MapOutput)> = outs.iter().enumerate().collect();
        let reduces = plan_reduces(3, &maps).unwrap();
        assert_eq!(reduces.len(), 3);
        assert_eq!(reduces[2].partition, 2);
        assert_eq!(reduces[0].maps.0, vec![(0, 2, 1), (2, 1, 2), (3, 2, 1)]);
        let each: Vec<(usize, u32)> = reduces[0].maps.iter().collect();
        assert_eq!(each, vec![(0, 1), (1, 1), (2, 2), (3, 1), (4, 1)]);
        // 20 000 maps without a retry: one run, and a reduce task far below the
        // transport's 16 MiB frame whatever the number of maps.
        let many = MapAttempts::from_attempts(std::iter::repeat_n(1, 20_000));
        assert_eq!(many.0, vec![(0, 20_000, 1)]);
        let outs: Vec<MapOutput> = (0..20_000)
            .map(|i| out(i, 1 + (i % 97 == 0) as u32))
            .collect();
        let maps: Vec<(usize, &MapOutput)> = outs.iter().enumerate().collect();
        let reduce = &plan_reduces(1024, &maps).unwrap()[1023];
        let bytes = serde_json::to_vec(reduce).unwrap().len();
        assert!(
            bytes < 16 << 10,
            "a reduce task of {bytes} bytes for 20 000 maps"
        );
        assert_eq!(reduce.maps.iter().count(), 20_000);
        // A gap (a map without a result) or a foreign file name is an error.
        let gap: Vec<(usize, &MapOutput)> = vec![(0, &outs[0]), (2, &outs[2])];
        assert!(plan_reduces(3, &gap).is_err());
        let mut forged = out(0, 1);
        forged.shuffle_file = "manifest.json".into();
        assert!(plan_reduces(1, &[(0, &forged)]).is_err());
        // A journal of an earlier release names Arrow IPC shuffle files, which this one
        // does not read: refused, saying so.
        let mut earlier = out(0, 1);
        earlier.shuffle_file = "_job/shuffle/map-00000-a1.arrow".into();
        let err = plan_reduces(1, &[(0, &earlier)]).unwrap_err().to_string();
        assert!(err.contains("earlier probeflow release"), "{err}");
    }

    #[test]
    fn small_row_groups_are_gathered() {
        assert_eq!(
            cut_row_groups(&[4, 4, 4, 4, 1], 8),
            vec![cut(0..2, 0, 8), cut(2..4, 0, 8), cut(4..5, 0, 1)]
        );
        assert_eq!(cut_row_groups(&[3, 6], 8), vec![cut(0..2, 0, 9)]);
    }

    #[test]
    fn a_large_row_group_is_split_in_row_ranges() {
        assert_eq!(
            cut_row_groups(&[8_000_000], 3_000_000),
            vec![
                cut(0..1, 0, 3_000_000),
                cut(0..1, 3_000_000, 3_000_000),
                cut(0..1, 6_000_000, 2_000_000)
            ]
        );
        // Gathered groups before it are a task of their own; so are those after.
        assert_eq!(
            cut_row_groups(&[2, 3, 20, 1, 1], 8),
            vec![
                cut(0..2, 0, 5),
                cut(2..3, 0, 8),
                cut(2..3, 8, 8),
                cut(2..3, 16, 4),
                cut(3..5, 0, 2)
            ]
        );
    }

    #[test]
    fn every_row_is_in_exactly_one_cut_and_no_cut_is_too_big() {
        let groups = [0, 7, 100, 3, 0, 9, 9, 250, 1];
        let per_task = 10;
        let cuts = cut_row_groups(&groups, per_task);
        let mut covered = vec![0u64; groups.len()];
        for c in &cuts {
            assert!(c.rows > 0 && c.rows < 2 * per_task, "{c:?}");
            if c.row_groups.len() == 1 {
                covered[c.row_groups.start] += c.rows;
            } else {
                assert_eq!(c.skip_rows, 0);
                let sum: u64 = groups[c.row_groups.clone()].iter().sum();
                assert_eq!(sum, c.rows);
                for i in c.row_groups.clone() {
                    covered[i] += groups[i];
                }
            }
        }
        assert_eq!(covered, groups.to_vec());
    }
}
