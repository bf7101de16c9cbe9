//! The check every task result passes before the coordinator journals it: a result
//! names only the paths the coordinator planned for that task and attempt, only the
//! job's partitions, and counts that add up. A pure function of the plan and the
//! result; a result that fails it is refused and counts as a failed attempt.

use std::collections::BTreeSet;

use super::map::{rejects_path, shuffle_path};
use probeflow_reader::row::Split;

use super::protocol::{
    shard_path, InputFormat, MapOutput, MapTask, ReduceOutput, ReduceTask, Settings,
};

/// Why a result was refused.
pub type Refusal = String;

/// Checks map result `m` of attempt `attempt` of `task`.
pub fn check_map(task: &MapTask, attempt: u32, m: &MapOutput) -> Result<(), Refusal> {
    let shuffle = shuffle_path(task.index, attempt);
    if m.shuffle_file != shuffle {
        return Err(format!(
            "shuffle file {:?} is not the planned {shuffle:?}",
            m.shuffle_file
        ));
    }
    let rejected: u64 = m.rejected.values().sum();
    let rejects = rejects_path(task.index, attempt);
    match (&m.rejects_file, rejected) {
        (Some(f), _) if *f != rejects => {
            return Err(format!("rejects file {f:?} is not the planned {rejects:?}"))
        }
        (Some(_), 0) => return Err("a rejects file but no rejected rows".into()),
        (None, n) if n > 0 => return Err(format!("{n} rejected rows but no rejects file")),
        _ => {}
    }
    if let Some(w) = &m.rejects_written {
        if m.rejects_file.as_ref() != Some(&w.path) {
            return Err(format!(
                "rejects file written at {:?}, not at the named {:?}",
                w.path, m.rejects_file
            ));
        }
    }
    // An Atlas results file's rows are known once read (its task plans none).
    if task.format == InputFormat::Parquet && m.input_rows != task.rows {
        return Err(format!(
            "{} input rows, but the planned rows are {}",
            m.input_rows, task.rows
        ));
    }
    if m.kept_rows + rejected != m.input_rows {
        return Err(format!(
            "{} kept + {rejected} rejected rows is not the {} input rows",
            m.kept_rows, m.input_rows
        ));
    }
    Ok(())
}

/// Checks reduce result `r` of `task`.
pub fn check_reduce(task: &ReduceTask, job: &Settings, r: &ReduceOutput) -> Result<(), Refusal> {
    let planned_splits: BTreeSet<&str> = job
        .split_rule()
        .map_err(|e| e.to_string())?
        .splits()
        .into_iter()
        .map(Split::as_str)
        .collect();
    let mut splits = BTreeSet::new();
    let mut measurements = 0u64;
    for s in &r.shards {
        if !planned_splits.contains(s.split.as_str()) {
            return Err(format!(
                "a shard of split {:?}, but this job writes {planned_splits:?}",
                s.split
            ));
        }
        if !splits.insert(s.split.as_str()) {
            return Err(format!("two {} shards", s.split));
        }
        let planned = shard_path(&s.split, task.partition, job.shards);
        if s.partition != task.partition || s.path != planned {
            return Err(format!(
                "shard {:?} of partition {} is not the planned {planned:?}",
                s.path, s.partition
            ));
        }
        // Every row holds at least one measurement, every source at least one row.
        if s.sources > s.rows || s.rows > s.measurements {
            return Err(format!("shard {:?}: inconsistent counts", s.path));
        }
        if s.blake3.len() != 64 || !s.blake3.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "shard {:?}: {:?} is not a blake3 digest",
                s.path, s.blake3
            ));
        }
        measurements += s.measurements;
    }
    if splits != planned_splits {
        return Err(format!(
            "shards of splits {splits:?}, but this job writes {planned_splits:?}"
        ));
    }
    if measurements != r.input_rows {
        return Err(format!(
            "{measurements} measurements written, but the partition's segments hold {}",
            r.input_rows
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::protocol::{MapAttempts, Plausible, ShardInfo};
    use super::*;
    use probeflow_engine::completion::OutputFile;
    use std::collections::BTreeMap;

    fn job() -> Settings {
        Settings {
            shards: 4,
            max_row_bytes: 1 << 20,
            array_record_options: String::new(),
            split_seed: 1,
            test_fraction: 0.1,
            val_fraction: 0.0,
            columns: Default::default(),
            plausible: Plausible::default(),
            allow_private_sources: false,
            format: InputFormat::Parquet,
            source: Default::default(),
        }
    }

    fn map_task() -> MapTask {
        MapTask {
            index: 7,
            file: "in.parquet".into(),
            file_size: 10,
            file_etag: None,
            row_groups: 0..1,
            skip_rows: 0,
            rows: 10,
            format: InputFormat::Parquet,
        }
    }

    fn map_output() -> MapOutput {
        MapOutput {
            shuffle_file: shuffle_path(7, 2),
            input_rows: 10,
            kept_rows: 8,
            rejected: BTreeMap::from([("bad_rtt".to_string(), 2)]),
            rejects_file: Some(rejects_path(7, 2)),
            rejects_written: Some(OutputFile::of(rejects_path(7, 2), b"PAR1")),
            atlas: None,
        }
    }

    fn check_map_output(m: MapOutput) -> Result<(), Refusal> {
        check_map(&map_task(), 2, &m)
    }

    #[test]
    fn a_planned_map_result_passes() {
        check_map_output(map_output()).unwrap();
    }

    #[test]
    fn map_results_with_foreign_paths_are_refused() {
        let mut m = map_output();
        m.shuffle_file = "manifest.json".into();
        assert!(check_map_output(m).unwrap_err().contains("manifest.json"));
        let mut m = map_output();
        m.rejects_file = Some("manifest.json".into());
        assert!(check_map_output(m).unwrap_err().contains("manifest.json"));
        // Another attempt's paths are not this attempt's.
        let mut m = map_output();
        m.shuffle_file = shuffle_path(7, 1);
        assert!(check_map_output(m).is_err());
        // The rejects file's entry is the named file's.
        let mut m = map_output();
        m.rejects_written = Some(OutputFile::of("manifest.json", b""));
        assert!(check_map_output(m).unwrap_err().contains("manifest.json"));
    }

    #[test]
    fn map_results_with_wrong_counts_or_partitions_are_refused() {
        let mut m = map_output();
        m.input_rows = 11;
        assert!(check_map_output(m).unwrap_err().contains("planned rows"));
        let mut m = map_output();
        m.kept_rows = 9;
        assert!(check_map_output(m).is_err());
        let mut m = map_output();
        m.rejects_file = None;
        assert!(check_map_output(m).unwrap_err().contains("no rejects file"));
    }

    fn reduce_task() -> ReduceTask {
        ReduceTask {
            partition: 2,
            maps: MapAttempts::from_attempts([1, 1]),
        }
    }

    fn shard(split: &str, measurements: u64) -> ShardInfo {
        ShardInfo {
            split: split.into(),
            partition: 2,
            path: shard_path(split, 2, 4),
            rows: 2,
            sources: 1,
            measurements,
            bytes: 100,
            blake3: "ab".repeat(32),
        }
    }

    fn check_reduce_output(shards: Vec<ShardInfo>) -> Result<(), Refusal> {
        check_reduce(
            &reduce_task(),
            &job(),
            &ReduceOutput {
                shards,
                input_rows: 12,
            },
        )
    }

    #[test]
    fn reduce_results_are_checked() {
        check_reduce_output(vec![shard("train", 9), shard("test", 3)]).unwrap();
        let mut foreign = shard("train", 9);
        foreign.path = "../../elsewhere.array_record".into();
        assert!(check_reduce_output(vec![foreign, shard("test", 3)])
            .unwrap_err()
            .contains("elsewhere"));
        let mut other = shard("train", 9);
        other.partition = 3;
        other.path = shard_path("train", 3, 4);
        assert!(check_reduce_output(vec![other, shard("test", 3)]).is_err());
        assert!(
            check_reduce_output(vec![shard("train", 9), shard("train", 3)])
                .unwrap_err()
                .contains("two train")
        );
        assert!(
            check_reduce_output(vec![shard("train", 9), shard("test", 2)])
                .unwrap_err()
                .contains("segments hold 12")
        );
        let mut bad = shard("test", 3);
        bad.blake3 = "x".into();
        assert!(check_reduce_output(vec![shard("train", 9), bad]).is_err());
    }

    #[test]
    fn a_reduce_writes_exactly_the_jobs_splits() {
        // A missing split, even an empty one, leaves the manifest without its shard.
        let mut empty = shard("test", 0);
        (empty.rows, empty.sources) = (0, 0);
        assert!(check_reduce_output(vec![shard("train", 12)])
            .unwrap_err()
            .contains("this job writes"));
        check_reduce_output(vec![shard("train", 12), empty.clone()]).unwrap();
        // No val shards in a job without a val split, and all three in one with it.
        let with_val = |shards| {
            let job = Settings {
                val_fraction: 0.2,
                ..job()
            };
            check_reduce(
                &reduce_task(),
                &job,
                &ReduceOutput {
                    shards,
                    input_rows: 12,
                },
            )
        };
        let val = shard("val", 4);
        assert!(
            check_reduce_output(vec![shard("train", 5), val.clone(), shard("test", 3)])
                .unwrap_err()
                .contains("\"val\"")
        );
        with_val(vec![shard("train", 5), val.clone(), shard("test", 3)]).unwrap();
        assert!(with_val(vec![shard("train", 9), shard("test", 3)]).is_err());
        let mut unknown = shard("val", 4);
        unknown.split = "validation".into();
        assert!(with_val(vec![shard("train", 5), unknown, shard("test", 3)]).is_err());
    }
}
